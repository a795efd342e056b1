"""``convert --cq rocksdb|file``: the same store with its consume queues in the other 5.x layout.

The new store gets a copy of the commit log, index files, checkpoint and config files (consumer offsets
unchanged), and every queue's units in the target layout at the same queue offsets: consume queue files
(``storeType=default``) or a RocksDB database with the ``max``/``min`` rows and the dispatch checkpoint row
(``storeType=defaultRocksDB``). A unit keeps its commit log offset, size and tagsCode; a RocksDB unit also
holds its record's store timestamp, read from the commit log. The engine's min offset stays what it is:
a RocksDB ``min`` row names the queue's min offset as the source store serves it.

Nothing of the source store is changed. The new store is built in ``<output>.converting`` beside the
output and renamed to it when complete, so a run killed at any step leaves no half store under the output's
name; a re-run removes the unfinished build and starts again. Its broker.conf (the source's with the new
paths and ``storeType``) is shown, or written beside the new store with ``write_broker_conf``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.codec.commitlog import MIN_RECORD_SIZE_V1, store_timestamp_at
from rmqstore.errors import UnsafePlan, UsageError
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, fsync_file
from rmqstore.safety.journal import StepHook, no_step
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import StoreConfig, read_java_properties, segment_for
from rmqstore.store.queue.interface import ConsumeQueue
from rmqstore.store.queue.kinds import consume_queue_store, keeps_rocksdb
from rmqstore.store.queue.rocksdbconsumequeue import ROCKSDB_STORE_TYPE, RocksDBConsumeQueues

LAYOUTS = {"file": "default", "rocksdb": ROCKSDB_STORE_TYPE}  # --cq value -> storeType
# what is copied as it is: everything a broker reads but the consume queues (and rmqstore's own scratch)
_NOT_COPIED = {"consumequeue", "lock", SCRATCH_DIR, "broker.conf"}
_PATH_KEYS = ("storePathRootDir", "storePathCommitLog", "storeType")


@dataclass(frozen=True, slots=True)
class QueueCopy(JsonModel):
    """One queue written in the new layout: its bounds as the store serves them and its units."""

    topic: str
    queue_id: int
    bounds: tuple[int, int]  # min and max offset
    units: int

    json_keys = "topic queue_id bounds=minMaxOffset units"


@dataclass(frozen=True, slots=True)
class ConvertPlan(JsonModel):
    """The new store: what is copied, which queues are written in the target layout, its broker.conf."""

    operation: ClassVar[str] = "convert"
    json_keys = "stores=storeAndOutput layouts=fromTo copied queues broker_conf=brokerConf broker_conf_path"

    layouts: tuple[str, str]  # the consume queue layout of the store, and of the new store
    stores: tuple[Path, Path]  # the store, and the new store's root
    queues: tuple[QueueCopy, ...]
    copied: tuple[str, ...]  # paths under the store root, copied as they are
    broker_conf: str  # the new store's broker.conf
    broker_conf_path: Path | None = None  # where it is written (None: shown only)

    @property
    def store_root(self) -> Path:
        return self.stores[0]

    @property
    def output(self) -> Path:
        return self.stores[1]

    @property
    def target_layout(self) -> str:
        return self.layouts[1]

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        out = [
            PlannedAction("convert", "copy", self.output / p, f"copied from {self.store_root / p}") for p in self.copied
        ]
        why = f"{len(self.queues)} queue(s), {sum(q.units for q in self.queues)} unit(s) in the {self.target_layout} layout"
        out.append(PlannedAction("convert", "write", self.output / "consumequeue", why))
        out.append(
            PlannedAction("convert", "write", self.output / "broker.conf", f"storeType={LAYOUTS[self.target_layout]}")
        )
        return tuple(out)

    def summary(self) -> dict[str, Any]:
        return {
            "store": str(self.store_root),
            "output": str(self.output),
            "consumeQueues": " -> ".join(self.layouts),
            "queues": len(self.queues),
            "units": sum(q.units for q in self.queues),
            "storeType": LAYOUTS[self.target_layout],
        }

    def details(self) -> dict[str, list[dict[str, Any]]]:
        return {"queues": [q.to_json() for q in self.queues]}


def layout_of(cfg: StoreConfig) -> str:
    return "rocksdb" if keeps_rocksdb(cfg) else "file"


def plan_convert_cq(st: Store, target: str, output: Path, *, write_broker_conf: bool = False) -> ConvertPlan:
    """What converting ``st`` to the ``target`` consume queue layout writes into ``output`` (reads only)."""
    if target not in LAYOUTS:
        raise UsageError(f"--cq takes {' or '.join(LAYOUTS)}, not {target!r}")
    source = layout_of(st.config)
    if source == target:
        raise UsageError(f"{st.root}: the consume queues are already in the {target} layout")
    output = Path(output).absolute()
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise UnsafePlan(f"{output}: the output exists and is not an empty directory; nothing was written")
    if output == st.root.absolute() or st.root.absolute() in output.parents:
        raise UsageError(f"{output}: the output must lie outside the store")
    if st.abort_exists():
        raise UnsafePlan(f"{st.root}: abort exists (the last shutdown was not clean): run `rmqstore recover` first")
    queues = _queues(st, target)
    copied = tuple(sorted(n for n in os.listdir(st.root) if n not in _NOT_COPIED))
    conf = broker_conf_text(st.config, output, target)
    conf_path = output.parent / "broker.conf" if write_broker_conf else None
    if conf_path is not None and conf_path.exists() and conf_path.read_text("utf-8") != conf:
        raise UnsafePlan(
            f"{conf_path}: exists; the conversion writes the new store's broker.conf there (move it away first)"
        )
    return ConvertPlan((source, target), (st.root, output), tuple(queues), copied, conf, conf_path)


def _queues(st: Store, target: str) -> list[QueueCopy]:
    min_phy = st.min_phy_offset()
    out, lmq = [], []
    for q in st.consume_queues.queues():
        if target == "rocksdb" and q.topic.startswith("%LMQ%"):
            lmq.append(q.topic)
            continue
        first, units = q.units()
        rng = q.queue_range(min_phy)
        out.append(QueueCopy(q.topic, q.queue_id, (rng.min_offset, rng.max_offset), len(units)))
    if lmq:
        raise UnsafePlan(
            f"{st.root}: %LMQ% queues ({', '.join(sorted(set(lmq)))}) cannot be kept: the 5.2.0 RocksDB consume "
            "queue dispatches no LMQ queue; nothing was written"
        )
    return out


def broker_conf_text(cfg: StoreConfig, output: Path, target: str) -> str:
    """The source's broker.conf with the new store's paths and ``storeType``."""
    lines = [f"# the broker.conf of {output}: written by rmqstore convert --cq {target}"]
    if cfg.source is not None:
        props = read_java_properties(cfg.source)
        lines += [f"{k}={v[0]}" for k, v in props.items() if k not in _PATH_KEYS]
    lines += [f"storePathRootDir={output}", f"storePathCommitLog={output / 'commitlog'}",
              f"storeType={LAYOUTS[target]}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def build_path(output: Path) -> Path:
    return output.with_name(output.name + ".converting")


def apply_convert_cq(plan: ConvertPlan, st: Store, *, on_step: StepHook | None = None) -> Path:
    """Write the new store into ``<output>.converting``, then rename it to the output."""
    hook = on_step or no_step
    build = build_path(plan.output)
    shutil.rmtree(build, ignore_errors=True)  # an unfinished earlier run
    build.mkdir(parents=True)
    for part in plan.copied:
        _copy(st.root / part, build / part)
    hook("convert:copied")
    target_cfg = replace(st.config, store_root=build, store_type=LAYOUTS[plan.target_layout],
                         explicit=st.config.explicit | {"storeType"})  # fmt: skip
    _write_queues(st, target_cfg, build, plan)
    hook("convert:queues")
    if plan.broker_conf_path is not None:  # before the rename: a re-run finds the same text there
        atomic_write(plan.broker_conf_path, plan.broker_conf.encode("utf-8"))
    fsync_dir(build)
    if plan.output.exists():
        plan.output.rmdir()  # an empty directory given as the output
    os.rename(build, plan.output)
    fsync_dir(plan.output.parent)
    hook("convert:finished")
    return plan.output


def _copy(src: Path, dst: Path) -> None:
    """A file or a directory tree, each file fsynced (the build is renamed into place only when whole)."""
    if src.is_dir():
        dst.mkdir()
        for name in sorted(os.listdir(src)):
            _copy(src / name, dst / name)
        fsync_dir(dst)
    elif src.is_file():
        shutil.copyfile(src, dst)
        shutil.copystat(src, dst)
        fsync_file(dst)


def _write_queues(st: Store, cfg: StoreConfig, build: Path, plan: ConvertPlan) -> None:
    target = consume_queue_store(cfg, build, writable=True)
    stamps = _StoreTimes(st)
    ok = False
    try:
        for qc in plan.queues:
            src = st.consume_queues.queue(qc.topic, qc.queue_id)
            _write_queue(src, target, qc, stamps)
        ok = True
    finally:
        stamps.close()
        target.close(sync=ok)
    if target.directory.is_dir():
        fsync_dir(target.directory)


def _write_queue(src: ConsumeQueue, target: Any, qc: QueueCopy, stamps: _StoreTimes) -> None:
    first, units = src.units()
    if not len(units):
        return
    phy = units["phy_offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    if "store_timestamp_ms" in units.dtype.names:
        ts = units["store_timestamp_ms"].astype(np.int64)
    else:
        ts = stamps.at(phy)
    w = target.queue(qc.topic, qc.queue_id).writer()
    qoff = np.arange(first, first + len(units), dtype=np.int64)
    w.put(phy, size, units["tags_code"].astype(np.int64), qoff, ts)
    w.close(True)
    min_offset = qc.bounds[0]
    if isinstance(target, RocksDBConsumeQueues) and first <= min_offset < first + len(units):
        target.mark_min(qc.topic, qc.queue_id, min_offset, int(phy[min_offset - first]))


class _StoreTimes:
    """Store timestamps of records by commit log offset (a file queue's units do not hold them)."""

    def __init__(self, st: Store) -> None:
        self.segs, _ = st.commitlog_segments()
        self.file_size = st.config.commitlog_file_size
        self._maps: dict[Path, Any] = {}
        self._stack = contextlib.ExitStack()

    def at(self, phy: np.ndarray) -> np.ndarray:
        out = np.zeros(len(phy), dtype=np.int64)
        for i, p in enumerate(phy.tolist()):
            seg = segment_for(self.segs, p, self.file_size)
            if seg is None or p - seg.base_offset + MIN_RECORD_SIZE_V1 > seg.size:
                continue
            buf = self._maps.get(seg.path)
            if buf is None:
                buf = self._maps[seg.path] = self._stack.enter_context(map_file(seg.path))
            out[i] = store_timestamp_at(buf, p - seg.base_offset)
        return out

    def close(self) -> None:
        self._maps.clear()
        self._stack.close()
