"""Files of fixed-size units named by their first byte's offset (§2.1): reading units, placing them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rmqstore.store.files import data_end, map_file
from rmqstore.store.layout import Segment, file_name
from rmqstore.store.queue.interface import QueueCut

if TYPE_CHECKING:
    import numpy as np


def read_units(path: Path, dtype: np.dtype, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Whole units ``start`` to ``stop`` of a file (fewer where the file ends), as a copy."""
    import numpy as np

    with map_file(path) as buf:
        count = len(buf) // dtype.itemsize
        stop = count if stop is None else max(0, min(stop, count))
        start = min(max(0, start), stop)
        view = np.frombuffer(buf, dtype=dtype, count=stop - start, offset=start * dtype.itemsize)
        out = view.copy()
        del view
    return out


def read_at(path: Path, pos: int, n: int) -> bytes:
    """Up to ``n`` bytes of a file from ``pos``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, pos)
    finally:
        os.close(fd)


def nonzero_units(path: Path, start: int, end: int, unit_size: int) -> int:
    """Slots of ``unit_size`` bytes in [start, end) of a file that are not all zeros (a trailing part slot too)."""
    import numpy as np

    if end <= start:
        return 0
    data = read_at(path, start, end - start)
    n = len(data) // unit_size
    arr = np.frombuffer(data[: n * unit_size], dtype=np.uint8).reshape(n, unit_size)
    return int(arr.any(axis=1).sum()) + (1 if len(data) % unit_size and any(data[n * unit_size :]) else 0)


def truncate_dirty_files(segs: list[Segment], file_size: int, end: int, unit_size: int) -> list[QueueCut]:
    """``MappedFileQueue.truncateDirtyFiles(end)`` (§8.5): the data after ``end`` in the file holding it
    zeroed, the files after it deleted; each cut counts the units it removes."""
    out = []
    for s in segs:
        if s.base_offset + file_size <= end:
            continue
        if end >= s.base_offset:
            cut = end - s.base_offset
            stop = data_end(s.path, cut)
            if stop > cut:
                out.append(QueueCut(s.path, "zero", cut, stop, nonzero_units(s.path, cut, stop, unit_size)))
        else:
            out.append(QueueCut(s.path, "delete", 0, s.size, nonzero_units(s.path, 0, s.size, unit_size)))
    return out


@dataclass(slots=True)
class MappedFileQueue:
    """Writes units into ``<directory>/<20-digit offset>`` files of ``file_size`` bytes, creating them as needed."""

    directory: Path
    file_size: int
    _fd: int | None = None
    _base: int = -1

    def put_at(self, byte_offset: int, data: bytes) -> None:
        base = byte_offset - byte_offset % self.file_size
        if base != self._base:
            self.close()
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.directory / file_name(base), os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size < self.file_size:
                os.ftruncate(self._fd, self.file_size)
            self._base = base
        assert self._fd is not None
        os.pwrite(self._fd, data, byte_offset - base)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            self._base = -1
