"""The lenient walk of commit log files: every byte as intact records, damage, the BLANK or the end of data.

Recovery's walk (``chain``, ``checked``) stops at the first frame that does not read. This one goes
on: a damaged stretch ends at the next verified frame start (:class:`RecordStarts`: a record the
decoder accepts, holding its own offset), or at the BLANK or zeros that end the file, so one bad
byte never hides the records after it (store-format.md §3.11). ``dump commitlog`` shows every byte
of a file this way; ``check`` reads the records between the damage as the broker does (``as_broker``).

Runs of intact records come from the verified starts a window at a time, so a clean file costs no
Python per record; only the frames around damage are stepped one by one.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import MIN_RECORD_SIZE_V1, Blank, Record, checked_size, decode_record
from rmqstore.codec.framing import BLANK, END, RECORD, Framing
from rmqstore.errors import CorruptData
from rmqstore.rules import rules_for
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment
from rmqstore.walk.starts import RecordStarts, first_nonzero, zero_tail_start

ZEROS_WHY = "zero bytes where a record should start, with data after them"


@dataclass(frozen=True, slots=True, eq=False)
class Run:
    """Consecutive intact records of one file: each frame starts where the previous one ends."""

    seg: Segment
    positions: np.ndarray  # int64 record positions inside the file
    end_pos: int  # where the last frame ends

    @property
    def record_bytes(self) -> int:
        """The bytes of the run's records: its frames (each one's record right after its head) without the heads."""
        return self.end_pos - int(self.positions[0]) - (len(self.positions) - 1) * self.seg.framing.head

    def within(self, lo: int, hi: int) -> Run:
        """The run's records at commit log offsets in ``[lo, hi)``, as a run of their own."""
        phy = self.positions + self.seg.base_offset
        i, j = int(np.searchsorted(phy, lo)), int(np.searchsorted(phy, hi))
        end = self.end_pos if j == len(phy) else int(self.seg.framing.frame_of(int(self.positions[j])))
        return Run(self.seg, self.positions[i:j], end)


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes no record explains, from a frame that does not read up to where records go on."""

    pos: int
    resume: int  # a verified frame start, or the BLANK that ends the file
    error: CorruptData | None  # why the frame at ``pos`` does not read; None: zeros stand there

    @property
    def why(self) -> str:
        return ZEROS_WHY if self.error is None else self.error.what


@dataclass(frozen=True, slots=True)
class BlankEnd:
    """The BLANK frame that ends a full file (§3.4)."""

    pos: int
    total: int  # the size it gives itself (its TOTALSIZE)
    error: CorruptData | None  # set when that size is not the rest of the file


@dataclass(frozen=True, slots=True)
class DataEnd:
    """Where the data of a file ends, with no BLANK: the file's size when records fill it."""

    pos: int
    garbage: int | None  # the first byte after ``pos`` that is not padding; None: only zeros follow
    zeros: int  # where the zeros that fill the rest of the file begin
    error: CorruptData | None  # why the bytes at ``pos`` are no record; None: zeros (or nothing) there

    @property
    def why(self) -> str:
        return ZEROS_WHY if self.error is None else self.error.what


Item = Run | Damage | BlankEnd | DataEnd


def _not_intact(buf: Any, seg: Segment, pos: int, at: int, size: int, broker: str) -> CorruptData:
    """Why the frame at ``pos`` (its record at ``at``) does not count as intact: the framing's or the
    decoder's error, or where the record says it is."""
    path, base = str(seg.path), seg.base_offset
    error = seg.framing.explain(buf, pos, path=path, file_from=base, end=size, broker=broker)
    if error.what != "invalid record":
        return error
    try:
        rec = decode_record(buf, at, path=path, file_from=base, end=size, broker=broker)
    except CorruptData as e:
        return e
    if not isinstance(rec, Blank) and rec.phy_offset != base + at:
        what = f"PHYSICALOFFSET field is {rec.phy_offset}, the record is at {base + at}"
    else:  # pragma: no cover - the verified starts, the framing and the decoder agree
        what = "record does not follow the previous one"
    return CorruptData(what, path=path, pos=at, phy_offset=base + at)


def intact_record(buf: Any, pos: int, *, path: str, file_from: int, broker: str) -> Record:
    """The record at a position the walk found readable (in a Run)."""
    rec = decode_record(buf, pos, path=path, file_from=file_from, broker=broker)
    if not isinstance(rec, Record):  # pragma: no cover - a Run never holds a BLANK
        raise CorruptData("a BLANK record where a message was expected", path=path, pos=pos)
    return rec


def _readable(buf: Any, framing: Framing, pos: int, size: int, limit: int) -> tuple[array, int]:
    """Records the decoder reads, chained from ``pos`` up to ``limit``, wherever their PHYSICALOFFSET points."""
    out = array("q")
    while pos < limit:
        kind, at, end = framing.step(buf, pos, size)
        if kind != RECORD or checked_size(buf, at, size) != end - at:
            break
        out.append(at)
        pos = end
    return out, pos


def _short_tail(buf: Any, seg: Segment, pos: int, size: int) -> DataEnd:
    """The end of the data at ``pos``, where no frame header fits."""
    if not any(buf[pos:size]):
        return DataEnd(pos, None, pos, None)
    what = f"{size - pos} bytes, too short for a record"
    return DataEnd(pos, pos, size, CorruptData(what, path=str(seg.path), pos=pos, phy_offset=seg.base_offset + pos))


def _misfit(seg: Segment, pos: int, total: int, size: int) -> CorruptData | None:
    """Why a BLANK at ``pos`` of ``total`` bytes does not end the file, or None when it fills the rest."""
    if total == size - pos:
        return None
    what = f"BLANK record with TOTALSIZE {total} but {size - pos} bytes to the end of the file"
    return CorruptData(what, path=str(seg.path), pos=pos, phy_offset=seg.base_offset + pos)


def walk_file(
    buf: Any,
    seg: Segment,
    *,
    broker: str = "4.4.0",
    as_broker: bool = False,
    until: int | None = None,
    start: int = 0,
    starts: RecordStarts | None = None,
) -> Iterator[Item]:
    """Every byte of one commit log file in order: runs, damage, and one BlankEnd or DataEnd at the end.

    A record is intact when it decodes and holds its own offset, and a BLANK ends the file when it
    fills the rest of it (every byte accounted for). ``as_broker`` reads as the broker does: any
    record the decoder accepts is one (its stored offset is the caller's business), any BLANK ends
    the file, and V2 records are resynchronised on only where the broker reads them. Nothing that
    starts at or after ``until`` is yielded (and no end). ``start`` is a frame start to begin at
    (the file's start, a verified start, or where an earlier walk stopped).
    """
    size = len(buf)
    stop = size if until is None else min(size, until)
    framing = seg.framing
    if starts is None:
        v2 = not as_broker or rules_for(broker).v2_magic
        starts = RecordStarts(buf, size, seg.base_offset, v2=v2, framing=framing, path=seg.path)
    pos = start
    while pos < stop:
        run = starts.run_at(pos) if size - pos >= MIN_RECORD_SIZE_V1 else None
        if run is not None:
            yield Run(seg, run[0], run[1])
            pos = run[1]
            continue
        kind, at, frame_end = framing.step(buf, pos, size)
        if kind == RECORD and as_broker:
            limit = starts.next_start(pos)
            got, end = _readable(buf, framing, pos, size, size if limit is None else limit)
            if got:
                yield Run(seg, np.frombuffer(got, np.int64), end)
                pos = end
                continue
        garbage, error = pos, None
        if kind == END:
            if size - pos < 8 or any(buf[pos : pos + 8]):  # no frame fits here
                yield _short_tail(buf, seg, pos, size)
                return
            garbage = first_nonzero(buf, pos, size, path=seg.path)
            if garbage is None:
                yield DataEnd(pos, None, pos, None)
                return
            # a record's TOTALSIZE has a non-zero byte among its first four
            q = starts.resync(max(pos, garbage - 3) - 1)
        elif kind == BLANK:
            error = _misfit(seg, pos, frame_end - pos, size)
            q = None if error is None or as_broker else starts.resync(pos)
            if q is None:  # a BLANK of the wrong size with nothing valid after it still ends the file
                yield BlankEnd(pos, frame_end - pos, error)
                return
        else:
            error = _not_intact(buf, seg, pos, at, size, broker)
            q = starts.resync(pos)
        if q is None:
            yield DataEnd(pos, garbage, zero_tail_start(buf, pos, size, path=seg.path), error)
            return
        yield Damage(pos, q, error)
        pos = q
    if pos == stop == size:
        yield DataEnd(pos, None, pos, None)  # records fill the file


def boundaries(buf: Any, seg: Segment, upto: int, *, broker: str = "4.4.0", back: int = 4 << 20) -> np.ndarray:
    """Every frame boundary of the lenient walk of one file at or before ``upto`` (the file start, record
    starts and ends, where damage starts and ends, the BLANK, the end of data), walked from the last
    verified frame start at least ``back`` bytes before ``upto`` (from the file start when none is)."""
    starts = RecordStarts(buf, len(buf), seg.base_offset, framing=seg.framing, path=seg.path)
    lo = max(0, upto - back)
    first = starts.next_start(lo - 1) if lo else 0
    first = 0 if first is None or first > upto else first
    out = [np.array([first], np.int64)]
    for item in walk_file(buf, seg, broker=broker, until=upto + 1, start=first, starts=starts):
        if isinstance(item, Run):
            out += [seg.framing.frame_of(item.positions), np.array([item.end_pos], np.int64)]
        elif isinstance(item, Damage):
            out.append(np.array([item.pos, item.resume], np.int64))
        else:
            out.append(np.array([item.pos], np.int64))
    got = np.concatenate(out)
    return np.unique(got[got <= upto])


def walk_files(
    segs: Sequence[Segment], *, broker: str = "4.4.0", as_broker: bool = False, to_phy: int | None = None
) -> Iterator[tuple[Segment, Any, Iterator[Item]]]:
    """Each file of ``segs`` in order, mapped, with its lenient walk (up to ``to_phy``); the mapping
    lasts until the next file is asked for."""
    for seg in segs:
        with map_file(seg.path) as buf:
            until = None if to_phy is None else to_phy - seg.base_offset
            yield seg, buf, walk_file(buf, seg, broker=broker, as_broker=as_broker, until=until)


def records_end(segs: Sequence[Segment], *, broker: str = "4.4.0") -> int | None:
    """The commit log offset just past the last intact record (None when there is none)."""
    for seg, _buf, items in walk_files(list(reversed(segs)), broker=broker):
        end = None
        for item in items:
            if isinstance(item, Run):
                end = seg.base_offset + item.end_pos
        if end is not None:
            return end
    return None
