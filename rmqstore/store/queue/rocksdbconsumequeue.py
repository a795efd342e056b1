"""Consume queues in a RocksDB database (5.x ``storeType=defaultRocksDB``): ``consumequeue/`` is the database.

A queue's units are rows of column family ``default`` keyed by queue offset; its bounds are the ``max`` and
``min`` rows of ``offset`` (``RocksDBConsumeQueueOffsetTable``). For the operations that page through a
queue file by file, a run of queue offsets stands for a file: ``files()`` gives one :class:`Segment` per
``mappedFileSizeConsumeQueue / 20`` offsets, named by its first byte in the 20-byte stream (``<database>/
<topic>/<queueId>/<offset x 20>``, a name, not a file), and ``read()`` places the units of that run by queue
offset (an offset without a row reads as an empty slot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rmqstore.codec import rocksdbcq as codec
from rmqstore.codec.consumequeue import ENTRY_SIZE, effective_file_size, valid_prefix
from rmqstore.errors import CorruptData
from rmqstore.problems import Problem
from rmqstore.store.layout import Segment, StoreConfig, file_name
from rmqstore.store.queue.interface import QueueCut, QueueRange, QueueRecovery, QueueTail
from rmqstore.store.queue.rocksdb import Database

if TYPE_CHECKING:
    import numpy as np

ROCKSDB_STORE_TYPE = "defaultRocksDB"


@dataclass(eq=False)
class RocksDBConsumeQueues:
    """Every queue of the database in ``<root>/consumequeue`` (a store, or a build directory beside it).

    The database is opened on first use, read-only unless ``writable`` (a rebuild), and kept until
    :meth:`close`."""

    config: StoreConfig
    root: Path
    writable: bool = False
    unit_size: ClassVar[int] = ENTRY_SIZE
    _db: Database | None = field(default=None, repr=False)
    _ends: dict[tuple[str, int], list[int]] = field(default_factory=dict, repr=False)  # written: first/last units
    dispatched: int = 0  # the end of the last record written (the dispatch checkpoint row)

    @property
    def directory(self) -> Path:
        return self.root / "consumequeue"

    def database(self) -> Database:
        if self._db is None:
            if self.writable:
                self._db = Database.open_write(self.directory)
            else:
                if not self.directory.is_dir():
                    raise CorruptData("no consume queue database (expected a RocksDB database)", path=self.directory,
                                      pos=0)  # fmt: skip
                self._db = Database.open_read(self.directory)
        return self._db

    def exists(self) -> bool:
        return self.directory.is_dir()

    def queues(self) -> list[RocksDBConsumeQueue]:
        """Every queue with a unit or a ``max``/``min`` row, sorted by topic and queue id."""
        if not self.directory.is_dir():
            return []
        found = {(r.topic, r.queue_id) for r in self.offset_rows() if r.topic != codec.CHECKPOINT_TOPIC}
        found |= set(self._unit_queues())
        return [self.queue(t, q) for t, q in sorted(found)]

    def _unit_queues(self) -> list[tuple[str, int]]:
        """The queues of ``default``, one seek per queue (each queue's keys are one range)."""
        db, out, lo = self.database(), [], b""
        while True:
            row = next(iter(db.scan(lo, None)), None)
            if row is None:
                return out
            k = codec.decode_unit_key(row[0], str(self.directory))
            out.append((k.topic, k.queue_id))
            lo = _after(codec.queue_prefix(k.topic, k.queue_id))

    def offset_rows(self) -> list[codec.OffsetRow]:
        """Every row of column family ``offset``, decoded."""
        where = str(self.directory)
        return [codec.decode_offset_row(k, v, where) for k, v in self.database().scan(b"", None, offset=True)]

    def checkpoint(self) -> int | None:
        """The dispatch checkpoint row: where the engine's dispatch stands in the commit log (None without one)."""
        if not self.writable and not self.exists():
            return None
        v = self.database().get(codec.CHECKPOINT_KEY, offset=True)
        return None if v is None else codec.decode_offset_row(codec.CHECKPOINT_KEY, v, str(self.directory)).phy_offset

    def queue(self, topic: str, queue_id: int) -> RocksDBConsumeQueue:
        return RocksDBConsumeQueue(self, topic, int(queue_id))

    def path_problem(self, topic: str, queue_id: int) -> str | None:
        """Every name is a key of the database: none is a path."""
        return None

    def out_of_line(self, end: int) -> str | None:
        """Why the database does not serve the commit log up to ``end`` (where the valid records end) as
        the engine left it after a clean shutdown, None when it does: the checkpoint row at ``end`` and no
        unit, ``max`` or ``min`` row pointing at or past it."""
        if not self.directory.is_dir():
            return "is missing"
        cp = self.checkpoint()
        if cp is None:
            return "holds no dispatch checkpoint row (nothing was flushed before a crash)"
        if cp != end:
            return f"was dispatched up to commit log offset {cp}, the valid records end at {end}"
        for q in self.queues():
            last = q.last_key()
            u = None if last is None else q.get(last)
            mx = q.max_row()
            if u is not None and int(u["phy_offset"]) >= end:
                return f"has units of {q.topic} queue {q.queue_id} pointing at or past {end}"
            if mx is None and last is not None:
                return f"has units of {q.topic} queue {q.queue_id} without a max row"
            if mx is not None and (mx.queue_offset != last or mx.phy_offset >= end):
                return f"has a max row of {q.topic} queue {q.queue_id} that is not its last unit"
        return None

    def mark_min(self, topic: str, queue_id: int, queue_offset: int, phy_offset: int) -> None:
        """The ``min`` row a written queue gets (default: its first unit written), for a queue whose min
        offset is past its first unit (a converted queue whose first messages have expired)."""
        ends = self._ends[(topic, queue_id)]
        ends[0], ends[1] = queue_offset, phy_offset

    def close(self, sync: bool = True) -> None:
        if self._db is None:
            return
        if self.writable:
            self._write_bounds()
        self._db.close(sync)
        self._db = None

    def _write_bounds(self) -> None:
        """``max``/``min`` rows of the queues written and the checkpoint row, as the engine leaves them."""
        assert self._db is not None
        for (topic, qid), (first_q, first_phy, last_q, last_phy) in sorted(self._ends.items()):
            self._db.put(codec.offset_key(topic, qid, codec.MAX), codec.encode_offset(last_phy, last_q), offset=True)
            min_key = codec.offset_key(topic, qid, codec.MIN)
            if self._db.get(min_key, offset=True) is None:  # a continued queue keeps its min row
                self._db.put(min_key, codec.encode_offset(first_phy, first_q), offset=True)
        if self._ends or self.dispatched:
            self._db.put(codec.CHECKPOINT_KEY, codec.encode_checkpoint(self.dispatched), offset=True)
        self._db.write()


def _after(prefix: bytes) -> bytes:
    """The smallest key above every key starting with ``prefix`` (which ends in 0x01)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


@dataclass(frozen=True, slots=True)
class RocksDBConsumeQueue:
    """One ``(topic, queueId)`` of the database."""

    store: RocksDBConsumeQueues
    topic: str
    queue_id: int

    unit_size: ClassVar[int] = ENTRY_SIZE

    @property
    def directory(self) -> Path:
        """The queue's name under the database (problems name it; no such directory exists)."""
        return self.store.directory / self.topic / str(self.queue_id)

    @property
    def dtype(self) -> np.dtype:
        return codec.UNIT_DTYPE

    def _prefix(self) -> bytes:
        return codec.queue_prefix(self.topic, self.queue_id)

    def _where(self) -> str:
        return str(self.directory)

    def _row(self, kind: bytes) -> codec.OffsetRow | None:
        if not self.store.exists():
            return None
        key = codec.offset_key(self.topic, self.queue_id, kind)
        v = self.store.database().get(key, offset=True)
        return None if v is None else codec.decode_offset_row(key, v, self._where())

    def max_row(self) -> codec.OffsetRow | None:
        return self._row(codec.MAX)

    def min_row(self) -> codec.OffsetRow | None:
        return self._row(codec.MIN)

    def exists(self) -> bool:
        return self.store.exists() and (self.first_key() is not None or self.max_row() is not None)

    def first_key(self) -> int | None:
        """The queue offset of the first unit row, None without units."""
        if not self.store.exists():
            return None
        p = self._prefix()
        row = next(iter(self.store.database().scan(p, _after(p))), None)
        return None if row is None else codec.decode_unit_key(row[0], self._where()).queue_offset

    def last_key(self) -> int | None:
        if not self.store.exists():
            return None
        p = self._prefix()
        row = self.store.database().last_before(_after(p), p)
        return None if row is None else codec.decode_unit_key(row[0], self._where()).queue_offset

    def files(self) -> tuple[list[Segment], list[Problem]]:
        first, last = self.first_key(), self.last_key()
        if first is None or last is None:
            return [], []
        per = effective_file_size(self.store.config.cq_file_size) // ENTRY_SIZE
        out, q = [], first
        while q <= last:
            stop = min((q // per + 1) * per, last + 1)
            out.append(Segment(self.directory / file_name(q * ENTRY_SIZE), q * ENTRY_SIZE, (stop - q) * ENTRY_SIZE))
            q = stop
        return out, []

    def range_units(self, lo: int, hi: int) -> np.ndarray:
        """Slots for queue offsets ``lo`` to ``hi`` (exclusive): units where rows are, empty slots elsewhere."""
        import numpy as np

        out = np.zeros(max(0, hi - lo), dtype=codec.UNIT_DTYPE)
        if hi <= lo:
            return out
        keys, values = [], []
        for k, v in self.store.database().scan(codec.unit_key(self.topic, self.queue_id, lo),
                                               codec.unit_key(self.topic, self.queue_id, hi)):  # fmt: skip
            keys.append(k)
            values.append(v)
        if keys:
            qoffs, units = codec.decode_units(self._prefix(), keys, values, self._where())
            out[qoffs - lo] = units
        return out

    def read(self, seg: Segment, start: int = 0, stop: int | None = None) -> np.ndarray:
        first = seg.base_offset // ENTRY_SIZE
        n = seg.size // ENTRY_SIZE
        stop = n if stop is None else min(stop, n)
        return self.range_units(first + start, first + stop)

    def units(self) -> tuple[int, np.ndarray]:
        """The units from the first row on, up to the first missing queue offset (or invalid unit)."""
        import numpy as np

        first, last = self.first_key(), self.last_key()
        if first is None or last is None:
            return 0, np.empty(0, codec.UNIT_DTYPE)
        arr = self.range_units(first, last + 1)
        return first, arr[: valid_prefix(arr)]

    def get(self, queue_offset: int) -> np.void | None:
        if not self.store.exists():
            return None
        v = self.store.database().get(codec.unit_key(self.topic, self.queue_id, queue_offset))
        if v is None:
            return None
        codec.decode_unit(v, self._where())
        return codec.units_array([v])[0]

    def _unit_size(self, queue_offset: int) -> int | None:
        u = self.get(queue_offset)
        return None if u is None else int(u["size"])

    def tail(self) -> QueueTail:
        """From the ``max`` row (the engine's maxOffsetInQueue is its queue offset + 1; maxPhysicOffset is the
        record's start, not its end)."""
        row = self.max_row()
        if row is None:
            return QueueTail(0, 0, None, -1, None)
        size = self._unit_size(row.queue_offset)
        end = (row.queue_offset + 1) * ENTRY_SIZE
        last = None if size is None else (row.phy_offset, size)
        return QueueTail(end, row.queue_offset + 1, last, row.phy_offset, None)

    def last_unit(self) -> tuple[int, int] | None:
        return self.tail().last

    def queue_range(self, min_phy: int) -> QueueRange:
        """``getMinOffsetInQueue`` / ``getMaxOffsetInQueue`` of ``RocksDBConsumeQueue`` after load."""
        mx = self.max_row()
        max_offset = 0 if mx is None else mx.queue_offset + 1
        min_offset = self._min_offset(min_phy, mx)
        if mx is None:
            return QueueRange(self.topic, self.queue_id, min_offset, 0, -1, -1)
        size = self._unit_size(mx.queue_offset)
        return QueueRange(self.topic, self.queue_id, min_offset, max_offset, mx.phy_offset,
                          -1 if size is None else mx.phy_offset + size)  # fmt: skip

    def _min_offset(self, min_phy: int, mx: codec.OffsetRow | None) -> int:
        """``getMinCqOffset``: the ``min`` row while it points at or after the commit log's start; else
        ``correctMinCqOffset`` (0 without a ``max`` row, past the ``max`` row when all is below the
        commit log, else the first unit at or after ``min_phy``, looked for from the ``min`` row on)."""
        mn = self.min_row()
        if mn is not None and mn.phy_offset >= min_phy:
            return mn.queue_offset
        low = 0 if mn is None else mn.queue_offset
        if mx is None:
            return 0
        if mx.phy_offset < min_phy:
            return mx.queue_offset + 1
        hit = self._first_at_or_after(min_phy, low, mx.queue_offset)
        return low if hit is None else hit

    def _first_at_or_after(self, phy: int, low: int, high: int) -> int | None:
        """``binarySearchInCQ``: the first queue offset in ``[low, high]`` whose unit points at or past ``phy``."""
        found = None
        while low <= high:
            mid = (low + high) // 2
            u = self.get(mid)
            if u is None:
                return found
            if int(u["phy_offset"]) >= phy:
                found, high = mid, mid - 1
            else:
                low = mid + 1
        return found

    def offset_by_time(self, timestamp_ms: int, min_phy: int) -> int:
        """``getOffsetInQueueByTime`` (``binarySearchInCQByTime``) from the ``min`` to the ``max`` row, by the
        units' own store timestamps: an exact match, else the nearer of the last unit before and the first
        after (the earlier on a tie); units below ``min_phy`` count as earlier; 0 for a queue without a ``max``
        row or when a unit's store time is negative."""
        mx = self.max_row()
        if mx is None:
            return 0
        low, high = self._min_offset(min_phy, mx), mx.queue_offset
        left = right = -1
        left_ts = right_ts = -1
        while high >= low:
            mid = low + (high - low) // 2
            u = self.get(mid)
            if u is None:
                low = mid + 1
                continue
            if int(u["phy_offset"]) < min_phy:
                low, left = mid + 1, mid
                continue
            ts = int(u["store_timestamp_ms"])
            if ts < 0:
                return 0
            if ts == timestamp_ms:
                return mid
            if ts > timestamp_ms:
                high, right, right_ts = mid - 1, mid, ts
            else:
                low, left, left_ts = mid + 1, mid, ts
        if left_ts == -1:
            return right
        if right_ts == -1:
            return left
        return right if abs(timestamp_ms - left_ts) > abs(timestamp_ms - right_ts) else left

    def recover(self) -> QueueRecovery:
        """The database has no per-queue recovery: every queue loads as its rows say."""
        segs, problems = self.files()
        t = self.tail()
        first = self.first_key() or 0
        return QueueRecovery(self, segs, problems, t.end, first, t.max_offset, t.max_physic_offset, kept=segs)

    def _units_from(self, phy_offset: int) -> tuple[int, int] | None:
        """The first and last queue offset of the units pointing at or past ``phy_offset`` (units are in
        commit log order within a queue)."""
        first, last = self.first_key(), self.last_key()
        if first is None or last is None:
            return None
        u = self.get(last)
        if u is None or int(u["phy_offset"]) < phy_offset:
            return None
        hit = self._first_at_or_after(phy_offset, first, last)
        return (first if hit is None else hit), last

    def truncate_dirty(self, phy_offset: int, recovered: QueueRecovery) -> list[QueueCut]:
        """The units pointing at or past ``phy_offset``, as rows to delete (positions are queue offsets x 20)."""
        span = self._units_from(phy_offset)
        if span is None:
            return []
        lo, hi = span
        return [QueueCut(self.store.directory, "delete-rows", lo * ENTRY_SIZE, (hi + 1) * ENTRY_SIZE, hi + 1 - lo)]

    def phy_offsets_at(self, queue_offsets: np.ndarray, recovered: QueueRecovery) -> np.ndarray:
        import numpy as np

        out = np.full(len(queue_offsets), -1, dtype=np.int64)
        for i, qo in enumerate(queue_offsets.tolist()):
            u = self.get(int(qo))
            if u is not None and int(u["size"]) > 0:
                out[i] = int(u["phy_offset"])
        return out

    def destroy(self) -> list[QueueCut]:
        first, last = self.first_key(), self.last_key()
        if first is None or last is None:
            return []
        return [QueueCut(self.store.directory, "delete-rows", first * ENTRY_SIZE, (last + 1) * ENTRY_SIZE,
                         last + 1 - first)]  # fmt: skip

    def expired_files(self, min_phy: int) -> tuple[list[tuple[Segment, int]], str | None]:
        return [], "a RocksDB consume queue has no files to delete: the engine moves its min row instead"

    def writer(self, *, where: tuple[Path | str, int, int | None] | None = None) -> RocksDBQueueWriter:
        return RocksDBQueueWriter(self)


class RocksDBQueueWriter:
    """Puts the units of one queue into the database's write batch, as the engine's dispatch does."""

    def __init__(self, queue: RocksDBConsumeQueue) -> None:
        self.queue = queue
        self.written = 0
        self.last_ts = 0
        self._prefix = queue._prefix()

    def put(
        self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray, queue_offset: np.ndarray, store_ts: np.ndarray
    ) -> None:

        n = len(phy)
        if not n:
            return
        store = self.queue.store
        store.database().put_many(
            codec.unit_keys(self._prefix, queue_offset), codec.unit_values(phy, size, tags_code, store_ts)
        )
        key = (self.queue.topic, self.queue.queue_id)
        ends = store._ends.get(key)
        if ends is None:
            ends = store._ends[key] = [int(queue_offset[0]), int(phy[0]), 0, 0]
        ends[2], ends[3] = int(queue_offset[-1]), int(phy[-1])
        store.dispatched = max(store.dispatched, int(phy[-1]) + int(size[-1]))
        self.written += n
        self.last_ts = int(store_ts[-1])

    def close(self, sync: bool = True) -> None:
        """Rows stay in the database's batch until the queue store closes."""
