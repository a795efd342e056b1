"""What the broker's recovery finds in a store when it opens it (store-format.md §8.1-§8.5), read only.

Where the commit log's valid data ends (``processOffset``) and why, which file the walk starts
from, where each consume queue's valid entries end, the index files kept and destroyed, and the
records without their consume queue entry: ``recover`` plans from these facts, ``write`` checks
that the broker keeps everything before its append point, ``check`` and ``info`` report them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec import indexfile as ix
from rmqstore.codec.commitlog import BORNHOST_V6_FLAG, HEAD_OFFSETS, OFFSETS_V4
from rmqstore.codec.dledger import DLEDGER
from rmqstore.errors import CorruptData, UnsupportedStore
from rmqstore.problems import LOAD_FAILURES, Problem, ProblemKind
from rmqstore.rules import BrokerRules, rules_for
from rmqstore.safety.openfile import read_file
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.store.queue.batchconsumequeue import batch_cq_topics
from rmqstore.store.queue.interface import ConsumeQueue, QueueRecovery
from rmqstore.walk.chain import FileWalk, first_record, indexed, queue_order, queued
from rmqstore.walk.checked import TopicIds, recovery_walk
from rmqstore.walk.kept import KeptColumns

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def refuse_unrecoverable(st: Store) -> None:
    """Stores whose recovery this library does not follow."""
    cfg = st.config
    if cfg.duplication_enable:
        raise UnsupportedStore(f"{st.root}: duplicationEnable=true (replica mode) recovery is not supported")
    if cfg.enable_consume_queue_ext:
        raise UnsupportedStore(f"{st.root}: enableConsumeQueueExt=true (consume queue ext files) is not supported")


@dataclass(frozen=True, slots=True)
class LostRecord(JsonModel):
    """A commit log record removed by the truncation, decoded as far as its bytes allow."""

    phy_offset: int
    size: int
    topic: str | None
    queue_id: int | None
    queue_offset: int | None
    keys: str | None
    uniq_key: str | None
    msg_id: str | None
    store_timestamp_ms: int | None
    torn: bool = False  # only the fixed header was readable

    json_keys = (
        "phy_offset=commitLogOffset size=storeSize topic queue_id queue_offset keys uniq_key msg_id "
        "store_timestamp_ms=storeTimestamp torn"
    )


def rel_path(root: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(Path(path).resolve())


def refuse_load_failure(p: Problem, consequence: str) -> None:
    """A segment directory problem that makes the broker fail to load the directory stops the plan."""
    if p.kind in LOAD_FAILURES:
        raise CorruptData(f"{p.what}{consequence} or move the file away", path=p.path, pos=0)


def recover_queue(q: ConsumeQueue) -> QueueRecovery:
    """The queue's own recovery (§8.4); a directory the broker would not load stops the plan."""
    rec = q.recover()
    for p in rec.problems:
        refuse_load_failure(p, ": the broker would not load this consume queue; fix mappedFileSizeConsumeQueue")
    return rec


def read_checkpoint_bytes(path: Path) -> bytes | None:
    """The checkpoint as the broker maps it: 4096 bytes (a short file reads as zero-padded)."""
    try:
        return checkpoint_page(read_file(path))
    except FileNotFoundError:
        return None


def checkpoint_page(data: bytes) -> bytes:
    return (data + bytes(cpmod.FILE_SIZE))[: cpmod.FILE_SIZE]


def _abnormal_start(segs: list[Segment], cp: cpmod.Checkpoint, cfg: StoreConfig, rules: BrokerRules) -> tuple[int, str]:
    """``isMappedFileMatchedRecover`` from the last file backwards (§8.3); the first file if none."""
    safe = cfg.message_index_enable and cfg.message_index_safe
    limit = cp.min_timestamp_index_ms if safe else cp.min_timestamp_ms
    what = "minTimestampIndex" if safe else "minTimestamp"
    for i in range(len(segs) - 1, -1, -1):
        with map_file(segs[i].path) as buf:
            at = first_record(buf, segs[i], v2=rules.v2_magic)
            if at is None or len(buf) < at + 76:
                continue
            sys_flag = _I32.unpack_from(buf, at + OFFSETS_V4["sys_flag"])[0]
            layout = HEAD_OFFSETS[(sys_flag & BORNHOST_V6_FLAG) >> 4 if rules.ipv6_hosts else 0]
            ts = _I64.unpack_from(buf, at + layout["store_timestamp_ms"])[0]
        if ts != 0 and ts <= limit:
            return i, f"its first record was stored at {ts} <= checkpoint {what} {limit}"
    return 0, f"no file starts with a record stored at or before checkpoint {what} {limit}, so the first file"


@dataclass
class CqCheck:
    """Walked NOT/COMMIT records without their consume queue slot (§4.3), counted as the walk goes."""

    missing: int = 0
    fixed: int = 0  # of those, what the broker re-dispatches anyway
    examples: list[LostRecord] = field(default_factory=list)
    skip: frozenset[str] = frozenset()  # batch consume queue topics: their units are not plain slots

    def add(
        self,
        w: FileWalk,
        topics: TopicIds,
        queues: dict[tuple[str, int], QueueRecovery],
        rules: BrokerRules,
        abnormal: bool,
        max_cq: int,
    ) -> None:
        ci = np.flatnonzero(queued(w.sys_flag))
        if not ci.size:
            return
        key = (w.topic_id[ci] << 32) | (w.queue_id[ci] & 0xFFFFFFFF)
        order = queue_order(w.topic_id[ci], w.queue_id[ci])  # queues grouped, records in walk order
        sorted_key = key[order]
        bounds = np.concatenate([[0], np.flatnonzero(sorted_key[1:] != sorted_key[:-1]) + 1, [len(key)]])
        uk = sorted_key[bounds[:-1]]
        for gi, k in enumerate(uk.tolist()):
            sel = ci[order[bounds[gi] : bounds[gi + 1]]]
            topic = topics.names[k >> 32]
            if topic in self.skip:
                continue
            qid = int(np.int64(k & 0xFFFFFFFF).astype(np.int32))
            q = queues.get((topic, qid))
            qoff, phy, size = w.queue_offset[sel], w.phy[sel], w.size[sel]
            if q is None or not q.kept:
                miss = np.ones(len(sel), dtype=bool)
            else:
                first = q.first_offset
                known = (qoff >= first) & (qoff < q.max_offset)
                present = np.zeros(len(sel), dtype=bool)
                kk = np.flatnonzero(known)
                present[kk] = q.queue.phy_offsets_at(qoff[kk], q) == phy[kk]
                miss = ~present & (qoff >= first)  # older than the queue's first file: expired, not lost
            if not miss.any():
                continue
            mq, mp, ms = qoff[miss], phy[miss], size[miss]
            if abnormal:
                # The re-dispatch appends what lies past the queue's end and past its max physical offset.
                qend = q.max_offset if q else 0
                dup_key = mp + (ms if rules.cq_max_includes_size else 0)
                fixed = (mq >= qend) & (dup_key > (q.max_physic_offset if q else -1))
            elif rules.start_catches_up:
                fixed = mp >= max_cq  # start() re-dispatches from the consume queue maximum
            else:
                fixed = np.zeros(len(mq), dtype=bool)
            self.missing += len(mq)
            self.fixed += int(fixed.sum())
            for j in np.flatnonzero(~fixed)[: max(0, 20 - len(self.examples))].tolist():
                self.examples.append(
                    LostRecord(
                        w.seg.base_offset + int(w.pos[sel][miss][j]),
                        int(ms[j]),
                        topic,
                        qid,
                        int(mq[j]),
                        None,
                        None,
                        None,
                        None,
                    )
                )


def _index_files_kept(st: Store, abort: bool, cp: cpmod.Checkpoint) -> tuple[list[Path], list[tuple[Path, str, bool]]]:
    """Index files the broker keeps, and those it destroys (file, why, not an index file at all) (§5.5).

    An abnormal exit destroys those newer than the checkpoint's indexMsgTimestamp.
    """
    cfg = st.config
    index_files, _ = st.index_files()
    kept: list[Path] = []
    dropped: list[tuple[Path, str, bool]] = []
    for p in index_files:
        size = p.stat().st_size
        if size != cfg.index_file_size():
            why = f"{size} bytes, not the {cfg.index_file_size()} bytes of an index file of this store"
            dropped.append((p, why, True))
            continue
        with map_file(p) as buf:
            h = ix.decode_header(buf, path=str(p))
        bad = ix.header_problem(h, cfg.max_index_num)
        if bad:
            dropped.append((p, f"not an index file: {bad}", True))
        elif abort and h.end_timestamp_ms > cp.index_msg_timestamp_ms:
            why = f"endTimestamp {h.end_timestamp_ms} > checkpoint indexMsgTimestamp {cp.index_msg_timestamp_ms}"
            dropped.append((p, why, False))
        else:
            kept.append(p)
    return kept, dropped


def walk_start(
    segs: list[Segment], abort: bool, cp: cpmod.Checkpoint, cfg: StoreConfig, rules: BrokerRules, max_cq: int
) -> tuple[int, str]:
    """The commit log file recovery walks from, and why (§8.2, §8.3)."""
    if not segs:
        return 0, "no commit log file"
    if cfg.dledger:  # DLedger's own recovery checks entry headers only: every record is checked here
        return 0, "the first file: every DLedger entry's record is checked"
    if abort:
        return _abnormal_start(segs, cp, cfg, rules)
    if rules.normal_start_from_cq_max:
        idx = next((i for i in range(len(segs) - 1, -1, -1) if segs[i].base_offset <= max_cq), 0)
        return idx, f"the last file starting at or before the consume queue maximum {max_cq}"
    return max(0, len(segs) - 3), "the third file from the end"


@dataclass
class RecoveryEnd:
    """Where recovery's walk ends (processOffset) and what it saw on the way, file by file."""

    process_offset: int
    stop: str = "no commit log file"
    reason: str = "end"  # of the last file walked: "blank" | "end" | "invalid"
    records: int = 0
    last_cq_ts: int = 0  # store time of the last record a consume queue gets
    last_cq_ts_after_cq: int = 0  # the same, among records past the consume queues' maximum
    not_indexed: int = 0  # records past the last index file's end that the index would get
    last_record: int = -1  # commit log offset of the last valid record (5.x confirm offset)
    last_ts: int = 0  # store time of the last valid record
    walked: bool = False  # a file was walked

    def add(self, w: FileWalk, last_index_end: int, max_cq: int) -> None:
        self.walked = True
        self.records += len(w.pos)
        if len(w.pos):
            self.last_record = w.seg.base_offset + int(w.pos[-1])
            self.last_ts = int(w.store_ts[-1])
        self.not_indexed += int(((w.phy > last_index_end) & indexed(w.sys_flag)).sum())
        ci = np.flatnonzero(queued(w.sys_flag))
        if ci.size:
            self.last_cq_ts = int(w.store_ts[ci[-1]])
            after = ci[w.phy[ci] > max_cq]
            if after.size:
                self.last_cq_ts_after_cq = int(w.store_ts[after[-1]])
        self.process_offset = w.seg.base_offset + w.stop_pos
        self.reason = w.reason
        if w.reason == "blank":
            self.stop = f"blank record at {self.process_offset}, the end of the last file"
        elif w.reason == "end":
            self.stop = "end of data (zeros)" if w.stop_pos + 8 <= w.seg.size else "end of the last file"
        else:
            self.stop = f"invalid record: {w.error}" if w.error else "invalid record"


@dataclass
class RecoveryFacts:
    """What the broker's recovery finds in a store, worked out once (§8.1-§8.5).

    Where the commit log data ends (``end.process_offset``), where each consume queue ends
    (``queues``), and the inputs of what the broker truncates; ``plan_recover`` turns them into
    actions, ``check`` and ``info`` report them.
    """

    rules: BrokerRules
    check_crc: bool
    abort: bool
    segs: list[Segment]  # the commit log files the broker loads (an empty last file left out)
    empty_last: Segment | None
    notes: list[str]
    cp_bytes: bytes | None  # the checkpoint page as mapped, None when there is no file
    cp: cpmod.Checkpoint
    kept_index: list[Path]
    dropped_index: list[tuple[Path, str, bool]]
    last_index_end: int  # endPhyOffset of the last kept index file, -1 when none
    queues: dict[tuple[str, int], QueueRecovery]
    max_cq: int  # maxPhyOffsetOfConsumeQueue after the queues' own recovery
    batch_topics: frozenset[str]
    batch_max: int
    start_idx: int
    start_why: str
    end: RecoveryEnd
    cq_check: CqCheck
    fused_columns: KeptColumns  # dispatch columns of the walked records, when the walk kept them
    cp_file: bytes | None = None  # the checkpoint file as it is
    batch_queues: list[QueueRecovery] = field(default_factory=list)  # the batch consume queues' own recovery
    reindex: bool = False  # index files that hold keys of records past the end were dropped (DLedger)
    topic_names: tuple[str, ...] = ()  # every topic of the records walked

    @property
    def stop(self) -> str:
        """Why the walk ended where it did, and the file it started from."""
        start = f"; walked from {self.segs[self.start_idx].path.name}: {self.start_why}" if self.segs else ""
        return self.end.stop + start

    @property
    def start_phy(self) -> int:
        return self.segs[self.start_idx].base_offset if self.segs else 0

    @property
    def process_offset(self) -> int:
        return self.end.process_offset

    @property
    def truncate_logic(self) -> bool:
        """``truncateDirtyLogicFiles`` runs: a consume queue points at or past processOffset (§8.5)."""
        return bool(self.segs) and self.max_cq >= self.process_offset

    @property
    def destroy_logics(self) -> bool:
        """No commit log file: the broker destroys every consume queue."""
        return not self.segs and (self.abort or self.rules.normal_destroys_logics)


def short_last_file(st: Store, segs: list[Segment]) -> Segment | None:
    """A DLedger store's last data file when it is shorter than the configured size (cut by a copy or a
    full disk): DLedger refuses to load it, recover fills it up with zeros to its size."""
    last = segs[-1] if segs else None
    if last is None or last.framing is not DLEDGER or not 0 < last.size < st.config.commitlog_file_size:
        return None
    return last


def _loaded_commitlog(st: Store, root: Path) -> tuple[list[Segment], Segment | None, list[str]]:
    """The commit log files as the broker loads them (§2.4), the empty last file, and notes."""
    segs, problems = st.commitlog_segments()
    empty_last = segs[-1] if segs and segs[-1].size == 0 else None
    short = short_last_file(st, segs)
    notes = []
    for p in problems:
        if empty_last is not None and p.path == empty_last.path:
            continue
        if short is not None and p.path == short.path and p.kind is ProblemKind.WRONG_SIZE:
            notes.append(f"{rel_path(root, p.path)}: {p.what}; filled up with zeros to its size")
            continue
        refuse_load_failure(
            p,
            "; the broker would stop loading the commit log here: fix the file size in the broker config "
            "(mapedFileSizeCommitLog up to 4.5.1, mappedFileSizeCommitLog after)",
        )
        notes.append(f"{rel_path(root, p.path)}: {p.what}")
    if empty_last is not None:
        segs.pop()  # mapped at full size (zeros) by 4.x, deleted by 5.1.3+: either way it holds nothing
    return segs, empty_last, notes


def recovery_facts(
    st: Store,
    *,
    check_crc: bool | None = None,
    progress: Callable[[int], None] | None = None,
    keep_columns: bool = False,
) -> RecoveryFacts:
    """Walk the store as the broker's recovery does (§8.1 order) and say what it finds; reads only.
    ``keep_columns``: keep the walked records' dispatch columns (``fused_columns``) for a re-dispatch."""
    return recovery_facts_for([st], check_crc=check_crc, progress=progress, keep_columns=keep_columns)[0]


def recovery_facts_for(
    stores: Sequence[Store],
    *,
    check_crc: bool | None = None,
    progress: Callable[[int], None] | None = None,
    keep_columns: bool = False,
) -> list[RecoveryFacts]:
    """``recovery_facts`` of one store under several broker versions (``stores``: the same store, each
    with its ``broker``), with one walk of the commit log for all the versions that read records alike:
    they differ only in the rules applied to what the walk found (where it starts, what a queue loses)."""
    facts = [_facts_before_walk(s, check_crc) for s in stores]
    groups: dict[tuple[Any, ...], list[RecoveryFacts]] = {}
    for f in facts:
        key = (tuple(getattr(f.rules, n) for n in _WALK_RULES), f.check_crc, tuple(s.path for s in f.segs))
        groups.setdefault(key, []).append(f)
    for group in groups.values():
        _walk_shared(stores[facts.index(group[0])].config, group, progress, keep_columns)
        for f in group:
            if f.segs[f.start_idx :] and not f.end.walked:  # the shared walk ended before its start
                _walk_shared(stores[facts.index(f)].config, [f], progress, keep_columns)
    for f, s in zip(facts, stores, strict=True):
        if s.config.dledger:
            _drop_stale_index(f)
    return facts


# the rules that decide how the walk reads a record: versions equal in these walk a store alike
_WALK_RULES = ("v2_magic", "ipv6_hosts", "new_properties_parser", "prop_crc", "body_limit_only", "record_slack")


def _facts_before_walk(st: Store, check_crc: bool | None) -> RecoveryFacts:
    """Everything recovery reads before the commit log walk (§8.1 steps 1-5) and where the walk starts."""
    cfg = st.config
    rules = rules_for(cfg.broker)
    check = cfg.check_crc_on_recover if check_crc is None else check_crc
    # 1. lastExitOK, and the commit log files as the broker loads them (§2.4).
    abort = st.abort_exists()
    segs, empty_last, notes = _loaded_commitlog(st, Path(st.root))
    # 2.-3. consume queues (loaded), checkpoint.
    try:
        cp_file: bytes | None = read_file(cfg.checkpoint_path)
    except FileNotFoundError:
        cp_file = None
    cp_bytes = None if cp_file is None else checkpoint_page(cp_file)
    cp = cpmod.decode(cp_bytes) if cp_bytes is not None else cpmod.Checkpoint(0, 0, 0)
    if cp_bytes is None:
        notes.append("no checkpoint file: the broker creates a zeroed one")
    # 4. index files: abnormal exit destroys those newer than indexMsgTimestamp (§5.5).
    kept, dropped_index = _index_files_kept(st, abort, cp)
    last_index_end = -1
    if kept:
        with map_file(kept[-1]) as buf:
            last_index_end = ix.decode_header(buf).end_phy_offset
    # 5. every consume queue's own recovery (§8.4).
    queues = {(q.topic, q.queue_id): recover_queue(q) for q in st.consume_queues.queues()}
    batch = [q.recover() for q in st.batch_queues.queues()]
    batch_max = max((q.max_physic_offset for q in batch), default=-1)
    max_cq = max(max((q.max_physic_offset for q in queues.values()), default=-1), batch_max)
    # 6. the commit log: normal (§8.2) or abnormal (§8.3) recovery.
    start_idx, start_why = walk_start(segs, abort, cp, cfg, rules, max_cq)
    facts = RecoveryFacts(
        rules, check, abort, segs, empty_last, notes, cp_bytes, cp, kept, dropped_index, last_index_end, queues,
        max_cq, batch_cq_topics(cfg), batch_max, start_idx, start_why, RecoveryEnd(0), CqCheck(), KeptColumns(),
        cp_file, batch,
    )  # fmt: skip
    facts.end = RecoveryEnd(facts.start_phy)
    facts.cq_check = CqCheck(skip=facts.batch_topics)
    return facts


def _walk_shared(
    cfg: StoreConfig,
    group: list[RecoveryFacts],
    progress: Callable[[int], None] | None,
    keep_columns: bool,
) -> None:
    """One recovery walk from the earliest start of ``group``; each version takes the files from its own start."""
    first = group[0]
    segs, rules, check = first.segs, first.rules, first.check_crc
    start = min(f.start_idx for f in group)
    sink = KeptColumns() if keep_columns else None
    topics = TopicIds()
    walked = recovery_walk(segs, start, cfg, rules, check, topics, progress, sink) if segs else iter(())
    for i, w in enumerate(walked, start):
        for f in group:
            if f.start_idx <= i:
                f.end.add(w, f.last_index_end, f.max_cq)
                f.cq_check.add(w, topics, f.queues, f.rules, f.abort or cfg.dledger, f.max_cq)  # DLedger: re-dispatched
    for f in group:
        f.topic_names = tuple(topics.names)
        if f.start_idx == start and sink is not None:
            f.fused_columns = sink


def _drop_stale_index(f: RecoveryFacts) -> None:
    """DLedger mode: index files holding keys of records at or past the recovered end are dropped and
    their records indexed again (an index file's keys cannot be removed one by one)."""
    ends = []
    for p in f.kept_index:
        with map_file(p) as buf:
            ends.append(ix.decode_header(buf).end_phy_offset)
    first = next((i for i, e in enumerate(ends) if e >= f.process_offset), None)
    if first is None:
        return
    for p in f.kept_index[first:]:
        why = f"holds keys of records at or past the recovered end {f.process_offset}"
        f.dropped_index.append((p, why, False))
    f.kept_index = f.kept_index[:first]
    f.last_index_end = ends[first - 1] if first else -1
    f.reindex = True
