"""The consume queue store interface (rmqstore.store.queue): the consumequeue/ files and the 5.x
batchconsumequeue/ files through the same calls, on stores real engines wrote and on built ones,
and a third, in-memory kind of queue that operations use through the interface alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from rmqstore.codec.consumequeue import ENTRY_DTYPE, ENTRY_SIZE, valid_prefix
from rmqstore.ops import info as info_op
from rmqstore.problems import Problem
from rmqstore.rules import rules_for
from rmqstore.store import Store, lookup, open_store
from rmqstore.store import offsets as store_offsets
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.store.queue.batchconsumequeue import BatchConsumeQueues
from rmqstore.store.queue.consumequeue import FileConsumeQueue, FileConsumeQueues
from rmqstore.store.queue.interface import (
    ConsumeQueue,
    ConsumeQueueStore,
    QueueCut,
    QueueRange,
    QueueRecovery,
    QueueTail,
)
from tests.conftest import copy_real_store, load_truth

# stores the broker loads unchanged: what it reports is what the files hold
CLEAN_CASES = ("clean-2topics", "4.9.4/clean-2topics", "5.2.0/clean-5x-mixed", "5.2.0/batch-cq")


def kind_of(st: Store, queue: dict) -> ConsumeQueueStore:
    """The store's queues of the kind truth.json names for a queue (SimpleCQ unless BatchCQ)."""
    return st.batch_queues if queue.get("cqType") == "BatchCQ" else st.consume_queues


def units_as_truth(units: np.ndarray, first: int, batch: bool) -> list[dict]:
    out = []
    for i, u in enumerate(units):
        e = {"commitLogOffset": int(u["phy_offset"]), "size": int(u["size"]), "tagsCode": int(u["tags_code"])}
        e["queueOffset"] = int(u["base_offset"]) if batch else first + i
        if batch:
            e["batchNum"] = int(u["batch_size"])
        out.append(e)
    return out


def apply_cuts(cuts: list[QueueCut]) -> None:
    for c in cuts:
        if c.verb == "delete":
            c.path.unlink()
        else:
            with open(c.path, "r+b") as f:
                f.seek(c.from_pos)
                f.write(bytes(c.to_pos - c.from_pos))


# ------------------------------------------------------------------------------ both kinds, real stores


@pytest.mark.parametrize("case", CLEAN_CASES)
def test_every_queue_of_a_real_store_through_the_interface(case: str, tmp_path: Path) -> None:
    truth = load_truth(case)
    root = copy_real_store(case, tmp_path)
    with open_store(root) as st:
        listed = {(q.topic, q.queue_id) for kind in (st.consume_queues, st.batch_queues) for q in kind.queues()}
        assert listed == {(q["topic"], q["queueId"]) for q in truth["queues"] if q["maxOffset"] > 0}
        min_phy = st.min_phy_offset()
        for tq in truth["queues"]:
            batch = tq.get("cqType") == "BatchCQ"
            q = kind_of(st, tq).queue(tq["topic"], tq["queueId"])
            where = (tq["topic"], tq["queueId"])
            assert q.exists() == (tq["maxOffset"] > 0), where
            assert q.files()[1] == [], where
            rng = q.queue_range(min_phy)
            assert (rng.min_offset, rng.max_offset) == (tq["minOffset"], tq["maxOffset"]), where
            first, units = q.units()
            assert units_as_truth(units, first, batch) == tq["entries"], where
            assert q.tail().max_offset == tq["maxOffset"], where
            rec = q.recover()
            assert (rec.max_offset, rec.cuts) == (tq["maxOffset"], []), where
            if not tq["entries"]:
                assert q.last_unit() is None and rec.max_physic_offset == -1
                continue
            last = tq["entries"][-1]
            assert q.last_unit() == (last["commitLogOffset"], last["size"]), where
            assert rec.max_physic_offset == tq["maxPhysicOffset"], where
            offsets = np.array([e["queueOffset"] for e in tq["entries"]], dtype=np.int64)
            want = [e["commitLogOffset"] for e in tq["entries"]]
            assert q.phy_offsets_at(offsets, rec).tolist() == want, where
            assert [int(q.get(int(o))["phy_offset"]) for o in offsets] == want, where
            assert q.truncate_dirty(truth["maxPhyOffset"], rec) == [], where  # nothing past the commit log end
            assert q.expired_files(0) == ([], None), where


@pytest.mark.parametrize("case", ["5.2.0/clean-5x-mixed", "5.2.0/batch-cq"])
def test_truncation_after_the_first_unit_keeps_only_it(case: str, tmp_path: Path) -> None:
    """``truncateDirtyLogicFiles`` planned by either kind, applied: the queue then ends after its first unit."""
    truth = load_truth(case)
    root = copy_real_store(case, tmp_path)
    with open_store(root) as st:
        for tq in (q for q in truth["queues"] if len(q["entries"]) > 1):
            q = kind_of(st, tq).queue(tq["topic"], tq["queueId"])
            first = tq["entries"][0]
            cuts = q.truncate_dirty(first["commitLogOffset"] + 1, q.recover())
            assert cuts and sum(c.units for c in cuts) == len(tq["entries"]) - 1
            apply_cuts(cuts)
            _, units = q.units()
            assert [int(u["phy_offset"]) for u in units] == [first["commitLogOffset"]]
            assert q.tail().last == (first["commitLogOffset"], first["size"])


@pytest.mark.parametrize("case", ["clean-2topics", "5.2.0/batch-cq"])
def test_writers_rebuild_the_files_the_engine_wrote(case: str, tmp_path: Path) -> None:
    """Each kind's writer, fed the units read through the interface, writes the engine's bytes."""
    root = copy_real_store(case, tmp_path)
    build = tmp_path / "build"
    with open_store(root) as st:
        kinds: list[tuple[ConsumeQueueStore, ConsumeQueueStore]] = [
            (st.consume_queues, FileConsumeQueues(st.config, build)),
            (st.batch_queues, BatchConsumeQueues(st.config, build)),
        ]
        compared = 0
        for live, rebuilt in kinds:
            for q in live.queues():
                first, units = q.units()
                phy, size, tags = units["phy_offset"], units["size"], units["tags_code"]
                w = rebuilt.queue(q.topic, q.queue_id).writer()
                if live is st.batch_queues:
                    w.put(phy, size, tags, units["base_offset"], units["store_timestamp_ms"], units["batch_size"])
                else:
                    w.put(phy, size, tags, np.arange(first, first + len(units)), np.zeros(len(units), np.int64))
                w.close()
                assert w.written == len(units)
                new = rebuilt.queue(q.topic, q.queue_id)
                assert [s.path.name for s in new.files()[0]] == [s.path.name for s in q.files()[0]]
                for a, b in zip(q.files()[0], new.files()[0], strict=True):
                    assert a.path.read_bytes() == b.path.read_bytes(), a.path
                    compared += 1
        assert compared


# ------------------------------------------------------------------------------ built stores


def write_units(path: Path, entries: list[tuple[int, int]], slots: int = 4) -> None:
    arr = np.zeros(slots, dtype=ENTRY_DTYPE)
    for i, (phy, size) in enumerate(entries):
        arr[i]["phy_offset"], arr[i]["size"] = phy, size
    path.write_bytes(arr.tobytes())


def test_queue_tail_is_the_valid_prefix_of_the_last_file(tmp_path: Path) -> None:
    q = FileConsumeQueue("T", 0, tmp_path, 4 * ENTRY_SIZE, "4.4.0")
    assert q.tail() == QueueTail(0, 0, None, -1, None)
    write_units(tmp_path / f"{0:020d}", [(0, 10), (10, 10), (20, 10), (30, 10)])
    tail = q.tail()
    assert (tail.end, tail.max_offset, tail.last, tail.max_physic_offset) == (4 * ENTRY_SIZE, 4, (30, 10), 30)
    write_units(tmp_path / f"{4 * ENTRY_SIZE:020d}", [(40, 10), (50, 10), (0, 0), (70, 10)])  # a hole ends them
    assert (q.tail().end, q.tail().last) == (6 * ENTRY_SIZE, (50, 10))
    assert q.tail().file == q.files()[0][-1]
    write_units(tmp_path / f"{4 * ENTRY_SIZE:020d}", [])  # nothing valid in the last file: the one before's
    assert (q.tail().end, q.tail().last) == (4 * ENTRY_SIZE, (30, 10))
    assert FileConsumeQueue("T", 0, tmp_path, 4 * ENTRY_SIZE, "5.2.0").tail().max_physic_offset == 40


@given(
    valid=hs.lists(hs.integers(0, 3 * (1 << 16) + 5), min_size=1, max_size=3),
    slots=hs.lists(hs.integers(1, 3 * (1 << 16) + 8), min_size=1, max_size=3),
    stray=hs.booleans(),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_units_are_the_valid_prefixes_read_file_by_file(
    valid: list[int], slots: list[int], stray: bool, tmp_path: Path
) -> None:
    """``units`` reads each file only as far as its valid units go (a chunk at a time): the same units as
    ``valid_prefix`` of every whole file, stopping after the first file that is not all valid."""
    q_dir = tmp_path / f"q{len(list(tmp_path.iterdir()))}"
    q_dir.mkdir()
    size = max(slots) * ENTRY_SIZE
    for i, (n_valid, n_slots) in enumerate(zip(valid, slots, strict=False)):
        arr = np.zeros(n_slots, dtype=ENTRY_DTYPE)
        n = min(n_valid, n_slots)
        arr["phy_offset"][:n] = np.arange(n) * 7 + i
        arr["size"][:n] = 7
        if stray and n + 1 < n_slots:
            arr[n + 1] = (99, 7, 0)  # a unit after the hole is not one of them
        (q_dir / f"{i * size:020d}").write_bytes(arr.tobytes())
    q = FileConsumeQueue("T", 0, q_dir, size, "5.2.0")
    expected = [np.zeros(0, ENTRY_DTYPE)]
    for seg in q.files()[0]:  # every whole unit of the file, then its valid prefix
        data = seg.path.read_bytes()
        arr = np.frombuffer(data, dtype=ENTRY_DTYPE, count=len(data) // ENTRY_SIZE)
        n = valid_prefix(arr)
        expected.append(arr[:n])
        if n < len(arr):
            break
    first, units = q.units()
    assert first == 0
    assert units.tobytes() == np.concatenate(expected).tobytes()


def test_recovery_expiry_and_destruction_of_built_files(tmp_path: Path) -> None:
    q = FileConsumeQueue("T", 0, tmp_path, 4 * ENTRY_SIZE, "5.2.0")
    write_units(tmp_path / f"{0:020d}", [(0, 10), (10, 10), (20, 10), (30, 10)])
    write_units(tmp_path / f"{80:020d}", [(40, 10), (0, 0), (60, 10)])  # a stale unit after the hole
    write_units(tmp_path / f"{160:020d}", [(80, 10)])  # past the end recovery finds
    rec = q.recover()
    assert (rec.end, rec.max_offset, rec.max_physic_offset) == (100, 5, 50)
    assert [s.path.name for s in rec.kept] == [f"{0:020d}", f"{80:020d}"]
    assert [(c.path.name, c.verb, c.from_pos, c.units) for c in rec.cuts] == [
        (f"{80:020d}", "zero", 20, 1),
        (f"{160:020d}", "delete", 0, 1),
    ]
    # slots are read as they are (the hole reads 0); a queue offset in no kept file has none
    assert q.phy_offsets_at(np.array([0, 3, 4, 5, 8]), rec).tolist() == [0, 30, 40, 0, -1]
    expired, stopped = q.expired_files(35)  # the last slot of each file but the last decides (zeros read as 0)
    assert [(s.path.name, phy) for s, phy in expired] == [(f"{0:020d}", 30), (f"{80:020d}", 0)]
    assert stopped is None
    assert q.expired_files(30) == ([], None)  # the first file's last unit is not below: nothing goes
    assert {c.path.name for c in q.destroy()} == {f"{0:020d}", f"{80:020d}", f"{160:020d}"}


def test_refused_topic_names_hold_no_queue(tmp_path: Path) -> None:
    queues = FileConsumeQueues(StoreConfig(store_root=tmp_path), tmp_path)
    (tmp_path / "consumequeue" / "x").mkdir(parents=True)
    bad = queues.queue("../x", 0)
    assert not bad.exists() and bad.files() == ([], [])
    assert ".refused-topic" in bad.directory.parts


# ------------------------------------------------------------------------------ a third kind, in memory


@dataclass
class MemoryQueue:
    """One queue whose units live in memory, cut into pieces of ``per_file`` units that stand for files."""

    topic: str
    queue_id: int
    entries: np.ndarray  # its valid units (ENTRY_DTYPE), from queue offset ``first`` on
    per_file: int
    first: int = 0
    max_includes_size: bool = False  # maxPhysicOffset is the last unit's end (4.5.1+), else its offset

    @property
    def unit_size(self) -> int:
        return ENTRY_SIZE

    @property
    def directory(self) -> Path:
        return Path("memory") / self.topic / str(self.queue_id)

    def exists(self) -> bool:
        return True

    def files(self) -> tuple[list[Segment], list[Problem]]:
        size = self.per_file * ENTRY_SIZE
        start = self.first * ENTRY_SIZE - self.first * ENTRY_SIZE % size
        stop = (self.first + len(self.entries)) * ENTRY_SIZE
        return [Segment(self.directory / f"{b:020d}", b, size) for b in range(start, stop, size)], []

    def read(self, seg: Segment, start: int = 0, stop: int | None = None) -> np.ndarray:
        slots = np.zeros(self.per_file, dtype=ENTRY_DTYPE)
        base = seg.base_offset // ENTRY_SIZE
        lo, hi = max(base, self.first), min(base + self.per_file, self.first + len(self.entries))
        if hi > lo:
            slots[lo - base : hi - base] = self.entries[lo - self.first : hi - self.first]
        return slots[start:stop].copy()

    def units(self) -> tuple[int, np.ndarray]:
        return self.first, self.entries.copy()

    def get(self, queue_offset: int) -> np.void | None:
        i = queue_offset - self.first
        return self.entries[i] if 0 <= i < len(self.entries) else None

    def last_unit(self) -> tuple[int, int] | None:
        return (int(self.entries[-1]["phy_offset"]), int(self.entries[-1]["size"])) if len(self.entries) else None

    def tail(self) -> QueueTail:
        end = self.first + len(self.entries)
        last = self.last_unit()
        segs = self.files()[0]
        max_physic = -1 if last is None else last[0] + (last[1] if self.max_includes_size else 0)
        return QueueTail(end * ENTRY_SIZE, end, last, max_physic, segs[-1] if segs else None)

    def queue_range(self, min_phy: int) -> QueueRange:
        end = self.first + len(self.entries)
        hits = np.flatnonzero(self.entries["phy_offset"] >= min_phy)
        last = self.last_unit() or (-1, 0)
        mn = self.first + int(hits[0]) if hits.size else 0
        return QueueRange(self.topic, self.queue_id, mn, end, last[0], last[0] + last[1] if last[0] >= 0 else -1)

    def recover(self) -> QueueRecovery:
        segs = self.files()[0]
        end = self.first + len(self.entries)
        return QueueRecovery(self, segs, [], end * ENTRY_SIZE, self.first, end, self.tail().max_physic_offset, segs)

    def truncate_dirty(self, phy_offset: int, recovered: QueueRecovery) -> list[QueueCut]:
        return []  # nothing kept in files

    def phy_offsets_at(self, queue_offsets: np.ndarray, recovered: QueueRecovery) -> np.ndarray:
        i = queue_offsets - self.first
        inside = (i >= 0) & (i < len(self.entries))
        out = np.full(len(queue_offsets), -1, dtype=np.int64)
        out[inside] = self.entries["phy_offset"][i[inside]]
        return out

    def destroy(self) -> list[QueueCut]:
        return []

    def expired_files(self, min_phy: int) -> tuple[list[tuple[Segment, int]], str | None]:
        return [], None

    def writer(self, *, where: tuple[Path | str, int, int | None] | None = None) -> MemoryWriter:
        return MemoryWriter(self)


@dataclass
class MemoryWriter:
    queue: MemoryQueue
    written: int = 0
    last_ts: int = 0

    def put(self, phy, size, tags_code, queue_offset, store_ts) -> None:  # noqa: ANN001
        new = np.zeros(len(phy), dtype=ENTRY_DTYPE)
        new["phy_offset"], new["size"], new["tags_code"] = phy, size, tags_code
        self.queue.entries = np.concatenate([self.queue.entries, new])
        self.written += len(phy)
        self.last_ts = int(store_ts[-1]) if len(store_ts) else self.last_ts

    def close(self, sync: bool = True) -> None:
        pass


@dataclass
class MemoryQueues:
    """A consume queue store in memory."""

    per_file: int
    max_includes_size: bool = False
    held: dict[tuple[str, int], MemoryQueue] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return Path("memory")

    def queues(self) -> list[MemoryQueue]:
        return [self.held[k] for k in sorted(self.held)]

    def close(self, sync: bool = True) -> None:
        """Nothing is held open."""

    def queue(self, topic: str, queue_id: int) -> MemoryQueue:
        empty = MemoryQueue(topic, queue_id, np.zeros(0, ENTRY_DTYPE), self.per_file, 0, self.max_includes_size)
        return self.held.get((topic, queue_id), empty)

    @classmethod
    def copy_of(cls, queues: ConsumeQueueStore, cfg: StoreConfig) -> MemoryQueues:
        out = cls(cfg.cq_file_size // ENTRY_SIZE, rules_for(cfg.broker).cq_max_includes_size)
        for q in queues.queues():
            first, units = q.units()
            held = MemoryQueue(q.topic, q.queue_id, units, out.per_file, first, out.max_includes_size)
            out.held[(q.topic, q.queue_id)] = held
        return out


def test_a_queue_in_memory_satisfies_the_interface() -> None:
    q: ConsumeQueue = MemoryQueue("T", 0, np.zeros(0, ENTRY_DTYPE), 4)
    w = q.writer()
    w.put(np.array([0, 100, 200]), np.array([100, 100, 50]), np.zeros(3, np.int64), np.arange(3), np.array([1, 2, 3]))
    assert (w.written, w.last_ts, q.last_unit(), q.tail().max_offset) == (3, 3, (200, 50), 3)
    assert q.queue_range(100) == QueueRange("T", 0, 1, 3, 200, 250)
    seg = q.files()[0][0]
    assert valid_prefix(q.read(seg)) == 3 and q.read(seg, 1, 2)["phy_offset"].tolist() == [100]
    store: ConsumeQueueStore = MemoryQueues(4, False, {("T", 0): q})  # type: ignore[dict-item]
    assert [x.topic for x in store.queues()] == ["T"]


@pytest.mark.parametrize("case", ["clean-2topics", "5.2.0/clean-5x-mixed"])
def test_operations_read_queues_through_the_interface_alone(case: str, tmp_path: Path) -> None:
    """Consumer progress, the queue listing of info and a lookup by queue offset give the same answers
    from a store whose queues are held in memory; changing what memory holds changes the answers."""
    root = copy_real_store(case, tmp_path)
    with open_store(root) as st:
        files = (store_offsets.consumer_progress(st), info_op.store_info(st).queues)
        hit = lookup.query_queue_offset(st, "TopicA", 0, 3)
        st.consume_queues = MemoryQueues.copy_of(st.consume_queues, st.config)
        assert (store_offsets.consumer_progress(st), info_op.store_info(st).queues) == files
        assert lookup.query_queue_offset(st, "TopicA", 0, 3) == hit
        # one more unit in memory (the record of the last one again): the queue's max offset and lag grow
        memory = st.consume_queues.queue("TopicA", 0)
        last = memory.entries[-1]
        memory.writer().put(*([last[f]] for f in ("phy_offset", "size", "tags_code")), [0], [0])
        before = {(r.group, r.queue_id): r for r in files[0] if r.topic == "TopicA"}
        for r in store_offsets.consumer_progress(st, topic="TopicA"):
            grew = r.queue_id == 0
            assert r.max_offset == before[(r.group, r.queue_id)].max_offset + grew
        was = {(q.topic, q.queue_id): q.max_offset for q in files[1]}
        now = {(q.topic, q.queue_id): q.max_offset for q in info_op.store_info(st).queues}
        assert now == {k: v + (k == ("TopicA", 0)) for k, v in was.items()}
