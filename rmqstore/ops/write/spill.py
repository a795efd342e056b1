"""The planned commit log bytes in bounded memory.

The first ``MEMORY_BUDGET`` bytes of encoded records stay in memory; the rest go, in order, to an
unnamed temporary file (:func:`rmqstore.walk.kept.unnamed_file`: gone when closed or when the process
dies) and are copied into the commit log from there when the plan is applied. A dry run never writes
into the store: only the temporary directory holds the spilled bytes, and only while the plan lives.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from typing import Any

from rmqstore.store.files import pwrite_all
from rmqstore.walk.kept import unnamed_file

MEMORY_BUDGET = 24 << 20  # bytes of encoded records kept in memory; the rest is spilled
_COPY = 16 << 20  # bytes read back and written at a time


class Spill:
    """Where the planned bytes go once the budget is spent: one temporary file, appended to in order."""

    def __init__(self, memory_budget: int | None = None) -> None:
        self.memory_budget = MEMORY_BUDGET if memory_budget is None else memory_budget
        self._in_memory = 0
        self._fd: int | None = None
        self._size = 0

    def keep(self, data: bytes | bytearray) -> bytes | bytearray | SpilledPiece:
        """``data`` itself while the budget lasts, else where it now lies in the temporary file."""
        if self._fd is None and self._in_memory + len(data) <= self.memory_budget:
            self._in_memory += len(data)
            return data
        return self._append(data)

    def keep_object(self, obj: Any, nbytes: int) -> Any:
        """``obj`` itself while its ``nbytes`` fit in the budget, else where it now lies in the
        temporary file, pickled (read back with ``pickle.loads(bytes(piece))``)."""
        if self._fd is None and self._in_memory + nbytes <= self.memory_budget:
            self._in_memory += nbytes
            return obj
        return self._append(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def _append(self, data: bytes | bytearray) -> SpilledPiece:
        at = self._size
        try:
            if self._fd is None:
                self._fd = unnamed_file()
            pwrite_all(self._fd, data, at)
        except OSError as e:  # a full or unwritable temporary directory: name it, not the store
            raise OSError(e.errno, e.strerror or str(e), tempfile.gettempdir()) from None
        self._size += len(data)
        return SpilledPiece(self, at, len(data))

    def read(self, pos: int, length: int) -> bytes:
        assert self._fd is not None
        out = os.pread(self._fd, length, pos)
        if len(out) != length:
            raise OSError(f"planned commit log bytes: short read ({len(out)} of {length} bytes)")
        return out

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


@dataclass(frozen=True, slots=True)
class SpilledPiece:
    """Planned bytes kept in the :class:`Spill`'s file: ``length`` bytes from ``pos``."""

    spill: Spill
    pos: int
    length: int

    def __len__(self) -> int:
        return self.length

    def __bytes__(self) -> bytes:
        return self.spill.read(self.pos, self.length)

    def write_to(self, fd: int, at: int) -> None:
        """Copy the bytes to ``fd`` at ``at`` a slice at a time."""
        done = 0
        while done < self.length:
            n = min(_COPY, self.length - done)
            pwrite_all(fd, self.spill.read(self.pos + done, n), at + done)
            done += n
