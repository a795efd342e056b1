"""File helpers of the store layer: ``first_difference`` compares where either file holds data; ``FileWriter``
starts the writeback of a large run at once."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from rmqstore.store import files
from rmqstore.store.files import first_difference

SIZE = 3 << 20  # three 1 MiB comparison steps


def sparse(path: Path, size: int, writes: list[tuple[int, bytes]]) -> Path:
    """A file of ``size`` bytes that holds data only where ``writes`` put it (holes elsewhere)."""
    with open(path, "wb") as f:
        for pos, data in writes:
            f.seek(pos)
            f.write(data)
        f.truncate(size)  # a write past the size is cut back
    return path


def reference_difference(a: bytes, b: bytes) -> int | None:
    """The first differing position, the shorter length when one is a prefix, None when equal."""
    diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    return diff if diff is not None else (None if len(a) == len(b) else min(len(a), len(b)))


WRITES = hs.lists(hs.tuples(hs.integers(0, SIZE - 1), hs.binary(min_size=1, max_size=5000)), max_size=4)


@given(a=WRITES, b=WRITES, dense=hs.booleans(), grow=hs.sampled_from([0, 0, 1, 4096]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_first_difference_is_that_of_the_bytes_whatever_holes_the_files_have(
    a: list[tuple[int, bytes]], b: list[tuple[int, bytes]], dense: bool, grow: int, tmp_path: Path
) -> None:
    x = sparse(tmp_path / "x", SIZE, a)
    y = sparse(tmp_path / "y", SIZE + grow, b)
    if dense:  # explicit zeros where the other file may have a hole
        y.write_bytes(y.read_bytes())
    assert (first_difference(x, y) is None) == (x.read_bytes() == y.read_bytes())
    assert (first_difference(y, x) is None) == (first_difference(x, y) is None)
    assert first_difference(x, y) == reference_difference(x.read_bytes(), y.read_bytes())


def test_a_byte_in_one_file_only_is_a_difference(tmp_path: Path) -> None:
    x = sparse(tmp_path / "x", SIZE, [(100, b"abc")])
    y = sparse(tmp_path / "y", SIZE, [(100, b"abc"), (2 << 20, b"\x01")])  # data where x has a hole
    z = sparse(tmp_path / "z", SIZE, [(100, b"abc"), (2 << 20, b"\x00")])  # a written zero is still a zero
    assert first_difference(x, y) is not None
    assert first_difference(x, z) is None
    assert first_difference(x, sparse(tmp_path / "w", SIZE + 1, [(100, b"abc")])) is not None


@pytest.mark.parametrize("refused", [False, True])
def test_a_large_write_starts_its_writeback_and_a_refusal_is_no_error(tmp_path: Path, monkeypatch, refused) -> None:
    """``FileWriter`` asks the kernel to write a run of 1 MiB or more back at once; a file system that
    refuses the advice still gets every byte."""
    calls = []

    def advise(fd: int, pos: int, size: int, advice: int) -> None:
        calls.append((pos, size, advice))
        if refused:
            raise OSError(errno.ESPIPE, "refused")

    monkeypatch.setattr(files.os, "posix_fadvise", advise)
    p = tmp_path / "f"
    p.write_bytes(bytes(3 << 20))
    w = files.FileWriter(p)
    w.write_at(b"\x01" * 100, 0)  # a short run: left to the final sync
    w.write_at(b"\x02" * (1 << 20), 4096)
    w.close(sync=True)
    assert calls == [(4096, 1 << 20, os.POSIX_FADV_DONTNEED)]
    data = p.read_bytes()
    assert data[:100] == b"\x01" * 100 and data[4096 : 4096 + (1 << 20)] == b"\x02" * (1 << 20)
    assert len(data) == 3 << 20
