"""The planned records, column by column, and the index keys the dispatcher puts for them (§5.3)."""

from __future__ import annotations

import bisect
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import offset_msg_id
from rmqstore.ops.write.spill import Spill, SpilledPiece
from rmqstore.ops.write.uniq import _topic_key_hashes
from rmqstore.safety.plan import JsonModel
from rmqstore.walk.columns import Columns


@dataclass(frozen=True, slots=True)
class PlannedRecord(JsonModel):
    """One record of the plan, with the values the broker reports for a put."""

    json_keys = "topic queue_id queue_offset phy_offset=commitLogOffset size=storeSize store_timestamp_ms=storeTimestamp sys_flag msg_id uniq_key"

    origin: str
    topic: str  # as stored (SCHEDULE_TOPIC_XXXX for a delayed message)
    queue_id: int
    queue_offset: int
    phy_offset: int
    size: int
    store_timestamp_ms: int
    sys_flag: int
    uniq_key: str | None
    store_addr: bytes
    store_port: int

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_addr, self.store_port, self.phy_offset)


class _Joined(Sequence[str]):
    """Strings kept as one string and where each ends: two objects for a run, not one per record."""

    __slots__ = ("text", "ends")

    def __init__(self, values: list[str]) -> None:
        self.text = "".join(values)
        self.ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, j: Any) -> Any:
        return self.text[int(self.ends[j - 1]) if j else 0 : int(self.ends[j])]

    def __iter__(self) -> Iterator[str]:
        text, at = self.text, 0
        for end in self.ends.tolist():
            yield text[at:end]
            at = end


def _packed(values: list[str | None]) -> list[str | None] | _Joined:
    try:
        return _Joined(values)  # type: ignore[arg-type]
    except TypeError:  # a None among them
        return values


class StringColumn(Sequence[str | None]):
    """A string (or None) per planned record, packed a run at a time (:class:`_Joined`)."""

    _TAIL = 4096  # values appended one by one before they are packed

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._parts: list[Any] = []
        self._len = 0
        self._tail: list[str | None] = []

    def append(self, value: str | None) -> None:
        self._tail.append(value)
        if len(self._tail) >= self._TAIL:
            self._seal()

    def extend_strings(self, values: list[str | None]) -> None:
        self._seal()
        self._add(_packed(values), len(values))

    def take(self) -> StringColumn:
        """The values so far as a column of their own; this one goes on empty (its bound
        ``append`` still works)."""
        self._seal()
        out = type(self)()
        out._starts, out._parts, out._len = self._starts, self._parts, self._len
        self._starts, self._parts, self._len = [], [], 0
        return out

    def _add(self, part: Any, n: int) -> None:
        if n:
            self._starts.append(self._len)
            self._parts.append(part)
            self._len += n

    def _seal(self) -> None:
        if self._tail:
            tail, self._tail = self._tail, []
            self._add(_packed(tail), len(tail))

    def __len__(self) -> int:
        return self._len + len(self._tail)

    def __getitem__(self, i: Any) -> Any:
        self._seal()
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        k = bisect.bisect_right(self._starts, i) - 1
        return self._value(self._parts[k], i - self._starts[k])

    def _value(self, part: Any, j: int) -> str | None:
        return part[j]  # type: ignore[no-any-return]

    def _values(self, part: Any) -> Iterator[str | None]:
        return iter(part)

    def __iter__(self) -> Iterator[str | None]:
        self._seal()
        for part in self._parts:
            yield from self._values(part)


class UniqKeyColumn(StringColumn):
    """The UNIQ_KEY of each planned record; keys generated a run at a time are kept as their
    constant head plus per-record fields and made into strings only when read."""

    def extend_generated(self, head: str, time_field: np.ndarray, counter: np.ndarray) -> None:
        self._seal()
        self._add((head, time_field, counter), len(time_field))

    def _value(self, part: Any, j: int) -> str | None:
        if not isinstance(part, tuple):
            return part[j]  # type: ignore[no-any-return]
        head, tf, ctr = part
        return f"{head}{int(tf[j]):08X}{int(ctr[j]):04X}"

    def _values(self, part: Any) -> Iterator[str | None]:
        if not isinstance(part, tuple):
            return iter(part)
        head, tf, ctr = part
        return (f"{head}{t:08X}{c:04X}" for t, c in zip(tf.tolist(), ctr.tolist(), strict=True))


# The numeric columns of a segment, in order (key_rec: the record of each index key, in the segment).
_NUMERIC = ("topic_id", "queue_id", "queue_offset", "phy_offset", "size", "store_timestamp_ms", "sys_flag", "tags_code")
_KEYS = ("key_rec", "key_hash")


@dataclass(frozen=True, slots=True)
class _Segment:
    """Consecutive planned records: their numeric columns and index keys, and their strings."""

    start: int  # the index of its first record in the plan
    arrays: tuple[np.ndarray, ...]  # _NUMERIC, then _KEYS
    origin: StringColumn
    uniq_key: UniqKeyColumn
    store_host: list[tuple[bytes, int]]

    def __len__(self) -> int:
        return len(self.arrays[0])

    def column(self, name: str) -> np.ndarray:
        return self.arrays[_COLUMN_AT[name]]


_COLUMN_AT = {name: i for i, name in enumerate(_NUMERIC + _KEYS)}


class RecordColumns:
    """The planned records column by column, a segment of consecutive records at a time: numbers
    in int64 arrays, strings packed (a million records are a few arrays per segment, not a million
    objects). Segments past the budget of :class:`~.spill.Spill` wait in its temporary file, so
    the plan's memory stays bounded; the dispatch reads them back one at a time, in order."""

    def __init__(
        self,
        topics: list[str],
        segments: list[_Segment | SpilledPiece],
        starts: list[int],
        count: int,
        ranges: dict[int, list[int]],
        keys: int,
    ) -> None:
        self.topics = topics
        self._segments, self._starts, self._count = segments, starts, count
        self._ranges, self.key_count = ranges, keys

    def __len__(self) -> int:
        return self._count

    def segments(self) -> Iterator[_Segment]:
        """The segments in record order (a spilled one read back)."""
        return map(_loaded, self._segments)

    def batches(self) -> Iterator[Columns]:
        """Each segment as :class:`rmqstore.walk.columns.Columns` for ``Dispatcher.dispatch_columns``."""
        for seg in self.segments():
            yield self._as_columns(seg, 0, len(seg))

    def queues(self) -> set[tuple[str, int]]:
        """Every (topic, queue id) a record goes to."""
        return set(self.queue_offset_ranges())

    def queue_offset_ranges(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, queue id) -> the first and last queue offset the records take there."""
        return {(self.topics[k >> 32], k & 0xFFFFFFFF): (lo, hi) for k, (lo, hi) in sorted(self._ranges.items())}

    def columns(self, start: int, stop: int) -> Columns:
        """Records ``start:stop`` as :class:`rmqstore.walk.columns.Columns`."""
        parts = []
        for seg in self.segments():
            a, b = max(start - seg.start, 0), min(stop - seg.start, len(seg))
            if a < b:
                parts.append(self._as_columns(seg, a, b))
        if not parts:
            parts.append(self._as_columns(_empty_segment(), 0, 0))
        base = np.cumsum([0] + [len(c) for c in parts[:-1]])
        return Columns(
            *(np.concatenate([getattr(c, f) for c in parts]) for f in _COLUMNS_FIELDS),
            self.topics,
            np.concatenate([c.key_rec + b for c, b in zip(parts, base.tolist(), strict=True)]),
            np.concatenate([c.key_hash for c in parts]),
        )

    def _as_columns(self, seg: _Segment, a: int, b: int) -> Columns:
        tid, qid, qoff, phy, size, ts, sys_flag, tcode, key_rec, key_hash = seg.arrays
        ka, kb = np.searchsorted(key_rec, [a, b]).tolist()
        return Columns(
            phy[a:b], size[a:b], qid[a:b], qoff[a:b], ts[a:b], sys_flag[a:b], tcode[a:b], tid[a:b], self.topics,
            key_rec[ka:kb] - a, key_hash[ka:kb],
        )  # fmt: skip

    def column(self, name: str) -> np.ndarray:
        """One whole column (a name of ``_NUMERIC``), read back from every segment: a look at a
        small plan, never on the write's own path."""
        parts = [seg.column(name) for seg in self.segments()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    topic_id = property(lambda self: self.column("topic_id"))
    size = property(lambda self: self.column("size"))
    tags_code = property(lambda self: self.column("tags_code"))

    @property
    def topic(self) -> TopicColumn:
        return TopicColumn(self.topics, self.topic_id)

    def record(self, i: int) -> PlannedRecord:
        if not 0 <= i < self._count:
            raise IndexError(i)
        k = bisect.bisect_right(self._starts, i) - 1
        return self._record(_loaded(self._segments[k]), i - self._starts[k])

    def _record(self, seg: _Segment, j: int) -> PlannedRecord:
        tid, qid, qoff, phy, size, ts, sys_flag = (int(c[j]) for c in seg.arrays[:7])
        addr, port = seg.store_host[j]
        return PlannedRecord(
            seg.origin[j], self.topics[tid], qid, qoff, phy, size, ts, sys_flag, seg.uniq_key[j], addr, port
        )

    def __iter__(self) -> Iterator[PlannedRecord]:
        for seg in self.segments():
            for j in range(len(seg)):
                yield self._record(seg, j)


_COLUMNS_FIELDS = ("phy", "size", "queue_id", "queue_offset", "store_ts", "sys_flag", "tags_code", "topic_id")


def _loaded(seg: _Segment | SpilledPiece) -> _Segment:
    return seg if isinstance(seg, _Segment) else pickle.loads(bytes(seg))  # type: ignore[no-any-return]


def _empty_segment() -> _Segment:
    empty = np.zeros(0, dtype=np.int64)
    return _Segment(0, (empty,) * 10, StringColumn(), UniqKeyColumn(), [])


def _keys_index(topics: list[str], tid: np.ndarray, keys: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Index keys of the KEYS values: each non-empty token (keys are separated by one space), with
    the record it belongs to, records in order."""
    krec = [i for i, k in enumerate(keys) if k]
    kstr = [keys[i] for i in krec]
    if " " in "".join(kstr):  # type: ignore[arg-type]
        pairs = [(i, t) for i in krec for t in keys[i].split(" ") if t]  # type: ignore[union-attr]
        krec, kstr = [i for i, _ in pairs], [t for _, t in pairs]
    rec = np.array(krec, dtype=np.int64)
    return rec, _topic_key_hashes(topics, tid[rec], kstr)  # type: ignore[arg-type]


def _merge_index_keys(
    urec: np.ndarray, uhash: np.ndarray, krec: np.ndarray, khash: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The broker's put order (§5.3): per record its UNIQ_KEY, then its KEYS tokens."""
    n = len(urec)
    if n == len(krec) and n and (urec == krec).all():  # one of each per record: interleave
        return np.repeat(urec, 2), np.stack((uhash, khash), axis=1).ravel()
    rec = np.concatenate((urec, krec))
    order = np.argsort(rec, kind="stable")
    return rec[order], np.concatenate((uhash, khash))[order]


class TopicColumn(Sequence[str]):
    """Each record's topic, read from its topic id (no string kept per record)."""

    def __init__(self, topics: list[str], topic_id: np.ndarray) -> None:
        self._topics, self._ids = topics, topic_id

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._topics[t] for t in self._ids[i].tolist()]
        return self._topics[int(self._ids[i])]

    def __iter__(self) -> Iterator[str]:
        return map(self._topics.__getitem__, self._ids.tolist())


class _ColumnsBuilder:
    """Collects the plan's columns: records put one by one go into lists, runs put at once
    arrive as arrays; between blocks of messages (:meth:`settle`) the records so far become a
    segment, kept by the :class:`~.spill.Spill` (in memory, then in its temporary file)."""

    def __init__(self) -> None:
        self.topic_ids: dict[str, int] = {}
        self.origin = StringColumn()
        self.uniq = UniqKeyColumn()
        self.store_host: list[tuple[bytes, int]] = []
        self.parts: list[tuple[np.ndarray, ...]] = []  # _NUMERIC, then _KEYS (their record in the plan)
        self.count = 0
        # records put one by one, not yet in parts: _NUMERIC, KEYS and UNIQ_KEY
        self.one: tuple[list[int], ...] = ([], [], [], [], [], [], [], [])
        self.keys: list[str | None] = []
        self.one_uniq: list[str | None] = []
        self.cut_at = 0  # records in segments
        self.segments: list[_Segment | SpilledPiece] = []
        self.starts: list[int] = []
        self.ranges: dict[int, list[int]] = {}  # topic id << 32 | queue id -> first, last queue offset
        self.key_count = 0
        self.end = -1  # commit log offset after the last record of the segments
        self.spill = Spill(COLUMNS_BUDGET)

    def topic_id(self, topic: str) -> int:
        t = self.topic_ids.get(topic)
        if t is None:
            t = self.topic_ids[topic] = len(self.topic_ids)
        return t

    def flush_one(self) -> None:
        if not self.one_uniq:
            return
        numeric = tuple(np.array(c, dtype=np.int64) for c in self.one)
        for c in self.one:
            c.clear()
        tid, uniq, names = numeric[0], self.one_uniq, list(self.topic_ids)
        urec = [i for i, u in enumerate(uniq) if u is not None]
        urec_a = np.array(urec, dtype=np.int64)
        uhash = _topic_key_hashes(names, tid[urec_a], [uniq[i] for i in urec])  # type: ignore[misc]
        krec, khash = _keys_index(names, tid, self.keys)
        self._append(numeric, *_merge_index_keys(urec_a, uhash, krec, khash))
        self.uniq.extend_strings(uniq.copy())
        uniq.clear()  # in place: put_one holds these appends
        self.keys.clear()

    def add_run(self, arrays: tuple[np.ndarray, ...], key_rec: np.ndarray, key_hash: np.ndarray) -> None:
        """A run's numeric columns (``_NUMERIC``) and index keys; the caller extends the list columns."""
        self.flush_one()
        self._append(arrays, key_rec, key_hash)

    def _append(self, numeric: tuple[np.ndarray, ...], key_rec: np.ndarray, key_hash: np.ndarray) -> None:
        self.parts.append((*numeric, key_rec + self.count, key_hash))
        self.count += len(numeric[0])

    def settle(self) -> None:
        """Between two messages: the records so far become a segment once there are enough of them."""
        self.flush_one()
        if self.count - self.cut_at >= SEGMENT_RECORDS:
            self._cut()

    def _cut(self) -> None:
        if self.count == self.cut_at:
            return
        cols = [np.concatenate(c) for c in zip(*self.parts, strict=True)]
        self.parts = []
        tid, qid, qoff, phy, size, *_, key_rec, key_hash = cols
        key_rec -= self.cut_at  # in place: each index key's record in the segment
        self._track(tid, qid, qoff)
        self.key_count += len(key_hash)
        self.end = int(phy[-1] + size[-1])
        hosts = self.store_host.copy()
        self.store_host.clear()  # in place: put_one holds its append
        seg = _Segment(self.cut_at, tuple(cols), self.origin.take(), self.uniq.take(), hosts)  # type: ignore[arg-type]
        nbytes = sum(c.nbytes for c in cols) + _STRING_BYTES * len(seg)
        self.segments.append(self.spill.keep_object(seg, nbytes))
        self.starts.append(self.cut_at)
        self.cut_at = self.count

    def _track(self, tid: np.ndarray, qid: np.ndarray, qoff: np.ndarray) -> None:
        """The first and last queue offset of each queue, over every segment."""
        keys, inv = np.unique(tid * (1 << 32) + qid, return_inverse=True)
        lo = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(len(keys), -1, dtype=np.int64)
        np.minimum.at(lo, inv, qoff)
        np.maximum.at(hi, inv, qoff)
        for k, a, b in zip(keys.tolist(), lo.tolist(), hi.tolist(), strict=True):
            r = self.ranges.setdefault(k, [a, b])
            r[0], r[1] = min(r[0], a), max(r[1], b)

    def finish(self) -> RecordColumns:
        self.flush_one()
        self._cut()
        topics = list(self.topic_ids)
        return RecordColumns(topics, self.segments, self.starts, self.count, self.ranges, self.key_count)


SEGMENT_RECORDS = 1 << 15  # records of a segment at least (cut between blocks of messages)
COLUMNS_BUDGET = 8 << 20  # bytes of segments kept in memory; the rest is spilled
_STRING_BYTES = 64  # about what a record's origin, UNIQ_KEY and store host take in memory
