"""Re-dispatch: rebuild consume queues and index files from the commit log, then swap them in.

The rebuild is written into ``<root>/.rmqstore/redispatch/build`` (never into the live
directories; a dry run builds in a temporary folder outside the store and removes it), compared
with the current files, and swapped in by directory renames under a journal: the old directories
go to a fresh folder of the quarantine, so nothing is lost and a run killed at any point can be
re-run to the same result. A rebuild that would leave far fewer consume queue entries than the
store has is refused unless forced.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.describe import index_header_json
from rmqstore.codec.indexfile import decode_header
from rmqstore.codec.topic import skipped_lines
from rmqstore.dispatch.rebuild import build
from rmqstore.errors import InputError, UnsafePlan
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, move, scratch_dir
from rmqstore.safety.journal import Journal, Progress, Resumed, StepHook, found_journal, journal_file, register
from rmqstore.safety.openfile import read_file
from rmqstore.safety.plan import JsonModel
from rmqstore.safety.quarantine import Quarantine, default_quarantine_base
from rmqstore.store import Store
from rmqstore.store.files import first_difference
from rmqstore.store.queue.interface import ConsumeQueue, ConsumeQueueStore
from rmqstore.store.queue.kinds import consume_queue_store, keeps_rocksdb
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueues


@dataclass(frozen=True, slots=True)
class QueueDiff(JsonModel):
    topic: str
    queue_id: int
    current_entries: int
    rebuilt_entries: int
    missing: int  # in the rebuild, not in the current files
    extra: int  # in the current files, not in the rebuild
    different: int  # same queue offset, different bytes
    files_differ: int = 0  # files whose bytes differ (stray tail bytes, a length, a name), entries aside


@dataclass(frozen=True, slots=True)
class RedispatchPlan(JsonModel):
    """A rebuild made beside the store, how it differs from the current files, and how it is swapped in."""

    operation: ClassVar[str] = "redispatch"

    store_root: Path
    build_root: Path
    from_phy: int
    to_phy: int
    build_consumequeue: bool
    build_index: bool
    topics: tuple[str, ...] | None
    stats: dict[str, Any]
    queue_diffs: tuple[QueueDiff, ...]
    index_files_current: tuple[str, ...]
    index_files_rebuilt: tuple[dict[str, Any], ...]
    stop_reason: str
    checkpoint_before: dict[str, int] | None
    checkpoint_after: dict[str, int] | None
    output: Path | None = None
    notes: tuple[str, ...] = field(default=())
    refusal: str | None = None  # why swapping this rebuild in is unsafe (needs force)
    keep_old: bool = True  # the replaced files go to a quarantine folder (else they are deleted)
    quarantine: Path | None = None  # where that folder goes (default: beside the store)

    json_keys = (
        "store_root=store build_root from_phy=fromPhyOffset to_phy=toPhyOffset stop_reason "
        "build_consumequeue=consumequeue build_index=index topics output stats queue_diffs=queues "
        "index_files_current index_files_rebuilt checkpoint_before checkpoint_after notes refusal=refused "
        "keep_old quarantine"
    )

    @property
    def exit_code(self) -> int:
        """8 when the swap would be refused without force, else 0."""
        return 8 if self.refusal else 0

    @property
    def changed(self) -> bool:
        return (
            any(_differs(d) for d in self.queue_diffs)
            or (self.build_index and self.index_files_changed)
            or self.stats.get("databaseRowsChanged", False)
        )

    @property
    def index_files_changed(self) -> bool:
        return self.stats.get("indexChanged", True)

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        """The swap in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
        if self.output is not None:
            return ()
        why = "rebuilt from the commit log"
        out = [
            PlannedAction("redispatch", "replace", self.store_root / p, why, kept=self.keep_old) for p in _parts(self)
        ]
        if self.checkpoint_after and self.checkpoint_after != self.checkpoint_before:
            cp, why = self.store_root / "checkpoint", "timestamps of the rebuilt files"
            out.append(PlannedAction("redispatch", "rewrite", cp, why, kept=self.keep_old))
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        """What was rebuilt, whether it differs from the current files, and where the replaced ones go."""
        s = self.stats
        where = str(self.quarantine) if self.quarantine else "a new folder in STORE/../<name>.quarantine"
        queues_differ = any(_differs(d) for d in self.queue_diffs)
        return {
            "records": s["records"],
            "fromPhyOffset": self.from_phy,
            "toPhyOffset": self.to_phy,
            "stop": self.stop_reason,
            "cqEntries": s["cqEntries"],
            "queues": s["queues"],
            "indexEntries": s["indexEntries"],
            "indexFiles": len(self.index_files_rebuilt),
            "consumeQueues": _state(self.build_consumequeue, queues_differ),
            "indexFilesState": _state(self.build_index, self.index_files_changed),
            "refused": f"without --force: {self.refusal}" if self.refusal else "no",
            "output": str(self.output) if self.output else None,
            "quarantine": where if self.keep_old and self.output is None else "none: replaced files are deleted",
        }

    def details(self) -> dict[str, list[dict[str, Any]]]:
        """The queues whose rebuild differs from the current files."""
        return {"queues": [d.to_json() for d in self.queue_diffs if _differs(d)]}


def _differs(d: QueueDiff) -> bool:
    return bool(d.missing or d.extra or d.different or d.files_differ)


def _queue_files_differ(cur: Path, new: Path) -> int:
    """Files of one queue directory that are not byte-identical (size included) to the rebuilt ones,
    counting a file on one side only: the broker loads the files, not the entries."""
    names = {p.name for d in (cur, new) if d.is_dir() for p in d.iterdir() if p.is_file()}
    return sum(
        1
        for n in names
        if not ((cur / n).is_file() and (new / n).is_file() and first_difference(cur / n, new / n) is None)
    )


def _state(built: bool, differs: bool) -> str:
    if not built:
        return "not rebuilt"
    return "differ from the current files" if differs else "identical to the current files"


def _diff_queues(cur: ConsumeQueueStore, new: ConsumeQueueStore, topics: tuple[str, ...] | None) -> list[QueueDiff]:
    def listed(queues: ConsumeQueueStore) -> dict[tuple[str, int], ConsumeQueue]:
        return {(q.topic, q.queue_id): q for q in queues.queues() if not topics or q.topic in topics}

    cur_queues, new_queues = listed(cur), listed(new)
    in_files = not isinstance(cur, RocksDBConsumeQueues)
    diffs = []
    for topic, qid in sorted(cur_queues.keys() | new_queues.keys()):
        files = _queue_files_differ(_dir(cur, topic, qid), _dir(new, topic, qid)) if in_files else 0
        cb, cur_units = (cur_queues.get((topic, qid)) or cur.queue(topic, qid)).units()
        if in_files and not files:  # the same files, byte for byte: the same units, read once
            nb, new_units = cb, cur_units
        else:
            nb, new_units = (new_queues.get((topic, qid)) or new.queue(topic, qid)).units()
        # align by queue offset
        lo = max(cb, nb)
        hi = min(cb + len(cur_units), nb + len(new_units))
        different = 0
        if hi > lo:
            different = int(np.count_nonzero(cur_units[lo - cb : hi - cb] != new_units[lo - nb : hi - nb]))
        overlap = max(0, hi - lo)
        diffs.append(
            QueueDiff(
                topic,
                qid,
                len(cur_units),
                len(new_units),
                len(new_units) - overlap,
                len(cur_units) - overlap,
                different,
                files,
            )
        )
    return diffs


def _dir(queues: ConsumeQueueStore, topic: str, qid: int) -> Path:
    return queues.directory / topic / str(qid)


def _diff_built(st: Store, build_root: Path, topics: tuple[str, ...] | None) -> tuple[list[QueueDiff], bool]:
    """The queues' differences, and whether a database's other rows (max/min, checkpoint) differ."""
    built = consume_queue_store(st.config, build_root)
    try:
        diffs = _diff_queues(st.consume_queues, built, topics)
        cur = st.consume_queues
        if isinstance(built, RocksDBConsumeQueues) and isinstance(cur, RocksDBConsumeQueues):
            if not cur.exists():
                return diffs, True
            return diffs, (cur.offset_rows(), cur.checkpoint()) != (built.offset_rows(), built.checkpoint())
        return diffs, False
    finally:
        built.close()


def _index_summary(root: Path) -> list[dict[str, Any]]:
    out = []
    d = root / "index"
    if d.is_dir():
        for name in sorted(n for n in os.listdir(d) if n.isdigit()):
            h = decode_header(read_file(d / name, limit=40), path=str(d / name))
            out.append({"name": name, **index_header_json(h)})
    return out


def _index_identical(cur_root: Path, new_root: Path) -> bool:
    a = sorted(p for p in (cur_root / "index").glob("*") if p.name.isdigit()) if (cur_root / "index").is_dir() else []
    b = sorted(p for p in (new_root / "index").glob("*") if p.name.isdigit()) if (new_root / "index").is_dir() else []
    return len(a) == len(b) and all(first_difference(x, y) is None for x, y in zip(a, b, strict=True))


SHRINK_LIMIT = 0.5  # a rebuild keeping less than this share of the current entries is refused


def _build_root(st: Store, output: Path | None, dry_run: bool) -> Path:
    """Where the rebuild goes: ``--output``; for a dry run a temporary folder outside the store (a dry
    run writes nothing in it); else the store's scratch directory (the broker's lock is held)."""
    if output is not None:
        build_root = Path(output)
        if build_root.exists() and any(build_root.iterdir()):
            raise UnsafePlan(f"{build_root}: output directory is not empty")
        build_root.mkdir(parents=True, exist_ok=True)
        return build_root
    if dry_run or not st.writable:
        return Path(tempfile.mkdtemp(prefix="rmqstore-redispatch-dry-run-"))
    build_root = scratch_dir(st.root, "redispatch") / "build"
    if build_root.exists():
        shutil.rmtree(build_root)
    build_root.mkdir(parents=True)
    return build_root


def _shrink_refusal(diffs: list[QueueDiff]) -> str | None:
    current = sum(d.current_entries for d in diffs)
    rebuilt = sum(d.rebuilt_entries for d in diffs)
    if current and rebuilt < current * SHRINK_LIMIT:
        return (
            f"the rebuild holds {rebuilt} consume queue entries where the store has {current} now: the commit log "
            "it was built from may be unreadable or damaged"
        )
    return None


def _check_scope(st: Store, topics: tuple[str, ...] | None, only: str | None) -> None:
    if only not in (None, "consumequeue", "index"):
        raise InputError(f"--only takes consumequeue or index, not {only!r}")
    if topics and only == "index":
        raise InputError("--topic selects consume queues; index files hold every topic and cannot be filtered")
    if topics and keeps_rocksdb(st.config):
        raise InputError("--topic: the consume queues are one RocksDB database, rebuilt and swapped in whole")


def plan_redispatch(
    st: Store,
    *,
    from_phy: int | None = None,
    topics: tuple[str, ...] | None = None,
    only: str | None = None,
    output: Path | None = None,
    engine: str = "local",
    progress: Callable[[int], None] | None = None,
    spark_master: str | None = None,
    dry_run: bool = False,
    keep_old: bool = True,
    quarantine: Path | None = None,
) -> RedispatchPlan:
    """Build the rebuild (in a scratch, temporary or output directory) and compare it with the current files.

    ``keep_old``: the swap moves the replaced files to a fresh folder inside ``quarantine`` (default:
    beside the store) instead of deleting them."""
    _check_scope(st, topics, only)
    build_cq = only in (None, "consumequeue")
    build_ix = only in (None, "index") and not topics and st.config.message_index_enable
    notes = []
    if topics and only is None:
        notes.append("--topic given: only the consume queues of those topics are rebuilt; index files are kept")
    build_root = _build_root(st, output, dry_run)
    try:
        stats, end, reason = build(
            st,
            build_root,
            from_phy=from_phy,
            topics=topics,
            consume_queue=build_cq,
            index=build_ix,
            engine=engine,
            progress=progress,
            spark_master=spark_master,
        )
        diffs, rows_changed = _diff_built(st, build_root, topics) if build_cq else ([], False)
        sj = stats.to_json()
        if rows_changed:
            sj["databaseRowsChanged"] = True
        if build_ix:
            sj["indexChanged"] = not _index_identical(st.root, build_root)
        rebuilt_index = tuple(_index_summary(build_root))
    except BaseException:
        if output is None:
            shutil.rmtree(build_root, ignore_errors=True)
        raise
    cp = st.read_checkpoint()
    after = None
    if cp is not None:
        after = cp
        if build_cq and stats.logics_msg_timestamp_ms:
            after = replace(after, logics_msg_timestamp_ms=stats.logics_msg_timestamp_ms)
        if build_ix:
            after = replace(after, index_msg_timestamp_ms=stats.index_msg_timestamp_ms)
    notes += skipped_lines(sj["skippedQueues"])
    segs, _ = st.commitlog_segments()
    return RedispatchPlan(
        st.root,
        build_root,
        from_phy if from_phy is not None else (segs[0].base_offset if segs else 0),
        end,
        build_cq,
        build_ix,
        topics,
        sj,
        tuple(diffs),
        tuple(i["name"] for i in _index_summary(st.root)),
        rebuilt_index,
        reason,
        cp.to_json() if cp else None,
        after.to_json() if after else None,
        output,
        tuple(notes),
        _shrink_refusal(diffs) if output is None else None,
        keep_old,
        quarantine,
    )


def discard(plan: RedispatchPlan) -> None:
    """Remove a scratch or temporary build (dry run, nothing to do, refused)."""
    if plan.output is None and plan.build_root.exists():
        shutil.rmtree(plan.build_root)
        parent = plan.build_root.parent
        if parent.name == "redispatch" and parent.parent.name == SCRATCH_DIR:
            for d in (parent, parent.parent):
                try:
                    d.rmdir()  # only when nothing else uses the scratch directory
                except OSError:
                    break


def default_quarantine(root: Path, now_ms: int | None = None) -> Path:
    """The base folder; each run gets a fresh ``redispatch-<UTC time>`` folder inside."""
    return default_quarantine_base(root)


def _parts(plan: RedispatchPlan) -> list[str]:
    parts = []
    if plan.build_consumequeue:
        parts += [f"consumequeue/{t}" for t in plan.topics] if plan.topics else ["consumequeue"]
        batch = Path(plan.build_root) / "batchconsumequeue"
        if not plan.topics and (batch.is_dir() or (Path(plan.store_root) / "batchconsumequeue").is_dir()):
            parts.append("batchconsumequeue")
        elif plan.topics:
            parts += [f"batchconsumequeue/{t}" for t in plan.topics if (batch / t).is_dir()]
    if plan.build_index:
        parts.append("index")
    return parts


def apply_redispatch(
    plan: RedispatchPlan,
    st: Store,
    *,
    force: bool = False,
    on_step: StepHook | None = None,
    now_ms: int | None = None,
) -> Path | None:
    """Swap the rebuilt directories in; old ones go to a fresh folder inside the plan's quarantine
    (or are deleted when the plan keeps nothing). Journaled: re-running after a kill finishes the swap.

    Refused (UnsafePlan, exit 8) when the rebuild would leave far fewer consume queue entries than
    the store has now, unless ``force``."""
    if plan.output is not None:
        return None  # built beside the store: nothing to swap
    if not st.writable:
        raise UnsafePlan(f"{st.root}: open the store writable to swap a rebuild in")
    if plan.refusal and not force:
        discard(plan)
        raise UnsafePlan(f"{st.root}: {plan.refusal}; nothing was changed (--force swaps it in anyway)")
    root = st.root
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    q = None
    if plan.quarantine is not None or plan.keep_old:
        q = Quarantine.fresh(plan.quarantine or default_quarantine_base(root), "redispatch", root, now)
    journal = Journal(
        journal_file(root, "redispatch"),
        {
            "operation": "redispatch",
            "build": str(plan.build_root),
            "quarantine": str(q.folder) if q else None,
            "parts": _parts(plan),
            "checkpoint": plan.checkpoint_after,
        },
        on_step,
    )
    journal.save()
    journal.hook("redispatch:journal")
    return _finish(root, journal)


def _resume(st: Store, on_step: StepHook | None, _progress: Progress | None) -> Resumed:
    """Complete a journaled swap (under its name or an earlier one)."""
    path = found_journal(st.root, "redispatch")
    journal = Journal.load(path, on_step) if path is not None else None
    assert journal is not None  # the journal is there: resume() found it
    q = _finish(Path(st.root), journal)
    return Resumed("redispatch", f"finished an interrupted redispatch; replaced files are in {q}", q)


register("redispatch", _resume)


def _manifest(root: Path, q: Quarantine, parts: list[str], checkpoint: bool) -> None:
    q.items = []
    for part in parts:
        live = (root / part).absolute()
        saved = q.folder / "files" / part
        q.add(
            {
                "kind": "directory",
                "path": str(live),
                "saved": str(saved),
                "why": "replaced by the one rebuilt from the commit log",
                "restore": f"rm -rf {shlex.quote(str(live))} && mv {shlex.quote(str(saved))} {shlex.quote(str(live))}",
            }
        )
    if checkpoint:
        cp, saved = (root / "checkpoint").absolute(), q.folder / "files" / "checkpoint"
        q.add(
            {
                "kind": "file",
                "path": str(cp),
                "saved": str(saved),
                "why": "logicsMsgTimestamp/indexMsgTimestamp rewritten for the rebuilt files",
                "restore": f"cp {shlex.quote(str(saved))} {shlex.quote(str(cp))}",
            }
        )
    q.write_manifest()


def _finish(root: Path, journal: Journal) -> Path | None:
    data = journal.data
    build = Path(data["build"])
    qdir = Path(data["quarantine"]) if data.get("quarantine") else None
    q = Quarantine.resume(qdir, "redispatch", root) if qdir is not None else None
    parts: list[str] = data["parts"]
    cp_path = root / "checkpoint"
    checkpoint = data.get("checkpoint")
    if q is not None and not journal.done("manifest"):
        _manifest(root, q, parts, bool(checkpoint) and cp_path.exists())  # written ahead of the moves
        journal.mark("manifest")
    for part in parts:
        live = root / part
        new = build / part
        if not journal.done(f"old:{part}"):
            if live.exists():
                if q is not None:
                    target = q.folder / "files" / part
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if not target.exists():
                        move(live, target)
                else:
                    trash = build.parent / "trash" / part
                    trash.parent.mkdir(parents=True, exist_ok=True)
                    move(live, trash)
            journal.mark(f"old:{part}")
        if not journal.done(f"new:{part}"):
            if new.exists() and not live.exists():
                live.parent.mkdir(parents=True, exist_ok=True)
                move(new, live)
            journal.mark(f"new:{part}")
    if checkpoint and not journal.done("checkpoint"):
        if q is not None and cp_path.exists() and not (q.folder / "files" / "checkpoint").exists():
            dst = q.folder / "files" / "checkpoint"
            dst.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dst, read_file(cp_path))
        c = checkpoint
        cp = cpmod.Checkpoint(
            c["physicMsgTimestamp"],
            c["logicsMsgTimestamp"],
            c["indexMsgTimestamp"],
            c["masterFlushedOffset"],
            c["confirmPhyOffset"],
        )
        atomic_write(cp_path, cpmod.encode(cp), tmp_dir=scratch_dir(root, "tmp"))
        journal.mark("checkpoint")
    shutil.rmtree(build.parent / "trash", ignore_errors=True)
    shutil.rmtree(build, ignore_errors=True)
    journal.remove()
    for d in (root / SCRATCH_DIR / "redispatch", root / SCRATCH_DIR / "tmp", root / SCRATCH_DIR):
        try:
            d.rmdir()  # only when nothing else uses it
        except OSError:
            break
    journal.hook("redispatch:finished")
    return qdir
