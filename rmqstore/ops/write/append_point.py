"""Where a write appends: the end of the valid commit log, as the broker's recovery finds it (§8.2),
checked against the consume queues and what lies after it (store-format.md §3.11, §4.4, §8).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmqstore.codec.commitlog import Record, decode_record
from rmqstore.codec.indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from rmqstore.codec.indexfile import decode_header as decode_index_header
from rmqstore.errors import CorruptData, UnsafePlan, UnsupportedStore
from rmqstore.safety.openfile import read_file
from rmqstore.store import Store
from rmqstore.store.files import data_end, map_file
from rmqstore.store.layout import Segment
from rmqstore.store.queue.kinds import keeps_rocksdb
from rmqstore.walk.chain import Stop, StopKind, walk_chain
from rmqstore.walk.requests import DispatchRequest, scan_requests

RECORD_SLACK = 65536  # 4.9.5+: a record may exceed maxMessageSize by this much


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
    if not st.framing.appendable:
        raise UnsupportedStore(
            f"{st.root}: the commit log holds its records in {st.framing.name} frames; writing to it is not supported"
        )
    if len(cfg.commitlog_dirs) > 1:
        raise UnsupportedStore(f"{st.root}: a multi-path commit log is not supported for writing")
    if keeps_rocksdb(cfg):
        raise UnsupportedStore(
            f"{st.root}: the consume queues are a RocksDB database (storeType=defaultRocksDB); writing to such a "
            "store is not supported"
        )
    if cfg.enable_consume_queue_ext:
        raise UnsupportedStore(f"{st.root}: enableConsumeQueueExt=true is not supported for writing")
    if cfg.duplication_enable:
        raise UnsupportedStore(f"{st.root}: duplicationEnable=true is not supported for writing")
    if st.batch_queues.directory.is_dir():
        raise UnsupportedStore(f"{st.root}: batch consume queues are not supported for writing")


def _furthest_entry(st: Store) -> tuple[int, int] | None:
    """(phy offset, size) of the furthest consume queue entry over all queues."""
    last: tuple[int, int] | None = None
    for q in st.consume_queues.queues():
        _, qproblems = q.files()
        if qproblems:
            raise UnsafePlan(f"{qproblems[0]}; run `rmqstore check` or `recover` first")
        e = q.last_unit()
        if e is not None and (last is None or e[0] > last[0]):
            last = e
    return last


def _walk_start(segs: list[Segment], fs: int, last: tuple[int, int] | None) -> tuple[int, int]:
    """(file index, frame position): the last dispatched record if it is valid, else the third file from the end."""
    if last is not None:
        idx = (last[0] - segs[0].base_offset) // fs
        if 0 <= idx < len(segs) and segs[idx].base_offset <= last[0] < segs[idx].base_offset + fs:
            seg, pos = segs[idx], last[0] - segs[idx].base_offset
            with map_file(seg.path) as buf:
                try:
                    rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, check_crc=True)
                except CorruptData:
                    rec = None
            if isinstance(rec, Record) and rec.total_size == last[1] and rec.phy_offset == last[0]:
                return idx, int(seg.framing.frame_of(pos))
    return max(0, len(segs) - 3), 0


@dataclass
class _Scan:
    seg: Segment
    requests: list[DispatchRequest]
    stop: Stop


def _scan_to_end(st: Store, segs: list[Segment], start_idx: int, start_pos: int) -> tuple[list[DispatchRequest], _Scan]:
    """The records from the start to the end of the valid commit log, with recovery's checks (§8.2)."""
    cfg = st.config

    def scan(seg: Segment, pos: int) -> _Scan:
        with map_file(seg.path) as buf:
            reqs, stop = scan_requests(
                buf, seg, cfg, start_pos=pos, check_crc=cfg.check_crc_on_recover, skip_size_mismatch=False
            )
        return _Scan(seg, reqs, stop)

    reqs: list[DispatchRequest] = []
    for last in walk_chain(segs, start_idx, scan, start_pos=start_pos):
        reqs += last.requests
    return reqs, last


def _stale_after(st: Store, segs: list[Segment], end: _Scan) -> StaleRange | None:
    """Non-zero bytes after the end in its file (refused past one record's size) and none in later files."""
    end_seg, pos, end_phy = end.seg, end.stop.pos, end.stop.phy_offset
    stale = None
    tail_end = data_end(end_seg.path, pos, end_seg.size)
    if end.stop.kind is StopKind.BLANK:  # no next file: the broker appends at the BLANK's position (§8.2)
        if tail_end > pos:
            stale = StaleRange(end_seg.path, pos, tail_end - pos, end_phy, padding=True)
    elif tail_end > pos:
        length = tail_end - pos
        if length > st.config.max_message_size + RECORD_SLACK:
            raise UnsafePlan(
                f"{end_seg.path}: {length} bytes of data after the end of valid records at byte {pos} "
                f"(phy offset {end_phy}); more than one record can be: run `rmqstore check` or `recover` first"
            )
        stale = StaleRange(end_seg.path, pos, length, end_phy)
    for later in segs[segs.index(end_seg) + 1 :]:
        if data_end(later.path, 0, later.size) > 0:
            raise UnsafePlan(
                f"{later.path}: holds data after the end of valid records at phy offset {end_phy}; "
                "run `rmqstore check` or `recover` first"
            )
    return stale


def _last_store_host(segs: list[Segment], fs: int, tail: DispatchRequest) -> tuple[bytes, int] | None:
    seg = segs[(tail.phy_offset - segs[0].base_offset) // fs]
    with map_file(seg.path) as buf:
        rec = decode_record(buf, tail.phy_offset - seg.base_offset, path=str(seg.path), file_from=seg.base_offset)
    return (rec.store_addr, rec.store_port) if isinstance(rec, Record) else None


def find_append_point(st: Store) -> AppendPoint:
    """Where the next record goes: the end of the valid commit log, checked against the consume queues."""
    cfg = st.config
    fs = cfg.commitlog_file_size
    segs, problems = st.commitlog_segments()
    if problems:
        p = problems[0]
        raise UnsafePlan(f"{p}; the broker would not load this commit log: run `rmqstore check` or `recover` first")
    last = _furthest_entry(st)
    dispatched_end = last[0] + last[1] if last else 0
    if not segs:
        if dispatched_end:
            raise UnsafePlan(
                f"{cfg.commitlog_dir}: no commit log files, but consume queues refer to offset {last[0] if last else 0}; "
                "run `rmqstore recover` first"
            )
        return AppendPoint(0, (), None, (), 0, 0, None)
    start_idx, start_pos = _walk_start(segs, fs, last)
    walk_start = segs[start_idx].base_offset + start_pos
    if dispatched_end < walk_start and dispatched_end < segs[start_idx].base_offset:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues end at commit log offset {dispatched_end} but the commit log "
            f"continues far beyond it (from {walk_start}); run `rmqstore redispatch` first"
        )
    reqs, end = _scan_to_end(st, segs, start_idx, start_pos)
    end_phy = end.stop.phy_offset
    if dispatched_end > end_phy:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues refer to commit log offsets up to {dispatched_end}, beyond the "
            f"end of valid records at {end_phy}; run `rmqstore recover` first"
        )
    stale = _stale_after(st, segs, end)
    pending = tuple(r for r in reqs if r.phy_offset >= dispatched_end)
    last_ts = reqs[-1].store_timestamp_ms if reqs else 0
    last_host = _last_store_host(segs, fs, reqs[-1]) if reqs else None
    return AppendPoint(end_phy, tuple(segs), stale, pending, dispatched_end, last_ts, last_host)


def index_end_phy(st: Store) -> int:
    files, _ = st.index_files()
    if not files:
        return 0
    try:
        head = read_file(files[-1], limit=INDEX_HEADER_SIZE)
    except OSError as e:
        raise CorruptData(f"cannot read: {e.strerror}", path=files[-1], pos=0) from None
    return decode_index_header(head, path=str(files[-1])).end_phy_offset if len(head) == INDEX_HEADER_SIZE else 0
