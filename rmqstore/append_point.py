"""Where a write appends: the end of the valid commit log, as the broker's recovery finds it (§8.2),
checked against the consume queues and what lies after it (store-format.md §3.11, §4.4, §8).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .commitlog import Record, decode_record
from .consumequeue import ENTRY_SIZE, FILLER_SIZE, entries_array, valid_prefix
from .dispatch import DispatchRequest, scan_requests
from .errors import CorruptData, UnsafePlan, UnsupportedStore
from .indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from .indexfile import decode_header as decode_index_header
from .layout import Segment
from .store import Store, map_file
from .walk import data_end

RECORD_SLACK = 65536  # 4.9.5+: a record may exceed maxMessageSize by this much


def _valid_entry(arr: np.ndarray, i: int) -> bool:
    return bool(arr[i]["phy_offset"] >= 0 and arr[i]["size"] > 0)


def last_cq_entry(segs: list[Segment]) -> tuple[int, int] | None:
    """(phy offset, size) of a queue's last valid entry, by binary search over the entries."""
    for seg in reversed(segs):
        if seg.size < ENTRY_SIZE:
            continue
        with map_file(seg.path) as buf:
            arr = entries_array(buf)
            if not _valid_entry(arr, 0):
                del arr
                continue
            lo, hi = 0, len(arr) - 1  # entry lo is valid
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _valid_entry(arr, mid):
                    lo = mid
                else:
                    hi = mid - 1
            out = (int(arr[lo]["phy_offset"]), int(arr[lo]["size"]))
            del arr
        if out == (0, FILLER_SIZE):
            return None
        return out
    return None


def queue_end(segs: list[Segment]) -> int:
    """Byte end of a queue's valid entries (``last.from + validEnd``), as recovery computes it."""
    if not segs:
        return 0
    last = segs[-1]
    with map_file(last.path) as buf:
        arr = entries_array(buf)
        n = valid_prefix(arr)
        del arr
    return last.base_offset + n * ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class StaleRange:
    """Non-zero bytes after the end of valid data, zeroed (after a quarantine copy) before appending."""

    path: Path
    pos: int  # first byte in the file
    length: int
    phy_offset: int
    padding: bool = False  # the BLANK record ending the last file: padding, reused as the broker reuses it


@dataclass(frozen=True, slots=True)
class AppendPoint:
    end_phy: int  # where the next record goes (end of valid data)
    segments: tuple[Segment, ...]
    stale: StaleRange | None
    pending: tuple[DispatchRequest, ...]  # records after the consume queues' end (not dispatched)
    dispatched_end: int  # end (offset + size) of the furthest consume queue entry
    last_store_ts: int  # store time of the last record (0 if none)
    last_store_host: tuple[bytes, int] | None


def check_supported(st: Store) -> None:
    cfg = st.config
    if len(cfg.commitlog_dirs) > 1:
        raise UnsupportedStore(f"{st.root}: a multi-path commit log is not supported for writing")
    if cfg.enable_consume_queue_ext:
        raise UnsupportedStore(f"{st.root}: enableConsumeQueueExt=true is not supported for writing")
    if cfg.duplication_enable:
        raise UnsupportedStore(f"{st.root}: duplicationEnable=true is not supported for writing")
    if (st.root / "batchconsumequeue").is_dir():
        raise UnsupportedStore(f"{st.root}: batch consume queues are not supported for writing")


def find_append_point(st: Store) -> AppendPoint:
    cfg = st.config
    segs, problems = st.commitlog_segments()
    if problems:
        p = problems[0]
        raise UnsafePlan(f"{p}; the broker would not load this commit log: run `rmqstore check` or `recover` first")
    last = _furthest_cq_entry(st)
    dispatched_end = last[0] + last[1] if last else 0
    if not segs:
        if dispatched_end:
            raise UnsafePlan(
                f"{cfg.commitlog_dir}: no commit log files, but consume queues refer to offset {last[0] if last else 0}; "
                "run `rmqstore recover` first"
            )
        return AppendPoint(0, (), None, (), 0, 0, None)
    start_idx, start_pos = _walk_start(segs, last, cfg.commitlog_file_size)
    walk_start = segs[start_idx].base_offset + start_pos
    if dispatched_end < walk_start and dispatched_end < segs[start_idx].base_offset:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues end at commit log offset {dispatched_end} but the commit log "
            f"continues far beyond it (from {walk_start}); run `rmqstore redispatch` first"
        )
    reqs, idx, stop_pos, blank = _walk(st, segs, start_idx, start_pos)
    end_phy = segs[idx].base_offset + stop_pos
    if dispatched_end > end_phy:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues refer to commit log offsets up to {dispatched_end}, beyond the "
            f"end of valid records at {end_phy}; run `rmqstore recover` first"
        )
    stale = _stale_after(st, segs, idx, stop_pos, blank)
    pending = tuple(r for r in reqs if r.phy_offset >= dispatched_end)
    last_ts, last_host = 0, None
    if reqs:
        tail = reqs[-1]
        last_ts = tail.store_timestamp_ms
        seg = segs[(tail.phy_offset - segs[0].base_offset) // cfg.commitlog_file_size]
        with map_file(seg.path) as buf:
            rec = decode_record(buf, tail.phy_offset - seg.base_offset, path=str(seg.path), file_from=seg.base_offset)
        if isinstance(rec, Record):
            last_host = (rec.store_addr, rec.store_port)
    return AppendPoint(end_phy, tuple(segs), stale, pending, dispatched_end, last_ts, last_host)


def _furthest_cq_entry(st: Store) -> tuple[int, int] | None:
    """(phy offset, size) of the furthest consume queue entry over all queues."""
    last: tuple[int, int] | None = None
    for topic, qid, _ in st.queues():
        qsegs, qproblems = st.cq_segments(topic, qid)
        if qproblems:
            p = qproblems[0]
            raise UnsafePlan(f"{p}; run `rmqstore check` or `recover` first")
        e = last_cq_entry(qsegs)
        if e is not None and (last is None or e[0] > last[0]):
            last = e
    return last


def _walk_start(segs: list[Segment], last: tuple[int, int] | None, fs: int) -> tuple[int, int]:
    """Where the recovery walk starts: at the last dispatched record if it is valid, else at the
    third-to-last file (file index, position)."""
    if last is not None:
        idx = (last[0] - segs[0].base_offset) // fs
        if 0 <= idx < len(segs) and segs[idx].base_offset <= last[0] < segs[idx].base_offset + fs:
            pos = last[0] - segs[idx].base_offset
            with map_file(segs[idx].path) as buf:
                try:
                    rec = decode_record(
                        buf, pos, path=str(segs[idx].path), file_from=segs[idx].base_offset, check_crc=True
                    )
                except CorruptData:
                    rec = None
            if isinstance(rec, Record) and rec.total_size == last[1] and rec.phy_offset == last[0]:
                return idx, pos
    return max(0, len(segs) - 3), 0


def _walk(st: Store, segs: list[Segment], idx: int, pos: int) -> tuple[list[DispatchRequest], int, int, bool]:
    """The records from ``(idx, pos)`` to where recovery stops: the records, the file index and
    position of the stop, and whether it stopped at a BLANK with no next file."""
    cfg = st.config
    reqs: list[DispatchRequest] = []
    while True:
        seg = segs[idx]
        with map_file(seg.path) as buf:
            chunk, stop = scan_requests(
                buf, seg, cfg, start_pos=pos, check_crc=cfg.check_crc_on_recover, skip_size_mismatch=False
            )
        reqs += chunk
        if stop.reason == "blank" and idx + 1 < len(segs):
            idx, pos = idx + 1, 0
            continue
        return reqs, idx, stop.pos, stop.reason == "blank"


def _stale_after(st: Store, segs: list[Segment], idx: int, stop_pos: int, blank: bool) -> StaleRange | None:
    """Stale bytes after the end in the same file; refused when more than a record, or in later files."""
    cfg = st.config
    end_seg = segs[idx]
    end_phy = end_seg.base_offset + stop_pos
    stale = None
    tail_end = data_end(end_seg.path, stop_pos, end_seg.size)
    if blank:  # no next file: the broker appends at the BLANK's position (§8.2)
        if tail_end > stop_pos:
            stale = StaleRange(end_seg.path, stop_pos, tail_end - stop_pos, end_phy, padding=True)
    elif tail_end > stop_pos:
        length = tail_end - stop_pos
        limit = cfg.max_message_size + RECORD_SLACK
        if length > limit:
            raise UnsafePlan(
                f"{end_seg.path}: {length} bytes of data after the end of valid records at byte {stop_pos} "
                f"(phy offset {end_phy}); more than one record can be: run `rmqstore check` or `recover` first"
            )
        stale = StaleRange(end_seg.path, stop_pos, length, end_phy)
    for later in segs[idx + 1 :]:
        if data_end(later.path, 0, later.size) > 0:
            raise UnsafePlan(
                f"{later.path}: holds data after the end of valid records at phy offset {end_phy}; "
                "run `rmqstore check` or `recover` first"
            )
    return stale


def index_end_phy(st: Store) -> int:
    files, _ = st.index_files()
    if not files:
        return 0
    try:
        with open(files[-1], "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
    except OSError as e:
        raise CorruptData(f"cannot read: {e.strerror}", path=files[-1], pos=0) from None
    return decode_index_header(head, path=str(files[-1])).end_phy_offset if len(head) == INDEX_HEADER_SIZE else 0
