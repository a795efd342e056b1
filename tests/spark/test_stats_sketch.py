"""The distinct-key sketch of ``spark stats`` (no Spark session): exact up to its set limit, a
HyperLogLog estimate within the stated error above it, and the same whether merged or whole."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from rmqstore.spark.stats import HLL_ERROR, SET_LIMIT, Distinct, token_hashes  # noqa: E402


def test_token_hashes_are_stable_and_tell_tokens_apart() -> None:
    tokens = ["", "a", "a\x00", "k-0000000001", "k-0000000010", "ключ", "x" * 64, "x" * 65, "y" * 300, "a"]
    arr = pa.array(tokens)
    h = token_hashes(arr).tolist()
    assert len(set(h)) == len(tokens) - 1 and h[1] == h[-1]
    assert token_hashes(arr.slice(3, 4)).tolist() == h[3:7]  # an array's offset is honoured


@pytest.mark.parametrize("n", [1, 500, SET_LIMIT, SET_LIMIT + 1, 20_000, 150_000])
def test_distinct_counts_exact_then_within_the_error(n: int) -> None:
    tokens = pa.array([f"order-{i}" for i in range(n)] * 2)  # every token twice
    hashes = token_hashes(tokens)
    whole = Distinct.of(hashes)
    count, exact = whole.count()
    assert exact == (n <= SET_LIMIT)
    if exact:
        assert count == n
    else:
        assert abs(count - n) <= 4 * HLL_ERROR * n, (count, n)
    parts = [Distinct.of(hashes[i::3]) for i in range(3)]  # as three tasks would see them
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    assert merged.count() == (count, exact)


def test_a_token_hashes_the_same_whatever_else_is_in_its_batch() -> None:
    """A batch's longest token sets how many words are read: a short token's hash must not change
    with it, or one key counts twice when the records fall into other batches."""
    alone = token_hashes(pa.array(["order-1", "k"]))
    beside_long = token_hashes(pa.array(["order-1", "k", "x" * 40]))
    assert alone.tolist() == beside_long[:2].tolist()
