"""Re-dispatch: rebuild consume queues and index files from the commit log, then swap them in.

The rebuild is written into ``<root>/.rmqstore/redispatch/build`` (never into the live
directories), compared with the current files, and swapped in by directory renames under a
journal: the old directories go to the quarantine folder, so nothing is lost and a run killed
at any point can be re-run to the same result.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as cpmod
from .columnar import iter_columns
from .consumequeue import entries_array, valid_prefix
from .dispatch import Dispatcher, DispatchStats, ScanStop
from .errors import InputError, UnsafePlan
from .fsutil import atomic_write, fsync_dir, scratch_dir
from .indexfile import decode_header
from .layout import StoreConfig
from .store import Store

JOURNAL = "redispatch.journal.json"


@dataclass(frozen=True, slots=True)
class QueueDiff:
    topic: str
    queue_id: int
    current_entries: int
    rebuilt_entries: int
    missing: int  # in the rebuild, not in the current files
    extra: int  # in the current files, not in the rebuild
    different: int  # same queue offset, different bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "currentEntries": self.current_entries,
            "rebuiltEntries": self.rebuilt_entries,
            "missing": self.missing,
            "extra": self.extra,
            "different": self.different,
        }


@dataclass(frozen=True, slots=True)
class RedispatchPlan:
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

    @property
    def changed(self) -> bool:
        return any(d.missing or d.extra or d.different for d in self.queue_diffs) or (
            self.build_index and self.index_files_changed
        )

    @property
    def index_files_changed(self) -> bool:
        return self.stats.get("indexChanged", True)

    def to_json(self) -> dict[str, Any]:
        return {
            "store": str(self.store_root),
            "fromPhyOffset": self.from_phy,
            "toPhyOffset": self.to_phy,
            "stopReason": self.stop_reason,
            "consumequeue": self.build_consumequeue,
            "index": self.build_index,
            "topics": list(self.topics) if self.topics else None,
            "output": str(self.output) if self.output else None,
            "stats": self.stats,
            "queues": [d.to_json() for d in self.queue_diffs],
            "indexFilesCurrent": list(self.index_files_current),
            "indexFilesRebuilt": list(self.index_files_rebuilt),
            "checkpointBefore": self.checkpoint_before,
            "checkpointAfter": self.checkpoint_after,
            "notes": list(self.notes),
        }


def _read_queue(qdir: Path) -> np.ndarray:
    """All valid entries of a queue directory, concatenated (empty array if none)."""
    parts = []
    if qdir.is_dir():
        for name in sorted(n for n in os.listdir(qdir) if n.isdigit()):
            data = (qdir / name).read_bytes()
            arr = entries_array(data)
            n = valid_prefix(arr)
            parts.append(arr[:n].copy())
            if n < len(arr):
                break
    if not parts:
        return entries_array(b"")
    return np.concatenate(parts)


def _queue_base(qdir: Path) -> int:
    names = sorted(n for n in os.listdir(qdir) if n.isdigit()) if qdir.is_dir() else []
    return int(names[0]) // 20 if names else 0


def _diff_queues(cur_root: Path, new_root: Path, topics: tuple[str, ...] | None) -> list[QueueDiff]:
    def qlist(root: Path) -> set[tuple[str, int]]:
        out = set()
        base = root / "consumequeue"
        if base.is_dir():
            for t in os.listdir(base):
                if topics and t not in topics:
                    continue
                for q in os.listdir(base / t) if (base / t).is_dir() else []:
                    if q.lstrip("-").isdigit():
                        out.add((t, int(q)))
        return out

    diffs = []
    for topic, qid in sorted(qlist(cur_root) | qlist(new_root)):
        cd = cur_root / "consumequeue" / topic / str(qid)
        nd = new_root / "consumequeue" / topic / str(qid)
        cur, new = _read_queue(cd), _read_queue(nd)
        cb, nb = _queue_base(cd), _queue_base(nd)
        # align by queue offset
        lo = max(cb, nb)
        hi = min(cb + len(cur), nb + len(new))
        different = 0
        if hi > lo:
            a = cur[lo - cb : hi - cb]
            b = new[lo - nb : hi - nb]
            different = int(np.count_nonzero(a != b))
        overlap = max(0, hi - lo)
        diffs.append(QueueDiff(topic, qid, len(cur), len(new), len(new) - overlap, len(cur) - overlap, different))
    return diffs


def _index_summary(root: Path) -> list[dict[str, Any]]:
    out = []
    d = root / "index"
    if d.is_dir():
        for name in sorted(n for n in os.listdir(d) if n.isdigit()):
            with open(d / name, "rb") as f:
                h = decode_header(f.read(40), path=str(d / name))
            out.append(
                {
                    "name": name,
                    "beginTimestamp": h.begin_timestamp_ms,
                    "endTimestamp": h.end_timestamp_ms,
                    "beginPhyOffset": h.begin_phy_offset,
                    "endPhyOffset": h.end_phy_offset,
                    "hashSlotCount": h.hash_slot_count,
                    "indexCount": h.index_count,
                }
            )
    return out


def _index_identical(cur_root: Path, new_root: Path) -> bool:
    a = sorted(p for p in (cur_root / "index").glob("*") if p.name.isdigit()) if (cur_root / "index").is_dir() else []
    b = sorted(p for p in (new_root / "index").glob("*") if p.name.isdigit()) if (new_root / "index").is_dir() else []
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.stat().st_size != y.stat().st_size:
            return False
        with open(x, "rb") as fx, open(y, "rb") as fy:
            while True:
                bx, by = fx.read(1 << 20), fy.read(1 << 20)
                if bx != by:
                    return False
                if not bx:
                    break
    return True


def build(
    st: Store,
    build_root: Path,
    *,
    from_phy: int | None = None,
    topics: tuple[str, ...] | None = None,
    consume_queue: bool = True,
    index: bool = True,
    engine: str = "local",
    progress: Callable[[int], None] | None = None,
    spark_master: str | None = None,
) -> tuple[DispatchStats, int, str]:
    """Dispatch the commit log into fresh files under ``build_root``; returns (stats, end phy, stop reason)."""
    cfg = st.config
    segs, _ = st.commitlog_segments()
    start = segs[0].base_offset if segs else 0
    if from_phy is not None and from_phy > start:
        # Continue the existing files, as the broker's re-dispatch from an offset does.
        for sub, wanted in (("consumequeue", consume_queue), ("index", index)):
            src = cfg.store_root / sub
            if wanted and src.is_dir():
                shutil.copytree(src, build_root / sub, dirs_exist_ok=True)
        start = from_phy
    if engine == "spark":
        from .spark.redispatch import spark_redispatch  # the extra "spark" is needed only here

        return spark_redispatch(
            st,
            build_root,
            from_phy=start,
            topics=topics,
            consume_queue=consume_queue,
            index=index,
            master=spark_master,
        )
    if engine != "local":
        raise InputError(f"unknown engine {engine!r}; use local or spark")
    d = Dispatcher(
        cfg, root=build_root, consume_queue=consume_queue, index=index, topics=set(topics) if topics else None
    )
    end = start
    reason = "end"
    try:
        for seg, item in iter_columns(segs, cfg, from_phy=start, progress=progress):
            if not isinstance(item, ScanStop):
                d.dispatch_columns(item)
                continue
            end = seg.base_offset + item.pos
            reason = item.reason
            if item.reason == "invalid" and item.error is not None:
                reason = f"invalid record: {item.error}"
    finally:
        stats = d.close(sync=True)
    return stats, end, reason


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
) -> RedispatchPlan:
    """Build the rebuild (in a scratch or output directory) and compare it with the current files."""
    if only not in (None, "consumequeue", "index"):
        raise InputError(f"--only takes consumequeue or index, not {only!r}")
    if topics and only == "index":
        raise InputError("--topic selects consume queues; index files hold every topic and cannot be filtered")
    build_cq = only in (None, "consumequeue")
    build_ix = only in (None, "index") and not topics and st.config.message_index_enable
    notes = []
    if topics and only is None:
        notes.append("--topic given: only the consume queues of those topics are rebuilt; index files are kept")
    if output is not None:
        build_root = Path(output)
        if build_root.exists() and any(build_root.iterdir()):
            raise UnsafePlan(f"{build_root}: output directory is not empty")
    else:
        build_root = scratch_dir(st.root, "redispatch") / "build"
        if build_root.exists():
            shutil.rmtree(build_root)
    build_root.mkdir(parents=True, exist_ok=True)
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
    diffs = _diff_queues(st.root, build_root, topics) if build_cq else []
    sj = stats.to_json()
    if build_ix:
        sj["indexChanged"] = not _index_identical(st.root, build_root)
    cp = st.read_checkpoint()
    after = None
    if cp is not None:
        after = cp
        if build_cq and stats.logics_msg_timestamp_ms:
            after = cpmod.Checkpoint(
                cp.physic_msg_timestamp_ms,
                stats.logics_msg_timestamp_ms,
                cp.index_msg_timestamp_ms,
                cp.master_flushed_offset,
                cp.confirm_phy_offset,
            )
        if build_ix:
            after = cpmod.Checkpoint(
                after.physic_msg_timestamp_ms,
                after.logics_msg_timestamp_ms,
                stats.index_msg_timestamp_ms,
                after.master_flushed_offset,
                after.confirm_phy_offset,
            )
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
        tuple(_index_summary(build_root)),
        reason,
        cp.to_json() if cp else None,
        after.to_json() if after else None,
        output,
        tuple(notes),
    )


def discard(plan: RedispatchPlan) -> None:
    """Remove a scratch build (dry run)."""
    if plan.output is None and plan.build_root.exists():
        shutil.rmtree(plan.build_root)


def default_quarantine(root: Path, now_ms: int | None = None) -> Path:
    t = dt.datetime.fromtimestamp((now_ms or int(dt.datetime.now().timestamp() * 1000)) / 1000, dt.UTC)
    return (
        root.resolve().parent / f"{root.resolve().name}.quarantine" / (t.strftime("%Y%m%dT%H%M%S%fZ") + "-redispatch")
    )


def apply_redispatch(plan: RedispatchPlan, st: Store, *, quarantine: Path | None, keep_old: bool = True) -> Path | None:
    """Swap the rebuilt directories in; old ones go to ``quarantine`` (or are deleted if None
    and not ``keep_old``). Journaled: re-running after a kill finishes the swap."""
    if plan.output is not None:
        return None  # built beside the store: nothing to swap
    root = st.root
    journal_path = scratch_dir(root, "redispatch") / JOURNAL
    parts = []
    if plan.build_consumequeue:
        if plan.topics:
            parts += [f"consumequeue/{t}" for t in plan.topics]
        else:
            parts.append("consumequeue")
    if plan.build_index:
        parts.append("index")
    qdir = quarantine
    if qdir is None and keep_old:
        qdir = default_quarantine(root)
    journal = {
        "build": str(plan.build_root),
        "quarantine": str(qdir) if qdir else None,
        "parts": parts,
        "checkpoint": plan.checkpoint_after,
        "done": [],
    }
    atomic_write(journal_path, json.dumps(journal, indent=1).encode())
    return finish(root, journal_path)


def finish(root: Path, journal_path: Path) -> Path | None:
    """Complete (or resume) a journaled swap."""
    journal = json.loads(journal_path.read_text())
    build = Path(journal["build"])
    qdir = Path(journal["quarantine"]) if journal["quarantine"] else None
    done = set(journal["done"])

    def mark(step: str) -> None:
        journal["done"].append(step)
        done.add(step)
        atomic_write(journal_path, json.dumps(journal, indent=1).encode())

    manifest = []
    for part in journal["parts"]:
        live = root / part
        new = build / part
        if f"old:{part}" not in done:
            if live.exists():
                if qdir is not None:
                    target = qdir / part
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if not target.exists():
                        os.replace(live, target)
                        fsync_dir(target.parent)
                else:
                    trash = build.parent / "trash" / part
                    trash.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(live, trash)
            mark(f"old:{part}")
        if f"new:{part}" not in done:
            if new.exists() and not live.exists():
                live.parent.mkdir(parents=True, exist_ok=True)
                os.replace(new, live)
                fsync_dir(live.parent)
            mark(f"new:{part}")
        manifest.append({"path": part, "restore": f"mv {qdir / part if qdir else '(deleted)'} {live}"})
    if journal.get("checkpoint") and "checkpoint" not in done:
        c = journal["checkpoint"]
        cp = cpmod.Checkpoint(
            c["physicMsgTimestamp"],
            c["logicsMsgTimestamp"],
            c["indexMsgTimestamp"],
            c["masterFlushedOffset"],
            c["confirmPhyOffset"],
        )
        cp_path = root / "checkpoint"
        if qdir is not None and cp_path.exists() and not (qdir / "checkpoint").exists():
            qdir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(cp_path, qdir / "checkpoint")
            manifest.append({"path": "checkpoint", "restore": f"cp {qdir / 'checkpoint'} {cp_path}"})
        atomic_write(cp_path, cpmod.encode(cp), tmp_dir=scratch_dir(root, "tmp"))
        mark("checkpoint")
    if qdir is not None:
        qdir.mkdir(parents=True, exist_ok=True)
        atomic_write(
            qdir / "manifest.json",
            json.dumps(
                {
                    "store": str(root),
                    "operation": "redispatch",
                    "moved": manifest,
                    "howToRestore": "stop the broker, then run each 'restore' command",
                },
                indent=2,
            ).encode(),
        )
    shutil.rmtree(build.parent / "trash", ignore_errors=True)
    shutil.rmtree(build, ignore_errors=True)
    journal_path.unlink()
    return qdir


def pending_journal(root: Path) -> Path | None:
    p = Path(root) / ".rmqstore" / "redispatch" / JOURNAL
    return p if p.exists() else None


def cfg_summary(cfg: StoreConfig) -> dict[str, Any]:
    return {
        "cqFileSize": cfg.cq_file_size,
        "maxHashSlotNum": cfg.max_hash_slot_num,
        "maxIndexNum": cfg.max_index_num,
        "broker": cfg.broker,
    }
