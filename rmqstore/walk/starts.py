"""Where records start and where data ends: verified record starts after damage, and zero tails."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rmqstore.codec.columnar import well_formed_records
from rmqstore.codec.commitlog import MAGIC_V2
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.store.files import ZERO_CHUNK, data_extents, next_data

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


_WINDOW = 16 << 20  # record starts indexed at a time: the pages a window touches stay resident until read


class RecordStarts:
    """Verified frame starts of one commit log file, computed a window at a time: the one resync routine.

    Positions are those of frames (where the walk steps); ``run_at`` gives the records' own
    positions. ``v2=False`` leaves V2 records out, for a broker that cannot read them.
    """

    def __init__(
        self,
        buf: Any,
        size: int,
        file_from: int,
        *,
        v2: bool = True,
        framing: Framing = PLAIN,
        path: Path | str | None = None,
    ) -> None:
        self.buf, self.size, self.file_from, self.v2, self.framing = buf, size, file_from, v2, framing
        self.path = path  # the file, when known: windows that are all hole are skipped
        self._windows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        got = self._windows.get(w)
        if got is None:
            if len(self._windows) >= 2:
                self._windows.pop(min(self._windows))
            lo, hi = w * _WINDOW, min((w + 1) * _WINDOW, self.size)
            records = self.framing.record_candidates(self.buf, self.size, lo, hi)
            if not self.v2 and records.size:
                be32 = np.ndarray((self.size - 3,), dtype=">i4", buffer=self.buf, strides=(1,))
                records = records[be32[records + 4] != MAGIC_V2]
                del be32
            records, ends = well_formed_records(self.buf, self.size, self.file_from, records)
            sound = self.framing.sound_frames(self.buf, self.size, self.file_from, records, ends)
            if sound is not None:
                records, ends = records[sound], ends[sound]
            frames = self.framing.frame_of(records)
            breaks = np.flatnonzero(ends[:-1] != frames[1:])  # the chain does not go on after these
            got = self._windows[w] = (frames, records, ends, breaks)
        return got

    def run_at(self, pos: int) -> tuple[np.ndarray, int] | None:
        """The records of the chained intact frames starting exactly at ``pos`` (within one window), or None."""
        frames, records, ends, breaks = self._window(pos // _WINDOW)
        i = int(np.searchsorted(frames, pos))
        if i == len(frames) or frames[i] != pos:
            return None
        b = int(np.searchsorted(breaks, i))
        j = int(breaks[b]) if b < len(breaks) else len(frames) - 1
        return records[i : j + 1], int(ends[j])

    def next_start(self, pos: int) -> int | None:
        """The first verified frame start after ``pos``."""
        w = pos // _WINDOW
        while w * _WINDOW < self.size:
            if self.path is not None and w not in self._windows:
                d = next_data(self.path, max(pos, w * _WINDOW))
                if d is None:
                    return None  # a hole up to the end of the file
                if d >= (w + 1) * _WINDOW:
                    w = d // _WINDOW  # skip the windows that are all hole
                    continue
            frames = self._window(w)[0]
            i = int(np.searchsorted(frames, pos, side="right"))
            if i < len(frames):
                return int(frames[i])
            w += 1
        return None

    def next_blank(self, pos: int, limit: int) -> int | None:
        """The first BLANK after ``pos`` (before ``limit``) that fills the rest of the file."""
        if self.path is None:
            return self.framing.blank_after(self.buf, self.size, pos, limit)
        for a, b in data_extents(self.path, pos + 1, limit):  # a BLANK's head is data, never a hole
            q = self.framing.blank_after(self.buf, self.size, max(pos, a - 64), b)
            if q is not None:
                return q
        return None

    def resync(self, pos: int) -> int | None:
        """Where the walk goes on after damage at ``pos``: the first frame or file-ending BLANK after it."""
        q = self.next_start(pos)
        blank = self.next_blank(pos, self.size if q is None else q)
        return q if blank is None else blank
