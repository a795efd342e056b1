"""Dispatch targets beyond the plain consume queue (store-format.md §4.7, §9.1).

* LMQ multi-dispatch (4.9.3+, ``enableMultiDispatch``): a record whose ``INNER_MULTI_DISPATCH`` lists
  queues is also entered in each of them, at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives in the same
  position; a ``%LMQ%`` queue (with ``enableLmq``) is queue 0, another one takes the record's queue id.
* Batch consume queues (5.x, topic attribute ``queue.type=BatchCQ``): the topic's records go into
  ``batchconsumequeue/<topic>/<queueId>/`` as 46-byte units, never into ``consumequeue/``; an
  inner-batch record (sysFlag 0x80) takes ``INNER_NUM`` queue offsets from ``INNER_BASE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rmqstore.codec.commitlog import (
    INNER_BATCH_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    Record,
    decode_record,
)
from rmqstore.codec.topic import SkippedQueue, note_skipped, queue_path_problem
from rmqstore.errors import CorruptData
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig, list_segments, record_place
from rmqstore.store.queue.batchconsumequeue import BatchConsumeQueues, BatchConsumeQueueWriter, batch_cq_topics
from rmqstore.store.queue.consumequeue import ConsumeQueueWriter, FileConsumeQueues
from rmqstore.store.queue.kinds import keeps_rocksdb
from rmqstore.walk.chain import walk_segment
from rmqstore.walk.requests import request_from_record

PROP_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROP_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROP_INNER_NUM = "INNER_NUM"
PROP_INNER_BASE = "INNER_BASE"
LMQ_PREFIX = "%LMQ%"
RETRY_PREFIX = "%RETRY%"


def lmq_targets(rec: Record, cfg: StoreConfig) -> list[tuple[str, int, int]]:
    """(queue, queue id, queue offset) of every extra queue the record is dispatched to."""
    if not cfg.enable_multi_dispatch or rec.topic.startswith(RETRY_PREFIX):
        return []
    props = rec.properties
    names = props.get(PROP_MULTI_DISPATCH)
    if not names:
        return []
    offsets = (props.get(PROP_MULTI_QUEUE_OFFSET) or "").split(",")
    out = []
    for i, name in enumerate(names.split(",")):
        if i >= len(offsets) or not offsets[i].lstrip("-").isdigit():
            break  # the broker's parse fails there: no further queue gets the record
        qid = 0 if cfg.enable_lmq and name.startswith(LMQ_PREFIX) else rec.queue_id
        out.append((name, qid, int(offsets[i])))
    return out


def safe_lmq_targets(
    rec: Record, cfg: StoreConfig, skipped: dict[tuple[str, int], SkippedQueue]
) -> list[tuple[str, int, int]]:
    """:func:`lmq_targets` whose names can be directories; the others are counted in ``skipped`` (the
    broker's ``multiDispatchLmqQueue`` skips a name holding a separator and goes on with the next)."""
    out = []
    for name, qid, offset in lmq_targets(rec, cfg):
        why = queue_path_problem(name, qid)
        if why is None:
            out.append((name, qid, offset))
            continue
        where = record_place(cfg.commitlog_dir, cfg.commitlog_file_size, rec.phy_offset)
        note_skipped(skipped, name, qid, f"INNER_MULTI_DISPATCH: {why}", where, 1)
    return out


def lmq_skipped(st: object, to_phy: int) -> list[SkippedQueue]:
    """The LMQ names the dispatch skips in the records before ``to_phy`` (reads only; an LMQ store only;
    a file whose chain breaks is read up to the break)."""
    cfg: StoreConfig = st.config  # type: ignore[attr-defined]
    skipped: dict[tuple[str, int], SkippedQueue] = {}
    if not cfg.enable_multi_dispatch or keeps_rocksdb(cfg):
        return []
    for seg in st.commitlog_segments()[0]:  # type: ignore[attr-defined]
        end = min(seg.size, to_phy - seg.base_offset)
        if end <= 0:
            break
        with map_file(seg.path) as buf:
            try:
                for rec in iter_records(seg, buf, 0, end, cfg):
                    if rec.sys_flag & TRANSACTION_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                        safe_lmq_targets(rec, cfg, skipped)
            except CorruptData:
                continue  # check reports the damage itself
    return list(skipped.values())


def predicted_skips(st: object, from_phy: int, to_phy: int, topics: tuple[str, ...]) -> list[SkippedQueue]:
    """What a dispatch of ``[from_phy, to_phy)`` will skip, for a plan to show before it runs: records whose
    queue cannot be a directory and LMQ names that cannot. ``topics`` are the names a walk of the range
    met: when all are safe and the store has no LMQ, nothing is read."""
    cfg: StoreConfig = st.config  # type: ignore[attr-defined]
    queues = st.consume_queues  # type: ignore[attr-defined]
    lmq = cfg.enable_multi_dispatch and not keeps_rocksdb(cfg)
    if not lmq and all(queues.path_problem(t, 0) is None for t in topics):
        return []
    skipped: dict[tuple[str, int], SkippedQueue] = {}
    exclude = batch_cq_topics(cfg)
    for seg in st.commitlog_segments()[0]:  # type: ignore[attr-defined]
        lo, hi = max(from_phy, seg.base_offset), min(to_phy, seg.base_offset + seg.size)
        if lo >= hi:
            continue
        with map_file(seg.path) as buf:
            for rec in iter_records(seg, buf, lo - seg.base_offset, hi - seg.base_offset, cfg):
                if rec.sys_flag & TRANSACTION_MASK not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                    continue
                why = queues.path_problem(rec.topic, rec.queue_id) if rec.topic not in exclude else None
                if why is not None:
                    where = (seg.path, rec.phy_offset - seg.base_offset, rec.phy_offset)
                    note_skipped(skipped, rec.topic, rec.queue_id, why, where, 1)
                if lmq:
                    safe_lmq_targets(rec, cfg, skipped)
    return list(skipped.values())


def batch_unit(rec: Record) -> tuple[int, int]:
    """(base queue offset, messages) of a record in a batch consume queue."""
    if rec.sys_flag & INNER_BATCH_FLAG:
        props = rec.properties
        try:
            return int(props.get(PROP_INNER_BASE, rec.queue_offset)), int(props.get(PROP_INNER_NUM, "1"))
        except ValueError:
            raise CorruptData(
                "INNER_BASE / INNER_NUM of an inner-batch record is not a number",
                pos=rec.pos,
                phy_offset=rec.phy_offset,
            ) from None
    return rec.queue_offset, 1


class ExtraDispatcher:
    """Writes the LMQ consume queue entries and batch consume queue units of records, in commit log order."""

    def __init__(self, cfg: StoreConfig, root: Path, bcq_topics: frozenset[str]):
        self.cfg = cfg
        self.bcq_topics = bcq_topics
        self._queues = FileConsumeQueues(cfg, Path(root))
        # 5.2.0's RocksDB consume queue dispatches no %LMQ% queue: its multi-dispatch lives in the file queue
        self.lmq = cfg.enable_multi_dispatch and not keeps_rocksdb(cfg)
        self._batch_queues = BatchConsumeQueues(cfg, Path(root))
        self._cq: dict[tuple[str, int], ConsumeQueueWriter] = {}
        self._bcq: dict[tuple[str, int], BatchConsumeQueueWriter] = {}
        self.skipped: dict[tuple[str, int], SkippedQueue] = {}

    @property
    def needed(self) -> bool:
        return bool(self.bcq_topics) or self.lmq

    def put(self, rec: Record) -> None:
        tt = rec.sys_flag & TRANSACTION_MASK
        if tt not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return
        req = None
        if rec.topic in self.bcq_topics:
            req = request_from_record(rec, self.cfg)
            self._put_unit(rec, req.tags_code)
        for name, qid, offset in safe_lmq_targets(rec, self.cfg, self.skipped) if self.lmq else ():
            req = req or request_from_record(rec, self.cfg)
            w = self._cq.get((name, qid))
            if w is None:
                w = self._cq[(name, qid)] = self._queues.queue(name, qid).writer()
            w.place(offset, rec.phy_offset, rec.total_size, req.tags_code)

    def _put_unit(self, rec: Record, tags_code: int) -> None:
        key = (rec.topic, rec.queue_id)
        w = self._bcq.get(key)
        if w is None:
            w = self._bcq[key] = self._batch_queues.queue(*key).writer()
        if rec.phy_offset < w.end_phy:
            return  # already in the queue (a re-dispatch continuing the files)
        base, num = batch_unit(rec)
        w.put((rec.phy_offset,), (rec.total_size,), (tags_code,), (base,), (rec.store_timestamp_ms,), (num,))

    def close(self) -> None:
        for w in (*self._cq.values(), *self._bcq.values()):
            w.close()


def iter_records(seg: Segment, buf: object, start: int, end: int, cfg: StoreConfig) -> Iterator[Record]:
    """Records of one mapped file between the frames at byte positions ``start`` and ``end`` (a valid chain)."""
    for rec in walk_segment(buf, seg, start_pos=start, end_pos=end, broker=cfg.broker):
        if isinstance(rec, Record):
            yield rec


def dispatch_extra(
    st: object, from_phy: int, to_phy: int, *, only_after: int | None = None, batch: frozenset[str] = frozenset()
) -> list[SkippedQueue]:
    """The %LMQ% entries and batch consume queue units of the records in ``[from_phy, to_phy)`` of the
    store's commit log (those after ``only_after`` when given), written into the store (§4.7, §9.1);
    the LMQ names skipped because they cannot be directories are returned."""

    cfg = st.config  # type: ignore[attr-defined]
    extra = ExtraDispatcher(cfg, Path(st.root), batch)  # type: ignore[attr-defined]
    try:
        for seg in st.commitlog_segments()[0]:  # type: ignore[attr-defined]
            lo, hi = max(from_phy, seg.base_offset), min(to_phy, seg.base_offset + seg.size)
            if lo < hi:
                with map_file(seg.path) as buf:
                    for rec in iter_records(seg, buf, lo - seg.base_offset, hi - seg.base_offset, cfg):
                        if only_after is None or rec.phy_offset > only_after:
                            extra.put(rec)
    finally:
        extra.close()
    return list(extra.skipped.values())


def lmq_listed(cfg: StoreConfig, queue: str, queue_id: int, phys: object, queue_offsets: object) -> object:
    """For each (commit log offset, queue offset) of queue ``queue``: does the record there list this
    queue in INNER_MULTI_DISPATCH with that offset (multi-dispatch entries)?"""
    import numpy as np

    segs, _ = list_segments(cfg.commitlog_dir, cfg.commitlog_file_size)
    bases = [s.base_offset for s in segs]
    out = np.zeros(len(phys), dtype=bool)  # type: ignore[arg-type]
    by_file: dict[int, list[int]] = {}
    for i, phy in enumerate(phys):  # type: ignore[attr-defined]
        f = max(0, int(np.searchsorted(bases, int(phy), side="right")) - 1)
        by_file.setdefault(f, []).append(i)
    for f, items in by_file.items():
        seg = segs[f]
        with map_file(seg.path) as buf:
            for i in items:
                try:
                    rec = decode_record_at(buf, int(phys[i]) - seg.base_offset, seg, cfg)  # type: ignore[index]
                except CorruptData:
                    continue
                if rec is None:
                    continue
                targets = lmq_targets(rec, cfg)
                out[i] = (queue, queue_id, int(queue_offsets[i])) in targets  # type: ignore[index]
    return out


def decode_record_at(buf: object, pos: int, seg: Segment, cfg: StoreConfig) -> Record | None:

    rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, broker=cfg.broker)
    return rec if isinstance(rec, Record) else None
