"""How records sit in the files of a commit log: the framing of the chain (store-format.md §2, §3.1, §3.10).

A commit log file is a chain of frames. In a plain commit log a frame is the record itself: the
chain follows TOTALSIZE, a BLANK record (its TOTALSIZE the rest of the file) ends a full file, and
zeros end the data. Other framings wrap each record in a header of their own (a DLedger entry
puts 48 bytes before it); the record's bytes and fields are the same, and its physical offset is
the file's base offset plus the position of its first byte (the frame's position plus ``head``).

A :class:`Framing` answers the questions a walk asks of the bytes, without a file system: the chain
of frames from a position (record positions, where the chain stopped and why), one step, where a
frame ends, and where intact frames may start after damage. The walk (``rmqstore.walk``) is its
user, and the store's readers below the walk's layer (version detection, the needle scan, the
lookup after the dispatch position); a new framing is one new class here, chosen per file by the
store.
"""

from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING, Any

from rmqstore.codec.commitlog import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    OFFSETS_V4,
    encode_blank,
    explain_invalid,
    read_head,
)
from rmqstore.errors import CorruptData

if TYPE_CHECKING:
    import numpy as np

# Why a chain of frames stopped (the walk's stop kinds are these strings)
BLANK = "blank"  # a frame that fills the rest of the file: the chain goes on in the next file
END = "end"  # zeros or the end of the file: the end of the data
INVALID = "invalid"  # bytes that are neither a frame, zeros nor a blank
UNTIL = "until"  # the caller's bound
RECORD = "record"  # one step found a frame holding a record

_PHY_END = OFFSETS_V4["phy_offset"] + 8  # PHYSICALOFFSET is bytes 28-35 of every record
_SEARCH_CHUNK = 1 << 20  # bytes compared per numpy step (stays in cache)
_BLANK_BYTES = struct.pack(">i", BLANK_MAGIC)
_RECORD_MAGICS = (MAGIC_V1.to_bytes(4, "big", signed=True), MAGIC_V2.to_bytes(4, "big", signed=True))


def is_record_magic(magic: int, *, v2: bool = True) -> bool:
    """Whether a MAGICCODE starts a message record (V2 only where the broker reads V2)."""
    return magic == MAGIC_V1 or (v2 and magic == MAGIC_V2)


def magic_positions(buf: Any, size: int, lo: int, hi: int) -> np.ndarray:
    """Every position m in [lo, hi) where a V1 or V2 magic code (§3.1) starts."""
    import numpy as np  # a key query reads no file this way: numpy stays unloaded for it

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


class _EqualRuns:
    """Runs of records of one size, chained with numpy: after ``_RUN_START`` records of the same
    TOTALSIZE, the next ones are read at once at ``pos + k * total`` and taken up to the first that
    fails the chain's step check or has another size (the loop goes on from there, record by
    record). The chain is the same: each record taken has the size that puts the next one there."""

    def __init__(self, buf: Any, end: int, limit: int) -> None:
        self.buf, self.end, self.limit = buf, end, limit
        self.last, self.same, self.ahead = 0, 0, _RUN_FIRST
        self.heads: Any = None

    def seen(self, total: int) -> bool:
        if total != self.last:
            self.last, self.same = total, 1
            return False
        self.same += 1
        return self.same >= _RUN_START

    def take(self, pos: int, total: int, out: array) -> int:
        import numpy as np

        n = min(self.ahead, (self.end - pos) // total, -(-(self.limit - pos) // total))
        if n <= 0 or total < 8:  # every record read here has its 8 head bytes before ``end``
            return pos
        if self.heads is None:  # TOTALSIZE and MAGICCODE at every byte position, read on demand
            self.heads = np.ndarray((self.end - 3,), dtype=">i4", buffer=self.buf, strides=(1,))
        at = pos + total * np.arange(n, dtype=np.int64)
        magic = self.heads[at + 4]
        ok = (self.heads[at] == total) & ((magic == MAGIC_V1) | (magic == MAGIC_V2))
        bad = np.flatnonzero(~ok)
        taken = int(bad[0]) if bad.size else n
        out.frombytes(at[:taken].astype("=i8").tobytes())
        # a run that goes on looks further ahead next time; a run that ends starts over
        self.ahead = min(self.ahead * 2, _RUN_MOST) if taken == n else _RUN_FIRST
        if taken < n:
            self.same = 0
        return pos + total * taken


_RUN_START = 8  # records of one size in a row before the next ones are read at once
_RUN_FIRST = 64  # records read ahead at first
_RUN_MOST = 1 << 16


class Framing:
    """The plain commit log: every frame is one record, with no header of its own."""

    name = "plain"
    head = 0  # bytes of a frame before its record
    blank_mark = (_BLANK_BYTES, 4)  # bytes found in every blank frame, and where in the frame
    appendable = True  # ``write`` lays out plain frames only: it refuses a store in any other framing
    blank_tells_version = True  # the broker's CommitLog wrote the blank: its tail tells which version

    def chain(self, buf: Any, start: int, end: int, until: int | None = None) -> tuple[np.ndarray, int, str]:
        """Record positions of the frames chained from ``start``; returns (positions, stop, reason).

        ``stop`` is where the next frame would start; ``reason`` is BLANK, END, INVALID, or UNTIL
        when ``until`` is given and a frame starts at or after it (that frame is not looked at).
        """
        import numpy as np  # as in magic_positions: loaded by the walks that need it only

        pos = start
        out = array("q")
        append = out.append
        unpack = read_head
        limit = end if until is None else min(until, end)
        reason = END
        runs = _EqualRuns(buf, end, limit)
        while pos + 8 <= end:
            if pos >= limit:
                reason = UNTIL
                break
            total, magic = unpack(buf, pos)
            if (magic == MAGIC_V1 or magic == MAGIC_V2) and 0 < total <= end - pos:
                append(pos)
                pos += total
                if runs.seen(total):
                    pos = runs.take(pos, total, out)
                continue
            if magic == BLANK_MAGIC:
                reason = BLANK
            elif total == 0 and magic == 0:
                reason = END
            else:
                reason = INVALID
            break
        runs.heads = None  # the buffer may be closed once the chain is known
        return np.frombuffer(out, dtype=np.int64) if len(out) else np.zeros(0, np.int64), pos, reason

    def step(self, buf: Any, pos: int, end: int) -> tuple[str, int, int]:
        """The frame at ``pos``: (kind, record position, the frame's end).

        ``kind`` is RECORD (a record of a plausible size), BLANK (its end: as its size field says),
        END (zeros, or no room for a head) or INVALID. The record itself is not checked: that is
        the decoder's business.
        """
        if pos + 8 > end:
            return END, pos, pos
        total, magic = read_head(buf, pos)
        if (magic == MAGIC_V1 or magic == MAGIC_V2) and 0 < total <= end - pos:
            return RECORD, pos, pos + total
        if magic == BLANK_MAGIC:
            return BLANK, pos, pos + total
        if total == 0 and magic == 0:
            return END, pos, pos
        return INVALID, pos, pos

    def blank_head(self, remaining: int) -> bytes:
        """The first bytes of the blank frame that fills the last ``remaining`` bytes of a file (zeros follow)."""
        return encode_blank(remaining)

    frame_fields: tuple[str, ...] = ()  # what a frame says of its record besides the record (dump's extra fields)

    def frame_values(self, buf: Any, record_pos: int) -> tuple[int, ...]:
        """The values of ``frame_fields`` for the record at ``record_pos``."""
        return ()

    def magic_at(self, buf: Any, pos: int) -> int:
        """The MAGICCODE of the record in the frame at ``pos``."""
        return read_head(buf, pos + self.head)[1]

    def sound_frames(
        self, buf: Any, size: int, file_from: int, records: np.ndarray, ends: np.ndarray
    ) -> np.ndarray | None:
        """Which of the well-formed ``records`` (ending at ``ends``) sit in a sound frame of their own;
        None when the record is the whole frame."""
        return None

    def explain(self, buf: Any, pos: int, **where: Any) -> CorruptData:
        """Why the frame at ``pos`` stops a walk (``where``: ``decode_record``'s keyword arguments): what
        the decoder says of the bytes where ``step`` places the frame's record."""
        at = self.step(buf, pos, where.get("end") or len(buf))[1]
        return explain_invalid(buf, at, **where)

    def frame_of(self, record_pos: np.ndarray | int) -> Any:
        """Frame positions of records at ``record_pos``."""
        return record_pos - self.head

    def record_candidates(self, buf: Any, size: int, lo: int, hi: int) -> np.ndarray:
        """Positions of records whose frame may start in [lo, hi): where a record magic code is."""
        return magic_positions(buf, size, lo + self.head + 4, hi + self.head + 4) - 4

    def blank_after(self, buf: Any, size: int, pos: int, limit: int) -> int | None:
        """The first frame after ``pos`` (before ``limit``) that is a BLANK filling the rest of the file."""
        mark, mark_at = self.blank_mark
        at = pos + 1 + mark_at
        while True:
            m = buf.find(mark, at, min(limit + mark_at, size))
            if m < 0:
                return None
            q = m - mark_at
            kind, _, frame_end = self.step(buf, q, size)
            if kind == BLANK and frame_end == size:
                return q
            at = m + 1

    def find_chained(self, u8: np.ndarray, base_offset: int, lo: int, hi: int) -> int | None:
        """The first frame position in [lo, hi) holding a record whose stored PHYSICALOFFSET is the
        file's base offset plus its position (a record on the chain), or None.

        Only a hint: a caller must check that the walk from the previous frame lands there.
        """
        import numpy as np

        n = len(u8)
        step = 1 << 16
        at = lo
        while at < hi:
            stop = min(hi, at + step)
            w = u8[at + self.head + 4 : min(stop + self.head + 7, n)]  # magic bytes of candidates at [at, stop)
            if len(w) < 4:
                return None
            m = (w[:-3] == 0xDA) & (w[1:-2] == 0xA3) & (w[2:-1] == 0x20) & ((w[3:] == 0xA7) | (w[3:] == 0xAB))
            for c in np.flatnonzero(m).tolist():
                pos = at + c + self.head
                if pos + _PHY_END > n:
                    return None
                total = int.from_bytes(u8[pos : pos + 4].tobytes(), "big", signed=True)
                phy = int.from_bytes(u8[pos + _PHY_END - 8 : pos + _PHY_END].tobytes(), "big", signed=True)
                if phy == base_offset + pos and 0 < total <= n - pos and self._frames(u8, at + c, pos, total):
                    return at + c
            at = stop
            step *= 2
        return None

    def _frames(self, u8: np.ndarray, frame: int, record: int, total: int) -> bool:
        """Whether the frame at ``frame`` holds exactly the record at ``record`` of ``total`` bytes."""
        return True

    def resync(self, buf: Any, start: int, end: int, valid: Any) -> int | None:
        """The first frame position ``p`` in ``[start, end)`` whose record magic is in place and ``valid(p)``.

        The bytes are searched in windows growing from 64 KiB, so finding a record near ``start``
        does not scan the whole range for the magic that is not there.
        """
        lo, step = start, 1 << 16
        off = self.head + 4
        while lo < end:
            hi = min(end, lo + step)
            at = lo + off
            while True:
                hits = [i for i in (buf.find(m, at, hi + off + 3) for m in _RECORD_MAGICS) if i >= 0]
                if not hits:
                    break
                idx = min(hits)
                if idx - off >= hi:
                    break
                if valid(idx - off):
                    return idx - off
                at = idx + 1
            lo, step = hi, step * 2
        return None


PLAIN = Framing()
