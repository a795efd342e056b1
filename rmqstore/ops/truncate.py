"""Cutting a store back at a commit log offset, as a replica must be before it follows another again.

:func:`plan_truncate` only reads: the offset must be a record boundary of the commit log chain (a
record's start, an end-of-file blank's start, the start of a file after a blank, or where the
records end), or is the first record stored at or after a time. The plan cuts at that offset what
the broker's own ``truncateDirtyFiles`` / ``truncateDirtyLogicFiles`` would (``dispatch.cut``, the
same cuts ``recover`` makes): the commit log tail zeroed and later files deleted, consume queue and
batch consume queue units pointing at or past it, index entries at or past it (each index header's
``endPhyOffset`` and end time back on the last kept entry), and the checkpoint brought back inside
the kept records (no timestamp after the last kept record, 5.x offsets not past the cut).

:func:`apply_truncate` carries the plan out step by step under the journal: every removed byte
range and file is saved in a fresh quarantine folder first, whole files are written through a temp
file, fsync and rename, and a run killed at any step finishes when run again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.codec.commitlog import Record
from rmqstore.dispatch.cut import (
    Removal,
    checkpoint_bytes,
    checkpoint_values,
    commitlog_cuts,
    cut_index_file,
    cut_queue_tails,
    dledger_cuts,
    in_store,
    index_cuts,
    queue_removal,
    remove,
    write_member_checkpoint,
)
from rmqstore.errors import CorruptData, InputError, UnsafePlan, UsageError
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, scratch_dir
from rmqstore.safety.journal import Journal, Resumed, StepHook, journal_file, register
from rmqstore.safety.plan import JsonModel
from rmqstore.safety.quarantine import Quarantine, check_quarantine_dir, default_quarantine_base
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment
from rmqstore.store.reader import CommitLogReader
from rmqstore.walk.chain import holds_data
from rmqstore.walk.columns import iter_columns
from rmqstore.walk.lenient import BlankEnd, Run, boundaries, intact_record, walk_file
from rmqstore.walk.recovery import read_checkpoint_bytes
from rmqstore.walk.requests import ScanStop

JOURNAL_FORMAT = 1
STEPS = ("quarantine", "index-cut", "cq-truncate", "commitlog-truncate", "dledger-cut", "checkpoint")


@dataclass(frozen=True, slots=True)
class TruncatePlan(JsonModel):
    """Everything ``truncate`` will do to one store, decided before anything is written."""

    operation: ClassVar[str] = "truncate"
    json_keys = (
        "root=store broker=brokerVersion to_offset to_time data_end last_kept=lastKeptOffset "
        "last_kept_ts=lastKeptStoreTimestamp actions checkpoint_before checkpoint_after write_checkpoint "
        "quarantine_dir=quarantine created_ms=createdAt notes dledger_checkpoint member_checkpoint"
    )

    root: str
    broker: str
    to_offset: int
    to_time: int | None  # the time asked for, when the offset came from one
    data_end: int  # where the records end now
    last_kept: int | None  # commit log offset of the last message kept
    last_kept_ts: int  # its store time (0 when nothing is kept)
    actions: tuple[Removal, ...]
    checkpoint_before: dict[str, int] | None
    checkpoint_after: dict[str, int]
    write_checkpoint: bool
    quarantine_dir: str | None
    created_ms: int
    notes: tuple[str, ...] = ()
    dledger_checkpoint: dict[str, str] | None = None  # DLedger mode: the member checkpoint after the cut
    member_checkpoint: str | None = None  # where that checkpoint is

    def steps(self) -> list[str]:
        have = {a.step for a in self.actions} | ({"checkpoint"} if self.write_checkpoint else set())
        if self.dledger_checkpoint is not None:
            have.add("dledger-cut")
        if have and self.quarantine_dir is not None:
            have.add("quarantine")
        return [s for s in STEPS if s in have]

    @property
    def is_empty(self) -> bool:
        return not self.steps()

    @property
    def records_removed(self) -> int:
        return sum(a.records_total for a in self.actions if a.kind == "commitlog")

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        root, kept = Path(self.root), self.quarantine_dir is not None
        out = []
        for a in self.actions:
            ranged = a.verb == "zero"
            start, end = (a.from_pos, a.to_pos) if ranged else (None, None)
            out.append(PlannedAction("truncate", a.verb, in_store(root, a.path), a.why, start, end, a.size, kept))
        if self.write_checkpoint:
            why = "no timestamp after the last kept record, no offset past the cut"
            out.append(PlannedAction("truncate", "rewrite", root / "checkpoint", why, kept=kept))
        if self.dledger_checkpoint is not None:
            why = "endIndex and committedIndex back on the last kept entry (and its .bak)"
            out.append(PlannedAction("truncate", "rewrite", Path(self.member_checkpoint or ""), why, kept=kept))
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        return {
            "toOffset": self.to_offset,
            "toTime": self.to_time,
            "dataEnd": self.data_end,
            "bytesRemoved": self.data_end - self.to_offset,
            "recordsRemoved": self.records_removed,
            "lastKeptOffset": self.last_kept,
            "lastKeptStoreTimestamp": self.last_kept_ts,
            "checkpoint": self._checkpoint_line(),
            "quarantine": self.quarantine_dir or "none: removed bytes are not kept",
            "steps": self.steps(),
        }

    def _checkpoint_line(self) -> str:
        if not self.write_checkpoint:
            return "unchanged"
        before = self.checkpoint_before or {}
        return ", ".join(f"{k} {before.get(k)} -> {v}" for k, v in self.checkpoint_after.items() if before.get(k) != v)

    def details(self) -> dict[str, list[dict[str, Any]]]:
        return {"recordsRemoved": [r.to_json() | {"file": a.path} for a in self.actions for r in a.records]}

    def to_json(self) -> dict[str, Any]:
        return {**JsonModel.to_json(self), "steps": self.steps(), "recordsRemoved": self.records_removed}


# -- where to cut ------------------------------------------------------------------------------


def _chain(st: Store) -> list[Segment]:
    """The commit log files of the chain: from the first one holding data, each following the last."""
    segs, _ = st.commitlog_segments()
    out: list[Segment] = []
    for s in segs:
        if out and s.base_offset != out[-1].base_offset + out[-1].size:
            break
        if out or holds_data(s):
            out.append(s)
    return out


def _file_items(seg: Segment, broker: str) -> tuple[list[int], int | None, int]:
    """A file's boundaries from its lenient walk, its blank's position (None without one), and where its
    data ends (the file size after a blank)."""
    with map_file(seg.path) as buf:
        b = boundaries(buf, seg, len(buf), broker=broker, back=len(buf))
        last: Any = None
        for last in walk_file(buf, seg, broker=broker, start=int(b[-1]) if len(b) else 0):  # noqa: B007
            pass
    blank = last.pos if isinstance(last, BlankEnd) else None
    end = seg.size if blank is not None else int(b[-1]) if len(b) else 0
    return [int(x) for x in b], blank, end


def data_end(segs: list[Segment], broker: str) -> int:
    """Where the records of the chain end (a last file's blank: the next file's start)."""
    if not segs:
        return 0
    _, _, end = _file_items(segs[-1], broker)
    return segs[-1].base_offset + end


def check_boundary(segs: list[Segment], offset: int, broker: str) -> int:
    """``offset`` when it is a record boundary of the chain; else a usage error naming the nearest ones.
    Returns where the records end."""
    first = segs[0].base_offset if segs else 0
    end = data_end(segs, broker)
    if offset < first or offset > end:
        raise UsageError(f"--to-offset {offset} is outside the commit log's records, {first}..{end}")
    seg = next((s for s in segs if s.base_offset <= offset < s.base_offset + s.size), None)
    if seg is None or offset == seg.base_offset or offset == end:
        return end
    found, _, _ = _file_items(seg, broker)
    pos = offset - seg.base_offset
    if pos in found:
        return end
    below = max((b for b in found if b < pos), default=0) + seg.base_offset
    above = min((b for b in found if b > pos), default=seg.size) + seg.base_offset
    raise UsageError(
        f"--to-offset {offset} is inside a record of {seg.path}: the nearest record boundaries are {below} and {above}"
    )


def offset_at_time(st: Store, segs: list[Segment], time_ms: int) -> int | None:
    """The commit log offset of the first record stored at or after ``time_ms`` (None: no such record)."""
    for _seg, item in iter_columns(segs, st.config, workers=1):
        if isinstance(item, ScanStop):
            continue
        hit = np.flatnonzero(item.store_ts >= time_ms)
        if hit.size:
            return int(item.phy[hit[0]])
    return None


def last_message_before(segs: list[Segment], offset: int, broker: str) -> Record | None:
    """The last message stored before ``offset`` (None when there is none)."""
    for seg in reversed([s for s in segs if s.base_offset < offset]):
        with map_file(seg.path) as buf:
            last = None
            for item in walk_file(buf, seg, broker=broker, until=offset - seg.base_offset):
                if isinstance(item, Run):
                    at = item.positions[item.positions + seg.base_offset < offset]
                    last = int(at[-1]) if len(at) else last
            if last is not None:
                return intact_record(buf, last, path=str(seg.path), file_from=seg.base_offset, broker=broker)
    return None


# -- the plan ----------------------------------------------------------------------------------


def _queue_cuts(st: Store, offset: int) -> list[Removal]:
    root, out = Path(st.root), []
    for queues in (st.consume_queues, st.batch_queues):
        for q in queues.queues():
            rec = q.recover()
            why = f"units of {q.topic}/{q.queue_id} after its last valid one (§8.4)"
            out += [queue_removal(root, "cq-truncate", c, why) for c in rec.cuts]
            why = f"units of {q.topic}/{q.queue_id} pointing at or past {offset}"
            out += [queue_removal(root, "cq-truncate", c, why) for c in q.truncate_dirty(offset, rec)]
    return out


def _checkpoint(st: Store, offset: int, last_ts: int) -> tuple[dict[str, int] | None, dict[str, int], bool]:
    """The checkpoint with no timestamp after the last kept record and no 5.x offset past the cut."""
    cp = st.read_checkpoint()
    if cp is None:
        return None, {}, False
    before = checkpoint_values(cp) | {
        "masterFlushedOffset": cp.master_flushed_offset,
        "confirmPhyOffset": cp.confirm_phy_offset,
    }
    after = {k: min(v, last_ts) for k, v in checkpoint_values(cp).items()}
    for key in ("masterFlushedOffset", "confirmPhyOffset"):
        if before[key] > offset:
            after[key] = offset
    raw = read_checkpoint_bytes(st.config.checkpoint_path)
    return before, after, checkpoint_bytes(raw, after) != raw


def _removals(st: Store, offset: int, end: int) -> tuple[list[Removal], dict[str, str] | None]:
    """What the cut at ``offset`` removes (nothing when the records end there and no file starts past it),
    and in DLedger mode the member checkpoint after it."""
    cfg, root = st.config, Path(st.root)
    all_segs, _ = st.commitlog_segments()
    if offset >= end and not any(s.base_offset >= offset for s in all_segs):
        return [], None
    index_files, _ = st.index_files()
    actions = index_cuts(root, cfg, index_files, offset, step="index-cut") + _queue_cuts(st, offset)
    actions += commitlog_cuts(root, all_segs, offset, cfg.broker, mark=f"--to-offset {offset}")
    member = None
    if cfg.dledger:
        cuts, member = dledger_cuts(root, cfg, offset, step="dledger-cut")
        actions += cuts
    return actions, member


def plan_truncate(
    st: Store,
    *,
    now_ms: int,
    to_offset: int | None = None,
    to_time_ms: int | None = None,
    quarantine: Path | None = None,
    use_quarantine: bool = True,
) -> TruncatePlan:
    """What cutting the store at ``to_offset`` (or at the first record stored at or after ``to_time_ms``) does."""
    if (to_offset is None) == (to_time_ms is None):
        raise UsageError("give one of --to-offset and --to-time")
    if st.abort_exists():
        raise UnsafePlan(
            f"{st.config.abort_path}: the store was not shut down cleanly; its consume queues may be behind the "
            f"commit log: run `rmqstore recover {st.root}` first, then truncate"
        )
    cfg, root = st.config, Path(st.root)
    segs = _chain(st)
    notes: list[str] = []
    if to_time_ms is not None:
        found = offset_at_time(st, segs, to_time_ms)
        to_offset = data_end(segs, cfg.broker) if found is None else found
        if found is None:
            notes.append(f"no record was stored at or after {to_time_ms}: nothing to cut")
    assert to_offset is not None
    end = check_boundary(segs, to_offset, cfg.broker)
    last = last_message_before(segs, to_offset, cfg.broker)
    last_ts = last.store_timestamp_ms if last is not None else 0
    actions, member = _removals(st, to_offset, end)
    before, after, write_cp = _checkpoint(st, to_offset, last_ts)
    qdir = None
    if use_quarantine:
        qpath = Path(quarantine) if quarantine is not None else default_quarantine_base(root)
        check_quarantine_dir(qpath, [cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir, root / SCRATCH_DIR])
        qdir = str(qpath.resolve())
    return TruncatePlan(
        str(root),
        cfg.broker,
        to_offset,
        to_time_ms,
        end,
        None if last is None else last.phy_offset,
        last_ts,
        tuple(actions),
        before,
        after,
        write_cp and bool(actions),
        qdir,
        now_ms,
        tuple(notes),
        member,
        str(cfg.dledger_checkpoint_path) if cfg.dledger else None,
    )


# -- applying ----------------------------------------------------------------------------------


def pending_plan(root: Path) -> TruncatePlan | None:
    """The plan of an interrupted ``truncate`` of this store, if its journal is there."""
    journal = Journal.load(journal_file(root, "truncate"))
    if journal is None:
        return None
    if journal.data.get("format") != JOURNAL_FORMAT or "plan" not in journal.data:
        raise CorruptData(f"truncate journal format is not {JOURNAL_FORMAT}", path=journal.path, pos=0)
    return TruncatePlan.from_json(journal.data["plan"])


@dataclass(frozen=True, slots=True)
class TruncateResult(JsonModel):
    json_keys = "resumed steps quarantine_dir=quarantine"

    plan: TruncatePlan
    resumed: bool
    steps: tuple[str, ...]
    quarantine_dir: str | None


def apply_truncate(st: Store, plan: TruncatePlan, *, on_step: StepHook | None = None) -> TruncateResult:
    """Carry out ``plan`` on a store opened writable; resumes the journal of an interrupted run.
    ``on_step`` is called with ``truncate:<step>`` after each step is durable."""
    root = Path(st.root)
    if not st.writable:
        raise InputError("apply_truncate needs a store opened with writable=True (the broker's lock held)")
    jp = journal_file(root, "truncate")
    journal = Journal.load(jp, on_step)
    resumed = journal is not None
    if journal is None:
        journal = Journal(jp, {"format": JOURNAL_FORMAT, "operation": "truncate", "plan": plan.to_json()}, on_step)
    elif journal.data.get("plan") != plan.to_json():
        raise InputError(f"{jp}: an interrupted truncate with another plan is pending; finish that one first")
    steps = plan.steps()
    if not steps:
        return TruncateResult(plan, False, (), None)
    journal.save()
    for step in steps:
        if not journal.done(step):
            _run_step(st, plan, journal, step)
            journal.mark(step)
    folder = journal.state.get("quarantine")
    journal.remove()
    shutil.rmtree(root / SCRATCH_DIR / "tmp", ignore_errors=True)
    for d in (root / SCRATCH_DIR,):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    fsync_dir(root)
    journal.hook("truncate:finished")
    return TruncateResult(plan, resumed, tuple(steps), folder)


def _run_step(st: Store, plan: TruncatePlan, journal: Journal, step: str) -> None:
    root = Path(st.root)
    todo = [a for a in plan.actions if a.step == step]
    if step == "quarantine":
        _step_quarantine(st, plan, journal)
    elif step == "index-cut":
        with CommitLogReader.of(st) as reader:
            for a in todo:
                if a.verb == "delete":
                    remove(root, [a])
                elif in_store(root, a.path).exists():
                    cut_index_file(in_store(root, a.path), st.config, plan.to_offset, reader, root)
    elif step == "cq-truncate":
        cut_queue_tails(root, todo)
    elif step == "commitlog-truncate":
        remove(root, todo)
    elif step == "dledger-cut":
        remove(root, todo)
        if plan.dledger_checkpoint is not None:
            write_member_checkpoint(st.config, plan.dledger_checkpoint, root)
    elif step == "checkpoint":
        p = st.config.checkpoint_path
        page = checkpoint_bytes(read_checkpoint_bytes(p), plan.checkpoint_after)
        atomic_write(p, page, tmp_dir=scratch_dir(root, "tmp"))


def _step_quarantine(st: Store, plan: TruncatePlan, journal: Journal) -> None:
    """Save every byte range and file the later steps remove or replace, and a manifest to restore them."""
    root = Path(st.root)
    assert plan.quarantine_dir is not None
    folder = journal.state.get("quarantine")
    if folder:
        q = Quarantine.resume(folder, "truncate", root)
    else:
        q = Quarantine.fresh(plan.quarantine_dir, "truncate", root, plan.created_ms)
        journal.set(quarantine=str(q.folder))
    for a in plan.actions:
        src = in_store(root, a.path)
        if a.verb == "zero":
            q.save_range(src, a.from_pos, a.to_pos, a.why)
        elif src.exists():  # deleted, or replaced by a rename: the old inode stays linked here
            q.save_file(src, a.why, link=True)
    if plan.write_checkpoint and st.config.checkpoint_path.exists():
        q.save_file(st.config.checkpoint_path, "rewritten inside the kept records")
    if plan.dledger_checkpoint is not None:
        cp = st.config.dledger_checkpoint_path
        for p in (cp, cp.with_name(cp.name + ".bak")):
            if p.exists():
                q.save_file(p, "endIndex and committedIndex back on the last kept entry")
    q.write_manifest(toOffset=plan.to_offset)


def _resume(st: Store, on_step: StepHook | None, progress: Any) -> Resumed:
    plan = pending_plan(st.root)
    assert plan is not None
    result = apply_truncate(st, plan, on_step=on_step)
    where = f"; removed bytes are in {result.quarantine_dir}" if result.quarantine_dir else ""
    return Resumed("truncate", f"resumed and finished: commit log ends at {plan.to_offset}{where}", result)


register("truncate", _resume)
