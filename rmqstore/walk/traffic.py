"""The one pass over a store's commit log behind ``report``: messages and bytes per topic, queue, time and file.

The lenient walk (``walk.lenient``, as the broker reads: ``check``'s reading) gives runs of intact
records; each run is decoded as arrays (``codec.arrays.record_arrays``) and folded into counters at
once, so memory holds the counters and one run, never the records. Records off the array layout
(IPv6 hosts, odd lengths) are read by the record decoder one by one.

Time buckets start at 100 ms and grow (:data:`BUCKET_LADDER`) whenever the store times seen
span more than :data:`MAX_BUCKETS` of them, so a long-lived store never keeps more than that many
buckets per topic.

Each file is walked on its own, so the files of a store may be counted apart (``rmqstore spark
report`` counts them in Spark tasks) and the parts merged (:meth:`Traffic.merge`): every width of
the ladder is a multiple of the one before, so buckets widened early hold the same records as
buckets widened late, and the merged counters draw the same chart as one walk of every file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmqstore.codec.arrays import record_arrays
from rmqstore.safety.plan import JsonModel
from rmqstore.store.layout import Segment
from rmqstore.walk.checked import TopicIds, topic_ids
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Run, intact_record, walk_files

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
# bucket widths, finest first: the walk coarsens along this ladder as the span grows
BUCKET_LADDER = (100, SECOND_MS, 10 * SECOND_MS, MINUTE_MS, 5 * MINUTE_MS, 15 * MINUTE_MS, HOUR_MS, 6 * HOUR_MS, DAY_MS)
MAX_BUCKETS = 4000  # distinct buckets the walk keeps per topic at most
CHART_BUCKETS = 240  # the chart's buckets at most: the finest width of the ladder that keeps to it
_QID_BITS = 32
_DENSE_LIMIT = 1 << 22  # pairs a run is counted over without sorting


@dataclass(frozen=True, slots=True)
class FileFigures(JsonModel):
    """One commit log file: where it sits, how big, its records and the store times of the first and last."""

    name: str
    base_offset: int
    size: int
    mtime_ms: int
    records: int
    record_bytes: int
    first_store_timestamp_ms: int | None
    last_store_timestamp_ms: int | None
    damaged_bytes: int  # bytes inside the data that no record explains

    json_keys = (
        "name base_offset size mtime_ms=mtimeMs records record_bytes first_store_timestamp_ms=firstStoreTimestamp "
        "last_store_timestamp_ms=lastStoreTimestamp damaged_bytes"
    )


@dataclass
class _FileCount:
    records: int = 0
    record_bytes: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    damaged: int = 0


@dataclass
class Traffic:
    """What the walk counted. Keys pack a topic id with a queue id or a time bucket into one int64."""

    names: TopicIds = field(default_factory=TopicIds)
    bucket_ms: int = BUCKET_LADDER[0]
    per_queue: dict[int, list[int]] = field(default_factory=dict)  # tid << 32 | qid -> [messages, bytes]
    per_bucket: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (tid, bucket) -> [messages, bytes]
    files: list[FileFigures] = field(default_factory=list)
    min_ts: int | None = None
    max_ts: int | None = None

    @property
    def span_ms(self) -> int:
        return 0 if self.min_ts is None or self.max_ts is None else self.max_ts - self.min_ts

    def add(self, tid: np.ndarray, qid: np.ndarray, size: np.ndarray, ts: np.ndarray) -> None:
        """Fold a batch of records into the counters."""
        if not len(tid):
            return
        self._span(int(ts.min()), int(ts.max()))
        for (t, q), n, z in _grouped(tid, qid & 0xFFFFFFFF, size):
            _count(self.per_queue, (t << _QID_BITS) | q, n, z)
        for key, n, z in _grouped(tid, ts // self.bucket_ms, size):
            _count(self.per_bucket, key, n, z)

    def _span(self, lo: int | None, hi: int | None) -> None:
        """Widen the span of store times to ``[lo, hi]``, and the buckets with it past :data:`MAX_BUCKETS`."""
        if lo is None or hi is None:
            return
        self.min_ts = lo if self.min_ts is None else min(self.min_ts, lo)
        self.max_ts = hi if self.max_ts is None else max(self.max_ts, hi)
        while self.span_ms // self.bucket_ms > MAX_BUCKETS and self.bucket_ms < BUCKET_LADDER[-1]:
            self.coarsen(BUCKET_LADDER[BUCKET_LADDER.index(self.bucket_ms) + 1])

    def merge(self, other: Traffic) -> Traffic:
        """Add the counters of other files of the same store (topics matched by name, buckets at the
        wider of the two widths); returns this one."""
        width = max(self.bucket_ms, other.bucket_ms)
        for part in (self, other):
            if part.bucket_ms != width:
                part.coarsen(width)
        tids = [self.names.id(name) for name in other.names.names]
        for key, (n, s) in other.per_queue.items():
            _count(self.per_queue, (tids[key >> _QID_BITS] << _QID_BITS) | (key & 0xFFFFFFFF), n, s)
        for (t, b), (n, s) in other.per_bucket.items():
            _count(self.per_bucket, (tids[t], b), n, s)
        self.files = sorted([*self.files, *other.files], key=lambda f: f.base_offset)
        self._span(other.min_ts, other.max_ts)
        return self

    def coarsen(self, bucket_ms: int) -> None:
        """Merge the time buckets into wider ones (a multiple of the current width)."""
        merged: dict[tuple[int, int], list[int]] = {}
        for (t, b), (n, s) in self.per_bucket.items():
            _count(merged, (t, b * self.bucket_ms // bucket_ms), n, s)
        self.per_bucket, self.bucket_ms = merged, bucket_ms

    def for_chart(self) -> None:
        """Widen the buckets to the finest width that draws the span in :data:`CHART_BUCKETS` or fewer."""
        for width in BUCKET_LADDER:
            if width >= self.bucket_ms and self.span_ms // width < CHART_BUCKETS:
                if width != self.bucket_ms:
                    self.coarsen(width)
                return
        self.coarsen(BUCKET_LADDER[-1])

    def queues(self) -> list[tuple[str, int, int, int]]:
        """(topic, queue id, messages, bytes) of every queue the records name."""
        out = []
        for key, (n, s) in self.per_queue.items():
            qid = key & 0xFFFFFFFF
            out.append((self.names.names[key >> _QID_BITS], qid - (1 << 32) if qid >= 1 << 31 else qid, n, s))
        return out


def _count(counters: dict[Any, list[int]], key: Any, messages: int, size: int) -> None:
    got = counters.setdefault(key, [0, 0])
    got[0] += messages
    got[1] += size


def _grouped(a: np.ndarray, b: np.ndarray, size: np.ndarray) -> list[tuple[tuple[int, int], int, int]]:
    """((a, b), records, bytes) for each distinct pair: counted with ``bincount`` over the pairs' compact
    range (no sort) when it is small, as a run's topics, queues and time buckets are; else by ``unique``."""
    a0, b0 = int(a.min()), int(b.min())
    wa, wb = int(a.max()) - a0 + 1, int(b.max()) - b0 + 1
    if wa * wb <= _DENSE_LIMIT:
        dense = (a - a0) * wb + (b - b0)
        counts = np.bincount(dense, minlength=wa * wb)
        sums = np.bincount(dense, weights=size, minlength=wa * wb)
        hit = np.flatnonzero(counts)
        pairs = zip((hit // wb + a0).tolist(), (hit % wb + b0).tolist(), strict=True)
        return list(zip(pairs, counts[hit].tolist(), sums[hit].astype(np.int64).tolist(), strict=True))
    keys, inv = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
    counts = np.bincount(inv.ravel(), minlength=len(keys))
    sums = np.bincount(inv.ravel(), weights=size, minlength=len(keys))
    return list(zip(map(tuple, keys.tolist()), counts.tolist(), sums.astype(np.int64).tolist(), strict=True))


def _run_columns(buf: Any, u8: np.ndarray, run: Run, names: TopicIds, broker: str) -> tuple[np.ndarray, ...]:
    """Topic id, queue id, size and store time of each record of a run."""
    a = record_arrays(u8, run.positions, len(u8))
    tid = np.empty(len(run.positions), np.int64)
    qid, size, ts = a.queue_id.copy(), a.total_size.copy(), a.store_timestamp_ms.copy()
    ok = np.flatnonzero(a.ok)
    if ok.size:
        tid[ok] = topic_ids(u8, a.topic_start[ok], a.topic_len[ok], names)
    path, base = str(run.seg.path), run.seg.base_offset
    for i in np.flatnonzero(~a.ok).tolist():  # off the array layout: the decoder reads it
        rec = intact_record(buf, int(run.positions[i]), path=path, file_from=base, broker=broker)
        tid[i], qid[i], size[i], ts[i] = names.id(rec.topic), rec.queue_id, rec.total_size, rec.store_timestamp_ms
    return tid, qid, size, ts


def walk_traffic(segs: list[Segment], broker: str, progress: Callable[[int], None] | None = None) -> Traffic:
    """Count every intact record of ``segs`` (the lenient walk as the broker reads), file by file."""
    traffic = Traffic()
    for seg, buf, items in walk_files(segs, broker=broker, as_broker=True):
        u8 = np.frombuffer(buf, np.uint8) if len(buf) else np.zeros(0, np.uint8)
        count, done = _FileCount(), 0
        for item in items:
            if isinstance(item, Run):
                tid, qid, size, ts = _run_columns(buf, u8, item, traffic.names, broker)
                traffic.add(tid, qid, size, ts)
                count.records += len(tid)
                count.record_bytes += int(size.sum())
                count.first_ts = int(ts[0]) if count.first_ts is None else count.first_ts
                count.last_ts = int(ts[-1])
                if progress is not None:
                    progress(item.end_pos - done)
                    done = item.end_pos
            elif isinstance(item, Damage):
                count.damaged += item.resume - item.pos
            elif isinstance(item, BlankEnd | DataEnd):
                break
        del u8
        if progress is not None:
            progress(max(seg.size - done, 0))
        mtime = seg.path.stat().st_mtime_ns // 1_000_000
        traffic.files.append(
            FileFigures(
                seg.path.name,
                seg.base_offset,
                seg.size,
                mtime,
                count.records,
                count.record_bytes,
                count.first_ts,
                count.last_ts,
                count.damaged,
            )  # fmt: skip
        )
    return traffic
