"""File helpers of the store layer: ``same_bytes`` compares where either file holds data."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from rmqstore.store.files import same_bytes

SIZE = 3 << 20  # three 1 MiB comparison steps


def sparse(path: Path, size: int, writes: list[tuple[int, bytes]]) -> Path:
    """A file of ``size`` bytes that holds data only where ``writes`` put it (holes elsewhere)."""
    with open(path, "wb") as f:
        for pos, data in writes:
            f.seek(pos)
            f.write(data)
        f.truncate(size)  # a write past the size is cut back
    return path


WRITES = hs.lists(hs.tuples(hs.integers(0, SIZE - 1), hs.binary(min_size=1, max_size=5000)), max_size=4)


@given(a=WRITES, b=WRITES, dense=hs.booleans(), grow=hs.sampled_from([0, 0, 1, 4096]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_same_bytes_is_byte_equality_whatever_holes_the_files_have(
    a: list[tuple[int, bytes]], b: list[tuple[int, bytes]], dense: bool, grow: int, tmp_path: Path
) -> None:
    x = sparse(tmp_path / "x", SIZE, a)
    y = sparse(tmp_path / "y", SIZE + grow, b)
    if dense:  # explicit zeros where the other file may have a hole
        y.write_bytes(y.read_bytes())
    assert same_bytes(x, y) == (x.read_bytes() == y.read_bytes())
    assert same_bytes(y, x) == same_bytes(x, y)


def test_a_byte_in_one_file_only_is_a_difference(tmp_path: Path) -> None:
    x = sparse(tmp_path / "x", SIZE, [(100, b"abc")])
    y = sparse(tmp_path / "y", SIZE, [(100, b"abc"), (2 << 20, b"\x01")])  # data where x has a hole
    z = sparse(tmp_path / "z", SIZE, [(100, b"abc"), (2 << 20, b"\x00")])  # a written zero is still a zero
    assert not same_bytes(x, y)
    assert same_bytes(x, z)
    assert not same_bytes(x, sparse(tmp_path / "w", SIZE + 1, [(100, b"abc")]))
