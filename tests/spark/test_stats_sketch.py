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


@pytest.mark.parametrize("n", [300, SET_LIMIT + 1, 90_000])
def test_distinct_fed_in_pieces_equals_the_whole(n: int) -> None:
    """Hashes added a chunk at a time (folded once enough wait), merged across tasks in any state,
    count as the whole set does."""
    import numpy as np

    hashes = token_hashes(pa.array([f"k-{i % n}" for i in range(2 * n)]))
    rng = np.random.default_rng(n)
    cuts = np.sort(rng.integers(0, len(hashes), 40))
    tasks = [Distinct(np.zeros(0, np.uint64)) for _ in range(3)]
    for i, piece in enumerate(np.split(hashes, cuts)):
        tasks[i % 3].add(piece)
    tasks[1].fold()
    merged = tasks[0]
    merged.merge(tasks[1])
    merged.merge(tasks[2])
    assert merged.count() == Distinct.of(hashes).count()
    assert merged.count()[1] == (n <= SET_LIMIT)


def test_a_token_hashes_the_same_whatever_else_is_in_its_batch() -> None:
    """A batch's longest token sets how many words are read: a short token's hash must not change
    with it, or one key counts twice when the records fall into other batches."""
    alone = token_hashes(pa.array(["order-1", "k"]))
    beside_long = token_hashes(pa.array(["order-1", "k", "x" * 40]))
    assert alone.tolist() == beside_long[:2].tolist()


def _reference(root, splits) -> dict:  # type: ignore[no-untyped-def]
    """Per group sums of the source's own rows (the Arrow reader, a row at a time)."""
    from pyspark.sql.types import StructType

    from rmqstore.spark.source import COMMITLOG_SCHEMA, read_split_batches
    from rmqstore.spark.stats import STATS_READ_COLUMNS

    schema = StructType([f for f in COMMITLOG_SCHEMA.fields if f.name in STATS_READ_COLUMNS])
    out: dict = {}
    for split in splits:
        for batch in read_split_batches(split, schema):
            for r in batch.to_pylist():
                g = out.setdefault((r["store"], r["topic"], r["queueId"], r["storeTimestamp"] // 3_600_000 * 3_600_000),
                                   [0, 0, r["storeTimestamp"], r["storeTimestamp"], set()])  # fmt: skip
                g[0] += 1
                g[1] += r["storeSize"]
                g[2], g[3] = min(g[2], r["storeTimestamp"]), max(g[3], r["storeTimestamp"])
                g[4].update(r["keys"])
    return {k: (m, b, f, la, len(keys)) for k, (m, b, f, la, keys) in out.items()}


def _summary(splits) -> dict:  # type: ignore[no-untyped-def]
    from rmqstore.spark import jobs
    from rmqstore.spark.stats import merge_summaries

    parts = [next(jobs.stats_split(iter([s]))) for s in splits]
    return {k: (g.messages, g.bytes, g.first, g.last, g.distinct.count()[0]) for k, g in merge_summaries(parts).items()}


def _splits(root, split_size: int | None = None):  # type: ignore[no-untyped-def]
    from rmqstore.spark.source import CommitLogSplit, plan_commitlog, plan_even, resolve_stores
    from rmqstore.walk.arrow import RowFilter

    infos = resolve_stores([str(root)])
    groups = plan_commitlog(infos, split_size=split_size) if split_size else plan_even(infos, 2)
    return [CommitLogSplit(g, False, 1024, RowFilter()) for g in groups]


def test_task_columns_sum_what_the_source_rows_hold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The tasks' numpy columns give the sums of the source's rows, on the records the fast layout
    leaves to the record codec too: KEYS not ASCII or longer than a word run, empty tokens, IPv6 hosts."""
    from rmqstore.ops import write as wr

    root = tmp_path / "store"
    keys = ["k1 k2", "ключ k1", "a  b", "  ", None, "x x", "é" * 70, "long-" * 20]
    msgs = [
        wr.Message(topic=t, queue_id=i % 3, body=b"b" * (i % 7), keys=keys[i % len(keys)], born_host=host,
                   store_timestamp_ms=1_700_000_000_000 + i * 400_000)
        for i in range(1500)
        for t, host in ((("T6", "[::1]:10911"),) if i % 5 == 0 else (("T", None),))
    ]  # fmt: skip
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={root}\nmapedFileSizeCommitLog=262144\n")
    wr.write_messages(root, msgs, create=True, broker="5.2.0", broker_config=conf)
    for size in (None, 8192):
        splits = _splits(root, size)
        want = _reference(root, splits)
        assert _summary(splits) == want and sum(v[0] for v in want.values()) == len(msgs)
