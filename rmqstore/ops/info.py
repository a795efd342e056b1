"""The state of a store at a glance, read cheaply (store-format.md §2, §4.4, §5.1, §6, §7, §8.2, §11).

``store_info`` never reads a whole commit log. It finds (the first two with :mod:`rmqstore.walk.extent`
and :mod:`rmqstore.store.queue.summary`, which ``report`` reads too):

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

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.codec.checkpoint import Checkpoint
from rmqstore.codec.describe import index_header_json
from rmqstore.codec.indexfile import HEADER_SIZE, IndexHeader, decode_header
from rmqstore.errors import CorruptData, RmqstoreError
from rmqstore.problems import ERROR, WARNING, Problem, StoreVerdict, absolute_path, shutdown_problems
from rmqstore.safety.openfile import open_fd, read_file
from rmqstore.store import Store
from rmqstore.store import config as configjson
from rmqstore.store.dledger import DLedgerIndex, read_member
from rmqstore.store.layout import Segment
from rmqstore.store.queue.summary import QueueInfo, queues_info
from rmqstore.walk.dledger import ledger_problems, ledger_state
from rmqstore.walk.extent import CommitLogInfo, commitlog_info

# Tables whose size says how much a config file holds (§11.3-§11.7).
_CONFIG_TABLES = ("topicConfigTable", "offsetTable", "subscriptionGroupTable", "filterDataByTopic")


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

    @property
    def verdict(self) -> StoreVerdict:
        """The verdict ``check`` gives too, from what ``info`` reads."""
        return StoreVerdict.of_problems(
            self.problems, clean_shutdown=self.clean_shutdown, broker_running=self.broker_running
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "store": absolute_path(self.root),
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
            "verdict": self.verdict.to_json(),
            "problems": [p.to_json() for p in self.problems],
        }


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


# ----------------------------------------------------------------------------------------- index files


def _index_info(st: Store, path: Path) -> tuple[IndexFileInfo, list[Problem]]:
    cfg = st.config
    problems: list[Problem] = []
    try:
        fd = open_fd(path)
        try:
            head, size = os.pread(fd, HEADER_SIZE, 0), os.fstat(fd).st_size
        finally:
            os.close(fd)
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
        text = read_file(path, limit=32).strip()
    except (OSError, RmqstoreError):  # a directory there is a problem the markers report
        return None
    return int(text) if text.isdigit() else None


def _checkpoint_info(st: Store) -> tuple[Checkpoint | None, list[Problem]]:
    try:
        cp = st.read_checkpoint()
    except CorruptData as e:
        return None, [Problem(e.path, e.pos, e.what)]
    return cp, [Problem(st.config.checkpoint_path, None, "no checkpoint file", WARNING)] if cp is None else []


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
    problems = shutdown_problems(cfg.abort_path, cfg.lock_path, abort=abort, lock_pid=pid)
    cp, cp_problems = _checkpoint_info(st)
    problems += cp_problems
    segs, seg_problems = st.commitlog_segments()
    problems += seg_problems
    queues, queue_problems = queues_info(st, segs[0].base_offset if segs else -1)
    problems += queue_problems
    furthest = max(queues, key=lambda q: q.last_offset, default=None)
    queued_end = -1 if furthest is None else furthest.last_offset
    hint = None if furthest is None or queued_end < 0 else (queued_end - furthest.last_size, furthest.last_size)
    clog, queued_after, clog_problems = commitlog_info(st, segs, hint, progress)
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
