"""The walk of the commit log chain: typed stops, the one chain rule, the record walk of a file, runs of
frames for the walks that check records their own way, and what a file's first frame says (whether
the file holds data, the record it starts with)."""

from __future__ import annotations

import enum
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from rmqstore.codec.commitlog import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Blank,
    Record,
    decode_record,
)
from rmqstore.codec.framing import BLANK, END, INVALID, RECORD, UNTIL, is_record_magic
from rmqstore.errors import CorruptData
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence


_RELEASE_EVERY = 16 << 20


def holds_data(seg: Segment) -> bool:
    """Whether a commit log file's first frame is anything but zeros (a pre-allocated file holds none)."""
    with map_file(seg.path) as buf:
        return seg.framing.step(buf, 0, len(buf))[0] != END


def first_record(buf: Any, seg: Segment, *, v2: bool = True) -> int | None:
    """Where the record of a file's first frame starts when its MAGICCODE says it is one (V2 only with
    ``v2``): all the broker's ``isMappedFileMatchedRecover`` asks of the bytes before the store time."""
    framing = seg.framing
    if len(buf) < framing.head + 8 or not is_record_magic(framing.magic_at(buf, 0), v2=v2):
        return None
    return framing.head


def walk_segment(
    buf: object,
    seg: Segment,
    *,
    start_pos: int = 0,
    end_pos: int | None = None,
    check_crc: bool = False,
    broker: str = "4.4.0",
) -> Iterator[Record | Blank]:
    """Records of one commit log file from ``start_pos`` (up to ``end_pos``): stops at a BLANK (yielded),
    at zeros or at the end; raises CorruptData at an invalid record (recovery semantics)."""
    size = len(buf) if end_pos is None else end_pos  # type: ignore[arg-type]
    pos = start_pos
    path = str(seg.path)
    step = seg.framing.step
    # Read pages of a mapping count as resident memory: give them back every 16 MiB. Safe,
    # because a Record holds copies of its body, topic and properties.
    release = getattr(buf, "madvise", None)
    released = start_pos - start_pos % mmap.PAGESIZE
    while True:
        kind, at, frame_end = step(buf, pos, size)
        if kind == END:
            return
        if kind == BLANK:
            yield Blank(pos, seg.base_offset + pos, frame_end - pos)
            return
        rec = decode_record(buf, at, path=path, file_from=seg.base_offset, end=size, check_crc=check_crc, broker=broker)
        if kind != RECORD or not isinstance(rec, Record):
            raise seg.framing.explain(buf, pos, path=path, file_from=seg.base_offset, end=size, broker=broker)
        yield rec
        pos = frame_end
        if release is not None and pos - released >= _RELEASE_EVERY:
            upto = pos - pos % mmap.PAGESIZE
            release(mmap.MADV_DONTNEED, released, upto - released)
            released = upto


def frame_start(seg: Segment, pos: int) -> int:
    """Where a walk from file position ``pos`` starts: ``pos`` itself, or the frame around it when ``pos``
    is where a framed record starts (a commit log offset as the broker serves it names the record)."""
    if not seg.framing.head or pos < seg.framing.head:
        return pos
    with map_file(seg.path) as buf:
        size = len(buf)
        if seg.framing.step(buf, pos, size)[0] != INVALID:
            return pos
        kind, at, _ = seg.framing.step(buf, pos - seg.framing.head, size)
    return pos - seg.framing.head if kind == RECORD and at == pos else pos


def iter_commitlog(
    st: Store, *, from_phy: int | None = None, check_crc: bool = False
) -> Iterator[tuple[Segment, Record | Blank]]:
    """Every record of the commit log from ``from_phy`` (default: the first file), in order."""
    segs, _ = st.commitlog_segments()
    for seg in segs:
        if from_phy is not None and seg.base_offset + seg.size <= from_phy:
            continue
        start = 0 if from_phy is None or from_phy < seg.base_offset else frame_start(seg, from_phy - seg.base_offset)
        with map_file(seg.path) as buf:
            ended = False
            for rec in walk_segment(buf, seg, start_pos=start, check_crc=check_crc, broker=st.config.broker):
                yield seg, rec
                if isinstance(rec, Blank):
                    ended = True
            if not ended:
                return  # data ended inside this file: later files hold nothing valid


class _Stopped(Protocol):
    @property
    def stop(self) -> Stop: ...


_W = TypeVar("_W", bound=_Stopped)


class StopKind(str, enum.Enum):
    """Why the walk of one commit log file ended (equal to its plain string, as older callers compare)."""

    BLANK = "blank"  # a BLANK record: the file is full, the chain goes on in the next file
    END = "end"  # zeros or the end of the file: the end of the data
    INVALID = "invalid"  # a record the walk's rules reject
    UNTIL = "until"  # the caller's bound


@dataclass(slots=True)
class Stop:
    """Where and why the walk of one commit log file ended.

    ``pos`` is where the next record would start in the file; with the file's ``base_offset`` it
    is the physical offset. ``error`` explains an INVALID stop.
    """

    pos: int
    kind: StopKind
    error: CorruptData | None = None
    file: Path | None = None
    base_offset: int = 0

    def __post_init__(self) -> None:
        self.kind = StopKind(self.kind)

    @property
    def reason(self) -> str:
        return self.kind.value

    @property
    def phy_offset(self) -> int:
        return self.base_offset + self.pos

    @property
    def explanation(self) -> str:
        if self.kind is StopKind.INVALID:
            return f"invalid record: {self.error}" if self.error else "invalid record"
        if self.kind is StopKind.BLANK:
            return f"blank record at {self.phy_offset}"
        return "end of data" if self.kind is StopKind.END else f"bound at {self.phy_offset}"


@dataclass(slots=True)
class Frames:
    """A run of consecutive frames of one commit log file that hold records; the last run of a walk
    carries where and why the chain stopped."""

    first: int  # where the run's first frame starts
    records: np.ndarray  # where each frame's record starts
    ends: np.ndarray  # where each frame ends: the next frame's position
    stop: Stop | None = None

    def frame(self, i: int) -> int:
        """Where the ``i``-th frame of the run starts."""
        return int(self.ends[i - 1]) if i else self.first


def frames(
    buf: Any, seg: Segment, start: int = 0, end: int | None = None, *, part: int = _RELEASE_EVERY
) -> Iterator[Frames]:
    """The chain of frames of one mapped file from ``start`` up to ``end``, a run of about ``part`` bytes
    at a time; the last run's ``stop`` is a BLANK, END or INVALID one. A run's pages are given back to
    the system when the caller asks for the next (they stay in the page cache)."""
    size = len(buf) if end is None else end
    chain, frame_of = seg.framing.chain, seg.framing.frame_of
    release = getattr(buf, "madvise", None)
    released, pos = start - start % mmap.PAGESIZE, start
    while True:
        records, stop, reason = chain(buf, pos, size, until=pos + part)
        ends = np.empty_like(records)
        if len(records):
            ends[:-1] = frame_of(records[1:])
            ends[-1] = stop
        if reason != UNTIL:
            yield Frames(pos, records, ends, Stop(stop, reason, None, seg.path, seg.base_offset))
            return
        yield Frames(pos, records, ends)
        pos = stop
        if release is not None and pos - released >= mmap.PAGESIZE:
            upto = pos - pos % mmap.PAGESIZE
            release(mmap.MADV_DONTNEED, released, upto - released)
            released = upto


def queued(sys_flag: Any) -> Any:
    """Whether a record gets a consume queue entry: a plain or committed message (§4.3), not a
    prepared or rolled back one. Works on one SYSFLAG or an array of them."""
    tt = sys_flag & TRANSACTION_MASK
    return (tt == TRANSACTION_NOT_TYPE) | (tt == TRANSACTION_COMMIT_TYPE)


def indexed(sys_flag: Any) -> Any:
    """Whether a record's keys go into the index: anything but a rollback (§5.3)."""
    return (sys_flag & TRANSACTION_MASK) != TRANSACTION_ROLLBACK_TYPE


def queue_order(topic_id: np.ndarray, queue_id: np.ndarray) -> np.ndarray:
    """Record indexes grouped by queue, (topic id, queue id) ascending, in commit log order within each.

    A stable sort of a 16-bit code of the two ids when they fit (numpy sorts it by radix, five times as
    fast as a 64-bit key): stores have a few topics and queues per batch; else of the 64-bit key."""
    if not len(queue_id):
        return np.zeros(0, np.int64)
    qmin, qmax, tmax = int(queue_id.min()), int(queue_id.max()), int(topic_id.max())
    if qmin < 0 or int(topic_id.min()) < 0 or (tmax + 1) * (qmax + 1) > 1 << 16:
        return np.argsort(topic_id.astype(np.int64) * (1 << 33) + queue_id, kind="stable")
    return np.argsort((topic_id * (qmax + 1) + queue_id).astype(np.uint16), kind="stable")


def walk_chain(
    segs: Sequence[Segment], start_idx: int, walk_file: Callable[[Segment, int], _W], *, start_pos: int = 0
) -> Iterator[_W]:
    """Walk the commit log chain from ``segs[start_idx]`` at ``start_pos``: ``walk_file(seg, pos)`` walks
    one file and says where it stopped (``.stop``); a BLANK moves on to the start of the next file,
    anything else ends the chain (§8.2, §9.2)."""
    pos = start_pos
    for seg in segs[start_idx:]:
        w = walk_file(seg, pos)
        yield w
        if w.stop.kind is not StopKind.BLANK:
            return
        pos = 0


@dataclass
class FileWalk:
    """Valid records of one commit log file (arrays in file order) and where the walk stopped."""

    seg: Segment
    start_pos: int
    pos: np.ndarray  # record positions in the file
    phy: np.ndarray  # PHYSICALOFFSET field
    size: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    store_ts: np.ndarray
    topic_id: np.ndarray
    stop: Stop

    @property
    def stop_pos(self) -> int:
        return self.stop.pos

    @property
    def reason(self) -> str:  # "blank" | "end" | "invalid"
        return self.stop.reason

    @property
    def error(self) -> CorruptData | None:
        return self.stop.error
