"""Where records start and where data ends: verified record starts after damage, and zero tails."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rmqstore.codec.columnar import well_formed_records
from rmqstore.codec.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, read_head
from rmqstore.store.files import ZERO_CHUNK, data_extents

if TYPE_CHECKING:
    pass


def _release(buf: Any, lo: int, hi: int) -> None:
    """Drop the mapped pages of ``buf[lo:hi]`` (page-aligned inside) from this process."""
    madvise = getattr(buf, "madvise", None)
    a = -(-lo // mmap.PAGESIZE) * mmap.PAGESIZE
    b = hi - hi % mmap.PAGESIZE
    if madvise is not None and b > a:
        madvise(mmap.MADV_DONTNEED, a, b - a)


def first_nonzero(buf: Any, start: int, end: int, *, path: Path | str | None = None) -> int | None:
    """Position of the first non-zero byte of ``buf[start:end]``, or None; holes of ``path`` are skipped."""
    for a, b in data_extents(path, start, end) if path is not None else [(start, end)]:
        for c0 in range(a, b, ZERO_CHUNK):
            c1 = min(c0 + ZERO_CHUNK, b)
            chunk = np.frombuffer(buf, np.uint8, count=c1 - c0, offset=c0)
            nz = np.flatnonzero(chunk)
            del chunk
            if nz.size:
                return c0 + int(nz[0])
            _release(buf, c0, c1)
    return None


def zero_tail_start(buf: Any, start: int, end: int, *, path: Path | str | None = None) -> int:
    """Where the run of zero bytes that ends at ``end`` begins (``end`` if the last byte is not 0)."""
    extents = data_extents(path, start, end) if path is not None else [(start, end)]
    if not extents:
        return start
    if extents[-1][1] < end:
        end_data = extents[-1][1]  # a hole runs to ``end``: only the data before it can end the run
    else:
        end_data = end
    for a, b in reversed(extents):
        c1 = min(b, end_data)
        while c1 > a:
            c0 = max(a, c1 - ZERO_CHUNK)
            chunk = np.frombuffer(buf, np.uint8, count=c1 - c0, offset=c0)
            nz = np.flatnonzero(chunk)
            del chunk
            _release(buf, c0, c1)
            if nz.size:
                return c0 + int(nz[-1]) + 1
            c1 = c0
    return start


_BLANK_BYTES = struct.pack(">i", BLANK_MAGIC)


_WINDOW = 64 << 20  # record starts are indexed 64 MiB of a file at a time


_SEARCH_CHUNK = 1 << 20  # bytes compared per numpy step (stays in cache)


def magic_positions(buf: Any, size: int, lo: int, hi: int) -> np.ndarray:
    """Every position m in [lo, hi) where a V1 or V2 magic code (§3.1) starts."""
    hi = min(hi, size - 3)
    if hi <= lo:
        return np.empty(0, np.int64)
    # Both magic codes are DA A3 20 A7/AB: find the rarer second byte, then check all four.
    u8 = np.frombuffer(buf, dtype=np.uint8, count=size)
    be32 = np.ndarray((size - 3,), dtype=">i4", buffer=buf, strides=(1,))
    parts = []
    try:
        for c0 in range(lo + 1, hi + 1, _SEARCH_CHUNK):
            m = np.flatnonzero(u8[c0 : min(c0 + _SEARCH_CHUNK, hi + 1)] == 0xA3) + (c0 - 1)
            if m.size:
                code = be32[m]
                m = m[(code == MAGIC_V1) | (code == MAGIC_V2)]
                if m.size:
                    parts.append(m)
    finally:
        del u8, be32
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


class RecordStarts:
    """Verified record starts of one file, computed a window at a time: the one resync routine.

    ``v2=False`` leaves V2 records out, for a broker that cannot read them.
    """

    def __init__(self, buf: Any, size: int, file_from: int, *, v2: bool = True) -> None:
        self.buf, self.size, self.file_from, self.v2 = buf, size, file_from, v2
        self._windows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        got = self._windows.get(w)
        if got is None:
            if len(self._windows) >= 2:
                self._windows.pop(min(self._windows))
            lo, hi = w * _WINDOW, min((w + 1) * _WINDOW, self.size)
            starts = magic_positions(self.buf, self.size, lo + 4, hi + 4) - 4
            if not self.v2 and starts.size:
                be32 = np.ndarray((self.size - 3,), dtype=">i4", buffer=self.buf, strides=(1,))
                starts = starts[be32[starts + 4] != MAGIC_V2]
                del be32
            starts, ends = well_formed_records(self.buf, self.size, self.file_from, starts)
            breaks = np.flatnonzero(ends[:-1] != starts[1:])  # the chain does not go on after these
            got = self._windows[w] = (starts, ends, breaks)
        return got

    def run_at(self, pos: int) -> tuple[np.ndarray, int] | None:
        """The chained intact records starting exactly at ``pos`` (within one window), or None."""
        starts, ends, breaks = self._window(pos // _WINDOW)
        i = int(np.searchsorted(starts, pos))
        if i == len(starts) or starts[i] != pos:
            return None
        b = int(np.searchsorted(breaks, i))
        j = int(breaks[b]) if b < len(breaks) else len(starts) - 1
        return starts[i : j + 1], int(ends[j])

    def next_start(self, pos: int) -> int | None:
        """The first verified record start after ``pos``."""
        w = pos // _WINDOW
        while w * _WINDOW < self.size:
            starts = self._window(w)[0]
            i = int(np.searchsorted(starts, pos, side="right"))
            if i < len(starts):
                return int(starts[i])
            w += 1
        return None

    def next_blank(self, pos: int, limit: int) -> int | None:
        """The first BLANK after ``pos`` (before ``limit``) whose TOTALSIZE is the rest of the file."""
        buf, size = self.buf, self.size
        at = pos + 5
        while True:
            m = buf.find(_BLANK_BYTES, at, min(limit + 4, size))
            if m < 0:
                return None
            q = m - 4
            if q > pos and read_head(buf, q)[0] == size - q:
                return q
            at = m + 1

    def resync(self, pos: int) -> int | None:
        """Where the walk goes on after damage at ``pos``: the first record or file-ending BLANK after it."""
        q = self.next_start(pos)
        blank = self.next_blank(pos, self.size if q is None else q)
        return q if blank is None else blank


_RECORD_MAGICS = (MAGIC_V1.to_bytes(4, "big", signed=True), MAGIC_V2.to_bytes(4, "big", signed=True))


def resync(buf: Any, start: int, end: int, valid: Callable[[int], bool]) -> int | None:
    """The first position ``p`` in ``[start, end)`` with the V1 or V2 magic at ``p + 4`` and ``valid(p)``.

    The bytes are searched in windows growing from 64 KiB, so finding a record near ``start``
    does not scan the whole range for the magic that is not there.
    """
    lo, step = start, 1 << 16
    while lo < end:
        hi = min(end, lo + step)
        at = lo + 4
        while True:
            hits = [i for i in (buf.find(m, at, hi + 7) for m in _RECORD_MAGICS) if i >= 0]
            if not hits:
                break
            idx = min(hits)
            if idx - 4 >= hi:
                break
            if valid(idx - 4):
                return idx - 4
            at = idx + 1
        lo, step = hi, step * 2
    return None
