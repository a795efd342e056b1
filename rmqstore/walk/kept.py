"""Dispatch columns kept from recovery's walk for its re-dispatch, in order, in bounded memory.

Batches stay in memory up to ``MEMORY_BUDGET`` bytes; the ones after go to an unnamed temporary file
(``O_TMPFILE``: never linked into a directory, gone when closed or when the process dies) and are read
back one at a time, so the re-dispatch of a store of any size reads its columns once instead of
decoding the commit log a second time, and resident memory stays bounded.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

import numpy as np

from rmqstore.store.files import pwrite_all
from rmqstore.walk.columns import Columns

MEMORY_BUDGET = 48 << 20  # bytes of columns kept in memory; the rest is spilled

_ARRAYS = tuple(f.name for f in fields(Columns) if f.name != "topics")


def columns_nbytes(c: Columns) -> int:
    return sum(getattr(c, name).nbytes for name in _ARRAYS)


@dataclass(frozen=True, slots=True)
class _Spilled:
    """Where one spilled batch lies in the file: its arrays one after the other."""

    offset: int
    shapes: tuple[tuple[str, int], ...]  # (dtype, length) of each array of ``_ARRAYS``
    topics: tuple[str, ...]


class KeptColumns:
    """Column batches in commit log order: the first in memory, the rest in a temporary file."""

    def __init__(self, memory_budget: int | None = None) -> None:
        self.memory_budget = MEMORY_BUDGET if memory_budget is None else memory_budget
        self._batches: list[Columns | _Spilled] = []
        self._in_memory = 0
        self._fd: int | None = None
        self._size = 0  # bytes written to the temporary file
        self.records = 0
        self.end = -1  # commit log offset after the last record kept

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def spilled(self) -> bool:
        return self._fd is not None

    def append(self, c: Columns) -> None:
        if not len(c):
            return
        n = columns_nbytes(c)
        if self._fd is None and self._in_memory + n <= self.memory_budget:
            self._batches.append(c)
            self._in_memory += n
        else:
            self._batches.append(self._spill(c))
        self.records += len(c)
        self.end = int(c.phy[-1] + c.size[-1])

    def extend(self, batches: Iterable[Columns]) -> None:
        for c in batches:
            self.append(c)

    def _spill(self, c: Columns) -> _Spilled:
        if self._fd is None:
            self._fd = unnamed_file()
        at = self._size
        for name in _ARRAYS:
            data = np.ascontiguousarray(getattr(c, name)).data
            pwrite_all(self._fd, data, self._size)
            self._size += data.nbytes
        shapes = tuple((getattr(c, name).dtype.str, len(getattr(c, name))) for name in _ARRAYS)
        return _Spilled(at, shapes, tuple(c.topics))

    def _read(self, s: _Spilled) -> Columns:
        assert self._fd is not None
        arrays = {}
        at = s.offset
        for name, (dtype, count) in zip(_ARRAYS, s.shapes, strict=True):
            nbytes = np.dtype(dtype).itemsize * count
            buf = bytearray(nbytes)
            got = os.preadv(self._fd, [buf], at)
            if got != nbytes:
                raise OSError(f"kept dispatch columns: short read ({got} of {nbytes} bytes)")
            arrays[name] = np.frombuffer(buf, dtype=dtype)
            at += nbytes
        return Columns(**arrays, topics=list(s.topics))

    def __iter__(self) -> Iterator[Columns]:
        for b in self._batches:
            yield b if isinstance(b, Columns) else self._read(b)

    def clear(self) -> None:
        """Forget every batch (the walk went exact: its columns come from the dispatch's own decode)."""
        self._batches.clear()
        self._in_memory = self._size = self.records = 0
        self.end = -1
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    close = clear

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def unnamed_file() -> int:
    """A file with no name in the temporary directory (a named one unlinked at once where O_TMPFILE is missing)."""
    directory = tempfile.gettempdir()
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(directory, flag | os.O_RDWR, 0o600)
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix="rmqstore-columns-", dir=directory)
    os.unlink(name)
    return fd
