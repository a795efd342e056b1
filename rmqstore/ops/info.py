"""The state of a store at a glance, read cheaply (store-format.md §2, §4.4, §5.1, §6, §7, §8.2, §11).

``store_info`` never reads a whole commit log. It finds:

* the commit log range: min = the first file's start offset; max = where the broker's normal
  recovery would stop (§8.2), found by walking only from the start of the last non-empty file,
  record by record, without the body CRC (structure only: magic, TOTALSIZE and the lengths
  inside the record must agree, as in ``checkMessageAndReturnSize``);
* per consume queue: the max queue offset from the valid prefix of the last file (§8.4) and the
  min queue offset by the 4.x ``correctMinOffset`` rule (§4.4), both with numpy over mmapped files;
* per index file: the 40-byte header only;
* ``config/*.json``: parsed the way the broker loads them (main file, else ``.bak``).

Anything odd seen on the way is a :class:`~rmqstore.problems.Problem`; errors are what the broker
would refuse or silently mis-read, warnings what it will repair or what needs attention.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec.checkpoint import Checkpoint
from rmqstore.codec.commitlog import (
    OFFSETS_V4,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    checked_size,
    decode_record,
    store_timestamp_at,
)
from rmqstore.codec.consumequeue import ENTRY_SIZE, valid_prefix
from rmqstore.codec.describe import index_header_json
from rmqstore.codec.indexfile import HEADER_SIZE, IndexHeader, decode_header
from rmqstore.errors import CorruptData, RmqstoreError
from rmqstore.problems import ERROR, INFO, WARNING, Problem
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store import config as configjson
from rmqstore.store.dledger import DLedgerIndex, read_member
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment
from rmqstore.store.queue.interface import ConsumeQueue
from rmqstore.walk.chain import Stop, StopKind, first_record, frames, holds_data, walk_chain
from rmqstore.walk.dledger import ledger_problems, ledger_state

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_MIN_SCAN_CHUNK = 4096  # entries read at a time when looking for the first live CQ entry
_STEP = 1 << 24  # every 16 MiB walked: report progress, release the pages walked

# Tables whose size says how much a config file holds (§11.3-§11.7).
_CONFIG_TABLES = ("topicConfigTable", "offsetTable", "subscriptionGroupTable", "filterDataByTopic")


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


@dataclass(frozen=True, slots=True)
class QueueInfo(JsonModel):
    topic: str
    queue_id: int
    files: int
    min_offset: int  # minOffsetInQueue
    max_offset: int  # maxOffsetInQueue: the next queue offset to be written
    max_physic_offset: int  # the broker's maxPhysicOffset (4.4.0: start of the last record; 4.5.1+: its end)
    last_offset: int  # end (offset + size) of the record of the last entry; -1 when empty
    last_size: int = 0  # size of that record

    json_keys = "topic queue_id files min_offset max_offset message_total max_physic_offset last_offset"

    @property
    def message_total(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class IndexFileInfo:
    name: str
    size: int
    header: IndexHeader | None  # None when the file is too short for a header
    full: bool

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "size": self.size}
        if self.header is not None:
            out.update(index_header_json(self.header))
        out["writeFull"] = self.full
        return out


@dataclass(frozen=True, slots=True)
class ConfigFileInfo:
    name: str
    size: int
    loaded_from: str  # "file", "bak", "missing" (empty state) or "error"
    entries: int | None  # size of the file's main table, when it has one
    bak: bool  # a .bak copy exists
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size": self.size,
            "loadedFrom": self.loaded_from,
            "entries": self.entries,
            "bak": self.bak,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class StoreInfo:
    root: Path
    broker_config: Path | None
    broker: str
    abort_exists: bool
    abort_pid: int | None  # 5.x brokers write their pid into abort
    lock_holder_pid: int | None
    checkpoint: Checkpoint | None
    commitlog: CommitLogInfo
    queues: tuple[QueueInfo, ...]
    index_files: tuple[IndexFileInfo, ...]
    config_files: tuple[ConfigFileInfo, ...]
    problems: tuple[Problem, ...]
    version: dict[str, Any] | None = None  # detect.Detection.to_json(): the family and its evidence
    extra_parts: tuple[tuple[str, int], ...] = ()  # 5.x timer / compaction / ext files: (path, bytes)
    dledger: dict[str, Any] | None = None  # DLedger mode: the member and its ledger

    @property
    def clean_shutdown(self) -> bool:
        return not self.abort_exists

    @property
    def broker_running(self) -> bool:
        return self.lock_holder_pid is not None

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    def to_json(self) -> dict[str, Any]:
        return {
            "store": str(self.root),
            "brokerConfig": None if self.broker_config is None else str(self.broker_config),
            "brokerVersion": self.broker,
            "brokerFamily": None if self.version is None else self.version["family"],
            "version": self.version,
            "extraParts": [{"path": p, "size": n} for p, n in self.extra_parts],
            "cleanShutdown": self.clean_shutdown,
            "abortExists": self.abort_exists,
            "abortPid": self.abort_pid,
            "brokerRunning": self.broker_running,
            "lockHolderPid": self.lock_holder_pid,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
            "commitLog": self.commitlog.to_json(),
            **({"dledger": self.dledger} if self.dledger is not None else {}),
            "queues": [q.to_json() for q in self.queues],
            "indexFiles": [i.to_json() for i in self.index_files],
            "configFiles": [c.to_json() for c in self.config_files],
            "problems": [p.to_json() for p in self.problems],
        }


# ------------------------------------------------------------------------------------------ commit log


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


def _commitlog_info(
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


# ---------------------------------------------------------------------------------------- consume queues


_EXTRA_PARTS = ("timerwheel", "timerlog", "config/timercheck", "config/timermetrics", "compaction", "consumequeue_ext")


def _extra_parts(root: Path) -> tuple[tuple[str, int], ...]:
    """Files of the 5.x timer store, compaction and consume queue ext (`dump timer`, `timercheck`, `compaction*`)."""
    out = []
    for name in _EXTRA_PARTS:
        p = root / name
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
        out += [(f.relative_to(root).as_posix(), f.stat().st_size) for f in files]
    return tuple(out)


def _batch_queue_info(q: ConsumeQueue) -> QueueInfo:
    """A 5.x batch consume queue (§4.7): offsets count messages; maxPhysicOffset is the last unit's offset."""
    segs, _ = q.files()
    first = next((arr[0] for arr in map(q.read, segs) if valid_prefix(arr)), None)
    tail = q.tail()
    if first is None or tail.last is None:
        return QueueInfo(q.topic, q.queue_id, len(segs), 0, 0, -1, -1)
    phy, size = tail.last
    base = int(first["base_offset"])
    return QueueInfo(q.topic, q.queue_id, len(segs), base, tail.max_offset, tail.max_physic_offset, phy + size, size)


def _queue_info(q: ConsumeQueue, commitlog_min: int, file_size: int) -> tuple[QueueInfo, list[Problem]]:
    segs, problems = q.files()
    if not segs:
        return QueueInfo(q.topic, q.queue_id, 0, 0, 0, -1, -1), problems
    # Max: the valid prefix of the last file (§8.4; earlier files are taken as complete).
    last = segs[-1]
    tail = q.tail()
    # Min: the 4.x correctMinOffset scan of the first file (§4.4); minLogicOffset stays 0 if nothing matches.
    first = segs[0]
    scan_end = tail.end - last.base_offset if first is last else min(first.size, file_size)
    min_logic = _first_live_entry(q, first, scan_end, commitlog_min)
    if min_logic is None:
        min_logic = 0
        if scan_end:
            problems.append(
                Problem(
                    first.path,
                    None,
                    f"no entry of the first file points at or after the commit log min offset {commitlog_min}: "
                    "every message of this queue has expired",
                    INFO,
                )
            )
    last_size = 0
    last_end = -1
    if tail.last is not None:
        last_size = tail.last[1]
        last_end = tail.last[0] + tail.last[1]
    return (
        QueueInfo(
            q.topic,
            q.queue_id,
            len(segs),
            min_logic // ENTRY_SIZE,
            tail.max_offset,
            tail.max_physic_offset,
            last_end,
            last_size,
        ),
        problems,
    )


def _first_live_entry(q: ConsumeQueue, seg: Segment, scan_end: int, commitlog_min: int) -> int | None:
    """Byte offset in the queue stream of the first entry pointing at or after ``commitlog_min``."""
    count = max(0, scan_end) // ENTRY_SIZE
    for start in range(0, count, _MIN_SCAN_CHUNK):
        hits = np.flatnonzero(q.read(seg, start, start + _MIN_SCAN_CHUNK)["phy_offset"] >= commitlog_min)
        if hits.size:
            return seg.base_offset + (start + int(hits[0])) * ENTRY_SIZE
    return None


# ----------------------------------------------------------------------------------------- index files


def _index_info(st: Store, path: Path) -> tuple[IndexFileInfo, list[Problem]]:
    cfg = st.config
    problems: list[Problem] = []
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
            size = f.seek(0, 2)
    except OSError as e:
        return IndexFileInfo(path.name, 0, None, False), [Problem(path, None, f"cannot read: {e.strerror}")]
    want = cfg.index_file_size()
    if size != want:
        problems.append(
            Problem(
                path,
                None,
                f"file is {size} bytes; maxHashSlotNum={cfg.max_hash_slot_num} and maxIndexNum={cfg.max_index_num} "
                f"make {want}: the broker would read it at wrong positions",
            )
        )
    if len(head) < HEADER_SIZE:
        return IndexFileInfo(path.name, size, None, False), problems
    h = decode_header(head, path=str(path))
    return IndexFileInfo(path.name, size, h, h.index_count >= cfg.max_index_num), problems


# ---------------------------------------------------------------------------------------- config files


def _config_info(st: Store) -> tuple[list[ConfigFileInfo], list[Problem]]:
    d = st.config.config_dir
    try:
        names = sorted(p.name for p in d.iterdir() if p.name.endswith(".json") and p.is_file())
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [Problem(d, None, f"cannot list: {e.strerror}", WARNING)]
    out: list[ConfigFileInfo] = []
    problems: list[Problem] = []
    for name in names:
        path = d / name
        size = path.stat().st_size
        bak = path.with_name(name + ".bak").is_file()
        try:
            cf = configjson.read_config(d, name)
        except RmqstoreError as e:
            out.append(ConfigFileInfo(name, size, "error", None, bak, str(e)))
            problems.append(Problem(path, None, f"cannot be loaded, nor its .bak: {e}"))
            continue
        if cf.skipped is not None:
            at = "" if cf.skipped.line is None else f"line {cf.skipped.line}: "
            problems.append(
                Problem(path, None, f"unusable ({at}{cf.skipped.what}); the broker loads {name}.bak instead", WARNING)
            )
        entries = None
        if isinstance(cf.data, dict):
            for key in _CONFIG_TABLES:
                table = cf.data.get(key)
                if isinstance(table, dict):
                    entries = len(table)
                    break
        out.append(ConfigFileInfo(name, size, cf.source, entries, bak, None if cf.skipped is None else str(cf.skipped)))
    return out, problems


# --------------------------------------------------------------------------------------------- summary


def _abort_pid(path: Path) -> int | None:
    """The pid a 5.x broker writes into ``abort`` (4.x leaves it empty)."""
    try:
        text = path.read_bytes()[:32].strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _marker_problems(st: Store, abort: bool, pid: int | None) -> list[Problem]:
    cfg = st.config
    if pid is not None:
        return [Problem(cfg.lock_path, 0, f"a running broker (pid {pid}) holds the lock: figures may change", WARNING)]
    if abort:
        why = "unclean shutdown: abort exists, the broker will run abnormal recovery on its next start"
        return [Problem(cfg.abort_path, None, why, WARNING)]
    return []


def _checkpoint_info(st: Store) -> tuple[Checkpoint | None, list[Problem]]:
    try:
        cp = st.read_checkpoint()
    except CorruptData as e:
        return None, [Problem(e.path, e.pos, e.what)]
    return cp, [Problem(st.config.checkpoint_path, None, "no checkpoint file", WARNING)] if cp is None else []


def _queues_info(st: Store, commitlog_min: int) -> tuple[list[QueueInfo], list[Problem]]:
    queues: list[QueueInfo] = []
    problems: list[Problem] = []
    for q in st.consume_queues.queues():
        info, qp = _queue_info(q, commitlog_min, st.config.cq_file_size)
        queues.append(info)
        problems += qp
    queues += [_batch_queue_info(q) for q in st.batch_queues.queues()]
    queues.sort(key=lambda q: (q.topic, q.queue_id))
    return queues, problems


def _index_files_info(st: Store, clog: CommitLogInfo) -> tuple[list[IndexFileInfo], list[Problem]]:
    index_paths, problems = st.index_files()
    index_files: list[IndexFileInfo] = []
    for path in index_paths:
        info, pp = _index_info(st, path)
        index_files.append(info)
        problems += pp
    last_index = index_files[-1].header if index_files else None
    if last_index is not None and last_index.index_count > 1 and last_index.end_phy_offset >= clog.max_phy_offset:
        problems.append(
            Problem(
                st.config.index_dir / index_files[-1].name,
                None,
                f"the index refers to phy offset {last_index.end_phy_offset}, at or past the commit log end "
                f"{clog.max_phy_offset}",
                WARNING,
            )
        )
    return index_files, problems


def _checkpoint_problems(st: Store, cp: Checkpoint | None, clog: CommitLogInfo) -> list[Problem]:
    """Checkpoint times later than the last record: an abnormal recovery would start too late (§8.3)."""
    last = clog.last_store_timestamp_ms
    if cp is None or last is None:
        return []
    out = []
    for name, ts in (
        ("physicMsgTimestamp", cp.physic_msg_timestamp_ms),
        ("logicsMsgTimestamp", cp.logics_msg_timestamp_ms),
    ):
        if ts > last:
            why = f"{name} {ts} is later than the last record's store time {last}: an abnormal recovery could skip records"
            out.append(Problem(st.config.checkpoint_path, None, why, WARNING))
    return out


def store_info(st: Store, *, progress: Callable[[int], None] | None = None) -> StoreInfo:
    """Everything ``rmqstore info`` shows about an opened store; reads only (see the module doc).

    ``progress`` is called with the number of commit log bytes walked since its last call.
    """
    cfg = st.config
    abort = st.abort_exists()
    pid = st.lock_holder()
    problems = _marker_problems(st, abort, pid)
    cp, cp_problems = _checkpoint_info(st)
    problems += cp_problems
    segs, seg_problems = st.commitlog_segments()
    problems += seg_problems
    queues, queue_problems = _queues_info(st, segs[0].base_offset if segs else -1)
    problems += queue_problems
    furthest = max(queues, key=lambda q: q.last_offset, default=None)
    queued_end = -1 if furthest is None else furthest.last_offset
    hint = None if furthest is None or queued_end < 0 else (queued_end - furthest.last_size, furthest.last_size)
    clog, queued_after, clog_problems = _commitlog_info(st, segs, hint, progress)
    problems += clog_problems
    problems += _dispatch_problems(st, clog, queued_end, queued_after)
    dledger, dledger_problems = _dledger_info(st, segs, queued_end)
    problems += dledger_problems
    index_files, index_problems = _index_files_info(st, clog)
    problems += index_problems
    problems += _checkpoint_problems(st, cp, clog)
    config_files, config_problems = _config_info(st)
    problems += config_problems
    return StoreInfo(
        root=st.root,
        broker_config=cfg.source,
        broker=cfg.broker,
        abort_exists=abort,
        abort_pid=_abort_pid(cfg.abort_path) if abort else None,
        lock_holder_pid=pid,
        checkpoint=cp,
        commitlog=clog,
        queues=tuple(queues),
        index_files=tuple(index_files),
        config_files=tuple(config_files),
        problems=tuple(problems),
        version=None if cfg.detection is None else cfg.detection.to_json(),
        extra_parts=_extra_parts(st.root),
        dledger=dledger,
    )


def _dispatch_problems(st: Store, clog: CommitLogInfo, queued_end: int, queued_after: int) -> list[Problem]:
    """Consume queues ahead of or behind the commit log (§8.4, §9.3)."""
    cq_dir = st.config.consumequeue_dir
    if queued_end > clog.max_phy_offset:
        return [
            Problem(
                cq_dir,
                None,
                f"consume queue entries reach phy offset {queued_end}, past the commit log end "
                f"{clog.max_phy_offset}: their messages are missing and recovery truncates the queues",
                ERROR,
            )
        ]
    if queued_after:
        # Records before the walk's start were not looked at: the count is then a lower bound.
        at_least = "at least " if queued_end < clog.walk_from_phy_offset else ""
        start = max(queued_end, 0)
        return [
            Problem(
                cq_dir,
                None,
                f"{at_least}{queued_after} message(s) from here on are in no consume queue (not dispatched yet)",
                WARNING,
                start,
            )
        ]
    return []


# ------------------------------------------------------------------------------------------ DLedger


def _dledger_info(st: Store, segs: list[Segment], queued_end: int) -> tuple[dict[str, Any] | None, list[Problem]]:
    """The DLedger member and its ledger (DLedger mode only), and where they disagree."""
    cfg = st.config
    if not cfg.dledger:
        return None, []
    with DLedgerIndex(cfg) as index:
        state = ledger_state(segs, index, read_member(cfg))
        problems = list(index.problems) + ledger_problems(state, index)
        member = state.member
        committed = member.committed_index
        unit = None if committed is None or committed < 0 else index.unit(committed)
        committed_pos = unit.pos + unit.size if unit is not None and unit.magic != 0 else None
        index_files = [_file_json(s) for s in index.segments]
    if committed_pos is not None and queued_end > committed_pos:
        problems.append(Problem(cfg.consumequeue_dir, None, f"consume queue entries reach {queued_end}, past the "
                                f"committed position {committed_pos}: the member serves only committed entries",
                                WARNING))  # fmt: skip
    last = state.last.header if state.last is not None else None
    return {
        "group": cfg.dleger_group, "selfId": cfg.dleger_self_id, "peers": cfg.dleger_peers,
        "currTerm": member.term, "voteLeader": member.vote,
        "ledgerBeginIndex": -1 if state.begin is None else state.begin.index, "ledgerEndIndex": state.end_index,
        "ledgerEndTerm": -1 if last is None else last.term,
        "committedIndex": committed, "committedPos": committed_pos, "checkpointEndIndex": member.end_index,
        "dataMinOffset": state.data_files[0].base_offset if state.data_files else 0, "dataWritePos": state.write_pos,
        "indexWritePos": state.index_write_pos, "dividedCommitlogOffset": state.divided_offset,
        "dataDirs": [str(d) for d in cfg.dledger_data_dirs], "indexDir": str(cfg.dledger_index_dir),
        "dataFiles": [_file_json(s) for s in state.data_files], "indexFiles": index_files,
    }, problems  # fmt: skip


def _file_json(seg: Segment) -> dict[str, Any]:
    return {"name": seg.path.name, "fileFromOffset": seg.base_offset, "fileSize": seg.size}
