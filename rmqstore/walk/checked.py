"""Recovery's checked walk (``checkMessageAndReturnSize(checkCRC)``), one file at a time or in worker processes."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rmqstore.codec.columnar import be, body_crcs, decode_heads, gather, head_column
from rmqstore.codec.commitlog import (
    HEAD_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE_V1,
    SCHEDULE_TOPIC,
    Record,
    decode_record,
    explain_invalid,
    prop_crc_check,
)
from rmqstore.errors import ChecksumMismatch, CorruptData
from rmqstore.safety.openfile import map_readonly
from rmqstore.store.files import map_file, release_range
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.walk.chain import FileWalk, Stop, walk_chain
from rmqstore.walk.columns import BATCH, decode_columns_and_heads
from rmqstore.walk.kept import KeptColumns
from rmqstore.walk.requests import request_from_record
from rmqstore.walk.workers import close_pool, worker_pool

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rmqstore.rules import BrokerRules
    from rmqstore.walk.columns import Columns


PART_SIZE = 16 << 20  # bytes of a file one worker checks and decodes at a time (what a worker holds at once)


_SYNC_WINDOW = 8 << 20  # how far a worker looks for the first record of its range


_CHASE_BATCH = 1 << 18  # records a checked walk validates per numpy batch


_FILE_WALK_FIELDS = ("phy", "size", "queue_id", "queue_offset", "sys_flag", "store_ts")


@dataclass
class FusedFile:
    """One file walked with recovery's checks: record positions, the walk's columns, where it ended."""

    positions: np.ndarray
    fields: list[np.ndarray]  # ``_FILE_WALK_FIELDS`` then the walk's topic ids
    stop_pos: int
    reason: str  # "blank" | "end"


class _FileColumns:
    """The walk's columns of one file, gathered part by part while the batches go on to the sink."""

    def __init__(self, topics: TopicIds, sink: KeptColumns | None) -> None:
        self.topics, self.sink = topics, sink
        self.positions: list[np.ndarray] = []
        self.fields: list[list[np.ndarray]] = [[] for _ in range(len(_FILE_WALK_FIELDS) + 1)]

    def add(self, part: _Part) -> None:
        self.positions.append(part.positions)
        for c in part.batches:
            for out, name in zip(self.fields, _FILE_WALK_FIELDS, strict=False):
                out.append(getattr(c, name))
            self.fields[-1].append(np.array([self.topics.id(t) for t in c.topics] or [0], np.int64)[c.topic_id])
            if self.sink is not None:
                self.sink.append(c)

    def done(self, stop_pos: int, reason: str) -> FusedFile:
        def cat(arrays: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

        return FusedFile(cat(self.positions), [cat(f) for f in self.fields], stop_pos, reason)


@dataclass
class _Part:
    sync: int | None
    positions: np.ndarray
    batches: list[Columns]
    stop_pos: int
    reason: str
    clean: bool  # every record passed: structure, CRC, and no record the fused path leaves to the exact walk


def _check_part(
    buf: Any, u8: np.ndarray, seg: Segment, cfg: StoreConfig, p: np.ndarray, end: int, flags: tuple[bool, bool, bool]
) -> Columns | None:
    """Dispatch columns of the records at ``p`` if every one passes recovery's checks, else None."""

    check_crc, ipv6_hosts, v2_magic = flags
    cols, bad, heads = decode_columns_and_heads(buf, u8, p, seg, cfg, end)
    if bad is not None or cols is None or len(cols) != len(p):
        return None  # an invalid record or a size mismatch: the exact walk explains it
    sys_flag = head_column(heads, "sys_flag")
    if not ipv6_hosts and (sys_flag & 0x30).any():
        return None  # brokers before 4.6.0 read 8-byte hosts whatever the flags say
    if not v2_magic and (head_column(heads, "magic") == MAGIC_V2).any():
        return None
    if check_crc:
        body_len = head_column(heads, "body_len")
        head_size = np.where(sys_flag & 0x10, 12, 0) + np.where(sys_flag & 0x20, 12, 0) + 88
        sel = np.flatnonzero(body_len > 0)
        if (body_crcs(buf, p[sel] + head_size[sel], body_len[sel]) != head_column(heads, "body_crc")[sel]).any():
            return None
    return cols


def _walk_part(
    buf: Any, seg: Segment, cfg: StoreConfig, lo: int, hi: int, end: int, known: bool, flags: tuple[bool, bool, bool]
) -> _Part:

    u8 = np.frombuffer(buf, dtype=np.uint8, count=end)
    sync = lo if known else seg.framing.find_chained(u8, seg.base_offset, lo, min(hi, lo + _SYNC_WINDOW, end))
    if sync is None:
        return _Part(None, np.zeros(0, np.int64), [], lo, "end", False)
    positions, stop_pos, reason = seg.framing.chain(buf, sync, end, until=hi)
    batches = []
    clean = reason != "invalid"
    for i in range(0, len(positions), BATCH) if clean else ():
        cols = _check_part(buf, u8, seg, cfg, positions[i : i + BATCH], end, flags)
        if cols is None:
            clean = False
            break
        batches.append(cols)
    del u8
    return _Part(sync, positions, batches, stop_pos, reason, clean)


_WORKER_MAPS: dict[str, Any] = {}  # a worker's mappings: the file being walked and the next one


def _walk_part_in_worker(args: tuple[Segment, StoreConfig, int, int, int, bool, tuple[bool, bool, bool]]) -> _Part:
    seg, cfg, lo, hi, end, known, flags = args
    key = str(seg.path)
    m = _WORKER_MAPS.get(key)
    if m is None:
        while len(_WORKER_MAPS) >= 2:
            _WORKER_MAPS.pop(next(iter(_WORKER_MAPS))).close()  # the oldest
        m = _WORKER_MAPS[key] = map_readonly(seg.path)
    part = _walk_part(m, seg, cfg, lo, hi, end, known, flags)
    release_range(m, lo, min(hi, end))
    return part


class PartFeed:
    """The byte ranges of a chain of files, submitted to the pool a few ahead of the walk and on into the
    next file before the current one's last ranges are back, so no worker waits at a file boundary.

    A file's walk starts at its first byte (the chain goes on there after a BLANK); ranges of a file
    the chain does not reach are dropped unused."""

    def __init__(self, pool: Any, segs: list[Segment], cfg: StoreConfig, flags: tuple[bool, bool, bool]) -> None:
        self.pool, self.cfg, self.flags = pool, cfg, flags
        self.window = (os.cpu_count() or 1) + 1
        self._todo = deque((s, lo, min(lo + PART_SIZE, s.size)) for s in segs for lo in range(0, s.size, PART_SIZE))
        self._pending: deque[tuple[Segment, int, Any]] = deque()

    def _top_up(self) -> None:
        while self._todo and len(self._pending) < self.window:
            seg, lo, hi = self._todo.popleft()
            args = (seg, self.cfg, lo, hi, seg.size, lo == 0, self.flags)
            self._pending.append((seg, hi, self.pool.submit(_walk_part_in_worker, args)))

    def next_part(self, seg: Segment) -> tuple[int, _Part] | None:
        """The end and the result of ``seg``'s next range, in order; None after its last."""
        self._top_up()
        if not self._pending or self._pending[0][0].path != seg.path:
            return None
        _seg, hi, future = self._pending.popleft()
        self._top_up()
        return hi, future.result()

    def drop(self, seg: Segment | None = None) -> None:
        """Forget the ranges of ``seg`` not yet taken (of every file when None)."""
        keep = (lambda s: s.path != seg.path) if seg is not None else (lambda s: False)
        for item in [p for p in self._pending if not keep(p[0])]:
            item[2].cancel()
        self._pending = deque(p for p in self._pending if keep(p[0]))
        self._todo = deque(t for t in self._todo if keep(t[0]))


def recovery_walk_file(feed: PartFeed, seg: Segment, topics: TopicIds, sink: KeptColumns | None) -> FusedFile | None:
    """Recovery's walk of one whole file by ``feed``'s worker processes; the dispatch columns of its
    records go to ``sink`` in order, as the ranges come back (the caller clears it on None).

    Returns None where the exact per-batch walk must decide: an invalid record, a size mismatch, a
    CRC mismatch, a record the broker version reads differently, or a chain the ranges disagree on.
    """
    out = _FileColumns(topics, sink)
    expected = 0
    while (got := feed.next_part(seg)) is not None:
        hi, res = got
        if expected >= hi:
            continue  # a record that started in an earlier range covers this one
        if res.sync != expected or not res.clean:
            feed.drop()
            return None
        out.add(res)
        expected = res.stop_pos
        if res.reason != "until":
            feed.drop(seg)
            return out.done(res.stop_pos, res.reason)
    return out.done(expected, "end")


@dataclass
class _Kept:
    fingerprint: tuple[Any, ...]
    from_phy: int
    to_phy: int
    batches: KeptColumns
    at: float


_KEPT: dict[str, _Kept] = {}


def _fingerprint(segs: list[Segment]) -> tuple[Any, ...]:
    out = []
    for s in segs:
        st = os.stat(s.path)
        out.append((s.path.name, st.st_ino, st.st_size))
    return tuple(out)


def keep_dispatch_columns(root: Path, segs: list[Segment], from_phy: int, to_phy: int, batches: KeptColumns) -> None:
    """Keep the columns of the records in [from_phy, to_phy) for ``take_dispatch_columns`` (one use)."""
    for old in _KEPT.values():
        if old.batches is not batches:
            old.batches.close()
    _KEPT.clear()
    _KEPT[str(root.resolve())] = _Kept(_fingerprint(segs), from_phy, to_phy, batches, time.monotonic())


def kept_range(root: Path) -> tuple[int, int] | None:
    """The [from_phy, to_phy) whose dispatch columns a recovery walk keeps for ``root``, if any."""
    kept = _KEPT.get(str(root.resolve()))
    return None if kept is None else (kept.from_phy, kept.to_phy)


def take_dispatch_columns(root: Path, segs: list[Segment], from_phy: int, to_phy: int) -> KeptColumns | None:
    """The columns a recovery walk of this process kept for exactly [from_phy, to_phy), once; else None.

    Only the walk of the plan being applied is used: same files (name, inode, size), same range,
    and the records must end exactly at ``to_phy``.
    """
    kept = _KEPT.pop(str(root.resolve()), None)
    if kept is None or (kept.from_phy, kept.to_phy) != (from_phy, to_phy):
        return None
    if kept.fingerprint != _fingerprint(segs) or time.monotonic() - kept.at > 3600:
        return None
    if kept.batches.end != to_phy:
        return None
    return kept.batches


class TopicIds:
    """Topic name <-> small integer, shared by every batch of a walk."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i


def _field(head: np.ndarray, name: str) -> np.ndarray:
    return head_column(head, name)


def topic_ids(u8: np.ndarray, start: np.ndarray, length: np.ndarray, topics: TopicIds) -> np.ndarray:
    """Topic id of each record from the topic's byte range, grouped by length and hashed."""
    out = np.empty(len(start), dtype=np.int64)
    # return_counts: unique without a second result asks np.ma.is_masked, importing numpy.ma (10-20 ms)
    for tl in np.unique(length, return_counts=True)[0].tolist():
        sel = np.flatnonzero(length == tl)
        if tl == 0:
            out[sel] = topics.id("")
            continue
        rows = np.ascontiguousarray(gather(u8, start[sel], tl))
        h = np.zeros(len(sel), dtype=np.uint64)
        for j in range(tl):  # FNV-style mix; every row is compared with its representative below
            h = (h ^ rows[:, j].astype(np.uint64)) * np.uint64(1099511628211)
        uniq, first, inv = np.unique(h, return_index=True, return_inverse=True)
        reps = rows[first]
        if not (rows == reps[inv]).all():  # a hash collision: exact grouping instead
            uniq_rows, first, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)
            reps = rows[first]
        ids = np.array([topics.id(bytes(r).decode("utf-8", "replace")) for r in reps], dtype=np.int64)
        out[sel] = ids[inv.ravel()]
    return out


def _first_prop_crc_error(
    buf: Any, pos: np.ndarray, total: np.ndarray, seg: Segment, path: str
) -> tuple[int, CorruptData] | None:
    """The first record whose __CRC32# property is missing or wrong, with the error recovery stops on."""
    for i, (at, n) in enumerate(zip(pos.tolist(), total.tolist(), strict=True)):
        stored, computed = prop_crc_check(buf, at, n)
        if stored is None:
            err: CorruptData = CorruptData(
                "no __CRC32# property (forceVerifyPropCRC)", path=path, pos=at, phy_offset=seg.base_offset + at
            )
            return i, err
        if stored != computed:
            err = ChecksumMismatch(path=path, pos=at, phy_offset=seg.base_offset + at, stored=stored, computed=computed)
            return i, err
    return None


@dataclass
class _Batch:
    """One batch of a checked walk: the records' fixed heads, and how far they pass the checks."""

    p: np.ndarray  # record positions
    head: np.ndarray
    simple: np.ndarray  # V1 records with IPv4 hosts (as this broker reads them): checked on arrays
    bl: np.ndarray  # body lengths (negatives as 0)
    topic_len: np.ndarray
    limit: int  # records before the first invalid one
    error: CorruptData | None = None
    exact: dict[int, Record] = field(default_factory=dict)  # records the exact decoder read


def _check_structure(
    buf: Any, u8: np.ndarray, p: np.ndarray, seg: Segment, cfg: StoreConfig, rules: BrokerRules, check_crc: bool
) -> _Batch:
    """Lengths against TOTALSIZE and magic on arrays; the exact decoder for the records that need it."""
    path = str(seg.path)
    head = decode_heads(u8, p)  # every fixed field up to BODYLENGTH of an IPv4/IPv4 record
    total, magic, sys_flag = _field(head, "total_size"), _field(head, "magic"), _field(head, "sys_flag")
    # Host widths follow the IPv6 flags from 4.6.0; older brokers read 8-byte hosts whatever the flags.
    simple = (magic == MAGIC_V1) & (((sys_flag & 0x30) == 0) | (not rules.ipv6_hosts))
    bl = np.maximum(_field(head, "body_len"), 0)
    ok = simple & (total >= MIN_RECORD_SIZE_V1) & (MIN_RECORD_SIZE_V1 + bl <= total)
    tpos = np.where(ok, p + HEAD_V4_SIZE + bl, p)
    topic_len = be(u8, tpos, ">i1")
    ok &= (topic_len >= 0) & (MIN_RECORD_SIZE_V1 + bl + topic_len <= total)
    props_len = be(u8, np.where(ok, tpos + 1 + topic_len, p), ">i2")
    ok &= MIN_RECORD_SIZE_V1 + bl + topic_len + np.maximum(props_len, 0) == total
    b = _Batch(p, head, simple, bl, topic_len, len(p))
    for i in np.flatnonzero(~ok).tolist():  # the first record the simple checks reject or leave to the decoder
        if simple[i]:
            b.limit = i  # a plain V1 record that fails a length check: invalid
            break
        if magic[i] == MAGIC_V2 and not rules.v2_magic:
            msg = f"V2 record magic 0xDAA320AB: broker {rules.broker} cannot read it"
            b.limit, b.error = i, CorruptData(msg, path=path, pos=int(p[i]))
            break
        try:
            rec = decode_record(
                buf, int(p[i]), path=path, file_from=seg.base_offset, check_crc=check_crc, broker=cfg.broker
            )
        except CorruptData as e:
            b.limit, b.error = i, e
            break
        assert isinstance(rec, Record)
        b.exact[i] = rec
    if b.limit < len(p) and b.error is None and simple[b.limit]:
        b.error = explain_invalid(
            buf, int(p[b.limit]), path=path, file_from=seg.base_offset, check_crc=check_crc, broker=cfg.broker
        )
    return b


def _check_crcs(buf: Any, b: _Batch, seg: Segment, check_crc: bool, prop_crc: bool) -> None:
    """Body CRC (or the __CRC32# property) of the records before the limit; moves the limit to the first bad one."""
    path, p, limit = str(seg.path), b.p, b.limit
    if check_crc and limit:
        body_len, crc = _field(b.head, "body_len"), _field(b.head, "body_crc")
        sel = np.flatnonzero(b.simple[:limit] & (body_len[:limit] > 0))
        got = body_crcs(buf, p[sel] + HEAD_V4_SIZE, body_len[sel])
        bad = np.flatnonzero(got != crc[sel])
        if bad.size:
            i = int(sel[bad[0]])
            at = int(p[i])
            b.limit = i
            b.error = ChecksumMismatch(
                path=path, pos=at, phy_offset=seg.base_offset + at, stored=int(crc[i]), computed=int(got[bad[0]])
            )
    if prop_crc and b.limit:
        bad_prop = _first_prop_crc_error(buf, p[: b.limit], _field(b.head, "total_size")[: b.limit], seg, path)
        if bad_prop is not None:
            b.limit, b.error = bad_prop


def _batch_topics(buf: Any, u8: np.ndarray, b: _Batch, seg: Segment, cfg: StoreConfig, topics: TopicIds) -> np.ndarray:
    """Topic ids of the records before the limit, then the DELAY check of SCHEDULE_TOPIC_XXXX records
    (a non-numeric level is invalid: the limit moves there)."""

    path, p = str(seg.path), b.p
    tid = np.empty(b.limit, dtype=np.int64)
    s_idx = np.flatnonzero(b.simple[: b.limit])
    if s_idx.size:
        tid[s_idx] = topic_ids(u8, p[s_idx] + HEAD_V4_SIZE + 1 + b.bl[s_idx], b.topic_len[s_idx], topics)
    for i, rec in b.exact.items():
        if i < b.limit:
            tid[i] = topics.id(rec.topic)
    sched = topics.ids.get(SCHEDULE_TOPIC)
    for i in np.flatnonzero(tid == sched).tolist() if sched is not None else ():
        try:
            rec = b.exact.get(i) or decode_record(
                buf, int(p[i]), path=path, file_from=seg.base_offset, broker=cfg.broker
            )
            assert isinstance(rec, Record)
            request_from_record(rec, cfg, path=path)
        except CorruptData as e:
            b.limit, b.error = i, e
            break
    return tid[: b.limit]


_WALK_COLUMNS = ("pos", "phy", "size", "queue_id", "queue_offset", "sys_flag", "store_ts", "topic_id")


def _batch_columns(b: _Batch, tid: np.ndarray) -> tuple[np.ndarray, ...]:
    """The walk's columns (``_WALK_COLUMNS``) of the records before the limit."""
    h = b.head[: b.limit]
    store_ts = _field(h, "store_timestamp_ms")
    for i, rec in b.exact.items():
        if i < b.limit:
            store_ts[i] = rec.store_timestamp_ms
    names = ("phy_offset", "total_size", "queue_id", "queue_offset", "sys_flag")
    return (b.p[: b.limit], *(_field(h, n) for n in names), store_ts, tid)


def walk_file_checked(
    buf: Any,
    seg: Segment,
    cfg: StoreConfig,
    rules: BrokerRules,
    topics: TopicIds,
    *,
    start_pos: int,
    check_crc: bool,
) -> FileWalk:
    """Walk one file as ``checkMessageAndReturnSize(checkCRC)`` does in recovery (§3.11, §8.2).

    One Python loop follows the TOTALSIZE chain; every other check (lengths against TOTALSIZE,
    magic, body CRC) runs on arrays. Records with IPv6 hosts (4.6.0+), V2 records (5.1.0+) and
    ``SCHEDULE_TOPIC_XXXX`` records (whose DELAY must parse) take the exact per-record decoder.
    """

    size = len(buf)
    # 5.2.0+ forceVerifyPropCRC: the __CRC32# property is checked instead of the body CRC (§3.6)
    prop_crc = check_crc and cfg.force_verify_prop_crc and rules.prop_crc
    check_crc = check_crc and not prop_crc
    positions, stop_pos, reason = seg.framing.chain(buf, start_pos, size)
    u8 = np.frombuffer(buf, dtype=np.uint8) if size else np.zeros(0, np.uint8)
    cols: list[tuple[np.ndarray, ...]] = []
    error: CorruptData | None = None
    for b0 in range(0, len(positions), _CHASE_BATCH):
        b = _check_structure(buf, u8, positions[b0 : b0 + _CHASE_BATCH], seg, cfg, rules, check_crc)
        _check_crcs(buf, b, seg, check_crc, prop_crc)
        tid = _batch_topics(buf, u8, b, seg, cfg, topics)
        cols.append(_batch_columns(b, tid))
        if b.limit < len(b.p):
            stop_pos, reason, error = int(seg.framing.frame_of(b.p[b.limit])), "invalid", b.error
            break
    else:
        if reason == "invalid":  # the size chain itself ended on bytes that are neither a record, zeros nor a blank
            error = seg.framing.explain(buf, stop_pos, path=str(seg.path), file_from=seg.base_offset, broker=cfg.broker)
    arrays = [np.concatenate(c) if c else np.zeros(0, np.int64) for c in zip(*cols, strict=True)] if cols else None
    arrays = arrays or [np.zeros(0, np.int64) for _ in _WALK_COLUMNS]
    return FileWalk(seg, start_pos, *arrays, Stop(stop_pos, reason, error, seg.path, seg.base_offset))


def _fused_file_walk(seg: Segment, f: FusedFile) -> FileWalk:
    """The recovery walk's arrays from a fused walk's columns (the same records)."""
    return FileWalk(seg, 0, f.positions, *f.fields, Stop(f.stop_pos, f.reason, None, seg.path, seg.base_offset))


def recovery_walk(
    segs: list[Segment],
    start_idx: int,
    cfg: StoreConfig,
    rules: BrokerRules,
    check_crc: bool,
    topics: TopicIds,
    progress: Callable[[int], None] | None,
    dispatch_columns: KeptColumns | None = None,
) -> Iterator[FileWalk]:
    """Recovery's walk from file ``start_idx`` (§8.2, §8.3): a BLANK moves on to the next file.

    Large files are checked by worker processes over byte ranges, which also decode the records'
    dispatch columns into ``dispatch_columns`` (cleared when any file needed the exact walk).
    """
    pool = feed = None
    fused_all = True
    # the parallel walk checks body CRCs only: a store verifying the CRC property walks exactly
    parallel = (
        [s for s in segs[start_idx:] if s.size > PART_SIZE] if not (check_crc and cfg.force_verify_prop_crc) else []
    )

    def walk_file(seg: Segment, start_pos: int) -> FileWalk:
        nonlocal pool, feed, fused_all
        fused = None
        if fused_all and seg.size > PART_SIZE and parallel:
            if feed is None:
                pool = worker_pool()
                feed = PartFeed(pool, parallel, cfg, (check_crc, rules.ipv6_hosts, rules.v2_magic))
            fused = recovery_walk_file(feed, seg, topics, dispatch_columns)
        if fused is not None:
            w = _fused_file_walk(seg, fused)
        else:
            fused_all = False
            if feed is not None:
                feed.drop()
            if dispatch_columns is not None:
                dispatch_columns.clear()
            with map_file(seg.path) as buf:
                w = walk_file_checked(buf, seg, cfg, rules, topics, start_pos=start_pos, check_crc=check_crc)
        if progress:
            progress(w.stop_pos)
        return w

    try:
        yield from walk_chain(segs, start_idx, walk_file)
    finally:
        if pool is not None:
            close_pool(pool)
