"""Consume queues in files: ``consumequeue/<topic>/<queueId>/``, 20-byte units (§4.1-§4.5, §8.4, §8.5, §10.2).

Unit ``i`` of a queue is queue offset ``i``, at byte ``i x 20`` of the queue's file stream.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rmqstore.codec import consumequeue as codec
from rmqstore.codec.consumequeue import ENTRY_SIZE, FILLER_SIZE, encode_entry, valid_prefix
from rmqstore.errors import CorruptData
from rmqstore.problems import Problem, ProblemKind
from rmqstore.rules import rules_for
from rmqstore.safety.openfile import create_sized, map_for_writing
from rmqstore.store.files import FileWriter, map_file, read_at
from rmqstore.store.layout import Segment, file_name, list_segments, queue_dir, segment_for
from rmqstore.store.queue.interface import QueueCut, QueueRange, QueueRecovery, QueueTail
from rmqstore.store.queue.mappedfiles import (
    FileQueueLifeCycle,
    MappedFileQueue,
    QueueDirectories,
    nonzero_units,
    truncate_dirty_files,
)

if TYPE_CHECKING:
    import numpy as np

_LONG = struct.Struct(">q")


_UNITS_CHUNK = 1 << 16  # units tested at a time: a file is read as far as its valid units go, not to its end


def _valid_units(path: Path) -> tuple[np.ndarray, bool]:
    """A copy of the leading valid units of a file (``valid_prefix``), and whether every whole unit is one."""
    import numpy as np

    with map_file(path) as buf:
        count = len(buf) // ENTRY_SIZE
        n = 0
        while n < count:
            view = codec.entries_array(buf, n * ENTRY_SIZE, min(count, n + _UNITS_CHUNK) * ENTRY_SIZE)
            k, chunk = valid_prefix(view), len(view)
            del view
            n += k
            if k < chunk:
                break
        out = np.frombuffer(buf, dtype=codec.ENTRY_DTYPE, count=n).copy() if n else np.empty(0, codec.ENTRY_DTYPE)
    return out, n == count


@dataclass(frozen=True, slots=True)
class FileConsumeQueues(QueueDirectories["FileConsumeQueue"]):
    """Every ``consumequeue/<topic>/<queueId>`` under ``root`` (a store, or a build directory beside it)."""

    kind: ClassVar[str] = "consumequeue"

    @staticmethod
    def _is_queue_id(name: str) -> bool:
        return name.isdigit() or (name.startswith("-") and name[1:].isdigit())

    def _queue(self, topic: str, queue_id: int, directory: Path) -> FileConsumeQueue:
        return FileConsumeQueue(topic, queue_id, directory, self.config.cq_file_size, self.config.broker)


@dataclass(frozen=True, slots=True)
class FileConsumeQueue(FileQueueLifeCycle):
    """One ``consumequeue/<topic>/<queueId>`` directory."""

    broker: str

    unit_size: ClassVar[int] = ENTRY_SIZE

    @property
    def dtype(self) -> np.dtype:
        return codec.ENTRY_DTYPE

    def files(self) -> tuple[list[Segment], list[Problem]]:
        return list_segments(self.directory, self.file_size)

    def units(self) -> tuple[int, np.ndarray]:
        import numpy as np

        segs, _ = self.files()
        parts = []
        for seg in segs:
            arr, whole = _valid_units(seg.path)
            parts.append(arr)
            if not whole:
                break
        first = segs[0].base_offset // ENTRY_SIZE if segs else 0
        return first, np.concatenate(parts) if parts else np.empty(0, codec.ENTRY_DTYPE)

    def get(self, queue_offset: int) -> np.void | None:
        seg = segment_for(self.files()[0], queue_offset * ENTRY_SIZE, self.file_size)
        if seg is None:
            return None
        slot = queue_offset - seg.base_offset // ENTRY_SIZE
        arr = self.read(seg, slot, slot + 1)
        return arr[0] if len(arr) else None

    def _max_physic(self, phy: int, size: int) -> int:
        """maxPhysicOffset of a last unit: 4.4.0 keeps its offset, 4.5.1+ its end (§4.4)."""
        return phy + size if rules_for(self.broker).cq_max_includes_size else phy

    def tail(self) -> QueueTail:
        """The last file's valid prefix; earlier files count as full (the file before gives the last unit
        when the last file has none)."""
        segs, _ = self.files()
        end, unit = _valid_end(segs, self.file_size)
        max_physic = -1 if unit is None else self._max_physic(*unit)
        return QueueTail(end, end // ENTRY_SIZE, unit, max_physic, segs[-1] if segs else None)

    def last_unit(self) -> tuple[int, int] | None:
        """By binary search in each file from the last one back; a fillPreBlank filler counts as none."""
        import numpy as np

        for seg in reversed(self.files()[0]):
            if seg.size < ENTRY_SIZE:
                continue
            with map_file(seg.path) as buf:
                arr = np.frombuffer(buf, dtype=codec.ENTRY_DTYPE, count=len(buf) // ENTRY_SIZE)
                if not _valid(arr, 0):
                    del arr
                    continue
                lo, hi = 0, len(arr) - 1  # unit lo is valid
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if _valid(arr, mid):
                        lo = mid
                    else:
                        hi = mid - 1
                out = (int(arr[lo]["phy_offset"]), int(arr[lo]["size"]))
                del arr
            return None if out == (0, FILLER_SIZE) else out
        return None

    def queue_range(self, min_phy: int) -> QueueRange:
        """Max: the valid end recovery finds from the third file from the end (§8.4). Min: ``correctMinOffset``
        (§4.4) over the first file up to where the broker reads it; with no unit at or after ``min_phy``
        4.x keeps 0 and 5.x takes the queue as empty (min = max). No files: min = max = 0."""
        segs, _ = self.files()
        if not segs:
            return QueueRange(self.topic, self.queue_id, 0, 0, -1, -1)
        start = max(0, len(segs) - 3)
        end_byte = segs[start].base_offset
        last_phy = last_end = -1
        first_valid_end: int | None = None  # valid units of the first file, when recovery reads it
        for i in range(start, len(segs)):
            seg = segs[i]
            arr = self.read(seg)
            k = valid_prefix(arr)
            if k and int(arr["size"][k - 1]) != FILLER_SIZE:  # a fillPreBlank filler points nowhere
                last_phy = int(arr["phy_offset"][k - 1])
                last_end = last_phy + int(arr["size"][k - 1])
            if i == 0:
                first_valid_end = k
            end_byte = seg.base_offset + k * ENTRY_SIZE
            if k * ENTRY_SIZE != self.file_size:  # a file not completely valid ends the queue
                break
        max_offset = end_byte // ENTRY_SIZE
        phys = self.read(segs[0], 0, first_valid_end)["phy_offset"]
        hits = (phys >= min_phy).nonzero()[0]
        if hits.size:
            min_offset = segs[0].base_offset // ENTRY_SIZE + int(hits[0])
        else:  # 5.x: every unit is below the commit log: the queue is empty
            min_offset = max_offset if rules_for(self.broker).empty_queue_min_is_max else 0
        return QueueRange(self.topic, self.queue_id, min_offset, max_offset, last_phy, last_end)

    def recover(self) -> QueueRecovery:
        """``ConsumeQueue.recover()`` (§8.4): from the third file from the end, valid units up to the first
        invalid one; a completely valid file goes on into the next. Then ``truncateDirtyFiles`` there."""
        segs, problems = self.files()
        rec = QueueRecovery(self, segs, problems, 0, 0, 0, -1)
        if not segs:
            return rec
        fs = self.file_size
        idx = max(0, len(segs) - 3)
        while True:
            arr = self.read(segs[idx])
            n = valid_prefix(arr)
            if n:
                rec.max_physic_offset = self._max_physic(int(arr["phy_offset"][n - 1]), int(arr["size"][n - 1]))
            if n * ENTRY_SIZE == fs and idx + 1 < len(segs):
                idx += 1
                continue
            break
        rec.end = segs[idx].base_offset + n * ENTRY_SIZE
        rec.max_offset = rec.end // ENTRY_SIZE
        rec.kept = [s for s in segs if not (s.base_offset + fs > rec.end and rec.end < s.base_offset)]
        rec.first_offset = rec.kept[0].base_offset // ENTRY_SIZE if rec.kept else 0
        rec.cuts = truncate_dirty_files(segs, fs, rec.end, ENTRY_SIZE)
        return rec

    def _kept_units(self, seg: Segment, recovered: QueueRecovery) -> np.ndarray:
        """A kept file's valid units as its recovery leaves them (all after the end read as zeros)."""
        return self.read(seg, 0, max(0, min(seg.size, recovered.end - seg.base_offset)) // ENTRY_SIZE)

    def truncate_dirty(self, phy_offset: int, recovered: QueueRecovery) -> list[QueueCut]:
        """From the last kept file back: a file whose first unit points at or past ``phy_offset`` goes (zeros
        read as offset 0); in the first that stays, the first unit is kept unchecked and the units from the
        first invalid one or one pointing at or past ``phy_offset`` are zeroed (§8.5)."""
        import numpy as np

        out: list[QueueCut] = []
        for last in reversed(recovered.kept):
            arr = self._kept_units(last, recovered)
            valid_end = max(0, min(last.size, recovered.end - last.base_offset))
            if (int(arr[0]["phy_offset"]) if len(arr) else 0) >= phy_offset:
                out.append(
                    QueueCut(last.path, "delete", 0, last.size, nonzero_units(last.path, 0, valid_end, ENTRY_SIZE))
                )
                continue
            phy, size = arr["phy_offset"][1:], arr["size"][1:]
            bad = np.flatnonzero((phy < 0) | (size <= 0) | (phy >= phy_offset))
            cut = (1 + (int(bad[0]) if bad.size else len(phy))) * ENTRY_SIZE
            if valid_end > cut:
                out.append(QueueCut(last.path, "zero", cut, valid_end, (valid_end - cut) // ENTRY_SIZE))
            break
        return out

    def phy_offsets_at(self, queue_offsets: np.ndarray, recovered: QueueRecovery) -> np.ndarray:
        """Reads only the slots asked for: one read per file for a dense run, one per slot when scattered."""
        import numpy as np

        out = np.full(len(queue_offsets), -1, dtype=np.int64)
        if not len(queue_offsets):
            return out
        per_file = self.file_size // ENTRY_SIZE
        bases = np.array([s.base_offset // ENTRY_SIZE for s in recovered.kept], dtype=np.int64)
        which = np.searchsorted(bases, queue_offsets, side="right") - 1
        for fi in np.unique(which[which >= 0], return_counts=True)[0].tolist():  # not numpy.ma's import
            sel = np.flatnonzero(which == fi)
            slots = queue_offsets[sel] - bases[fi]
            inside = slots < per_file
            sel, slots = sel[inside], slots[inside]
            if not len(sel):
                continue
            lo, hi = int(slots.min()), int(slots.max()) + 1
            path = recovered.kept[fi].path
            if hi - lo <= 4 * len(sel) + 4096:  # a dense run: one read
                arr = self.read(recovered.kept[fi], lo, hi)
                ok = slots - lo < len(arr)
                out[sel[ok]] = arr["phy_offset"][slots[ok] - lo]
                continue
            for i, slot in zip(sel.tolist(), slots.tolist(), strict=True):  # scattered (a damaged store)
                data = read_at(path, slot * ENTRY_SIZE, ENTRY_SIZE)
                if len(data) == ENTRY_SIZE:
                    out[i] = _LONG.unpack_from(data, 0)[0]
        return out

    def writer(self, *, where: tuple[Path | str, int, int | None] | None = None) -> ConsumeQueueWriter:
        root = self.directory.parent.parent.parent  # <root>/consumequeue/<topic>/<queueId>
        directory = queue_dir(root, self.topic, self.queue_id, where=where)
        return ConsumeQueueWriter(directory, self.file_size, not rules_for(self.broker).cq_max_includes_size)


def _last_valid(path: Path, file_size: int) -> tuple[int, tuple[int, int] | None]:
    """The number of valid units a file starts with (in its first ``file_size`` bytes), and the last of them."""
    import numpy as np

    with map_file(path) as buf:
        arr = np.frombuffer(buf, dtype=codec.ENTRY_DTYPE, count=min(len(buf), file_size) // ENTRY_SIZE)
        n = valid_prefix(arr)
        unit = (int(arr["phy_offset"][n - 1]), int(arr["size"][n - 1])) if n else None
        del arr
    return n, unit


def _valid_end(segs: list[Segment], file_size: int) -> tuple[int, tuple[int, int] | None]:
    """Where the valid units of the files ``segs`` end, and the last of them (see :meth:`FileConsumeQueue.tail`)."""
    if not segs:
        return 0, None
    n, unit = _last_valid(segs[-1].path, file_size)
    if unit is None and len(segs) > 1:
        unit = _last_valid(segs[-2].path, file_size)[1]
    return segs[-1].base_offset + n * ENTRY_SIZE, unit


def _valid(arr: np.ndarray, i: int) -> bool:
    return bool(arr[i]["phy_offset"] >= 0 and arr[i]["size"] > 0)


class ConsumeQueueWriter:
    """Appends units to one ``consumequeue/<topic>/<queueId>`` as ``putMessagePositionInfo`` does (§4.4).

    Existing files are continued exactly where the broker would continue them; runs of records are
    written with numpy, one unit at a time only where a rule needs it.
    """

    def __init__(self, directory: Path, file_size: int, broker_4_4: bool):
        self.dir = directory
        self.file_size = file_size
        self.old_dup_rule = broker_4_4
        self.segs: list[Segment] | None = None  # read on the first put
        self.first_created_here = False
        self.max_phy = -1  # maxPhysicOffset in memory (4.4.0: offset; 4.5.1+: offset + size)
        self.end = 0  # byte end of the queue stream (last.from + write position)
        self.last_ts = 0
        self.written = 0
        self._maps: dict[int, mmap.mmap] = {}
        self._writers: dict[int, FileWriter] = {}  # runs of units are written, not stored through the map
        self._placed: MappedFileQueue | None = None

    def _load(self) -> list[Segment]:
        segs, problems = list_segments(self.dir, self.file_size)
        bad = [p for p in problems if p.kind in (ProblemKind.WRONG_SIZE, ProblemKind.BAD_NAME)]
        if bad:
            raise CorruptData(bad[0].what, path=bad[0].path, pos=0)
        self.segs = segs
        self.first_created_here = not segs
        self.end, last = _valid_end(segs, self.file_size)
        if last is not None:
            self.max_phy = last[0] + (0 if self.old_dup_rule else last[1])
        return segs

    def _map(self, base: int) -> mmap.mmap:
        m = self._maps.get(base)
        if m is None:
            p = self.dir / file_name(base)
            if not os.path.lexists(p):
                self.dir.mkdir(parents=True, exist_ok=True)
                create_sized(p, self.file_size)
                assert self.segs is not None
                self.segs.append(Segment(p, base, self.file_size))
            m = map_for_writing(p, self.file_size)
            self._maps[base] = m
        return m

    def _writer(self, base: int) -> FileWriter:
        w = self._writers.get(base)
        if w is None:
            self._map(base)  # created and reserved
            w = self._writers[base] = FileWriter(self.dir / file_name(base))
        return w

    def _last_file_for(self, expected: int) -> int:
        """``getLastMappedFile(expected)``: the current last file, or a new one (§4.4)."""
        if not self.segs:
            return expected - expected % self.file_size
        last = self.segs[-1].base_offset
        if self.end >= last + self.file_size:
            return last + self.file_size
        return last

    def put(
        self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray, queue_offset: np.ndarray, store_ts: np.ndarray
    ) -> None:
        import numpy as np

        segs = self._load() if self.segs is None else self.segs
        n = len(phy)
        i = 0
        fs = self.file_size
        while i < n:
            # Bulk path: a run that continues exactly at the end, past max_phy, within one file.
            expected = int(queue_offset[i]) * ENTRY_SIZE
            p0 = int(phy[i])
            dup = p0 <= self.max_phy if self.old_dup_rule else p0 + int(size[i]) <= self.max_phy
            if not dup and expected == self.end and segs and self.end < segs[-1].base_offset + fs:
                base = segs[-1].base_offset
                room = (base + fs - self.end) // ENTRY_SIZE
                j = min(n, i + room)
                # Contiguous queue offsets and increasing phy offsets keep the bulk path exact.
                run_q = queue_offset[i:j] - queue_offset[i]
                ok = run_q == np.arange(j - i)
                run_phy = phy[i:j]
                if j - i > 1:
                    ok[1:] &= run_phy[1:] > run_phy[:-1]
                bad = np.flatnonzero(~ok)
                if bad.size:
                    j = i + int(bad[0])
                if j > i:
                    out = np.empty(j - i, dtype=codec.ENTRY_DTYPE)
                    out["phy_offset"] = phy[i:j]
                    out["size"] = size[i:j]
                    out["tags_code"] = tags_code[i:j]
                    self._writer(base).write_at(out, self.end - base)
                    self.end += (j - i) * ENTRY_SIZE
                    last = j - 1
                    self.max_phy = int(phy[last]) + (0 if self.old_dup_rule else int(size[last]))
                    self.last_ts = int(store_ts[last])
                    self.written += j - i
                    i = j
                    continue
            self._put_one(int(phy[i]), int(size[i]), int(tags_code[i]), int(queue_offset[i]), int(store_ts[i]))
            i += 1

    def _put_one(self, phy: int, size: int, tags: int, q: int, ts: int) -> None:
        import numpy as np

        if (phy <= self.max_phy) if self.old_dup_rule else (phy + size <= self.max_phy):
            return
        expected = q * ENTRY_SIZE
        base = self._last_file_for(expected)
        fresh = not self.segs
        m = self._map(base)
        if fresh and self.first_created_here and q != 0 and self.end <= base:
            # fillPreBlank: filler entries from the file start up to the expected position.
            self.end = base
            count = (expected % self.file_size) // ENTRY_SIZE
            fill = np.frombuffer(m, dtype=codec.ENTRY_DTYPE, count=count, offset=0)
            fill["phy_offset"] = 0
            fill["size"] = FILLER_SIZE
            fill["tags_code"] = 0
            del fill
            self.end = base + count * ENTRY_SIZE
        if q != 0 and expected < self.end:
            return  # already present
        # expected > end would be the broker's "[BUG]logic queue order maybe wrong": it appends anyway.
        if self.end < base:
            self.end = base
        self._writer(base).write_at(encode_entry(phy, size, tags), self.end - base)
        self.end += ENTRY_SIZE
        self.max_phy = phy + (0 if self.old_dup_rule else size)
        self.last_ts = ts
        self.written += 1

    def place(self, queue_offset: int, phy: int, size: int, tags_code: int) -> None:
        """A unit written at its queue offset's slot, no rule applied (the multi-dispatch entries of §4.3)."""
        if self._placed is None:
            self._placed = MappedFileQueue(self.dir, self.file_size)
        self._placed.put_at(queue_offset * ENTRY_SIZE, encode_entry(phy, size, tags_code))
        self.written += 1

    def close(self, sync: bool = True) -> None:
        for m in self._maps.values():
            if sync:
                m.flush()
            m.close()
        self._maps.clear()
        for w in self._writers.values():
            w.close(sync)
        self._writers.clear()
        if self._placed is not None:
            self._placed.close()
