"""Dispatch: build consume queue entries and index keys from commit log records (§9, §4.3-4.4, §5.2-5.3).

This is the broker's ``ReputMessageService`` + ``CommitLogDispatcherBuildConsumeQueue`` +
``CommitLogDispatcherBuildIndex`` chain, offline. It works on the files of a store root (the
store itself, or a build directory for an atomic swap) and keeps the broker's rules:

* consume queue: NOT and COMMIT records only, entry at ``QUEUEOFFSET x 20``, duplicate
  suppression against the queue's max physical offset (4.4.0 compares ``offset``, 4.5.1+
  ``offset + size``), fillPreBlank for a queue whose first entry is not offset 0, "already
  present" skips, and the broker's append-at-end when an entry would leave a gap;
* index: every record but ROLLBACK, skipped when below the last file's endPhyOffset, keys
  ``topic#UNIQ_KEY`` then each KEYS token, a new file when the last one is full.

Requests are processed in batches with numpy (the hash of every key, slot chains, time diffs
and the file writes are vectorised); the result is byte-identical to one-at-a-time puts.
"""

from __future__ import annotations

import datetime as dt
import functools
import mmap
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec import indexfile as ix
from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.javahash import index_key_hash_batch
from rmqstore.codec.topic import SkippedQueue, note_skipped
from rmqstore.errors import CorruptData, from_os_error
from rmqstore.safety.openfile import create_sized, map_for_writing
from rmqstore.store.files import FileWriter, read_at, run_together
from rmqstore.store.layout import StoreConfig, record_place
from rmqstore.store.queue.interface import QueueWriter
from rmqstore.store.queue.kinds import consume_queue_store
from rmqstore.walk.chain import indexed, queue_order, queued
from rmqstore.walk.requests import DispatchRequest


def index_file_name(now_ms: int, after: str | None) -> str:
    """``yyyyMMddHHmmssSSS`` of local time, kept strictly after the previous file's name."""
    t = dt.datetime.fromtimestamp(now_ms / 1000)
    name = t.strftime("%Y%m%d%H%M%S") + f"{now_ms % 1000:03d}"
    if after is not None and name <= after:
        name = f"{int(after) + 1:017d}"
    return name


class _IndexWriter:
    def __init__(self, directory: Path, slots: int, entries: int, broker: str, clock: Callable[[], int]):
        self.dir = directory
        self.slots = slots
        self.max_entries = entries
        self.size = ix.file_size(slots, entries)
        self.new_slots_only = ix.counts_new_slots_only(broker)
        self.clock = clock
        self.entries_pos = ix.HEADER_SIZE + slots * 4
        self.created: list[Path] = []
        self.full_end_timestamps: list[int] = []
        self.written = 0
        self._map: mmap.mmap | None = None  # the header
        self._file: FileWriter | None = None  # entries: appended, never read back; slots written back
        self._slots: _SlotTable | None = None
        self._path: Path | None = None
        self._last_name: str | None = None
        names = sorted(n for n in os.listdir(directory) if n.isdigit()) if directory.is_dir() else []
        if names:
            self._last_name = names[-1]
            self._open(directory / names[-1])

    def _open(self, p: Path) -> None:
        if p.stat().st_size != self.size:
            raise CorruptData(
                f"index file is {p.stat().st_size} bytes, expected {self.size} for "
                f"maxHashSlotNum={self.slots} maxIndexNum={self.max_entries}",
                path=p,
                pos=0,
            )
        self._map = map_for_writing(p, self.size)
        self._file = FileWriter(p)
        self._slots = _SlotTable(self.slots, read_at(p, ix.HEADER_SIZE, self.slots * 4))
        self._path = p

    def header(self) -> ix.IndexHeader | None:
        return ix.decode_header(self._map) if self._map is not None else None

    def _roll(self) -> None:
        # The new file is made and mapped before the old map closes: a failure (a full disk, an
        # immutable directory, Ctrl-C) leaves the writer on the old file, still usable.
        prev = self.header()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise from_os_error(e, self.dir, doing="create the index directory") from None
        name = index_file_name(self.clock(), self._last_name)
        p = self.dir / name
        create_sized(p, self.size)
        try:
            new = map_for_writing(p, self.size)
            new_file = FileWriter(p)
        except BaseException:
            os.unlink(p)
            raise
        old, self._map, self._path, self._last_name = self._map, new, p, name
        old_file, self._file = self._file, new_file
        old_slots, self._slots = self._slots, _SlotTable(self.slots, None)
        self.created.append(p)
        if old is not None:
            if prev is not None and prev.index_count >= self.max_entries:
                self.full_end_timestamps.append(prev.end_timestamp_ms)
            old.flush()
            old.close()
        if old_file is not None:
            assert old_slots is not None
            old_slots.write_back(old_file)
            old_file.close(sync=True)
        ix.write_header(self._map, ix.new_index_header_after(prev))

    def end_phy_offset(self) -> int:
        h = self.header()
        return h.end_phy_offset if h is not None else 0

    def put_batch(self, keys: list[str], phy: np.ndarray, ts: np.ndarray) -> None:
        """Put keys (already ``topic#key``) in order, rolling to new files when full."""
        if keys:
            self.put_hashes(index_key_hash_batch(keys).astype(np.int64), phy, ts)

    def put_hashes(self, hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
        """Put precomputed key hashes in order, rolling to new files when full."""
        n = len(hashes)
        i = 0
        while i < n:
            if self._map is None:
                self._roll()
            h = self.header()
            assert h is not None and self._map is not None
            count = max(h.index_count, 1)
            room = self.max_entries - count
            if room <= 0:
                self._roll()
                continue
            j = min(n, i + room)
            self._put_chunk(h, count, hashes[i:j], phy[i:j], ts[i:j])
            i = j

    def _put_chunk(self, h: ix.IndexHeader, count: int, hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
        m = self._map
        assert m is not None
        k = len(hashes)
        nums = np.arange(count, count + k, dtype=np.int64)
        assert self._slots is not None
        prev = self._slots.put(hashes % self.slots, nums)
        # time diffs (§5.2): the first entry of an empty file is measured against the old begin
        begin = h.begin_timestamp_ms
        diffs = np.empty(k, dtype=np.int64)
        if count <= 1:
            first_begin = begin
            begin = int(ts[0])
            d0 = int(ts[0]) - first_begin
            d0 = 0 if first_begin <= 0 or d0 < 0 else min(d0 // 1000, INT_MAX)
            diffs[0] = d0
            rest = ts[1:].astype(np.int64) - begin
            diffs[1:] = np.where(rest < 0, 0, np.minimum(rest // 1000, INT_MAX)) if begin > 0 else 0
        else:
            d = ts.astype(np.int64) - begin
            diffs[:] = np.where(d < 0, 0, np.minimum(d // 1000, INT_MAX)) if begin > 0 else 0
        out = np.empty(k, dtype=ix.ENTRY_DTYPE)
        out["key_hash"] = hashes
        out["phy_offset"] = phy
        out["time_diff"] = diffs
        out["prev"] = prev
        assert self._file is not None
        self._file.write_at(out, self.entries_pos + count * ix.ENTRY_SIZE)
        del out
        new_slots = int(np.count_nonzero(prev == 0))  # a later entry of a slot points at an earlier one
        slot_count = h.hash_slot_count + (new_slots if self.new_slots_only else k)
        if count <= 1:
            begin_phy, begin_ts = int(phy[0]), int(ts[0])
        else:
            begin_phy, begin_ts = h.begin_phy_offset, h.begin_timestamp_ms
        ix.HEADER.pack_into(m, 0, begin_ts, int(ts[-1]), begin_phy, int(phy[-1]), slot_count, count + k)
        self.written += k

    def close(self, sync: bool) -> None:
        # the slots are written before anything is synced: the file's data then goes to disk in one pass
        try:
            if self._file is not None:
                assert self._slots is not None
                self._slots.write_back(self._file)  # also after a failure: what the entries written need
        finally:
            if self._map is not None:
                h = self.header()
                if h is not None and h.index_count >= self.max_entries:
                    self.full_end_timestamps.append(h.end_timestamp_ms)
                if sync:
                    self._map.flush()
                self._map.close()
                self._map = None
            if self._file is not None:
                self._file.close(sync)
                self._file = self._slots = None


class _SlotTable:
    """An index file's slot table held in memory and written back with ``pwrite`` (the pages changed):
    through a map every page of it faulted in the file system's write path, a journal handle each,
    which waits for the disk when it is busy."""

    _BLOCK = 1024  # slots in a 4 KiB page

    def __init__(self, slots: int, data: bytes | None) -> None:
        self.values = np.zeros(slots, np.int32) if data is None else np.frombuffer(data, ">i4").astype(np.int32)
        self.dirty = np.zeros(-(-slots // self._BLOCK), dtype=bool)

    def put(self, slot: np.ndarray, nums: np.ndarray) -> np.ndarray:
        """``slot_chain`` of these entries; the pages it changes are written back later."""
        self.dirty[slot // self._BLOCK] = True
        return slot_chain(self.values, slot, nums)

    def write_back(self, file: FileWriter) -> None:
        """Write the changed pages, each run of them with one call."""
        blocks = np.flatnonzero(self.dirty)
        if not blocks.size:
            return
        breaks = np.flatnonzero(np.diff(blocks) > 1)
        for a, b in zip(blocks[np.r_[0, breaks + 1]].tolist(), blocks[np.r_[breaks, -1]].tolist(), strict=True):
            lo, hi = a * self._BLOCK, min((b + 1) * self._BLOCK, len(self.values))
            file.write_at(self.values[lo:hi].astype(">i4"), ix.HEADER_SIZE + lo * 4)
        self.dirty[:] = False


def slot_chain(table: np.ndarray, slot: np.ndarray, nums: np.ndarray) -> np.ndarray:
    """The broker's ``putKey`` chain for entries ``nums`` (consecutive numbers) put in order into ``slot``:
    each entry's prevIndex, with ``table`` (the slot values) updated to the last entry of each slot.

    A slot value counts only if it is above 0 and not past the entry's own number (the broker checks it
    against indexCount at each put). Few slots get two entries of one chunk, so the table is read and
    written for all at once, and only the entries of the slots hit twice are ordered one after the other.
    """
    old = table[slot].astype(np.int64)
    prev = np.where((old <= 0) | (old > nums), 0, old)
    table[slot] = nums
    lost = np.flatnonzero(table[slot] != nums)  # another entry of the chunk holds the slot now
    if lost.size:
        shared = np.zeros(len(slot), dtype=bool)
        shared[lost] = True
        shared[table[slot[lost]].astype(np.int64) - int(nums[0])] = True  # and the one holding it
        idx = np.flatnonzero(shared)
        order = idx[np.argsort(slot[idx], kind="stable")]
        s = slot[order]
        first = np.ones(len(s), dtype=bool)
        first[1:] = s[1:] != s[:-1]
        later = order[~first]
        prev[later] = nums[order[np.flatnonzero(~first) - 1]]  # the entry before it in the same slot
        last = np.ones(len(s), dtype=bool)
        last[:-1] = first[1:]
        table[s[last]] = nums[order[last]]
    return prev


_LANE_DEPTH = 2  # column batches queued for the index lane at most


def _select(c: Any, rec_mask: np.ndarray) -> Any:
    """The records of ``c`` where ``rec_mask`` holds, with their index keys."""
    keep = np.flatnonzero(rec_mask)
    remap = np.full(len(rec_mask), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    ksel = rec_mask[c.key_rec]
    return type(c)(
        c.phy[keep],
        c.size[keep],
        c.queue_id[keep],
        c.queue_offset[keep],
        c.store_ts[keep],
        c.sys_flag[keep],
        c.tags_code[keep],
        c.topic_id[keep],
        c.topics,
        remap[c.key_rec[ksel]],
        c.key_hash[ksel],
    )


@dataclass
class DispatchStats:
    records: int = 0
    cq_entries: int = 0
    index_entries: int = 0
    queues_touched: set[tuple[str, int]] = field(default_factory=set)
    index_files_created: list[Path] = field(default_factory=list)
    logics_msg_timestamp_ms: int = 0  # store time of the record behind the last CQ entry written
    index_msg_timestamp_ms: int = 0  # end time of the last index file that became full
    max_phy_offset: int = -1  # end (offset + size) of the last record dispatched
    skipped: dict[tuple[str, int], SkippedQueue] = field(default_factory=dict)  # names that are no directory

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "cqEntries": self.cq_entries,
            "indexEntries": self.index_entries,
            "queues": len(self.queues_touched),
            "indexFilesCreated": [p.name for p in self.index_files_created],
            "logicsMsgTimestamp": self.logics_msg_timestamp_ms,
            "indexMsgTimestamp": self.index_msg_timestamp_ms,
            "skippedQueues": [q.to_json() for q in self.skipped.values()],
        }


class Dispatcher:
    """Writes CQ entries and index keys into the files under ``root`` (a store or a build dir).

    Existing files are continued exactly where the broker would continue them. Call
    :meth:`dispatch` with requests in commit log order, then :meth:`close`.
    """

    def __init__(
        self,
        cfg: StoreConfig,
        *,
        root: Path | None = None,
        consume_queue: bool = True,
        index: bool | None = None,
        clock: Callable[[], int] | None = None,
        topics: set[str] | None = None,
        cq_exclude: frozenset[str] = frozenset(),
        index_lane: bool = False,
    ):
        self.cfg = cfg
        self.cq_exclude = cq_exclude  # batch consume queue topics: never written as plain queues
        self.root = Path(root) if root is not None else cfg.store_root
        self.build_cq = consume_queue
        self.build_index = cfg.message_index_enable if index is None else index
        self.topics = topics
        self._cq = consume_queue_store(cfg, self.root, writable=True)
        self._queues: dict[tuple[str, int], QueueWriter] = {}
        self._clock = clock or (lambda: int(dt.datetime.now().timestamp() * 1000))
        self._index: _IndexWriter | None = None
        self.stats = DispatchStats()
        # ``index_lane``: the index half of ``dispatch_columns`` runs in a thread of its own, beside the
        # consume queue half (numpy and pwrite let go of the GIL), batches in order, a few in flight
        self._lane = ThreadPoolExecutor(1, thread_name_prefix="index") if index_lane else None
        self._lane_pending: deque[Future[None]] = deque()

    def _queue(self, topic: str, qid: int, phy_offset: int, n: int) -> QueueWriter | None:
        """The writer of a queue, None for a name that cannot be a directory (counted in ``stats.skipped``:
        the ``n`` records are not entered, their index keys are)."""
        w = self._queues.get((topic, qid))
        if w is None:
            where = record_place(self.cfg.commitlog_dir, self.cfg.commitlog_file_size, phy_offset)
            why = self._cq.path_problem(topic, qid)
            if why is not None:
                note_skipped(self.stats.skipped, topic, qid, why, where, n)
                return None
            w = self._queues[(topic, qid)] = self._cq.queue(topic, qid).writer(where=where)
        return w

    def _index_writer(self) -> _IndexWriter:
        if self._index is None:
            self._index = _IndexWriter(
                self.root / "index", self.cfg.max_hash_slot_num, self.cfg.max_index_num, self.cfg.broker, self._clock
            )
        return self._index

    def dispatch(self, reqs: list[DispatchRequest]) -> None:
        """Dispatch a batch of requests (commit log order)."""
        if not reqs:
            return
        self._drain_lane(0)
        if self.topics is not None:
            reqs = [r for r in reqs if r.topic in self.topics]
            if not reqs:
                return
        self.stats.records += len(reqs)
        last = reqs[-1]
        self.stats.max_phy_offset = max(self.stats.max_phy_offset, last.phy_offset + last.size)
        if self.build_cq:
            self._dispatch_cq(reqs)
        if self.build_index:
            self._dispatch_index(reqs)

    def dispatch_columns(self, c: Any) -> None:
        """Dispatch a :class:`rmqstore.columnar.Columns` batch (same rules as :meth:`dispatch`)."""
        n = len(c)
        if n == 0:
            return
        if self.topics is not None:
            wanted = np.array([t in self.topics for t in c.topics] or [False], dtype=bool)
            rec_ok = wanted[c.topic_id]
            if not rec_ok.any():
                return
            if not rec_ok.all():
                c = _select(c, rec_ok)
                n = len(c)
        self.stats.records += n
        self.stats.max_phy_offset = max(self.stats.max_phy_offset, int(c.phy[-1] + c.size[-1]))
        if self.build_cq:
            self._cq_columns(c)
        if self.build_index and len(c.key_rec):
            if self._lane is None:
                self._index_columns(c)
            else:
                self._drain_lane(_LANE_DEPTH)
                self._lane_pending.append(self._lane.submit(self._index_columns, c))

    def _cq_columns(self, c: Any) -> None:
        """The consume queue half of ``dispatch_columns``: each queue's records in one put."""
        cq_ok = queued(c.sys_flag)
        if self.cq_exclude:
            keep = np.array([t not in self.cq_exclude for t in c.topics] or [True], dtype=bool)
            cq_ok &= keep[c.topic_id]
        idx = np.flatnonzero(cq_ok)
        idx = idx[queue_order(c.topic_id[idx], c.queue_id[idx])]
        topic_id, queue_id = c.topic_id[idx], c.queue_id[idx]
        # the columns in queue order once: each queue's run is then a view, not a copy
        phy, size, tags, qoff, ts = (a[idx] for a in (c.phy, c.size, c.tags_code, c.queue_offset, c.store_ts))
        bounds = np.flatnonzero(np.diff(topic_id * (1 << 33) + queue_id)) + 1
        last_phy, last_ts = -1, 0
        for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(idx)], strict=True):
            if a == b:
                continue
            key = (c.topics[int(topic_id[a])], int(queue_id[a]))
            w = self._queue(*key, int(phy[a]), b - a)
            if w is None:
                continue
            before = w.written
            w.put(phy[a:b], size[a:b], tags[a:b], qoff[a:b], ts[a:b])
            if w.written > before:
                self.stats.queues_touched.add(key)
                self.stats.cq_entries += w.written - before
                if int(phy[b - 1]) > last_phy:
                    last_phy, last_ts = int(phy[b - 1]), w.last_ts
        if last_ts:
            self.stats.logics_msg_timestamp_ms = last_ts

    def _index_columns(self, c: Any) -> None:
        w = self._index_writer()
        rec_ok = (c.phy >= w.end_phy_offset()) & indexed(c.sys_flag)
        sel = rec_ok[c.key_rec]
        kr = c.key_rec[sel]
        if len(kr):
            w.put_hashes(c.key_hash[sel], c.phy[kr], c.store_ts[kr])
            self.stats.index_entries = w.written

    def _drain_lane(self, depth: int) -> None:
        """Wait for the index lane until at most ``depth`` batches are in flight; its error is raised here."""
        while len(self._lane_pending) > depth:
            self._lane_pending.popleft().result()

    def _dispatch_cq(self, reqs: list[DispatchRequest]) -> None:
        groups: dict[tuple[str, int], list[DispatchRequest]] = {}
        for r in reqs:
            if queued(r.sys_flag) and r.topic not in self.cq_exclude:
                g = groups.get((r.topic, r.queue_id))
                if g is None:
                    groups[(r.topic, r.queue_id)] = g = []
                g.append(r)
        last_ts = 0
        last_phy = -1
        for key, g in groups.items():
            w = self._queue(*key, g[0].phy_offset, len(g))
            if w is None:
                continue
            before = w.written
            w.put(
                np.fromiter((r.phy_offset for r in g), np.int64, len(g)),
                np.fromiter((r.size for r in g), np.int64, len(g)),
                np.fromiter((r.tags_code for r in g), np.int64, len(g)),
                np.fromiter((r.queue_offset for r in g), np.int64, len(g)),
                np.fromiter((r.store_timestamp_ms for r in g), np.int64, len(g)),
            )
            if w.written > before:
                self.stats.queues_touched.add(key)
                self.stats.cq_entries += w.written - before
                if g[-1].phy_offset > last_phy:
                    last_phy, last_ts = g[-1].phy_offset, w.last_ts
        if last_ts:
            self.stats.logics_msg_timestamp_ms = last_ts

    def _dispatch_index(self, reqs: list[DispatchRequest]) -> None:
        w = self._index_writer()
        end_phy = w.end_phy_offset()
        keys: list[str] = []
        phys: list[int] = []
        tss: list[int] = []
        for r in reqs:
            if r.phy_offset < end_phy:
                continue
            if not indexed(r.sys_flag):
                continue
            topic = r.topic
            if r.uniq_key is not None:
                keys.append(f"{topic}#{r.uniq_key}")
                phys.append(r.phy_offset)
                tss.append(r.store_timestamp_ms)
            if r.keys:
                for k in r.keys.split(" "):
                    if k:
                        keys.append(f"{topic}#{k}")
                        phys.append(r.phy_offset)
                        tss.append(r.store_timestamp_ms)
        if keys:
            w.put_batch(keys, np.array(phys, dtype=np.int64), np.array(tss, dtype=np.int64))
            self.stats.index_entries = w.written

    def close(self, *, sync: bool = True) -> DispatchStats:
        if self._lane is not None:
            lane, self._lane = self._lane, None
            for f in self._lane_pending if not sync else ():
                f.cancel()  # a failed dispatch: what is queued is not written
            lane.shutdown(wait=True)
            pending, self._lane_pending = self._lane_pending, deque()
            for f in pending if sync else ():
                f.result()  # the lane's error, when the dispatch itself went well
        closes = [functools.partial(w.close, sync) for w in self._queues.values()]
        if self._index is not None:
            closes.append(functools.partial(self._index.close, sync))
        run_together(closes)  # their syncs at once
        self._cq.close(sync)
        if self._index is not None:
            self.stats.index_files_created = list(self._index.created)
            if self._index.full_end_timestamps:
                self.stats.index_msg_timestamp_ms = self._index.full_end_timestamps[-1]
        return self.stats

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(sync=exc[0] is None)
