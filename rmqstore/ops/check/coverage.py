"""The records' side of check, a window at a time (store-format.md §4.3, §8, §9).

Per queue named by records (topic and queue id) a few numbers: how many records name it, the
first, whether its name can be a directory, how many have no directory; per kind of finding the
first records found; the offsets of the records not in any queue yet go to an unnamed temporary
file (read back in chunks once recovery's forecast says where dispatch resumes). Nothing per
record stays in memory past its window.
"""

from __future__ import annotations

import tempfile
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec.topic import SkippedQueue
from rmqstore.dispatch.multiqueue import lmq_skipped
from rmqstore.ops.check.found import Firsts, Problems, emit_firsts
from rmqstore.ops.check.queues import QueueInfo
from rmqstore.ops.check.window import Window
from rmqstore.problems import ERROR, INFO, WARNING
from rmqstore.rules import rules_for
from rmqstore.store import Store
from rmqstore.store.layout import Segment
from rmqstore.walk.chain import queued
from rmqstore.walk.checked import TopicIds

_SPILL_READ = 1 << 20  # offsets read back at a time


@dataclass(slots=True)
class _Pair:
    """The records of one (topic, queue id) and the queue they name."""

    why: str | None  # why the name cannot be a consume queue directory
    first: int  # its queue's first queue offset, end, fillPreBlank end, whether it exists
    end: int
    fill: int
    exists: bool
    records: int = 0  # NOT/COMMIT records
    first_phy: int = -1  # offset of the first of them
    no_dir: int = 0  # records behind the queues' end with no queue directory


class Spill:
    """Ascending commit log offsets in an unnamed temporary file: counted, never held."""

    def __init__(self) -> None:
        self._file: Any = None
        self.count = 0
        self.first = -1

    def add(self, phys: np.ndarray) -> None:
        if not phys.size:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile()
            self.first = int(phys[0])
        self._file.write(np.ascontiguousarray(phys, dtype=np.int64).tobytes())
        self.count += int(phys.size)

    def below(self, *limits: int) -> list[int]:
        """How many offsets are below each limit."""
        got = [0] * len(limits)
        if self._file is None:
            return got
        self._file.seek(0)
        while chunk := self._file.read(_SPILL_READ * 8):
            a = np.frombuffer(chunk, dtype=np.int64)
            for i, limit in enumerate(limits):
                got[i] += int(np.count_nonzero(a < limit))
        return got

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class RecordCheck:
    """Records against the queues they name, window by window; ``quick``: only what a broker's start reads."""

    def __init__(
        self, st: Store, queues: Sequence[QueueInfo], horizon: int, log_dir: Path, keep: int, *, quick: bool
    ) -> None:
        self.st, self.quick, self.horizon, self.log_dir = st, quick, horizon, log_dir
        self.by_key = {(q.topic, q.queue_id): q for q in queues}
        self.pairs: dict[tuple[int, int], _Pair] = {}
        self.first_seen: dict[int, int] = {}  # topic id -> number of its first record
        self.filled = Firsts(keep)
        self.missing = Firsts(keep)
        self.pending = Spill()
        self.records = 0

    def _pair(self, names: TopicIds, tid: int, qid: int) -> _Pair:
        name = names.names[tid]
        q = self.by_key.get((name, qid))
        why = self.st.consume_queues.path_problem(name, qid)
        if q is None:
            return _Pair(why, -1, -1, -1, False)
        return _Pair(why, q.first_qoff, q.end_qoff, q.filler_end, True)

    def take(self, w: Window, names: TopicIds) -> None:
        """The records of one window."""
        if not w.count:
            return
        self.records += w.count
        a = w.cols
        topic, qid = a["topic"], a["qid"]
        keys, first, inverse = np.unique((topic.astype(np.int64) << 32) | (qid.astype(np.int64) & 0xFFFFFFFF),
                                         return_index=True, return_inverse=True)  # fmt: skip
        inverse = inverse.reshape(-1)
        for tid, row in zip((keys >> 32).tolist(), first.tolist(), strict=True):
            self.first_seen.setdefault(tid, w.first + row)
        got = []
        for tid, q in zip((keys >> 32).tolist(), qid[first].tolist(), strict=True):
            p = self.pairs.get((tid, q))
            if p is None:
                p = self.pairs[(tid, q)] = self._pair(names, tid, q)
            got.append(p)
        consumable = queued(a["tx"])
        per_pair = np.bincount(inverse[consumable], minlength=len(got))
        firsts = np.full(len(got), -1, dtype=np.int64)
        idx = np.flatnonzero(consumable)
        if idx.size:  # the first consumable record of each pair
            u, at = np.unique(inverse[idx], return_index=True)
            firsts[u] = idx[at]
        for p, n, f in zip(got, per_pair.tolist(), firsts.tolist(), strict=True):
            if n and p.records == 0:
                p.first_phy = int(w.phy[f])
            p.records += n
        if self.quick:
            self.pending.add(w.phy[consumable & (w.phy >= self.horizon)])
            return
        bad = np.array([p.why is not None for p in got], dtype=bool)
        self._coverage(w, names, got, inverse, consumable & ~bad[inverse])

    def _coverage(
        self, w: Window, names: TopicIds, got: list[_Pair], inverse: np.ndarray, consumable: np.ndarray
    ) -> None:
        """Records (NOT/COMMIT) without their consume queue entry (§4.3, §9)."""
        a = w.cols
        g = np.array([(p.first, p.end, p.fill, p.exists) for p in got], dtype=np.int64).reshape(-1, 4)
        first, end, fill, exists = g[inverse, 0], g[inverse, 1], g[inverse, 2], g[inverse, 3].astype(bool)
        qoff = a["qoff"]
        filled = consumable & exists & (qoff >= first) & (qoff < fill)
        self._records(
            self.filled, w, names, filled, "has a fillPreBlank filler as its consume queue entry: it cannot be consumed"
        )
        expired = exists & (qoff < first)
        missing = consumable & ~expired & (~exists | (qoff >= end))
        pending = missing & (w.phy >= self.horizon)
        behind = missing & ~pending
        self.pending.add(w.phy[pending])
        no_dir = np.bincount(inverse[behind & ~exists], minlength=len(got))
        for i in np.flatnonzero(no_dir).tolist():
            got[i].no_dir += int(no_dir[i])
        self._records(self.missing, w, names, behind & exists, "is missing from its consume queue")

    def _records(self, f: Firsts, w: Window, names: TopicIds, mask: np.ndarray, why: str) -> None:
        idx = np.flatnonzero(mask)
        if not idx.size:
            return
        a = w.cols
        for n in f.want(w.first + idx).tolist():
            r = n - w.first
            phy = int(w.phy[r])
            what = (f"record at commit log offset {phy} ({names.names[a['topic'][r]]} queue {a['qid'][r]} "
                    f"queueOffset {a['qoff'][r]}) {why}")  # fmt: skip
            f.put(n, (self.log_dir, None, what, phy))
        f.settle()

    # -- after the walk -----------------------------------------------------------------
    def _in_order(self) -> list[tuple[tuple[int, int], _Pair]]:
        """The pairs by topic (in the order topics first appear) and queue id."""
        rank = {tid: i for i, tid in enumerate(sorted(self.first_seen, key=self.first_seen.__getitem__))}
        return sorted(self.pairs.items(), key=lambda kv: (rank[kv[0][0]], kv[0][1] & 0xFFFFFFFF))

    def report_names(self, out: Problems, segs: Sequence[Segment], names: TopicIds, data_end: int) -> None:
        """Queues whose name cannot be a consume queue directory: one warning each, worded as the
        dispatch of recover and redispatch reports it (they skip those records too)."""
        if not self.records:
            return
        bases = [sg.base_offset for sg in segs]
        for (tid, qid), p in self._in_order():
            if p.why is None or not p.records:
                continue
            seg = segs[max(0, bisect_right(bases, p.first_phy) - 1)]
            name = names.names[tid]
            q = SkippedQueue(name, qid, p.why, str(seg.path), p.first_phy - seg.base_offset, p.first_phy, p.records)
            out.add(seg.path, q.pos, q.what(), WARNING, p.first_phy)
        for q in lmq_skipped(self.st, data_end) if rules_for(self.st.config.broker).multi_dispatch else ():
            out.add(q.path, q.pos, q.what(), WARNING, q.phy_offset)

    def report_coverage(self, out: Problems, log_dir: Path, names: TopicIds, fc: Any) -> None:
        """Records without their consume queue entry, in the order of a check of every record at once."""
        if not self.records:
            return
        emit_firsts(out, self.filled, log_dir, "filler over record")
        for (tid, qid), p in self._in_order():
            if p.no_dir:
                what = (f"{p.no_dir} record(s) of {names.names[tid]} queue {qid} have no consume queue directory "
                        "(deleted, or cleaned as unused)")  # fmt: skip
                out.add(log_dir, None, what, INFO)
        emit_firsts(out, self.missing, log_dir, "missing from queue")
        if not self.pending.count:
            return
        lo, n = self.pending.first, self.pending.count
        below_from, below_stop = self.pending.below(fc.dispatch_from, fc.stop_phy_offset)
        never = n - max(0, below_stop - below_from)
        if never == 0:  # nothing is lost, but the queues are behind: what info warns about too
            sev, why = WARNING, "the broker dispatches them when it starts"
        else:
            sev = ERROR if not fc.last_exit_ok else WARNING
            why = f"dispatch after recovery covers offsets from {fc.dispatch_from} only: {never} never get dispatched"
        out.add(
            log_dir, None, f"{n} record(s) from commit log offset {lo} are not in any consume queue yet; {why}", sev, lo
        )

    def report_quick(self, out: Problems, log_dir: Path, fc: Any) -> None:
        """Quick mode: records after the consume queues' end that the broker will never dispatch."""
        stop, df = fc.stop_phy_offset, fc.dispatch_from
        n, lost = self.pending.below(stop, min(stop, df))
        if not n:
            return
        lo = self.pending.first
        if not lost:
            out.add(log_dir, None, f"{n} record(s) from commit log offset {lo} are not in any consume queue yet; the "
                    "broker dispatches them when it starts", WARNING, lo)  # fmt: skip
        else:
            sev = ERROR if not fc.last_exit_ok else WARNING
            out.add(log_dir, None, f"{lost} of {n} undispatched record(s) from commit log offset {lo} lie before "
                    f"where dispatch resumes ({fc.dispatch_from}): they are never dispatched", sev, lo)  # fmt: skip

    def close(self) -> None:
        self.pending.close()
