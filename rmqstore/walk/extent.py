"""Where a store's commit log data starts and ends, as ``info`` and ``report`` show it (store-format.md §2, §8.2).

The end is found without reading the whole commit log: from the start of the last file that holds
data, frame by frame, with the structure check of each record (magic, TOTALSIZE and the lengths
inside the record must agree, as in ``checkMessageAndReturnSize``) but not the body CRC, as the
broker's normal recovery would stop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import (
    OFFSETS_V4,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    checked_size,
    decode_record,
    store_timestamp_at,
)
from rmqstore.errors import CorruptData
from rmqstore.problems import WARNING, Problem
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment
from rmqstore.walk.chain import Stop, StopKind, first_record, frames, holds_data, walk_chain

_INT = struct.Struct(">i")
_STEP = 1 << 24  # every 16 MiB walked: report progress, release the pages walked


@dataclass(frozen=True, slots=True)
class CommitLogFile:
    name: str
    base_offset: int
    size: int
    state: str  # "data", "empty" (preallocated, all-zero header), "after end" (past the data end)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "baseOffset": self.base_offset, "size": self.size, "state": self.state}


@dataclass(frozen=True, slots=True)
class CommitLogInfo:
    dirs: tuple[str, ...]
    file_size: int
    files: tuple[CommitLogFile, ...]
    min_phy_offset: int  # -1 when there is no commit log file, as the broker's getMinOffset
    max_phy_offset: int  # where the next record would be written
    walk_from_phy_offset: int  # the end was found by walking from here
    first_store_timestamp_ms: int | None  # of the first record of the first file
    last_store_timestamp_ms: int | None  # of the last valid record

    def to_json(self) -> dict[str, Any]:
        return {
            "dirs": list(self.dirs),
            "fileSize": self.file_size,
            "files": [f.to_json() for f in self.files],
            "minPhyOffset": self.min_phy_offset,
            "maxPhyOffset": self.max_phy_offset,
            "walkFromPhyOffset": self.walk_from_phy_offset,
            "firstStoreTimestamp": self.first_store_timestamp_ms,
            "lastStoreTimestamp": self.last_store_timestamp_ms,
        }


@dataclass(slots=True)
class _Walk:
    end_phy: int
    last_store_ts: int | None = None
    queued_after: int = 0  # NOT/COMMIT records at or after the given phy offset
    stop: Problem | None = None


@dataclass(slots=True)
class _FileEnd:
    stop: Stop
    last_store_ts: int | None
    queued_after: int
    problem: Problem | None


def _structure_ok(buf: Any, records: np.ndarray, size: int, base: int, count_from_phy: int) -> tuple[int, int]:
    """How many of ``records`` pass the structure check (up to the first that fails), and how many of
    those at or after ``count_from_phy`` a consume queue gets."""
    queued = 0
    for i, at in enumerate(records.tolist()):
        if checked_size(buf, at, size) is None:
            return i, queued
        if base + at >= count_from_phy:
            (sys_flag,) = _INT.unpack_from(buf, at + OFFSETS_V4["sys_flag"])
            queued += sys_flag & TRANSACTION_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
    return len(records), queued


def _walk_one_file(
    seg: Segment, pos: int, broker: str, count_from_phy: int, progress: Callable[[int], None] | None
) -> _FileEnd:
    """One file walked frame by frame with the structure check of each record; its pages released behind the walk."""
    with map_file(seg.path) as buf:
        size = len(buf)
        last, queued, problem, kind = -1, 0, None, StopKind.END
        for run in frames(buf, seg, pos, part=_STEP):
            good, n = _structure_ok(buf, run.records, size, seg.base_offset, count_from_phy)
            queued += n
            if good:
                last = int(run.records[good - 1])
            if progress is not None:
                progress(run.frame(good) - pos)
            pos = run.frame(good)
            if good < len(run.records):
                kind, problem = StopKind.INVALID, _explain(buf, int(run.records[good]), seg, size, broker)
                break
            if run.stop is not None:
                kind = run.stop.kind
                if kind is StopKind.INVALID:  # bytes that are neither a frame, zeros nor a blank
                    problem = _explain(buf, pos + seg.framing.head, seg, size, broker)
        last_ts = store_timestamp_at(buf, last) if last >= 0 else None
    return _FileEnd(Stop(pos, kind, None, seg.path, seg.base_offset), last_ts, queued, problem)


def _walk_to_end(
    segs: list[Segment],
    start: int,
    broker: str,
    count_from_phy: int,
    progress: Callable[[int], None] | None,
) -> _Walk:
    """Walk from the start of ``segs[start]`` like ``recoverNormally`` (§8.2), CRC not checked.

    A BLANK moves on to the next file; with no next file the write position stays at the blank.
    """
    walk = _Walk(end_phy=segs[start].base_offset)
    for f in walk_chain(segs, start, lambda seg, pos: _walk_one_file(seg, pos, broker, count_from_phy, progress)):
        walk.end_phy = f.stop.phy_offset
        walk.queued_after += f.queued_after
        walk.stop = f.problem
        if f.last_store_ts is not None:
            walk.last_store_ts = f.last_store_ts
    return walk


def _explain(buf: Any, pos: int, seg: Segment, size: int, broker: str) -> Problem:
    phy = seg.base_offset + pos
    try:
        decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=size, broker=broker)
        what = "record rejected by the structure check"
    except CorruptData as e:
        what = e.what
    return Problem(
        seg.path,
        pos,
        f"commit log data ends at an invalid record ({what}); a broker's recovery truncates here",
        WARNING,
        phy,
    )


def _first_store_timestamp(seg: Segment) -> int | None:
    with map_file(seg.path) as buf:
        at = first_record(buf, seg)
        if at is not None and checked_size(buf, at, len(buf)) is not None:
            return store_timestamp_at(buf, at)
    return None


def commitlog_info(
    st: Store,
    segs: list[Segment],
    hint: tuple[int, int] | None,
    progress: Callable[[int], None] | None,
) -> tuple[CommitLogInfo, int, list[Problem]]:
    """Commit log summary, the number of queueable records after ``hint`` (the record of the
    furthest consume queue entry: phy offset, size), and problems."""
    cfg = st.config
    dirs = tuple(str(d) for d in cfg.log_dirs if d.is_dir() or not cfg.dledger)
    if not segs:
        return CommitLogInfo(dirs, cfg.commitlog_file_size, (), -1, -1, -1, None, None), 0, []
    start = len(segs) - 1
    while start > 0 and not holds_data(segs[start]):
        start -= 1
    count_from = 0 if hint is None else hint[0] + hint[1]
    walk = _walk_to_end(segs, start, cfg.broker, count_from, progress)
    problems = [] if walk.stop is None else [walk.stop]
    files = []
    for seg in segs:
        if seg.base_offset < walk.end_phy:
            state = "data"
        elif not holds_data(seg):
            state = "empty"
        else:
            state = "after end"
            if seg.base_offset > walk.end_phy:  # the file the walk stopped in is explained already
                problems.append(
                    Problem(seg.path, 0, "file lies after the end of the commit log data but is not empty", WARNING)
                )
        files.append(CommitLogFile(seg.path.name, seg.base_offset, seg.size, state))
    info = CommitLogInfo(
        dirs,
        cfg.commitlog_file_size,
        tuple(files),
        segs[0].base_offset,
        walk.end_phy,
        segs[start].base_offset,
        _first_store_timestamp(segs[0]),
        walk.last_store_ts,
    )
    return info, walk.queued_after, problems
