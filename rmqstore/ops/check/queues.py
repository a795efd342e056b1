"""Consume queues against the records, a window of the commit log at a time (store-format.md §4, §4.7).

Before the walk each queue is read once a block at a time for what needs no record (invalid
entries, the gap that ends it, fillPreBlank fillers, its range) and its entries to match become
:class:`~rmqstore.ops.check.window.Cursors` blocks; during the walk each window matches the
entries that point into it; after the walk the findings are given to the report queue by queue,
in the order and words of a check that held every entry at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec.consumequeue import BCQ_UNIT_SIZE, ENTRY_SIZE, EXT_ADDR_MAX, FILLER_SIZE
from rmqstore.dispatch.multiqueue import lmq_listed
from rmqstore.ops.check.found import Firsts, Problems, emit_firsts
from rmqstore.ops.check.window import OFFSET_MAX, Block, Cursors, Window
from rmqstore.problems import ERROR, Problem, ProblemKind
from rmqstore.store import Store
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.store.queue.mappedfiles import FileQueueLifeCycle, pread_units
from rmqstore.walk.chain import queued
from rmqstore.walk.checked import TopicIds

QUEUE_BLOCK = 1 << 18  # units read at a time before the walk, and the size of a cursor block


@dataclass
class QueueInfo:
    topic: str
    queue_id: int
    first_qoff: int  # queue offset at the start of the first file
    end_qoff: int  # first queue offset after the valid entries (the max offset)
    last_phy: int  # start of the last valid entry, -1 if none
    last_end: int  # offset + size of the last valid real entry, -1 if none
    entries: int = 0
    fillers: int = 0
    filler_end: int = -1  # queue offset after the fillPreBlank prefix (-1: none)
    batch: bool = False  # a 5.x batch consume queue (first/end offsets count messages, not units)


def _read_units(q: Any, seg: Segment, a: int, b: int) -> np.ndarray:
    """Units ``a`` to ``b`` of one file of a queue: read from a file queue's file, asked of any other store."""
    if isinstance(q, FileQueueLifeCycle):
        return pread_units(seg.path, q.dtype, a, b)
    return q.read(seg, a, b)


def fix_segment_problems(problems: Iterable[Problem], segs: Sequence[Segment], expected: int) -> list[Problem]:
    """Give the size problems of :func:`~rmqstore.layout.list_segments` a byte position: where
    the file ends (truncated) or where it should have ended (too long)."""
    sizes = {str(s.path): s.size for s in segs}
    out = []
    for p in problems:
        if p.pos is None and str(p.path) in sizes and p.kind is ProblemKind.WRONG_SIZE:
            p = Problem(p.path, min(sizes[str(p.path)], expected), p.what, p.severity, p.phy_offset)
        out.append(p)
    return out


@dataclass(slots=True)
class _Queue:
    """What check keeps of one queue from before the walk to the report."""

    q: Any  # the ConsumeQueue or BatchConsumeQueue
    segs: list[Segment]
    starts: list[int]  # entry number of each file's first unit
    info: QueueInfo
    notes: list[Problem] = field(default_factory=list)  # file names and sizes
    found: dict[str, Firsts] = field(default_factory=dict)
    gap: tuple[Path, int, str] | None = None

    def firsts(self, group: str, keep: int) -> Firsts:
        f = self.found.get(group)
        if f is None:
            f = self.found[group] = Firsts(keep)
        return f


@dataclass
class _Prefix:
    """The walk of one queue's units before the check: where its valid prefix ends, its fillers."""

    end: int | None = None  # entry number of the first invalid unit
    end_at: tuple[Path, int, int] | None = None  # its file, byte and queue offset
    after: int = 0  # valid real units after it
    first_real: int | None = None
    fillers: int = 0
    filler_end: int = -1
    entries: int = 0
    last: tuple[int, int] | None = None  # (offset, size) of the last real unit
    end_qoff: int | None = None  # queue offset after the last unit of the prefix


class QueueCheck:
    """Every consume queue of a store: read before the walk, matched per window, reported after."""

    def __init__(self, st: Store, keep: int, counts: Any) -> None:
        self.cfg: StoreConfig = st.config
        self.keep = keep  # findings listed per kind (0: all)
        self.counts = counts
        self.queues: list[_Queue] = []
        self.cursors = Cursors()
        for q in st.consume_queues.queues():
            self.queues.append(self._prepare(q))
        for bq in st.batch_queues.queues():
            self.queues.append(self._prepare_batch(bq))
        self.cursors.freeze()

    @property
    def infos(self) -> list[QueueInfo]:
        return [x.info for x in self.queues]

    # -- before the walk ---------------------------------------------------------------
    def _prepare(self, q: Any) -> _Queue:
        segs, seg_problems = q.files()
        self.counts["queues"] += 1
        notes = fix_segment_problems(seg_problems, segs, self.cfg.cq_file_size)
        for seg in segs:
            if seg.base_offset % ENTRY_SIZE:
                notes.append(Problem(seg.path, 0, f"file name {seg.base_offset} is not a multiple of {ENTRY_SIZE}"))
            if seg.size % ENTRY_SIZE:
                cut = seg.size - seg.size % ENTRY_SIZE
                notes.append(Problem(seg.path, cut, f"file ends inside an entry ({seg.size % ENTRY_SIZE} stray bytes)"))
        starts = list(np.cumsum([0] + [s.size // ENTRY_SIZE for s in segs[:-1]]).tolist()) if segs else []
        x = _Queue(q, segs, starts, QueueInfo(q.topic, q.queue_id, 0, 0, -1, -1), notes)
        if not segs:
            return x
        pre = _Prefix()
        for part, seg in enumerate(segs):
            n = seg.size // ENTRY_SIZE
            for a in range(0, n, QUEUE_BLOCK):
                self._units(x, pre, part, a, _read_units(q, seg, a, min(a + QUEUE_BLOCK, n)))
        self._settle(x, pre)
        return x

    def _units(self, x: _Queue, pre: _Prefix, part: int, a: int, arr: np.ndarray) -> None:
        """One block of a queue's units: counts, invalid units, the prefix, fillers, cursor blocks."""
        seg, first = x.segs[part], x.starts[part] + a
        self.counts["cqSlots"] += len(arr)
        self.counts["cqEntries"] += int(np.count_nonzero(arr["size"]))
        phy, size, tags = (arr[k].astype(np.int64) for k in ("phy_offset", "size", "tags_code"))
        valid = (phy >= 0) & (size > 0)
        zero = (phy == 0) & (size == 0) & (tags == 0)
        filler = (phy == 0) & (size == FILLER_SIZE) & (tags == 0)
        inval = np.flatnonzero(~valid & ~zero)
        f = x.firsts("invalid entry", self.keep) if inval.size else None
        for i in f.want(first + inval).tolist() if f else ():
            j = i - first
            f.put(
                i, (seg.path, (a + j) * ENTRY_SIZE, f"invalid entry: commit log offset {phy[j]}, size {size[j]}", None)
            )  # type: ignore[union-attr]
        if f:
            f.settle()
        if pre.end is not None:
            pre.after += int(np.count_nonzero(valid & ~filler))
            return
        bad = np.flatnonzero(~valid)
        e = int(bad[0]) if bad.size else len(arr)
        self._prefix_units(x, pre, part, a, phy[:e], size[:e], filler[:e])
        if e < len(arr):
            pre.end = first + e
            pre.end_at = (seg.path, (a + e) * ENTRY_SIZE, seg.base_offset // ENTRY_SIZE + a + e)
            pre.after += int(np.count_nonzero(valid[e:] & ~filler[e:]))

    def _prefix_units(
        self, x: _Queue, pre: _Prefix, part: int, a: int, phy: np.ndarray, size: np.ndarray, filler: np.ndarray
    ) -> None:
        """Units of the valid prefix: fillers before the first real unit or after it, and the real ones."""
        if not phy.size:
            return
        seg, first = x.segs[part], x.starts[part] + a
        qoff0 = seg.base_offset // ENTRY_SIZE + a
        pre.end_qoff = qoff0 + len(phy)
        fill = np.flatnonzero(filler)
        real = np.flatnonzero(~filler)
        pre.fillers += int(fill.size)
        if pre.first_real is None and real.size:
            pre.first_real = first + int(real[0])
        head = fill if pre.first_real is None else fill[fill + first < pre.first_real]
        if head.size:
            pre.filler_end = qoff0 + int(head[-1]) + 1
        late = fill if pre.first_real is None else fill[fill + first > pre.first_real]
        late = late if pre.first_real is not None else late[:0]
        f = x.firsts("filler", self.keep) if late.size else None
        for i in f.want(first + late).tolist() if f else ():
            f.put(i, (seg.path, (a + i - first) * ENTRY_SIZE, "fillPreBlank filler entry after real entries", None))  # type: ignore[union-attr]
        if f:
            f.settle()
        if real.size:
            pre.entries += int(real.size)
            last = int(real[-1])
            pre.last = (int(phy[last]), int(size[last]))
            self.cursors.add(Block(len(self.queues), part, a, a + len(phy), True), phy[real])

    def _settle(self, x: _Queue, pre: _Prefix) -> None:
        first_qoff = x.segs[0].base_offset // ENTRY_SIZE
        if pre.end is not None and pre.after and pre.end_at is not None:
            path, pos, qoff = pre.end_at
            what = (
                f"gap at queue offset {qoff}: an empty or invalid entry followed by {pre.after} valid entries; the "
                f"broker stops reading the queue here (max offset {qoff}) and loses them"
            )
            x.gap = (path, pos, what)
        last_phy, last_end = (pre.last[0], pre.last[0] + pre.last[1]) if pre.last else (-1, -1)
        end_qoff = pre.end_qoff if pre.end_qoff is not None else first_qoff
        x.info = QueueInfo(x.q.topic, x.q.queue_id, first_qoff, end_qoff, last_phy, last_end, pre.entries,
                           pre.fillers, pre.filler_end)  # fmt: skip

    def _prepare_batch(self, q: Any) -> _Queue:
        """A 5.x batch consume queue: its valid units up to the first empty one (§4.7)."""
        self.counts["queues"] += 1
        segs = q.files()[0]
        x = _Queue(q, segs, [0] * len(segs), QueueInfo(q.topic, q.queue_id, 0, 0, -1, -1, batch=True))
        first = last = None
        units = 0
        for part, seg in enumerate(segs):
            arr = q.read(seg)
            bad = np.flatnonzero((arr["phy_offset"] < 0) | (arr["size"] <= 0))
            n = int(bad[0]) if bad.size else len(arr)
            x.starts[part] = units
            units += n
            if n:
                first = arr[0] if first is None else first
                last = arr[n - 1]
                for a in range(0, n, QUEUE_BLOCK):
                    b = min(a + QUEUE_BLOCK, n)
                    self.cursors.add(Block(len(self.queues), part, a, b, True), arr["phy_offset"][a:b].astype(np.int64))
            if n < len(arr):
                break
        self.counts["cqEntries"] += units
        self.counts["cqSlots"] += units
        if first is not None and last is not None:
            end = int(last["base_offset"]) + int(last["batch_size"])
            phy, size = int(last["phy_offset"]), int(last["size"])
            x.info = QueueInfo(q.topic, q.queue_id, int(first["base_offset"]), end, phy, phy + size, units, 0, -1, True)
        return x

    # -- during the walk ----------------------------------------------------------------
    def _read(self, block: Block, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = self.queues[block.owner]
        arr = _read_units(x.q, x.segs[block.part], a, b)
        phy = arr["phy_offset"].astype(np.int64)
        if x.info.batch:
            return np.arange(a, a + len(arr), dtype=np.int64), phy, arr
        real = np.flatnonzero(~((phy == 0) & (arr["size"] == FILLER_SIZE) & (arr["tags_code"] == 0)))
        return a + real, phy[real], arr[real]

    def match(self, w: Window, names: TopicIds, log_min: int, data_end: int) -> None:
        """The entries that point into window ``w`` against its records."""
        end = data_end if w.last else OFFSET_MAX  # only the last window sees entries past the data
        for block, num, phy, rows in self.cursors.pieces(w.lo, w.hi, self._read):
            x = self.queues[block.owner]
            rec, hit = w.lookup(phy)
            if x.info.batch:
                self._batch(x, block, w, names, num, phy, rows, rec, hit)
                continue
            self._off_records(x, block, num, phy, hit, log_min, end)
            ok = np.flatnonzero(hit)
            if ok.size:
                self._mismatches(x, block, w, names, num[ok], rows[ok], rec[ok])

    def _off_records(
        self, x: _Queue, block: Block, num: np.ndarray, phy: np.ndarray, hit: np.ndarray, log_min: int, end: int
    ) -> None:
        """Entries that point past the end of the data or where no record starts (expired ones aside)."""
        past = ~hit & (phy >= end)
        inside = ~hit & (phy >= log_min) & ~past
        seg, first = x.segs[block.part], x.starts[block.part]
        qoff0 = seg.base_offset // ENTRY_SIZE
        for group, mask in (("past end", past), ("not a record", inside)):
            idx = np.flatnonzero(mask)
            if not idx.size:
                continue
            f = x.firsts(group, self.keep)
            for i in f.want(first + num[idx]).tolist():
                j = int(np.searchsorted(num, i - first))
                p = int(phy[j])
                if group == "past end":
                    what = (
                        f"entry for queue offset {qoff0 + num[j]} points to commit log offset {p}, past the end of "
                        f"the commit log data ({end}): the broker truncates the queue there at start"
                    )
                else:
                    what = f"entry for queue offset {qoff0 + num[j]} points to commit log offset {p}, where no record starts"
                f.put(i, (seg.path, int(num[j]) * ENTRY_SIZE, what, p))
            f.settle()

    def _mismatches(
        self, x: _Queue, block: Block, w: Window, names: TopicIds, num: np.ndarray, rows: np.ndarray, ri: np.ndarray
    ) -> None:
        """Entries whose record (window rows ``ri``) disagrees with them."""
        a, cfg, topic, qid = w.cols, self.cfg, x.q.topic, x.q.queue_id
        seg, first = x.segs[block.part], x.starts[block.part]
        qoff = seg.base_offset // ENTRY_SIZE + num
        size, tags = rows["size"].astype(np.int64), rows["tags_code"].astype(np.int64)
        mismatch = {
            "topic": a["topic"][ri] != names.ids.get(topic, -1),
            "queue id": a["qid"][ri] != qid,
            "queue offset": a["qoff"][ri] != qoff,
            "size": a["size"][ri] != size,
            "tagsCode": a["tags"][ri] != tags,
            "transaction type": ~queued(a["tx"][ri]),
        }
        if cfg.enable_consume_queue_ext:
            mismatch["tagsCode"] &= tags > EXT_ADDR_MAX  # ext addresses are not tag hashes
        if cfg.enable_multi_dispatch and (mismatch["topic"] | mismatch["queue id"]).any():
            # a multi-dispatch queue: the record names it in INNER_MULTI_DISPATCH, with this queue offset
            listed = lmq_listed(cfg, topic, qid, w.phy[ri], qoff)
            for name in ("topic", "queue id", "queue offset"):
                mismatch[name] &= ~listed  # type: ignore[operator]
        any_bad = np.zeros(len(num), dtype=bool)
        for m in mismatch.values():
            any_bad |= m
        bad = np.flatnonzero(any_bad)
        if not bad.size:
            return
        f = x.firsts("entry mismatch", self.keep)
        for i in f.want(first + num[bad]).tolist():
            j = int(np.searchsorted(num, i - first))
            r = int(ri[j])
            fields = [name for name, m in mismatch.items() if m[j]]
            rec_desc = (
                f"topic {names.names[a['topic'][r]]} queue {a['qid'][r]} queueOffset {a['qoff'][r]} size "
                f"{a['size'][r]} tagsCode {a['tags'][r]}"
            )
            if "transaction type" in fields:
                rec_desc += " (a prepared/rollback record, which never gets an entry)"
            what = (
                f"entry for queue offset {qoff[j]} (commit log offset {w.phy[r]}, size {size[j]}, tagsCode "
                f"{tags[j]}) does not match the record there: {', '.join(fields)} differ ({rec_desc})"
            )
            f.put(i, (seg.path, int(num[j]) * ENTRY_SIZE, what, int(w.phy[r])))
        f.settle()

    def _batch(
        self, x: _Queue, block: Block, w: Window, names: TopicIds, num: np.ndarray, phy: np.ndarray, rows: np.ndarray,
        rec: np.ndarray, hit: np.ndarray,
    ) -> None:  # fmt: skip
        """Batch units: each a record of this topic and queue at its offset (every finding listed)."""
        a, seg = w.cols, x.segs[block.part]
        want = names.ids.get(x.q.topic, -1)
        f = x.firsts("batch", 0)
        size = rows["size"].astype(np.int64)
        for j in range(len(num)):
            r, e_phy, e_size, at = int(rec[j]), int(phy[j]), int(size[j]), int(num[j]) * BCQ_UNIT_SIZE
            if not hit[j]:
                what = f"batch unit points to commit log offset {e_phy}, where no record starts"
                f.put(x.starts[block.part] + int(num[j]), (x.q.directory / seg.path.name, at, what, None))
            elif a["topic"][r] != want or a["qid"][r] != x.q.queue_id or a["size"][r] != e_size:
                what = (
                    f"batch unit (commit log offset {e_phy}, size {e_size}) does not match the record there "
                    f"({names.names[a['topic'][r]]} queue {a['qid'][r]} size {a['size'][r]})"
                )
                f.put(x.starts[block.part] + int(num[j]), (x.q.directory / seg.path.name, at, what, e_phy))
        f.settle()

    # -- after the walk -----------------------------------------------------------------
    def report(self, out: Problems) -> None:
        """Every queue's findings, queue after queue, as a check of each queue at once gives them."""
        for x in self.queues:
            out.extend(x.notes)
            if x.info.batch:
                for path, pos, what, phy in x.found["batch"].listed() if "batch" in x.found else ():
                    out.add(path, pos, what, ERROR, phy_offset=phy)
                continue
            if not x.segs:
                continue
            qdir = x.segs[0].path.parent
            emit_firsts(out, x.found.get("invalid entry"), qdir, "invalid entry")
            if x.gap is not None:
                out.add(*x.gap, phy_offset=None)
            for group in ("filler", "past end", "not a record", "entry mismatch"):
                emit_firsts(out, x.found.get(group), qdir, group)
