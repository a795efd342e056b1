"""The walk of the commit log chain: typed stops, the one chain rule, and the plain record walk of a file."""

from __future__ import annotations

import enum
import mmap
import struct
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
    explain_invalid,
)
from rmqstore.codec.framing import BLANK, END, RECORD
from rmqstore.errors import CorruptData
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence


_HEAD = struct.Struct(">ii")


_RELEASE_EVERY = 16 << 20


def is_zero_header(buf: object, pos: int) -> bool:
    """An all-zero TOTALSIZE and MAGIC: the unwritten (preallocated) part of a file."""
    return _HEAD.unpack_from(buf, pos) == (0, 0)  # type: ignore[arg-type]


def walk_segment(
    buf: object,
    seg: Segment,
    *,
    start_pos: int = 0,
    check_crc: bool = False,
    broker: str = "4.4.0",
) -> Iterator[Record | Blank]:
    """Records of one commit log file from ``start_pos``: stops at a BLANK (yielded), at zeros
    or at the end of the file; raises CorruptData at an invalid record (recovery semantics)."""
    size = len(buf)  # type: ignore[arg-type]
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
        rec = decode_record(buf, at, path=path, file_from=seg.base_offset, check_crc=check_crc, broker=broker)
        if kind != RECORD or not isinstance(rec, Record):
            raise explain_invalid(buf, at, path=path, file_from=seg.base_offset, broker=broker)
        yield rec
        pos = frame_end
        if release is not None and pos - released >= _RELEASE_EVERY:
            upto = pos - pos % mmap.PAGESIZE
            release(mmap.MADV_DONTNEED, released, upto - released)
            released = upto


def iter_commitlog(
    st: Store, *, from_phy: int | None = None, check_crc: bool = False
) -> Iterator[tuple[Segment, Record | Blank]]:
    """Every record of the commit log from ``from_phy`` (default: the first file), in order."""
    segs, _ = st.commitlog_segments()
    for seg in segs:
        if from_phy is not None and seg.base_offset + seg.size <= from_phy:
            continue
        start = 0 if from_phy is None or from_phy < seg.base_offset else from_phy - seg.base_offset
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


def queued(sys_flag: Any) -> Any:
    """Whether a record gets a consume queue entry: a plain or committed message (§4.3), not a
    prepared or rolled back one. Works on one SYSFLAG or an array of them."""
    tt = sys_flag & TRANSACTION_MASK
    return (tt == TRANSACTION_NOT_TYPE) | (tt == TRANSACTION_COMMIT_TYPE)


def indexed(sys_flag: Any) -> Any:
    """Whether a record's keys go into the index: anything but a rollback (§5.3)."""
    return (sys_flag & TRANSACTION_MASK) != TRANSACTION_ROLLBACK_TYPE


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
