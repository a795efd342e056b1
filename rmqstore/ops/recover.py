"""Offline crash recovery, the broker's own (store-format.md §8, §2.4, §4.4, §5.5, §6, §7).

:func:`plan_recover` only reads. It decides what the broker would do when it opens the store:
the path (``abort`` present: abnormal, §8.3; absent: normal, §8.2), where the valid commit log
ends (``processOffset``), the byte ranges and files the broker's truncation drops (§8.5), the
consume queue tails its per-queue recovery cuts (§8.4), the index files it destroys (§5.5),
what it re-dispatches, and the checkpoint it writes at shutdown (§6). It also says what the
broker's way loses, decoding the records it drops.

:func:`apply_recover` carries out exactly that plan, step by step, under a journal
(``<root>/.rmqstore/recover.journal.json``). Every byte range and file it removes is first
copied to a quarantine folder with a manifest saying how to put it back. Each step is
idempotent, so a run killed at any point and run again finishes with the same files; a run
that finds a journal resumes it and never re-plans from a half-modified store.

Two deliberate differences from the broker, both compatible with it: truncated tails are
zeroed (the broker only moves its write position, leaving stale bytes it may read again after
a second crash), and index files that cannot be index files (wrong size, impossible header) are
removed rather than served. ``correctMinOffset`` and the topic queue table (§8.1 step 7) live
in the broker's memory only and are recomputed from the files at every start: nothing to write.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.codec import indexfile as ix
from rmqstore.codec.dledger import DLEDGER, HEADER_SIZE, INDEX_UNIT_SIZE, decode_header, header_problem
from rmqstore.codec.topic import skipped_lines
from rmqstore.dispatch.cut import (
    Removal,
    checkpoint_bytes,
    checkpoint_values,
    commitlog_cuts,
    cut_queue_tails,
    in_store,
    queue_removal,
    remove,
)
from rmqstore.dispatch.dispatcher import Dispatcher, DispatchStats
from rmqstore.dispatch.multiqueue import dispatch_extra, predicted_skips
from rmqstore.errors import CorruptData, InputError, RmqstoreError, from_os_error
from rmqstore.rules import BrokerRules, rules_for
from rmqstore.safety.actions import PlannedAction, StepFailed
from rmqstore.safety.files import (
    SCRATCH_DIR,
    atomic_write,
    fsync_dir,
    fsync_file,
    move,
    scratch_dir,
    sha256_file,
    unlink_if_present,
    zero_range,
)
from rmqstore.safety.journal import Journal, Resumed, StepHook, journal_file, register
from rmqstore.safety.openfile import create_sized, json_loads, kind_of, open_fd, read_file, reserve
from rmqstore.safety.plan import JsonModel
from rmqstore.safety.quarantine import Quarantine, check_quarantine_dir, default_quarantine_base
from rmqstore.store import Store
from rmqstore.store.detect import candidate_versions, plan_for_detected
from rmqstore.store.dledger import DLedgerIndex, read_member
from rmqstore.store.files import data_end, map_file, run_together
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.store.queue.batchconsumequeue import batch_cq_topics
from rmqstore.store.queue.interface import ConsumeQueueStore, QueueRecovery
from rmqstore.store.queue.kinds import consume_queue_store
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueues
from rmqstore.walk.checked import keep_dispatch_columns, take_dispatch_columns
from rmqstore.walk.columns import iter_columns
from rmqstore.walk.dledger import ENTRY, index_repair, iter_entries, kept_entries, member_checkpoint, unit_bytes
from rmqstore.walk.recovery import (
    LostRecord,
    RecoveryFacts,
    read_checkpoint_bytes,
    recovery_facts,
    recovery_facts_for,
    refuse_unrecoverable,
    rel_path,
    short_last_file,
)
from rmqstore.walk.requests import ScanStop, iter_requests

Clock = Callable[[], int] | None  # the store time in ms (default: the system clock)
Progress = Callable[[int], None] | None  # called with the bytes done since the last call
JOURNAL_FORMAT = 1
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------
# Version differences (§8.6), decided in one place.


def broker_rules(broker: str) -> BrokerRules:
    """The version-dependent decisions of recovery (see :mod:`rmqstore.rules`)."""
    return rules_for(broker)


# ---------------------------------------------------------------------------------------------
# Plan


@dataclass(frozen=True, slots=True)
class Loss(JsonModel):
    """Something the broker's recovery loses (or leaves missing), and what repairs it."""

    what: str  # "index-keys" | "cq-entries" | "index-entries" | "records"
    count: int
    detail: str
    repaired_by: str | None = None
    examples: tuple[LostRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class Redispatch(JsonModel):
    """Records dispatched into the consume queues and index (the broker's abnormal recovery walk)."""

    from_phy: int
    to_phy: int
    records: int
    consume_queue: bool
    index: bool
    only_after_phy: int | None = None  # 5.3.2+ normal recovery: only records past the CQ maximum
    last_cq_timestamp_ms: int = 0  # store time of the last NOT/COMMIT record: checkpoint logics value

    json_keys = (
        "from_phy=fromPhyOffset to_phy=toPhyOffset records consume_queue index only_after_phy=onlyAfterPhyOffset "
        "last_cq_timestamp_ms=lastConsumeQueueTimestamp"
    )


@dataclass(frozen=True, slots=True)
class QueueEnd:
    """Where a consume queue's valid entries end once the broker's recovery has cut it (§8.4)."""

    topic: str
    queue_id: int
    last_file: str | None  # segment holding the end (None: no file left)
    end_pos: int  # byte position of the end in that file

    def to_json(self) -> list[Any]:
        return [self.topic, self.queue_id, self.last_file, self.end_pos]

    @classmethod
    def from_json(cls, d: list[Any]) -> QueueEnd:
        return cls(d[0], d[1], d[2], d[3])


@dataclass(frozen=True, slots=True)
class MemberRepair(JsonModel):
    """A DLedger store's member after recovery: the entries kept, and its checkpoint file."""

    checkpoint: str  # the member checkpoint file, relative to the store root when inside it
    begin_index: int  # ledgerBeginIndex: the first entry kept
    end_index: int  # ledgerEndIndex: the last entry kept (-1: none)
    checkpoint_before: str | None  # dledger-<id>/checkpoint as found (None: no file)
    checkpoint_after: str | None  # what it becomes (None: it is right already)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RecoverPlan(JsonModel):
    """Everything ``recover`` will do to one store, decided before anything is written."""

    operation: ClassVar[str] = "recover"
    json_keys = (
        "root=store broker=brokerVersion path reason check_crc=checkCRC start_file start_phy=startPhyOffset "
        "min_phy=minPhyOffset process_offset stop max_phy_offset_cq=maxPhyOffsetOfConsumeQueue truncate_logic_files "
        "actions dispatch=redispatch rebuild_consume_queue rebuild_index queue_ends index_files_kept "
        "checkpoint_before checkpoint_after checkpoint_index_from_dispatch=checkpointIndexFromRedispatch "
        "write_checkpoint remove_abort losses=brokerLosses notes quarantine_dir=quarantine created_ms=createdAt "
        "member=dledgerMember"
    )

    root: str
    broker: str
    path: str  # "normal" | "abnormal"
    reason: str
    check_crc: bool
    start_file: str | None
    start_phy: int
    min_phy: int  # first commit log file start
    process_offset: int  # where valid commit log data ends (the broker's processOffset)
    stop: str  # why the walk ended there
    max_phy_offset_cq: int  # maxPhyOffsetOfConsumeQueue after the queues' own recovery
    truncate_logic_files: bool  # maxPhyOffsetOfConsumeQueue >= processOffset
    actions: tuple[Removal, ...]
    dispatch: Redispatch | None
    rebuild_consume_queue: bool
    rebuild_index: bool
    queue_ends: tuple[QueueEnd, ...]  # consume queue state before the re-dispatch
    index_files_kept: tuple[str, ...]  # index files left after the deletions, before the re-dispatch
    checkpoint_before: dict[str, int] | None
    checkpoint_after: dict[str, int]
    checkpoint_index_from_dispatch: bool  # indexMsgTimestamp settles when the re-dispatch fills a file
    write_checkpoint: bool
    remove_abort: bool
    losses: tuple[Loss, ...]
    notes: tuple[str, ...]
    quarantine_dir: str | None
    created_ms: int
    member: MemberRepair | None = None  # DLedger mode: the member's index and checkpoint

    # -- derived -------------------------------------------------------------------------
    def steps(self) -> list[str]:
        """The steps apply_recover runs, in order (numbered from 1 by the kill hooks)."""
        out: list[str] = []
        have = {a.step for a in self.actions}
        member_cp = self.member is not None and self.member.checkpoint_after is not None
        if self.quarantine_dir is not None and (self.actions or self.write_checkpoint or self._rebuilds() or member_cp):
            out.append("quarantine")
        for s in ("cq-recover", "index-delete", "extend"):
            if s in have:
                out.append(s)
        if self.dispatch is not None:
            out.append("dispatch")
        for s in ("commitlog-truncate", "cq-truncate", "dledger-index"):
            if s in have:
                out.append(s)
        if self._rebuilds():
            out += ["rebuild", "swap"]
        if self.write_checkpoint:
            out.append("checkpoint")
        if member_cp:
            out.append("member-checkpoint")
        if self.remove_abort:
            out.append("abort")
        return out

    def _rebuilds(self) -> bool:
        return self.rebuild_consume_queue or self.rebuild_index

    @property
    def is_empty(self) -> bool:
        return not self.steps()

    @property
    def records_lost(self) -> int:
        return sum(a.records_total for a in self.actions if a.kind == "commitlog")

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        """The plan in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
        root = Path(self.root)
        kept = self.quarantine_dir is not None
        out = [
            PlannedAction(
                "recover",
                a.verb,
                in_store(root, a.path),
                a.why,
                None if a.verb == "delete" else a.from_pos,
                None if a.verb == "delete" else a.to_pos,
                a.size,
                kept and a.verb != "extend",
            )
            for a in self.actions
        ]
        for part, on in (("consumequeue", self.rebuild_consume_queue), ("index", self.rebuild_index)):
            if on:
                out.append(PlannedAction("recover", "replace", root / part, "rebuilt from the commit log", kept=kept))
        if self.write_checkpoint:
            out.append(
                PlannedAction("recover", "rewrite", root / "checkpoint", "the values the broker writes", kept=kept)
            )
        if self.member is not None and self.member.checkpoint_after is not None:
            why = f"endIndex and committedIndex at the last entry kept ({self.member.end_index})"
            out.append(PlannedAction("recover", "rewrite", in_store(root, self.member.checkpoint), why, kept=kept))
        if self.remove_abort:
            out.append(PlannedAction("recover", "delete", root / "abort", "the store is consistent again"))
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        """The facts the actions do not carry: the path taken, where the commit log ends, what is lost."""
        d = self.dispatch
        return {
            "path": self.path,
            "reason": self.reason,
            "startFile": self.start_file,
            "processOffset": self.process_offset,
            "stop": self.stop,
            "checkCrc": self.check_crc,
            "redispatchRecords": d.records if d else 0,
            "redispatchRange": f"phy {d.from_phy}..{d.to_phy}" if d else "none",
            "checkpoint": self._checkpoint_line(),
            "recordsLost": self.records_lost,
            **({"dledgerEntries": self._member_line()} if self.member is not None else {}),
            "quarantine": self.quarantine_dir or "none: removed bytes are not kept",
            "steps": self.steps(),
            "createdAt": self.created_ms,
        }

    def _member_line(self) -> str:
        m = self.member
        assert m is not None
        kept = "none kept" if m.end_index < 0 else f"{m.begin_index}..{m.end_index} kept"
        units = sum(1 for a in self.actions if a.kind == "dledger-index")
        cp = "checkpoint unchanged" if m.checkpoint_after is None else "checkpoint endIndex/committedIndex set"
        return f"{kept}; {units} index change(s); {cp}"

    def _checkpoint_line(self) -> str:
        keys = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")
        b = "missing" if self.checkpoint_before is None else "/".join(str(self.checkpoint_before[k]) for k in keys)
        if not self.write_checkpoint:
            return f"unchanged ({b})"
        pending = " (index time set by the re-dispatch)" if self.checkpoint_index_from_dispatch else ""
        return f"{b} -> {'/'.join(str(self.checkpoint_after[k]) for k in keys)}{pending}"

    def details(self) -> dict[str, list[dict[str, Any]]]:
        """The records the truncation removes, and what the broker's way loses."""
        lost = [r.to_json() | {"file": a.path} for a in self.actions for r in a.records]
        losses = [
            {"what": x.what, "count": x.count, "repairedBy": x.repaired_by, "detail": x.detail} for x in self.losses
        ]
        return {"recordsRemoved": lost, "losses": losses}

    def to_json(self) -> dict[str, Any]:
        # "steps" and "recordsLost" are derived: from_json does not read them back
        return {**JsonModel.to_json(self), "steps": self.steps(), "recordsLost": self.records_lost}


# ---------------------------------------------------------------------------------------------
# Small file helpers


# ---------------------------------------------------------------------------------------------
# Consume queue recovery (§8.4) and truncateDirtyLogicFiles (§8.5)


def _cq_recover_actions(root: Path, q: QueueRecovery) -> list[Removal]:
    """The queue's own ``truncateDirtyFiles`` after its recovery (§8.4)."""
    whys = {
        "zero": f"entries after the first invalid entry of {q.topic}/{q.queue_id} (§8.4)",
        "delete": f"past the last valid entry of {q.topic}/{q.queue_id} (§8.4)",
    }
    return [queue_removal(root, "cq-recover", c, whys[c.verb]) for c in q.cuts]


def _cq_truncate_actions(root: Path, q: QueueRecovery, process_offset: int) -> list[Removal]:
    """``truncateDirtyLogicFiles(processOffset)`` on one queue (§8.5), on the files its recovery left."""
    whys = {
        "delete": f"first entry of {q.topic}/{q.queue_id} points at or past processOffset {process_offset} (§8.5)",
        "zero": f"entries of {q.topic}/{q.queue_id} pointing at or past processOffset {process_offset} (§8.5)",
    }
    return [queue_removal(root, "cq-truncate", c, whys[c.verb]) for c in q.queue.truncate_dirty(process_offset, q)]


# ---------------------------------------------------------------------------------------------
# Index files (§5.5)


def _index_entries_phy(path: Path, cfg: StoreConfig) -> np.ndarray:
    with map_file(path) as buf:
        f = ix.IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path))
        arr = f.entries_array()
        return np.array(arr["phy_offset"][1:], dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Checkpoint (§6)


# ---------------------------------------------------------------------------------------------
# Planning


def default_quarantine(root: Path, now_ms: int) -> Path:
    """``<store parent>/<store name>.quarantine``; each run gets a fresh ``recover-<UTC time>`` folder inside."""
    return default_quarantine_base(root)


def _commitlog_cut_actions(
    root: Path, segs: list[Segment], process_offset: int, stop: str, broker: str
) -> list[Removal]:
    """``truncateDirtyFiles(processOffset)`` on the commit log (§8.5), with the records it drops."""
    return commitlog_cuts(root, segs, process_offset, broker, mark=f"processOffset {process_offset}", stop=stop)


def _check_plannable(st: Store, rebuild_index: bool) -> None:
    refuse_unrecoverable(st)
    if rebuild_index and not st.config.message_index_enable:
        raise InputError("--rebuild-index: messageIndexEnable is false in the broker config, nothing to rebuild")


def _queue_actions(root: Path, f: RecoveryFacts) -> list[Removal]:
    """Each consume queue's own recovery (§8.4), or every queue destroyed when no commit log is left."""
    out: list[Removal] = []
    for q in f.queues.values():
        if not f.destroy_logics:
            out += _cq_recover_actions(root, q)
            continue
        why = "no commit log file: the broker destroys every consume queue"
        out += [queue_removal(root, "cq-truncate", c, why) for c in q.queue.destroy()]
        q.kept = []
    return out


def _queue_ends(f: RecoveryFacts) -> list[QueueEnd]:
    out = []
    for (topic, qid), q in sorted(f.queues.items()):
        last = q.kept[-1] if q.kept else None
        out.append(QueueEnd(topic, qid, last.path.name if last else None, q.end - last.base_offset if last else 0))
    return out


def _plan_dispatch(f: RecoveryFacts, cfg: StoreConfig, want_cq: bool, want_ix: bool) -> Redispatch | None:
    """The re-dispatch of the abnormal walk (5.3.2+: of the normal walk past the CQ maximum); in DLedger
    mode, of every record whose consume queue entry or index keys are missing (the engines dispatch
    only from the consume queues' end, 5.x only past the committed position)."""
    po, start, e = f.process_offset, f.start_phy, f.end
    if not f.segs or po <= start or not (want_cq or want_ix):
        return None
    missing = (want_cq and f.cq_check.missing > 0) or (want_ix and (e.not_indexed > 0 or f.reindex))
    if f.abort or (cfg.dledger and missing):
        return Redispatch(start, po, e.records, want_cq, want_ix, None, e.last_cq_ts)
    if f.rules.normal_dispatch_beyond_cq and f.max_cq < po:  # nothing past the CQ maximum: no-op
        return Redispatch(start, po, e.records, want_cq, want_ix, f.max_cq, e.last_cq_ts_after_cq)
    return None


def _index_tail_action(root: Path, cfg: StoreConfig, last: Path) -> Removal | None:
    """The re-dispatch appends to the last index file. Bytes past its indexCount are never read;
    zero them first so that a re-dispatch killed half way can be rolled back exactly."""
    with map_file(last) as buf:
        h = ix.decode_header(buf)
    used = ix.HEADER_SIZE + cfg.max_hash_slot_num * 4 + max(h.index_count, 1) * ix.ENTRY_SIZE
    end = data_end(last, used)
    if end <= used:
        return None
    return Removal(
        "index-delete",
        "zero",
        "index",
        rel_path(root, last),
        used,
        end,
        "stale bytes after the last entry (indexCount)",
    )


def _plan_checkpoint(
    f: RecoveryFacts, cfg: StoreConfig, dispatch: Redispatch | None, rebuild_index: bool, rebuild_cq: bool
) -> tuple[dict[str, int] | None, dict[str, int], bool, bool]:
    """The checkpoint the broker leaves at shutdown (§6): physic unchanged (nothing is flushed),
    logics = store time of the last record dispatched to a consume queue, index = end time of
    the last index file that filled up during the re-dispatch.

    Returns (before, after, index settled by the re-dispatch, whether to write it).
    """
    before = checkpoint_values(f.cp) if f.cp_bytes is not None else None
    after = checkpoint_values(f.cp)
    if cfg.dledger and 0 < f.end.last_ts < after["physicMsgTimestamp"]:
        after["physicMsgTimestamp"] = f.end.last_ts  # records after it were cut: the last one kept is flushed
    if dispatch is not None and dispatch.consume_queue and dispatch.last_cq_timestamp_ms:
        after["logicsMsgTimestamp"] = dispatch.last_cq_timestamp_ms
    index_pending = (dispatch is not None and dispatch.index) or rebuild_index
    current = f.cp_file
    write_cp = current is None or checkpoint_bytes(f.cp_bytes, after) != current
    write_cp = write_cp or index_pending or rebuild_cq
    if write_cp and f.rules.checkpoint_confirm_offset and f.end.last_record >= 0:
        after["confirmPhyOffset"] = f.end.last_record  # set by recovery, written by the shutdown flush
    return before, after, index_pending, write_cp


def _plan_actions(
    root: Path, f: RecoveryFacts, cfg: StoreConfig, rebuild_index: bool, rebuild_cq: bool
) -> list[Removal]:
    """The removals in the broker's order: empty last file, index files, consume queues' own recovery,
    then ``truncateDirtyFiles`` and ``truncateDirtyLogicFiles(processOffset)`` (§8.4, §8.5)."""
    actions: list[Removal] = []
    if f.empty_last is not None:
        actions.append(
            Removal(
                "commitlog-truncate", "delete", "commitlog", rel_path(root, f.empty_last.path), 0, 0, "empty last file"
            )
        )
    if not rebuild_index:
        for p, why, _garbage in f.dropped_index:
            actions.append(Removal("index-delete", "delete", "index", rel_path(root, p), 0, p.stat().st_size, why))
    if not rebuild_cq:
        actions += _queue_actions(root, f)
    short = {"blank": "a blank ends the last file", "end": "end of data", "invalid": "invalid record"}
    actions += _commitlog_cut_actions(root, f.segs, f.process_offset, short.get(f.end.reason, "end"), cfg.broker)
    return actions


def plan_recover(
    st: Store,
    *,
    now_ms: int,
    check_crc: bool | None = None,
    rebuild_index: bool = False,
    rebuild_consume_queue: bool = False,
    quarantine: Path | None = None,
    use_quarantine: bool = True,
    progress: Callable[[int], None] | None = None,
    keep_columns: bool = True,
    facts: RecoveryFacts | None = None,
) -> RecoverPlan:
    """Decide what the broker's recovery does to this store (reads only; §8.1 order).

    ``now_ms`` names the quarantine folder; ``check_crc`` overrides ``checkCRCOnRecover``;
    ``keep_columns`` keeps the walked records' dispatch columns for ``apply_recover`` in this process
    (a dry run does not); ``facts``: this store's recovery facts, already walked (``plan_recover_detected``).
    """
    cfg = st.config
    root = Path(st.root)
    _check_plannable(st, rebuild_index)
    f = facts or recovery_facts(st, check_crc=check_crc, progress=progress, keep_columns=keep_columns)
    rebuild_consume_queue, in_place_cq = _database_rebuild(st, f, rebuild_consume_queue)
    actions = _plan_actions(root, f, cfg, rebuild_index, rebuild_consume_queue)
    queue_ends = _queue_ends(f)
    if f.truncate_logic and not rebuild_consume_queue:
        actions += [a for _key, q in sorted(f.queues.items()) for a in _cq_truncate_actions(root, q, f.process_offset)]
        actions += _batch_cut_actions(root, f)
    want_cq = in_place_cq and not rebuild_consume_queue
    dispatch = _plan_dispatch(f, cfg, want_cq, cfg.message_index_enable and not rebuild_index)
    if dispatch is not None and dispatch.only_after_phy is None and f.fused_columns:
        keep_dispatch_columns(root, f.segs, f.start_phy, f.process_offset, f.fused_columns)
    indexing = dispatch is not None and dispatch.index and f.kept_index
    tail = _index_tail_action(root, cfg, f.kept_index[-1]) if indexing else None
    actions += [tail] if tail is not None else []
    member_actions, member = _plan_member(root, st, f)
    actions += member_actions
    losses = [x for x in _losses(f, cfg, actions) if not (rebuild_consume_queue and x.what == "cq-entries")]
    before, after, index_pending, write_cp = _plan_checkpoint(f, cfg, dispatch, rebuild_index, rebuild_consume_queue)
    qdir = _quarantine_for(root, cfg, quarantine, now_ms) if use_quarantine else None
    start_file = f.segs[f.start_idx].path.name if f.segs else None
    skips = (
        predicted_skips(st, dispatch.from_phy, dispatch.to_phy, f.topic_names)
        if dispatch and dispatch.consume_queue
        else []
    )
    plan = RecoverPlan(
        root=str(root),
        broker=cfg.broker,
        path="abnormal" if f.abort else "normal",
        reason="abort file present: the last shutdown was not clean" if f.abort else "no abort file: clean shutdown",
        check_crc=f.check_crc,
        start_file=start_file,
        start_phy=f.start_phy,
        min_phy=f.segs[0].base_offset if f.segs else 0,
        process_offset=f.process_offset,
        stop=f.stop,
        max_phy_offset_cq=f.max_cq,
        truncate_logic_files=f.truncate_logic,
        actions=tuple(actions),
        dispatch=dispatch,
        rebuild_consume_queue=rebuild_consume_queue,
        rebuild_index=rebuild_index,
        queue_ends=tuple(queue_ends),
        index_files_kept=tuple(p.name for p in f.kept_index),
        checkpoint_before=before,
        checkpoint_after=after,
        checkpoint_index_from_dispatch=index_pending,
        write_checkpoint=write_cp,
        remove_abort=f.abort,
        losses=tuple(losses),
        notes=(*f.notes, *skipped_lines([q.to_json() for q in skips])),
        quarantine_dir=qdir,
        created_ms=now_ms,
        member=member,
    )
    refuse_obstacles(plan.planned_actions())
    return plan


def _quarantine_for(root: Path, cfg: StoreConfig, quarantine: Path | None, now_ms: int) -> str:
    """The quarantine folder of a run: the one given, or a fresh one named by ``now_ms``; never inside
    a folder the run changes."""
    qpath = Path(quarantine) if quarantine is not None else default_quarantine(root, now_ms)
    check_quarantine_dir(qpath, [cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir, cfg.store_root / SCRATCH_DIR])
    return str(qpath.resolve())


def refuse_obstacles(actions: tuple[PlannedAction, ...]) -> None:
    """Refuse, before the first change, a plan whose file actions meet something else than a regular
    file (``abort`` as a directory): the step would fail halfway through a run."""
    for a in actions:
        if a.verb == "replace" or not os.path.lexists(a.path) or a.path.is_file():
            continue
        kind = kind_of(a.path.lstat().st_mode) or "not a regular file"
        raise CorruptData(
            f"is {kind}; a regular file was expected ({a.verb}: {a.why}); nothing was changed",
            path=a.path,
            pos=0,
        )


def plan_recover_detected(
    st: Store,
    *,
    check_crc: bool | None = None,
    progress: Callable[[int], None] | None = None,
    keep_columns: bool = True,
    **options: Any,
) -> RecoverPlan:
    """``plan_recover`` under the store's version, or under every family it could be when detection
    leaves several (they must agree: ``plan_for_detected``), with one walk of the commit log for all."""
    det = st.config.detection
    versions = [st.config.broker] if det is None or det.settled else candidate_versions(det)
    stores = [dataclasses.replace(st, config=dataclasses.replace(st.config, broker=v)) for v in versions]
    _check_plannable(st, bool(options.get("rebuild_index")))
    walked = recovery_facts_for(stores, check_crc=check_crc, progress=progress, keep_columns=keep_columns)
    facts = dict(zip(versions, walked, strict=True))

    def plan(s: Store) -> RecoverPlan:
        return plan_recover(s, check_crc=check_crc, keep_columns=keep_columns, facts=facts[s.config.broker], **options)

    return plan_for_detected(st, plan, "recover")


def _database_rebuild(st: Store, f: RecoveryFacts, rebuild: bool) -> tuple[bool, bool]:
    """(rebuild the consume queues, re-dispatch into them in place). The engine serves what a RocksDB database
    says and re-dispatches from its checkpoint row: a database out of line with the commit log is rebuilt
    whole beside the store (the old one to the quarantine), never changed in place."""
    queues = st.consume_queues
    if not isinstance(queues, RocksDBConsumeQueues):
        return rebuild, True
    why = None if rebuild else queues.out_of_line(f.process_offset)
    if why is not None:
        f.notes.append(f"the consume queue database {why}: it is rebuilt from the valid commit log and the old "
                       "database goes to the quarantine whole")  # fmt: skip
    return rebuild or why is not None, False


def _refuse_cut_entries(st: Store, f: RecoveryFacts) -> None:
    """A damaged DLedger entry is cut only as the log's torn tail: intact entries in a later data file
    mean the damage is inside the log, and cutting there would drop them all."""
    if f.end.reason != "invalid":
        return
    po = f.process_offset
    here = next((s for s in f.segs if s.base_offset <= po < s.end_offset), None)
    if here is None or here.framing is not DLEDGER:
        return
    later = next((e for s in f.segs if s.base_offset > po for e in iter_entries([s]) if e.kind == ENTRY), None)
    if later is None:
        return
    why = f.end.stop
    with map_file(here.path) as buf:
        if po - here.base_offset + HEADER_SIZE <= len(buf):
            head = decode_header(buf, po - here.base_offset)
            why = header_problem(head, po, here.end_offset - po) or why
    raise CorruptData(
        f"{why}; intact DLedger entries follow (entry {later.header.index if later.header else '?'} in "
        f"{later.seg.path.name}): this is not a torn tail, and recover does not cut intact entries",
        path=here.path,
        pos=po - here.base_offset,
        phy_offset=po,
    )


def _plan_member(root: Path, st: Store, f: RecoveryFacts) -> tuple[list[Removal], MemberRepair | None]:
    """DLedger mode: a short last data file filled up, the member's index holding one unit per entry
    kept and none after (DLedger's own recovery rewrites units that disagree and truncates the rest),
    and its checkpoint's endIndex and committedIndex at the last entry kept, so that the engine
    serves every kept entry (it serves none past the committed index)."""
    cfg = st.config
    if not cfg.dledger:
        return [], None
    _refuse_cut_entries(st, f)
    out: list[Removal] = []
    short = short_last_file(st, f.segs)
    if short is not None:
        why = f"{short.size} bytes, not mappedFileSizeCommitLog {cfg.commitlog_file_size}: DLedger does not load it"
        out.append(Removal("extend", "extend", "commitlog", rel_path(root, short.path), short.size,
                          cfg.commitlog_file_size, why))  # fmt: skip
    kept = kept_entries(f.segs, f.process_offset)
    with DLedgerIndex(cfg) as index:
        for seg in index.segments:
            if 0 < seg.size < index.file_size:
                why = f"{seg.size} bytes, not the {index.file_size} bytes of the other index files"
                out.append(Removal("extend", "extend", "dledger-index", rel_path(root, seg.path), seg.size,
                                  index.file_size, why))  # fmt: skip
        write, zero, drop = index_repair(index, kept)
    for u in write:
        why = "units that disagree with their entries" if u.exists else "units missing (no index file)"
        out.append(Removal("dledger-index", "rewrite", "dledger-index", rel_path(root, u.path), u.start, u.end, why,
                          entries_total=(u.end - u.start) // INDEX_UNIT_SIZE))  # fmt: skip
    after = f"after the last entry kept ({kept.last_index})"
    for u in zero:
        out.append(Removal("dledger-index", "zero", "dledger-index", rel_path(root, u.path), u.start, u.end,
                          f"units {after}", entries_total=(u.end - u.start) // INDEX_UNIT_SIZE))  # fmt: skip
    for p in drop:
        out.append(Removal("dledger-index", "delete", "dledger-index", rel_path(root, p), 0, p.stat().st_size,
                          f"index file {after}"))  # fmt: skip
    before, cp_after = member_checkpoint(read_member(cfg), kept.last_index)
    peers = [p for p in cfg.dleger_peers.split(";") if p.strip()]
    notes = (
        (f"dLegerPeers names {len(peers)} members: the leader's log decides what the group keeps",)
        if len(peers) > 1
        else ()
    )
    cp = rel_path(root, cfg.dledger_checkpoint_path)
    return out, MemberRepair(cp, kept.begin_index, kept.last_index, before, cp_after, notes)


def _batch_cut_actions(root: Path, f: RecoveryFacts) -> list[Removal]:
    """BatchConsumeQueue.truncateDirtyLogicFiles: units at or past ``process_offset`` are cut (§8.5)."""
    process_offset, out = f.process_offset, []
    for q in f.batch_queues:
        why = f"batch units of {q.topic}/{q.queue_id} pointing at or past processOffset {process_offset} (§8.5)"
        out += [queue_removal(root, "cq-truncate", c, why) for c in q.queue.truncate_dirty(process_offset, q)]
    return out


def _losses(f: RecoveryFacts, cfg: StoreConfig, actions: list[Removal]) -> list[Loss]:
    """What the broker's way loses (or leaves missing), and what repairs it."""
    rules, cq, start_phy, process_offset = f.rules, f.cq_check, f.start_phy, f.process_offset
    path, last_index_end, not_indexed = ("abnormal" if f.abort else "normal"), f.last_index_end, f.end.not_indexed
    out: list[Loss] = []
    walked = f"records between phy offsets {start_phy} and {process_offset}"
    if cq.missing:
        lost = cq.missing - cq.fixed
        if path == "abnormal" or cfg.dledger:
            detail = f"{cq.missing} {walked} have no consume queue entry: the re-dispatch adds {cq.fixed}"
        elif rules.start_catches_up:
            detail = f"{cq.missing} {walked} have no consume queue entry: the broker re-dispatches {cq.fixed} at start"
        else:
            detail = f"{cq.missing} {walked} have no consume queue entry: broker {cfg.broker} never re-dispatches them"
        if lost:
            detail += f"; {lost} stay missing"
        out.append(Loss("cq-entries", lost, detail, "--rebuild-consumequeue" if lost else None, tuple(cq.examples)))
    dispatched = rules.normal_dispatch_beyond_cq or cfg.dledger
    if path == "normal" and cfg.message_index_enable and not_indexed and not dispatched:
        if rules.start_catches_up:
            detail = (
                f"records after the last indexed offset {last_index_end} are indexed only from the consume "
                "queue maximum on, when the broker starts"
            )
        else:
            detail = (
                f"{not_indexed} records after the last indexed offset {last_index_end} get no index keys: "
                f"broker {cfg.broker} does not re-dispatch after a clean shutdown"
            )
        out.append(Loss("index-entries", not_indexed, detail, "--rebuild-index"))
    for p, why, garbage in f.dropped_index:
        if garbage:
            out.append(Loss("index-keys", 0, f"{p.name} ({why}): whatever keys it held", "--rebuild-index"))
            continue
        phys = _index_entries_phy(p, cfg)
        # The re-dispatch re-indexes records from the start file on, past the last kept file's end.
        gone = phys[(phys < start_phy) | (phys < last_index_end)]
        if len(gone):
            out.append(
                Loss(
                    "index-keys",
                    len(gone),
                    f"{p.name}: {len(gone)} keys of {len(np.unique(gone))} records stored before the re-dispatch "
                    f"start {start_phy} are not rebuilt",
                    "--rebuild-index",
                )
            )
    lost_records = sum(a.records_total for a in actions if a.kind == "commitlog")
    if lost_records:
        out.append(
            Loss(
                "records",
                lost_records,
                f"{lost_records} records at or after processOffset {process_offset} are dropped (kept in quarantine)",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Applying: a journal of steps, each idempotent


def pending_plan(root: Path) -> RecoverPlan | None:
    """The plan of an interrupted ``recover`` of this store, if its journal is there."""
    p = journal_file(root, "recover")
    try:
        data = json_loads(read_file(p), path=p)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise CorruptData(
            f"recover journal unreadable ({e}); remove it only if no recovery is half done", path=p, pos=0
        ) from None
    if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT:
        fmt = data.get("format") if isinstance(data, dict) else None
        raise CorruptData(f"recover journal format {fmt!r} is not {JOURNAL_FORMAT}", path=p, pos=0)
    return RecoverPlan.from_json(data["plan"])


@dataclass
class RecoverResult(JsonModel):
    json_keys = (
        "resumed steps_done=steps dispatch=redispatch rebuild checkpoint quarantine_dir=quarantine process_offset"
    )

    plan: RecoverPlan
    resumed: bool
    steps_done: list[str]
    dispatch: dict[str, Any] | None = None
    rebuild: dict[str, Any] | None = None
    checkpoint: dict[str, int] | None = None
    quarantine_dir: str | None = None

    exit_code = 0

    @property
    def process_offset(self) -> int:
        return self.plan.process_offset


def apply_recover(
    st: Store,
    plan: RecoverPlan,
    *,
    clock: Callable[[], int] | None = None,
    progress: Callable[[int], None] | None = None,
    on_step: StepHook | None = None,
) -> RecoverResult:
    """Carry out ``plan`` on a store opened writable; resumes the journal of an interrupted run.

    ``clock`` (epoch ms) names index files the re-dispatch creates, as the broker's clock does.
    ``on_step`` is called with ``recover:<step>`` after each step is durable (and with
    ``recover:<step>#1`` once inside the long steps). A step that fails leaves the journal, with
    the failure recorded, so the next run finishes once the obstacle is gone.
    """
    root = Path(st.root)
    if not st.writable:
        raise InputError("apply_recover needs a store opened with writable=True (the broker's lock held)")
    if Path(plan.root).resolve() != root.resolve():
        raise InputError(f"the plan is for {plan.root}, not {root}")
    jp = journal_file(root, "recover")
    journal = Journal.load(jp, on_step)
    resumed = journal is not None
    if journal is not None:
        if journal.data.get("plan") != plan.to_json():
            raise InputError(f"{jp}: an interrupted recovery with another plan is pending; resume that one first")
    else:
        journal = Journal(jp, {"format": JOURNAL_FORMAT, "operation": "recover", "plan": plan.to_json()}, on_step)
    steps = plan.steps()
    if not steps:
        return RecoverResult(plan, False, [])
    journal.save()
    hook = journal.hook
    for step in steps:
        if journal.done(step):
            continue
        try:
            _run_step(st, plan, journal, step, clock, progress)
        except BaseException as e:
            if not isinstance(e, Exception):
                raise
            # Bad data will not change by running again: undo what was done, from the quarantine.
            if isinstance(e, CorruptData) and _roll_back(st, plan, journal):
                raise StepFailed(f"{e}; recover rolled back every change it had made", exit_code=e.exit_code) from None
            journal.fail(step, e)
            raise _stopped(root, step, e) from None
        journal.mark(step)
    state = dict(journal.state)
    _finish(root)
    hook("recover:finished")
    return RecoverResult(
        plan,
        resumed,
        steps,
        state.get("dispatch"),
        state.get("rebuild"),
        state.get("checkpoint"),
        state.get("quarantine"),
    )


def _resume(st: Store, on_step: StepHook | None, progress: Progress) -> Resumed:
    """Finish the plan an interrupted run journaled."""
    plan = pending_plan(st.root)
    assert plan is not None  # the journal is there: resume() found it
    result = apply_recover(st, plan, progress=progress, on_step=on_step)
    where = f"; removed bytes are in {result.quarantine_dir}" if result.quarantine_dir else ""
    return Resumed("recover", f"resumed and finished: commit log ends at {plan.process_offset}{where}", result)


register("recover", _resume)


def _stopped(root: Path, step: str, e: Exception) -> RmqstoreError:
    """The error of a failed step, saying that the journal lets a re-run finish."""
    base: RmqstoreError = from_os_error(e) if isinstance(e, OSError) else e  # type: ignore[assignment]
    if not isinstance(base, RmqstoreError):
        base = RmqstoreError(f"{type(e).__name__}: {e}")
    again = f"`rmqstore recover {shlex.quote(str(root))}`"
    if isinstance(base, CorruptData):  # bad data with no quarantine to roll back from
        then = f"they cannot be undone without a quarantine: repair the data named, then run {again} again"
    else:
        then = f"remove the obstacle and run {again} again to finish"
    return StepFailed(
        f"recover stopped at step {step}: {base}; the steps before it are done and journaled: {then}",
        exit_code=base.exit_code,
    )


def _run_step(
    st: Store,
    plan: RecoverPlan,
    journal: Journal,
    step: str,
    clock: Callable[[], int] | None,
    progress: Callable[[int], None] | None,
) -> None:
    if step == "quarantine":
        _step_quarantine(st, plan, journal)
    elif step in ("cq-recover", "index-delete", "commitlog-truncate"):
        _step_remove(st, plan, step, journal.hook)
    elif step == "cq-truncate":
        _step_cq_truncate(st, plan, journal.hook)
    elif step == "extend":
        _step_extend(st, plan)
    elif step == "dledger-index":
        _step_dledger_index(st, plan, journal.hook)
    elif step == "member-checkpoint":
        _step_member_checkpoint(st, plan)
    elif step == "dispatch":
        _step_dispatch(st, plan, journal, clock, progress)
    elif step == "rebuild":
        _step_rebuild(st, plan, journal, clock, progress)
    elif step == "swap":
        _step_swap(st, plan, journal)
    elif step == "checkpoint":
        journal.set(checkpoint=_step_checkpoint(st, plan, journal))
    elif step == "abort":
        if unlink_if_present(st.config.abort_path):
            fsync_dir(st.config.abort_path.parent)


def _roll_back(st: Store, plan: RecoverPlan, journal: Journal) -> bool:
    """Put back every byte the steps done so far changed, from this run's quarantine; False when
    that cannot be done (no quarantine, or the swap of rebuilt directories has begun)."""
    root = Path(st.root)
    folder = journal.state.get("quarantine")
    if not journal.done("quarantine"):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        _finish(root)
        return True
    if not folder or journal.done("swap") or any(k.startswith("old:") for k in journal.state):
        return False
    if journal.state.get("dispatchStarted"):
        _rollback_dispatch(st, plan, journal)
    shutil.rmtree(_build_root(root), ignore_errors=True)
    manifest = Path(folder) / "manifest.json"
    items = json_loads(read_file(manifest), path=manifest)["items"]
    for item in reversed(items):
        path = Path(item["path"])
        if item["kind"] == "range":
            data = read_file(item["saved"])
            fd = open_fd(path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, int(item["from"]))
                os.fsync(fd)
            finally:
                os.close(fd)
        elif item["kind"] == "file" and (not path.exists() or sha256_file(path) != item["sha256"]):
            atomic_write(path, read_file(item["saved"]), tmp_dir=scratch_dir(root, "tmp"))
        elif item["kind"] == "marker" and not path.exists():
            path.touch()
            fsync_dir(path.parent)
    shutil.rmtree(folder, ignore_errors=True)
    _finish(root)
    return True


def _finish(root: Path) -> None:
    jp = journal_file(root, "recover")
    shutil.rmtree(jp.parent / "recover", ignore_errors=True)
    unlink_if_present(jp)
    for d in (jp.parent / "tmp", jp.parent):
        try:
            d.rmdir()  # only when nothing else uses the scratch directory
        except OSError:
            pass
    fsync_dir(root)


def _run_quarantine(st: Store, plan: RecoverPlan, journal: Journal) -> Quarantine | None:
    """This run's quarantine folder: a fresh one inside the plan's folder, kept in the journal."""
    if plan.quarantine_dir is None:
        return None
    folder = journal.state.get("quarantine")
    if folder:
        return Quarantine.resume(folder, "recover", st.root)
    q = Quarantine.fresh(plan.quarantine_dir, "recover", st.root, plan.created_ms)
    journal.set(quarantine=str(q.folder))
    return q


def _step_quarantine(st: Store, plan: RecoverPlan, journal: Journal) -> None:
    """Save every byte range and file the later steps remove, and a manifest to restore them."""
    root = Path(st.root)
    q = _run_quarantine(st, plan, journal)
    assert q is not None
    for i, a in enumerate(plan.actions):
        src = in_store(root, a.path)
        if a.verb == "delete":
            if src.exists():
                # Commit log and index files are never written before their deletion step: a hard
                # link is enough. Consume queue files may be, by the re-dispatch: copy them.
                q.save_file(src, a.why, link=a.kind != "consumequeue")
        elif a.verb == "extend" or not src.exists():
            _note_grown(q, src, a)
        else:
            q.save_range(src, a.from_pos, a.to_pos, a.why)
        if i == 0:
            journal.hook("recover:quarantine#1")
    if plan.member is not None and plan.member.checkpoint_after is not None:
        member_cp = in_store(root, plan.member.checkpoint)
        for p in (member_cp, _bak(member_cp)):
            if p.exists():
                q.save_file(p, "rewritten: endIndex and committedIndex at the last entry kept")
    cp_path = st.config.checkpoint_path
    if plan.write_checkpoint and cp_path.exists():
        q.save_file(cp_path, "rewritten with the values the broker writes at shutdown")
    for part, on in (("consumequeue", plan.rebuild_consume_queue), ("index", plan.rebuild_index)):
        if on:
            live = root / part
            saved = q.folder / "files" / part
            q.add(
                {
                    "kind": "directory",
                    "path": str(live.absolute()),
                    "saved": str(saved),
                    "why": "replaced by the one rebuilt from the commit log",
                    "restore": f"rm -rf {shlex.quote(str(live.absolute()))} && mv {shlex.quote(str(saved))} "
                    f"{shlex.quote(str(live.absolute()))}",
                }
            )
    if plan.remove_abort:
        ab = st.config.abort_path.absolute()
        q.note(ab, "removed: the store is consistent again", f"touch {shlex.quote(str(ab))}")
    q.write_manifest(processOffset=plan.process_offset)


def _note_grown(q: Quarantine, src: Path, a: Removal) -> None:
    """A file that grows or is created holds no bytes to keep: the manifest says how to undo it."""
    p = shlex.quote(str(src.absolute()))
    undo = f"truncate -s {a.from_pos} {p}" if a.verb == "extend" else f"rm -f {p}"
    kind = "extended" if a.verb == "extend" else "created"
    q.add({"kind": kind, "path": str(src.absolute()), "from": a.from_pos, "why": a.why, "restore": undo})


def _bak(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def _step_extend(st: Store, plan: RecoverPlan) -> None:
    """Fill up files shorter than their configured size with zeros (DLedger loads full-size files only)."""
    for a in (x for x in plan.actions if x.step == "extend"):
        p = in_store(Path(st.root), a.path)
        if p.exists() and p.stat().st_size < a.to_pos:
            fd = open_fd(p, os.O_RDWR)
            try:
                os.ftruncate(fd, a.to_pos)
                reserve(fd, 0, a.to_pos, p)
                os.fsync(fd)
            finally:
                os.close(fd)


def _step_dledger_index(st: Store, plan: RecoverPlan, hook: StepHook) -> None:
    """Zero the DLedger index units past the kept entries and delete the index files past them, then
    write the units the kept entries need (a range planned for rewriting is zeroed first: no matter)."""
    _step_remove(st, plan, "dledger-index", hook)
    rewrites = [a for a in plan.actions if a.step == "dledger-index" and a.verb == "rewrite"]
    if not rewrites:
        return
    root = Path(st.root)
    kept = kept_entries(st.commitlog_segments()[0], plan.process_offset)
    for a in rewrites:
        p = in_store(root, a.path)
        if not p.exists():
            _new_zero_file(root, p, st.config.dledger_index_file_size)
            fsync_dir(p.parent)
        fd = open_fd(p, os.O_WRONLY)
        try:
            os.pwrite(fd, unit_bytes(kept, int(p.name), a.from_pos, a.to_pos), a.from_pos)
            os.fsync(fd)
        finally:
            os.close(fd)


def _new_zero_file(root: Path, path: Path, size: int) -> None:
    """A file of ``size`` zero bytes (sparse), in place at once by rename."""
    tmp = scratch_dir(root, "tmp") / path.name
    unlink_if_present(tmp)
    create_sized(tmp, size)
    fsync_file(tmp)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, path)


def _step_member_checkpoint(st: Store, plan: RecoverPlan) -> None:
    """The member checkpoint as DLedger writes it: the previous text to ``.bak``, then the new one."""
    m = plan.member
    assert m is not None and m.checkpoint_after is not None
    path = in_store(Path(st.root), m.checkpoint)
    tmp = scratch_dir(Path(st.root), "tmp")
    if m.checkpoint_before is not None:
        atomic_write(_bak(path), m.checkpoint_before.encode("latin-1"), tmp_dir=tmp)
    atomic_write(path, m.checkpoint_after.encode("latin-1"), tmp_dir=tmp)


def _step_remove(st: Store, plan: RecoverPlan, step: str, hook: StepHook) -> None:
    """Zero the planned ranges and delete the planned files of ``step``."""
    todo = [x for x in plan.actions if x.step == step]
    remove(Path(st.root), todo[:1])
    if todo:
        hook(f"recover:{step}#1")
    remove(Path(st.root), todo[1:])


def _step_cq_truncate(st: Store, plan: RecoverPlan, hook: StepHook) -> None:
    """``truncateDirtyLogicFiles`` after the re-dispatch: whatever was appended after a cut goes too."""
    todo = [x for x in plan.actions if x.step == "cq-truncate"]
    cut_queue_tails(Path(st.root), todo[:1])
    if todo:
        hook("recover:cq-truncate#1")
    cut_queue_tails(Path(st.root), todo[1:])


def _snapshot_path(root: Path) -> Path:
    return scratch_dir(root, "recover") / "index-snapshot.bin"


def _rollback_dispatch(st: Store, plan: RecoverPlan, journal: Journal) -> None:
    """Undo a re-dispatch that was killed half way: back to the files as the steps before left them."""
    cfg = st.config
    root = Path(st.root)
    if plan.dispatch is not None and plan.dispatch.consume_queue:
        ends = {(q.topic, q.queue_id): q for q in plan.queue_ends}
        for cq in st.consume_queues.queues():
            qe, qdir = ends.get((cq.topic, cq.queue_id)), cq.directory
            segs, _ = cq.files()
            keep_base = int(qe.last_file) if qe is not None and qe.last_file is not None else -1
            for s in segs:
                if s.base_offset > keep_base:
                    unlink_if_present(s.path)
                elif s.base_offset == keep_base:
                    zero_range(s.path, qe.end_pos, data_end(s.path, qe.end_pos))  # type: ignore[union-attr]
            if qe is None:  # a queue the re-dispatch created
                shutil.rmtree(qdir, ignore_errors=True)
                try:
                    qdir.parent.rmdir()
                except OSError:
                    pass
            # a topic directory the re-dispatch created went with its last queue
            fsync_dir(qdir if qe is not None else qdir.parent if qdir.parent.exists() else qdir.parent.parent)
    if plan.dispatch is not None and plan.dispatch.consume_queue and journal.state.get("batchQueues") is not None:
        _rollback_batch_queues(st, journal.state["batchQueues"])
    if plan.dispatch is not None and plan.dispatch.index:
        kept = set(plan.index_files_kept)
        idir = cfg.index_dir
        for name in sorted(os.listdir(idir)) if idir.is_dir() else []:
            if name.isdigit() and name not in kept:
                unlink_if_present(idir / name)
        snap = journal.state.get("snapshot")
        if snap:
            data = read_file(_snapshot_path(root))
            last = idir / snap
            fd = open_fd(last, os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            h = ix.decode_header(data)
            used = ix.HEADER_SIZE + cfg.max_hash_slot_num * 4 + max(h.index_count, 1) * ix.ENTRY_SIZE
            zero_range(last, used, data_end(last, used))
        if idir.is_dir():
            fsync_dir(idir)


def _column_batches(st: Store, from_phy: int, to_phy: int, progress: Callable[[int], None] | None) -> Iterator[Any]:
    """Dispatch batches of the records in [from_phy, to_phy), as the dispatcher reads them (§9.2)."""
    segs, _ = st.commitlog_segments()
    segs = [s for s in segs if s.size == st.config.commitlog_file_size]
    kept = take_dispatch_columns(Path(st.root), segs, from_phy, to_phy)  # the plan's walk decoded them
    if kept is not None:
        if progress:
            progress(to_phy - from_phy)
        try:
            yield from kept
        finally:
            kept.close()  # the temporary file goes with its descriptor
        return
    end_seen = from_phy
    for seg, item in iter_columns(segs, st.config, from_phy=from_phy, to_phy=to_phy, progress=progress):
        if not isinstance(item, ScanStop):
            yield item
            continue
        # A blank hands over to the next file: the records went on to the end of this one.
        end_seen = seg.base_offset + (seg.size if item.reason == "blank" else item.pos)
        if item.reason == "invalid":
            break
    if end_seen != to_phy:
        raise CorruptData(
            f"the commit log changed since the plan: the records end at {end_seen}, the plan says {to_phy}",
            path=st.config.commitlog_dir,
            pos=0,
            phy_offset=end_seen,
        )


def _index_msg_timestamp(cfg: StoreConfig, stats: DispatchStats, old: int) -> int:
    """The broker sets indexMsgTimestamp to the end time of a file that filled up, when it rolls (§5.3)."""
    if not stats.index_files_created:
        return old
    names = sorted(n for n in os.listdir(cfg.index_dir) if n.isdigit())
    last_new = max(p.name for p in stats.index_files_created)
    i = names.index(last_new)
    if i == 0:
        return old
    with map_file(cfg.index_dir / names[i - 1]) as buf:
        h = ix.decode_header(buf)
    return h.end_timestamp_ms if h.index_count >= cfg.max_index_num else old


def _fsync_dispatch_dirs(queues: ConsumeQueueStore, index_dir: Path, stats: DispatchStats) -> None:
    dirs = {queues.directory, index_dir}
    for topic, qid in stats.queues_touched:
        q = queues.queue(topic, qid).directory
        dirs |= {q, q.parent}
    run_together([functools.partial(fsync_dir, d) for d in sorted(dirs) if d.is_dir()])  # each once, at once


def _step_dispatch(st: Store, plan: RecoverPlan, journal: Journal, clock: Clock, progress: Progress) -> None:
    """Re-dispatch the walked records into the store's consume queues and index (§8.3)."""
    cfg = st.config
    root = Path(st.root)
    d = plan.dispatch
    assert d is not None
    if d.index and plan.index_files_kept and "snapshot" not in journal.state:
        last = cfg.index_dir / plan.index_files_kept[-1]
        with map_file(last) as buf:
            head = bytes(buf[: ix.HEADER_SIZE + cfg.max_hash_slot_num * 4])
        atomic_write(_snapshot_path(root), head)
        journal.set(snapshot=last.name)
    batch = batch_cq_topics(cfg) if d.consume_queue else frozenset()
    if batch and "batchQueues" not in journal.state:
        journal.set(batchQueues=_batch_queue_state(st))  # what a rollback returns the batch queues to
    if journal.state.get("dispatchStarted"):
        _rollback_dispatch(st, plan, journal)
    else:
        journal.set(dispatchStarted=True)
    dispatcher = Dispatcher(
        cfg, root=root, consume_queue=d.consume_queue, index=d.index, clock=clock, cq_exclude=batch, index_lane=True
    )
    ok = False
    try:
        first = True
        if d.only_after_phy is None:
            for cols in _column_batches(st, d.from_phy, d.to_phy, progress):
                dispatcher.dispatch_columns(cols)
                if first:
                    first = False
                    journal.hook("recover:dispatch#1")
        else:
            segs, _ = st.commitlog_segments()
            for reqs, _stop, _seg in iter_requests(segs, cfg, from_phy=d.from_phy, to_phy=d.to_phy, progress=progress):
                dispatcher.dispatch([r for r in reqs if r.phy_offset > d.only_after_phy])
        ok = True
    finally:
        stats = dispatcher.close(sync=ok)
    if d.consume_queue and (batch or (cfg.enable_multi_dispatch and broker_rules(cfg.broker).multi_dispatch)):
        extra = dispatch_extra(st, d.from_phy, d.to_phy, only_after=d.only_after_phy, batch=batch)  # rolled back too
        for q in extra:
            stats.skipped.setdefault((q.name, q.queue_id), q)
    _fsync_dispatch_dirs(st.consume_queues, cfg.index_dir, stats)
    index_ts = plan.checkpoint_after["indexMsgTimestamp"]
    if d.index:
        index_ts = _index_msg_timestamp(cfg, stats, index_ts)
    journal.set(dispatch=stats.to_json(), indexMsgTimestamp=index_ts)


def _batch_queue_state(st: Store) -> list[dict[str, Any]]:
    """Every batch consume queue's files and where its valid units end (units are appended, §4.7)."""
    out = []
    for q in st.batch_queues.queues():
        segs, _ = q.files()
        tail = q.tail()
        last, end = (None, 0) if tail.file is None else (tail.file.path.name, tail.end - tail.file.base_offset)
        out.append(
            {
                "dir": rel_path(Path(st.root), q.directory),
                "files": [s.path.name for s in segs],
                "last": last,
                "end": end,
            }
        )
    return out


def _rollback_batch_queues(st: Store, state: list[dict[str, Any]]) -> None:
    root = Path(st.root)
    known = {q["dir"]: q for q in state}
    for bq in st.batch_queues.queues():
        qdir = bq.directory
        q = known.get(rel_path(root, qdir))
        if q is None:  # a queue the re-dispatch created
            shutil.rmtree(qdir, ignore_errors=True)
            continue
        for seg in bq.files()[0]:
            if seg.path.name not in q["files"]:
                unlink_if_present(seg.path)
            elif seg.path.name == q["last"]:
                zero_range(seg.path, q["end"], data_end(seg.path, q["end"]))
        fsync_dir(qdir)


def _build_root(root: Path) -> Path:
    return scratch_dir(root, "recover") / "build"


def _step_rebuild(st: Store, plan: RecoverPlan, journal: Journal, clock: Clock, progress: Progress) -> None:
    """Build fresh consume queues and/or index files from the whole valid commit log, beside the store."""
    cfg = st.config
    build = _build_root(Path(st.root))
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    dispatcher = Dispatcher(
        cfg, root=build, consume_queue=plan.rebuild_consume_queue, index=plan.rebuild_index, clock=clock
    )
    ok = False
    try:
        first = True
        for cols in _column_batches(st, plan.min_phy, plan.process_offset, progress):
            dispatcher.dispatch_columns(cols)
            if first:
                first = False
                journal.hook("recover:rebuild#1")
        ok = True
    finally:
        stats = dispatcher.close(sync=ok)
    _fsync_dispatch_dirs(consume_queue_store(cfg, build), build / "index", stats)
    state: dict[str, Any] = {"rebuild": stats.to_json()}
    if plan.rebuild_consume_queue:
        state["logicsMsgTimestamp"] = stats.logics_msg_timestamp_ms
    if plan.rebuild_index:
        # A fresh index: indexMsgTimestamp is the end time of its last full file, else 0.
        ts = 0
        idir = build / "index"
        for name in sorted(os.listdir(idir)) if idir.is_dir() else []:
            with map_file(idir / name) as buf:
                h = ix.decode_header(buf)
            if h.index_count >= cfg.max_index_num:
                ts = h.end_timestamp_ms
        state["indexMsgTimestamp"] = ts
    journal.set(**state)


def _move_dir(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; a no-op once done."""
    move(src, dst, missing_ok=True)


def _step_swap(st: Store, plan: RecoverPlan, journal: Journal) -> None:
    """Old directories to the quarantine (or away), rebuilt ones in; each half journaled."""
    root = Path(st.root)
    q = _run_quarantine(st, plan, journal)
    qdir = q.folder if q is not None else None
    build = _build_root(root)
    for part, on in (("consumequeue", plan.rebuild_consume_queue), ("index", plan.rebuild_index)):
        if not on:
            continue
        live = root / part
        if not journal.state.get(f"old:{part}"):
            if qdir is not None:
                _move_dir(live, qdir / "files" / part)
            elif live.exists():
                trash = scratch_dir(root, "recover") / "trash" / part
                _move_dir(live, trash)
                shutil.rmtree(trash)
            journal.set(**{f"old:{part}": True})
        new = build / part
        if new.exists():
            _move_dir(new, live)
        live.mkdir(exist_ok=True)
        fsync_dir(root)


def _step_checkpoint(st: Store, plan: RecoverPlan, journal: Journal) -> dict[str, int]:
    after = dict(plan.checkpoint_after)
    state = journal.state
    if plan.checkpoint_index_from_dispatch and "indexMsgTimestamp" in state:
        after["indexMsgTimestamp"] = state["indexMsgTimestamp"]
    if plan.rebuild_consume_queue and state.get("logicsMsgTimestamp"):
        after["logicsMsgTimestamp"] = state["logicsMsgTimestamp"]
    cfg = st.config
    current = read_checkpoint_bytes(cfg.checkpoint_path)
    atomic_write(cfg.checkpoint_path, checkpoint_bytes(current, after), tmp_dir=scratch_dir(Path(st.root), "tmp"))
    return after
