"""A consume queue read as the broker reads it: its bounds, the unit at a queue offset with the record it
points at, and the queue offset for a time (store-format.md §4.3, §4.4, §9.3)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rmqstore.codec.commitlog import (
    MIN_RECORD_SIZE_V1,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    Record,
    store_timestamp_at,
)
from rmqstore.codec.consumequeue import ENTRY_SIZE, CqEntry, valid_prefix
from rmqstore.codec.framing import BLANK, RECORD
from rmqstore.errors import CorruptData
from rmqstore.store import Store
from rmqstore.store.layout import Segment, segment_for
from rmqstore.store.queue.interface import ConsumeQueue
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueue
from rmqstore.store.reader import CommitLogReader, scan_records

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class QueueBounds:
    min_offset: int  # first valid queue offset (the broker's minOffsetInQueue)
    max_offset: int  # one past the last valid entry (maxOffsetInQueue)
    last_record_end: int = 0  # offset + size of the last entry's record (4.4.0's maxPhysicOffset is the offset)


@dataclass(frozen=True, slots=True)
class QueueHit:
    """``query offset`` / ``query time``: a queue offset, its entry and its record (if any)."""

    topic: str
    queue_id: int
    queue_offset: int
    bounds: QueueBounds
    entry: CqEntry | None
    record: Record | None
    notices: tuple[str, ...] = ()


@dataclass
class _Queue:
    queue: ConsumeQueue
    segments: list[Segment]
    min_phy_offset: int
    valid: dict[int, np.ndarray] = field(default_factory=dict)  # segment index -> its valid entries

    def valid_entries(self, i: int) -> np.ndarray:
        v = self.valid.get(i)
        if v is None:
            arr = self.queue.read(self.segments[i])
            v = self.valid[i] = arr[: valid_prefix(arr)]
        return v


def _open_queue(st: Store, topic: str, queue_id: int, reader: CommitLogReader) -> _Queue:
    q = st.consume_queues.queue(topic, queue_id)
    return _Queue(q, q.files()[0], reader.min_phy_offset)


def _entry(unit: np.void) -> CqEntry:
    return CqEntry(int(unit["phy_offset"]), int(unit["size"]), int(unit["tags_code"]))


def queue_bounds(st: Store, topic: str, queue_id: int) -> QueueBounds:
    """Min and max queue offset as the broker computes them after load (§4.4)."""
    with CommitLogReader.of(st) as reader:
        q = _open_queue(st, topic, queue_id, reader)
        return _bounds(q)


def _bounds(q: _Queue) -> QueueBounds:
    if not q.segments:
        return QueueBounds(0, 0)
    first, last = q.segments[0], q.segments[-1]
    end = last.base_offset + len(q.valid_entries(len(q.segments) - 1)) * ENTRY_SIZE
    # correctMinOffset (4.x): the first entry of the first file at or after the commit log's min offset.
    min_logic = first.base_offset
    at = (q.valid_entries(0)["phy_offset"] >= q.min_phy_offset).nonzero()[0]
    if at.size:
        min_logic = first.base_offset + int(at[0]) * ENTRY_SIZE
    return QueueBounds(min_logic // ENTRY_SIZE, end // ENTRY_SIZE, _last_entry_end(q))


def _last_entry_end(q: _Queue) -> int:
    for i in range(len(q.segments) - 1, -1, -1):
        valid = q.valid_entries(i)
        if len(valid):
            e = _entry(valid[-1])
            return 0 if e.is_filler else e.phy_offset + e.size
    return 0


def dispatched_end(st: Store) -> int:
    """Where the broker's dispatch stands: the end of the newest record in any consume queue.

    Dispatch runs through the commit log in order, so every record before this offset is in its
    consume queue; records after it are put there when a broker starts (§9.3).
    """
    end = 0
    with CommitLogReader.of(st) as reader:
        for queue in st.consume_queues.queues():
            end = max(end, _last_entry_end(_open_queue(st, queue.topic, queue.queue_id, reader)))
    return end


def query_queue_offset(st: Store, topic: str, queue_id: int, queue_offset: int) -> QueueHit:
    """The consume queue entry at ``queue_offset`` and the record it points to.

    An offset at or past the queue's end may belong to a record not dispatched yet (the broker
    was stopped while dispatch was behind, or crashed): the records after the dispatch position
    are then scanned for it, as a starting broker would put them in the queue (NOT and COMMIT
    records, at their QUEUEOFFSET field, §4.3).
    """
    notices: list[str] = []
    with CommitLogReader.of(st) as reader:
        q = _open_queue(st, topic, queue_id, reader)
        bounds = _bounds(q)
        if queue_offset >= bounds.max_offset and q.segments:
            start = dispatched_end(st)
            for rec in scan_records(reader, topic.encode("utf-8"), from_phy=start, notices=notices):
                if (
                    rec.topic == topic
                    and rec.queue_id == queue_id
                    and rec.queue_offset == queue_offset
                    and rec.transaction_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
                ):
                    notices.append(
                        f"queue offset {queue_offset} is not in the consume queue yet (dispatch stopped at commit "
                        f"log offset {start}); found by scanning the records after it"
                    )
                    return QueueHit(topic, queue_id, queue_offset, bounds, None, rec, tuple(notices))
        return _entry_and_record(q, reader, topic, queue_id, queue_offset, bounds, notices)


def store_times_at(st: Store, topic: str, queue_id: int, queue_offsets: Iterable[int]) -> dict[int, int | None]:
    """Store time of the record at each queue offset inside the queue's bounds (None: a filler, an
    unreadable record, or outside); each offset read once, the queue and commit log opened once."""
    with CommitLogReader.of(st) as reader:
        q = _open_queue(st, topic, queue_id, reader)
        bounds = _bounds(q)
        wanted = set(queue_offsets)
        unit_at = q.queue.get if isinstance(q.queue, RocksDBConsumeQueue) else _units_of(q, wanted)
        out: dict[int, int | None] = {}
        for off in wanted:
            hit = _entry_and_record(q, reader, topic, queue_id, off, bounds, [], unit_at)
            out[off] = None if hit.record is None else hit.record.store_timestamp_ms
        return out


def _units_of(q: _Queue, offsets: set[int]) -> Callable[[int], np.void | None]:
    """The unit at each of ``offsets`` of a file queue, each file read once over the slots asked for."""
    size = q.queue.file_size  # type: ignore[attr-defined]
    spans: dict[int, tuple[Segment, int, int]] = {}  # base -> (file, first slot, last slot)
    for off in offsets:
        seg = segment_for(q.segments, off * ENTRY_SIZE, size)
        if seg is not None:
            slot = off - seg.base_offset // ENTRY_SIZE
            lo, hi = spans.get(seg.base_offset, (seg, slot, slot))[1:]
            spans[seg.base_offset] = (seg, min(lo, slot), max(hi, slot))
    read = {base: (lo, q.queue.read(seg, lo, hi + 1)) for base, (seg, lo, hi) in spans.items()}  # type: ignore[attr-defined]

    def unit_at(off: int) -> np.void | None:
        seg = segment_for(q.segments, off * ENTRY_SIZE, size)
        if seg is None:
            return None
        lo, arr = read[seg.base_offset]
        slot = off - seg.base_offset // ENTRY_SIZE - lo
        return arr[slot] if 0 <= slot < len(arr) else None

    return unit_at


def _entry_and_record(
    q: _Queue,
    reader: CommitLogReader,
    topic: str,
    queue_id: int,
    queue_offset: int,
    bounds: QueueBounds,
    notices: list[str],
    unit_at: Callable[[int], np.void | None] | None = None,
) -> QueueHit:
    def miss(why: str, entry: CqEntry | None = None) -> QueueHit:
        notices.append(why)
        return QueueHit(topic, queue_id, queue_offset, bounds, entry, None, tuple(notices))

    if not q.segments:
        return miss(f"no consume queue {topic}/{queue_id}")
    if not bounds.min_offset <= queue_offset < bounds.max_offset:
        return miss(
            f"queue offset {queue_offset} is outside {topic}/{queue_id}'s [{bounds.min_offset}, {bounds.max_offset})"
        )
    unit = (unit_at or q.queue.get)(queue_offset)
    if unit is None:
        return miss(f"no consume queue file holds queue offset {queue_offset}")
    entry = _entry(unit)
    if entry.is_filler:
        return miss(f"queue offset {queue_offset} is a filler entry (the queue starts later)", entry)
    try:
        rec = reader.read(entry.phy_offset)
    except CorruptData as e:
        return miss(f"the entry points to commit log offset {entry.phy_offset}, which holds no message: {e}", entry)
    if rec.total_size != entry.size or rec.phy_offset != entry.phy_offset:
        notices.append(
            f"the entry says {entry.size} bytes at offset {entry.phy_offset}; the record there is "
            f"{rec.total_size} bytes and says offset {rec.phy_offset}"
        )
    return QueueHit(topic, queue_id, queue_offset, bounds, entry, rec, tuple(notices))


def _java_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def offset_by_time(st: Store, topic: str, queue_id: int, timestamp_ms: int, *, file_by_mtime: bool = False) -> QueueHit:
    """The broker's ``getOffsetInQueueByTime`` (4.4.0), with the record at the offset found.

    1. Pick a file: the broker takes the first consume queue file whose modification time is at
       or after ``timestamp_ms``, else the last file. A file's mtime is the time its last entry
       was written, so by default we use the store timestamp of each file's last valid entry
       instead, which survives copying and restoring a store; ``file_by_mtime`` uses the mtimes.
    2. Binary-search that file's valid entries from the queue's min offset: entries pointing
       below the commit log's min offset count as earlier; otherwise compare the record's store
       timestamp. An exact match wins (any one of equal timestamps, wherever the search meets it);
       otherwise the nearer of the last entry below and the first above (the lower one on a
       tie); only one side found: that side. A record that cannot be read (e.g. a filler entry)
       makes the broker answer 0. A missing or empty queue answers 0.

    Only entries on disk are searched: records not dispatched yet (after a crash; a note says
    when there are any) are put in the queue by a starting broker and then take part in its search.
    """
    notices: list[str] = []
    with CommitLogReader.of(st) as reader:
        q = _open_queue(st, topic, queue_id, reader)
        bounds = _bounds(q)
        if not q.segments:
            notices.append(f"no consume queue {topic}/{queue_id}: the broker answers 0")
            return QueueHit(topic, queue_id, 0, bounds, None, None, tuple(notices))
        if isinstance(q.queue, RocksDBConsumeQueue):  # the whole queue, by the units' own store times
            qo: int | None = q.queue.offset_by_time(timestamp_ms, reader.min_phy_offset)
        else:
            qo = _search_file(q, _pick_file(q, reader, timestamp_ms, file_by_mtime), reader, timestamp_ms, bounds)
        if qo is None:
            notices.append("the search met an entry whose message cannot be read: the broker answers 0")
            qo = 0
        # A clean 4.x shutdown waits for dispatch to catch up; only a crash leaves records behind.
        start = dispatched_end(st) if st.abort_exists() and st.lock_holder() is None else None
        if start is not None and _record_after(reader, start):
            notices.append(
                f"the commit log holds records after the dispatch position (offset {start}) that no consume queue "
                "holds yet; a starting broker adds them, this search does not see them"
            )
        return _entry_and_record(q, reader, topic, queue_id, qo, bounds, notices)


def _record_after(reader: CommitLogReader, phy_offset: int) -> bool:
    """Whether a frame holding a message record starts at ``phy_offset`` (or, past a blank, at the next file)."""
    for _ in range(2):
        loc = reader.locate(phy_offset)
        if loc is None:
            return False
        seg, pos = loc
        buf = reader.buffer(seg)
        kind, at, end = seg.framing.step(buf, pos, len(buf))  # one frame: this lookup sits below the walk
        if kind != BLANK:
            return kind == RECORD and end - at >= MIN_RECORD_SIZE_V1
        phy_offset = seg.base_offset + len(buf)
    return False


def _store_time(reader: CommitLogReader, phy_offset: int, size: int) -> int:
    """``CommitLog.pickupStoreTimestamp``: -1 when the bytes are not in a commit log file."""
    if phy_offset < reader.min_phy_offset:
        return -1
    loc = reader.locate(phy_offset)
    if loc is None:
        return -1
    seg, pos = loc
    buf = reader.buffer(seg)
    if size <= 0 or pos + size > len(buf) or pos + 80 > len(buf):
        return -1
    return store_timestamp_at(buf, pos)


def _pick_file(q: _Queue, reader: CommitLogReader, timestamp_ms: int, by_mtime: bool) -> int:
    for i, seg in enumerate(q.segments):
        if by_mtime:
            if os.stat(seg.path).st_mtime_ns // 1_000_000 >= timestamp_ms:
                return i
            continue
        valid = q.valid_entries(i)
        if len(valid) and _store_time(reader, int(valid[-1]["phy_offset"]), int(valid[-1]["size"])) >= timestamp_ms:
            return i
    return len(q.segments) - 1


def _search_file(q: _Queue, i: int, reader: CommitLogReader, timestamp_ms: int, bounds: QueueBounds) -> int | None:
    seg = q.segments[i]
    valid = q.valid_entries(i)
    min_logic = bounds.min_offset * ENTRY_SIZE
    low = min_logic - seg.base_offset if min_logic > seg.base_offset else 0
    high = len(valid) * ENTRY_SIZE - ENTRY_SIZE
    target = left = right = -1
    left_value = right_value = -1
    while high >= low:
        mid = (low + high) // (2 * ENTRY_SIZE) * ENTRY_SIZE
        e = _entry(valid[mid // ENTRY_SIZE])
        if e.phy_offset < reader.min_phy_offset:
            low = mid + ENTRY_SIZE
            left = mid
            continue
        t = _store_time(reader, e.phy_offset, e.size)
        if t < 0:
            return None
        if t == timestamp_ms:
            target = mid
            break
        if t > timestamp_ms:
            high = mid - ENTRY_SIZE
            right, right_value = mid, t
        else:
            low = mid + ENTRY_SIZE
            left, left_value = mid, t
    if target != -1:
        pos = target
    elif left_value == -1:
        pos = right
    elif right_value == -1:
        pos = left
    else:
        pos = right if abs(timestamp_ms - left_value) > abs(timestamp_ms - right_value) else left
    return _java_div(seg.base_offset + pos, ENTRY_SIZE)
