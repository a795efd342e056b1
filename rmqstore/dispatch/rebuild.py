"""Dispatch a commit log into fresh consume queue and index files under a build root (§9).

The local engine walks the commit log as the broker's re-dispatch does (the columnar scan of
``rmqstore.walk.columns``) and writes through :class:`Dispatcher`; LMQ and batch consume queues take
a second, per-record pass; another engine (Spark) is looked up in :data:`ENGINES`. ``redispatch``
swaps such a build into a store; ``convert`` builds the queues of the store it writes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from rmqstore.codec.topic import SkippedQueue
from rmqstore.dispatch.dispatcher import Dispatcher, DispatchStats
from rmqstore.dispatch.engines import ENGINES, BuildScope
from rmqstore.dispatch.multiqueue import ExtraDispatcher, iter_records
from rmqstore.errors import InputError, UnsupportedStore
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.queue.batchconsumequeue import batch_cq_topics
from rmqstore.store.queue.kinds import keeps_rocksdb
from rmqstore.walk.columns import iter_columns
from rmqstore.walk.requests import ScanStop


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
        for src, wanted in (
            (st.consume_queues.directory, consume_queue),
            (st.batch_queues.directory, consume_queue),
            (cfg.index_dir, index),
        ):
            if wanted and src.is_dir():
                shutil.copytree(src, build_root / src.name, dirs_exist_ok=True)
        start = from_phy
    if engine != "local":
        if consume_queue and keeps_rocksdb(cfg):
            raise UnsupportedStore(f"{st.root}: engine {engine!r} writes no RocksDB consume queue; use --engine local")
        if consume_queue and (cfg.enable_multi_dispatch or batch_cq_topics(cfg)):
            raise UnsupportedStore(
                f"{st.root}: engine {engine!r} writes neither %LMQ% (multi-dispatch) nor batch consume queues; "
                "use --engine local"
            )
        fn = ENGINES.get(engine)
        if fn is None:
            raise InputError(
                f"engine {engine!r} is not loaded; use local, or import its package first "
                "(rmqstore.spark.redispatch for spark, which the command does)"
            )
        return fn(st, build_root, BuildScope(start, topics, consume_queue, index), master=spark_master)
    bcq = batch_cq_topics(cfg)
    d = Dispatcher(
        cfg,
        root=build_root,
        consume_queue=consume_queue,
        index=index,
        topics=set(topics) if topics else None,
        cq_exclude=bcq,
        index_lane=True,
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
    if consume_queue:
        for q in _dispatch_extra(st, build_root, start, end, bcq, topics):
            stats.skipped.setdefault((q.name, q.queue_id), q)
    return stats, end, reason


def _dispatch_extra(
    st: Store, build_root: Path, start: int, end: int, bcq: frozenset[str], topics: tuple[str, ...] | None
) -> list[SkippedQueue]:
    """LMQ multi-dispatch and batch consume queues: a second, per-record pass (only on stores that use
    them); returns the LMQ names skipped."""
    extra = ExtraDispatcher(st.config, build_root, bcq)
    if not extra.needed:
        return []
    try:
        for seg in st.commitlog_segments()[0]:
            lo, hi = max(start, seg.base_offset), min(end, seg.base_offset + seg.size)
            if lo >= hi:
                continue
            with map_file(seg.path) as buf:
                for rec in iter_records(seg, buf, lo - seg.base_offset, hi - seg.base_offset, st.config):
                    if topics is None or rec.topic in topics:
                        extra.put(rec)
    finally:
        extra.close()
    return list(extra.skipped.values())
