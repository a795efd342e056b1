"""Dispatch targets beyond the plain consume queue (store-format.md §4.7, §9.1).

* LMQ multi-dispatch (4.9.3+, ``enableMultiDispatch``): a record whose ``INNER_MULTI_DISPATCH`` lists
  queues is also entered in each of them, at the offset ``INNER_MULTI_QUEUE_OFFSET`` gives in the same
  position; a ``%LMQ%`` queue (with ``enableLmq``) is queue 0, another one takes the record's queue id.
* Batch consume queues (5.x, topic attribute ``queue.type=BatchCQ``): the topic's records go into
  ``batchconsumequeue/<topic>/<queueId>/`` as 46-byte units, never into ``consumequeue/``; an
  inner-batch record (sysFlag 0x80) takes ``INNER_NUM`` queue offsets from ``INNER_BASE``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqstore.codec.commitlog import (
    INNER_BATCH_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    Record,
    decode_record,
)
from rmqstore.codec.consumequeue import (
    BCQ_UNIT_SIZE,
    ENTRY_SIZE,
    decode_bcq_entry,
    encode_bcq_entry,
    encode_entry,
)
from rmqstore.codec.topic import topic_name_problem
from rmqstore.errors import CorruptData
from rmqstore.store.batchcq import bcq_units, bcq_valid
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig, list_segments
from rmqstore.walk.chain import walk_segment
from rmqstore.walk.requests import request_from_record
from rmqstore.walk.starts import data_end

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


@dataclass(slots=True)
class _Appender:
    """Appends fixed-size units to a segmented queue directory, rolling at the file size."""

    directory: Path
    file_size: int
    unit: int
    written: int = 0
    _fd: int | None = None
    _base: int = -1

    def put_at(self, byte_offset: int, data: bytes) -> None:
        base = byte_offset - byte_offset % self.file_size
        if base != self._base:
            self.close()
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{base:020d}"
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size < self.file_size:
                os.ftruncate(self._fd, self.file_size)
            self._base = base
        assert self._fd is not None
        os.pwrite(self._fd, data, byte_offset - base)
        self.written += 1

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            self._base = -1


class ExtraDispatcher:
    """Writes the LMQ consume queue entries and batch consume queue units of records, in commit log order."""

    def __init__(self, cfg: StoreConfig, root: Path, bcq_topics: frozenset[str]):
        self.cfg = cfg
        self.root = Path(root)
        self.bcq_topics = bcq_topics
        self._cq: dict[tuple[str, int], _Appender] = {}
        self._bcq: dict[tuple[str, int], _Appender] = {}
        self._bcq_next: dict[tuple[str, int], int] = {}
        self._bcq_end: dict[tuple[str, int], int] = {}  # commit log end of each queue's last unit
        self.lmq_entries = 0
        self.bcq_units = 0

    @property
    def needed(self) -> bool:
        return bool(self.bcq_topics) or self.cfg.enable_multi_dispatch

    def put(self, rec: Record) -> None:
        tt = rec.sys_flag & TRANSACTION_MASK
        if tt not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return
        req = None
        if rec.topic in self.bcq_topics:
            req = request_from_record(rec, self.cfg)
            self._put_unit(rec, req.tags_code)
        for name, qid, offset in lmq_targets(rec, self.cfg):
            if topic_name_problem(name) is not None:
                raise CorruptData(f"INNER_MULTI_DISPATCH names a queue the broker refuses: {name!r}", pos=rec.pos)
            req = req or request_from_record(rec, self.cfg)
            w = self._cq.get((name, qid))
            if w is None:
                w = _Appender(self.root / "consumequeue" / name / str(qid), self.cfg.cq_file_size, ENTRY_SIZE)
                self._cq[(name, qid)] = w
            w.put_at(offset * ENTRY_SIZE, encode_entry(rec.phy_offset, rec.total_size, req.tags_code))
            self.lmq_entries += 1

    def _put_unit(self, rec: Record, tags_code: int) -> None:
        key = (rec.topic, rec.queue_id)
        w = self._bcq.get(key)
        if w is None:
            size = self.cfg.bcq_file_size - self.cfg.bcq_file_size % BCQ_UNIT_SIZE
            w = _Appender(self.root / "batchconsumequeue" / rec.topic / str(rec.queue_id), size, BCQ_UNIT_SIZE)
            self._bcq[key] = w
            self._bcq_next[key], self._bcq_end[key] = _existing_units(w.directory, size)
        if rec.phy_offset < self._bcq_end[key]:
            return  # already in the queue (a re-dispatch continuing the files)
        base, num = batch_unit(rec)
        unit = encode_bcq_entry(rec.phy_offset, rec.total_size, tags_code, rec.store_timestamp_ms, base, num)
        w.put_at(self._bcq_next[key] * BCQ_UNIT_SIZE, unit)
        self._bcq_next[key] += 1
        self.bcq_units += 1

    def close(self) -> None:
        for w in (*self._cq.values(), *self._bcq.values()):
            w.close()


def _existing_units(directory: Path, file_size: int) -> tuple[int, int]:
    """(units, commit log end of the last unit) already in a batch consume queue directory (units are
    appended, not placed by offset; the last file may hold none yet)."""
    names = []
    with contextlib.suppress(FileNotFoundError):
        names = sorted(n for n in os.listdir(directory) if n.isdigit())
    for name in reversed(names):
        count, end = int(name) // BCQ_UNIT_SIZE, -1
        with open(directory / name, "rb") as f, contextlib.suppress(ValueError):
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                for pos in range(0, len(buf) - BCQ_UNIT_SIZE + 1, BCQ_UNIT_SIZE):
                    e = decode_bcq_entry(buf, pos, path=str(directory / name))
                    if e.ends_queue:
                        break
                    count, end = count + 1, e.phy_offset + e.size
        if end >= 0 or name == names[0]:
            return count, end
    return 0, -1


def iter_records(seg: Segment, buf: object, start: int, end: int, cfg: StoreConfig) -> Iterator[Record]:
    """Records of one mapped file between the frames at byte positions ``start`` and ``end`` (a valid chain)."""
    for rec in walk_segment(buf, seg, start_pos=start, end_pos=end, broker=cfg.broker):
        if isinstance(rec, Record):
            yield rec


def dispatch_extra(
    st: object, from_phy: int, to_phy: int, *, only_after: int | None = None, batch: frozenset[str] = frozenset()
) -> None:
    """The %LMQ% entries and batch consume queue units of the records in ``[from_phy, to_phy)`` of the
    store's commit log (those after ``only_after`` when given), written into the store (§4.7, §9.1)."""

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


# ------------------------------------------------------------------- recovery of batch consume queues


@dataclass(frozen=True, slots=True)
class BatchCut:
    """One removal ``BatchConsumeQueue.truncateDirtyLogicFiles`` makes in a batch consume queue."""

    topic: str
    queue_id: int
    path: Path  # a file of batchconsumequeue/<topic>/<queueId>/
    verb: str  # "delete" (the whole file) | "zero" (from_pos up to the end of its data)
    from_pos: int
    to_pos: int
    units: int  # units removed


def plan_batch_cq_cut(topic: str, queue_id: int, segs: list[Segment], phy_offset: int) -> list[BatchCut]:
    """What ``truncateDirtyLogicFiles(phyOffset)`` removes from one batch consume queue (reads only).

    From the last file back: a file whose first unit points at or past ``phy_offset`` is deleted
    (the first unit is not checked otherwise, zeros read as offset 0); in the first file that stays,
    units are kept up to the first one that is invalid or points at or past ``phy_offset``, and
    everything after them goes (the engine moves its write position there and overwrites the rest).
    """
    import numpy as np

    out: list[BatchCut] = []
    for seg in reversed(segs):
        with map_file(seg.path) as buf:
            units = bcq_units(buf)
            phys = np.asarray(units["phy_offset"]).copy()  # type: ignore[index]
            valid = np.asarray(bcq_valid(units)).copy()
            del units
        if not len(phys):
            break  # nothing in it to cut (the engine maps it full of zeros: unit 0 is offset 0)
        if int(phys[0]) >= phy_offset:
            out.append(BatchCut(topic, queue_id, seg.path, "delete", 0, seg.size, _leading(valid)))
            continue
        stop = np.flatnonzero(~valid[1:] | (phys[1:] >= phy_offset))
        keep = 1 + (int(stop[0]) if stop.size else len(phys) - 1)
        cut = keep * BCQ_UNIT_SIZE
        end = data_end(seg.path, cut)
        if end > cut:
            out.append(BatchCut(topic, queue_id, seg.path, "zero", cut, end, _leading(valid[keep:])))
        break
    return out


def _leading(valid: object) -> int:
    """How many units lead ``valid`` before the first invalid one."""
    import numpy as np

    bad = np.flatnonzero(~np.asarray(valid))
    return int(bad[0]) if bad.size else len(valid)  # type: ignore[arg-type]
