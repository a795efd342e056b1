"""The planned records, column by column, and the index keys the dispatcher puts for them (§5.3)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import offset_msg_id
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


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The planned records column by column: numbers in int64 arrays, names in lists (a million
    records stay a few arrays, not a million objects)."""

    origin: StringColumn
    topic: TopicColumn  # as stored: ``topics[topic_id[i]]``
    topic_id: np.ndarray  # index into ``topics`` of each record's topic (as stored)
    topics: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phy_offset: np.ndarray
    size: np.ndarray
    store_timestamp_ms: np.ndarray
    sys_flag: np.ndarray
    uniq_key: UniqKeyColumn
    store_host: list[tuple[bytes, int]]
    tags_code: np.ndarray  # as the dispatcher derives them (§4.2, §3.11)
    key_rec: np.ndarray  # the index keys (§5.3) in the broker's put order: record of each
    key_hash: np.ndarray  # and its keyHash (``topic#UNIQ_KEY``, then each KEYS token)

    def __len__(self) -> int:
        return len(self.phy_offset)

    def queues(self) -> set[tuple[str, int]]:
        """Every (topic, queue id) a record goes to."""
        if not len(self):
            return set()
        pairs = np.unique(self.topic_id * (1 << 32) + self.queue_id)
        return {(self.topics[int(v) >> 32], int(v) & 0xFFFFFFFF) for v in pairs.tolist()}

    def columns(self, start: int, stop: int) -> Columns:
        """Records ``start:stop`` as :class:`rmqstore.columnar.Columns` for ``Dispatcher.dispatch_columns``."""
        ka, kb = np.searchsorted(self.key_rec, [start, stop]).tolist()
        return Columns(
            self.phy_offset[start:stop],
            self.size[start:stop],
            self.queue_id[start:stop],
            self.queue_offset[start:stop],
            self.store_timestamp_ms[start:stop],
            self.sys_flag[start:stop],
            self.tags_code[start:stop],
            self.topic_id[start:stop],
            self.topics,
            self.key_rec[ka:kb] - start,
            self.key_hash[ka:kb],
        )

    def record(self, i: int) -> PlannedRecord:
        addr, port = self.store_host[i]
        return PlannedRecord(
            self.origin[i],
            self.topic[i],
            int(self.queue_id[i]),
            int(self.queue_offset[i]),
            int(self.phy_offset[i]),
            int(self.size[i]),
            int(self.store_timestamp_ms[i]),
            int(self.sys_flag[i]),
            self.uniq_key[i],
            addr,
            port,
        )

    def __iter__(self) -> Iterator[PlannedRecord]:
        return (self.record(i) for i in range(len(self)))


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
    arrive as arrays; :meth:`finish` joins them."""

    def __init__(self) -> None:
        self.topic_ids: dict[str, int] = {}
        self.origin = StringColumn()
        self.uniq = UniqKeyColumn()
        self.store_host: list[tuple[bytes, int]] = []
        self.keys: list[str | None] = []  # of the records put one by one, not yet in parts
        self.parts: list[tuple[np.ndarray, ...]] = []  # tid, qid, qoff, phy, size, ts, sys, tcode, key_rec, key_hash
        self.count = 0
        # records put one by one, not yet in parts
        self.one: tuple[list[int], ...] = ([], [], [], [], [], [], [], [])
        self.one_uniq: list[str | None] = []

    def topic_id(self, topic: str) -> int:
        t = self.topic_ids.get(topic)
        if t is None:
            t = self.topic_ids[topic] = len(self.topic_ids)
        return t

    def flush_one(self) -> None:
        if not self.one_uniq:
            return
        tid, qid, qoff, phy, size, ts, sys_flag, tcode = (np.array(c, dtype=np.int64) for c in self.one)
        for c in self.one:
            c.clear()
        n = len(tid)
        keys = self.keys
        uniq = self.one_uniq
        urec = [i for i, u in enumerate(uniq) if u is not None]
        names = list(self.topic_ids)
        urec_a = np.array(urec, dtype=np.int64)
        uhash = _topic_key_hashes(names, tid[urec_a], [uniq[i] for i in urec])  # type: ignore[misc]
        krec, khash = _keys_index(names, tid, keys)
        key_rec, key_hash = _merge_index_keys(urec_a, uhash, krec, khash)
        self.parts.append((tid, qid, qoff, phy, size, ts, sys_flag, tcode, key_rec + self.count, key_hash))
        self.uniq.extend_strings(uniq.copy())
        uniq.clear()  # in place: put_one holds these appends
        keys.clear()
        self.count += n

    def add_run(self, arrays: tuple[np.ndarray, ...], key_rec: np.ndarray, key_hash: np.ndarray) -> None:
        """A run's numeric columns (tid, qid, qoff, phy, size, ts, sys, tcode) and index keys; the
        caller extends the list columns."""
        self.flush_one()
        n = len(arrays[0])
        self.parts.append((*arrays, key_rec + self.count, key_hash))
        self.count += n

    def finish(self) -> RecordColumns:
        self.flush_one()
        if self.parts:
            cols = [np.concatenate(c) for c in zip(*self.parts, strict=True)]
        else:
            cols = [np.zeros(0, dtype=np.int64)] * 10
        tid, qid, qoff, phy, size, ts, sys_flag, tcode, key_rec, key_hash = cols
        topics = list(self.topic_ids)
        return RecordColumns(
            self.origin,
            TopicColumn(topics, tid),
            tid,
            topics,
            qid,
            qoff,
            phy,
            size,
            ts,
            sys_flag,
            self.uniq,
            self.store_host,
            tcode,
            key_rec,
            key_hash,
        )
