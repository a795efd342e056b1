"""5.x batch consume queues: ``batchconsumequeue/<topic>/<queueId>/``, 46-byte units (§4.7).

A topic whose ``queue.type`` attribute is BatchCQ keeps its queues here, never in ``consumequeue/``.
Units are appended in commit log order, not placed by queue offset: each unit is one record and
holds its first queue offset (``base_offset``) and how many messages it carries (``batch_size``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rmqstore.codec import consumequeue as codec
from rmqstore.codec.consumequeue import BCQ_UNIT_SIZE, BcqEntry, encode_bcq_entry, valid_prefix
from rmqstore.errors import ConfigError
from rmqstore.problems import Problem
from rmqstore.store.config import read_config
from rmqstore.store.files import data_end, names_in
from rmqstore.store.layout import Segment, StoreConfig, list_segments, queue_dir
from rmqstore.store.queue.interface import QueueCut, QueueRange, QueueRecovery, QueueTail
from rmqstore.store.queue.mappedfiles import FileQueueLifeCycle, MappedFileQueue, QueueDirectories, truncate_dirty_files

if TYPE_CHECKING:
    import numpy as np

BATCH_DIR = "batchconsumequeue"
BATCH_CQ = "BatchCQ"


def batch_cq_topics(cfg: StoreConfig) -> frozenset[str]:
    """Topics whose ``queue.type`` attribute is BatchCQ in ``config/topics.json`` (5.x)."""
    try:
        cf = read_config(cfg.store_root / "config", "topics.json")
    except (ConfigError, OSError):
        return frozenset()
    table = (cf.data or {}).get("topicConfigTable", {}) if isinstance(cf.data, dict) else {}
    out = set()
    for name, tc in table.items():
        attrs = tc.get("attributes") if isinstance(tc, dict) else None
        if isinstance(attrs, dict) and attrs.get("queue.type") == BATCH_CQ:
            out.add(str(name))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class BatchConsumeQueues(QueueDirectories["BatchConsumeQueue"]):
    """Every ``batchconsumequeue/<topic>/<queueId>`` under ``root`` (a store, or a build directory beside it)."""

    kind: ClassVar[str] = BATCH_DIR

    def _topics(self) -> list[str]:
        return names_in(self.directory) if self.directory.is_dir() else []

    def _queue(self, topic: str, queue_id: int, directory: Path) -> BatchConsumeQueue:
        size = self.config.bcq_file_size
        return BatchConsumeQueue(topic, queue_id, directory, size - size % BCQ_UNIT_SIZE)


@dataclass(frozen=True, slots=True)
class BatchUnit:
    """One unit of a batch consume queue, where it is kept."""

    file: str
    pos: int
    entry: BcqEntry

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "kind": "batch",
            "queueOffset": e.base_offset,
            "batchNum": e.batch_size,
            "commitLogOffset": e.phy_offset,
            "size": e.size,
            "tagsCode": e.tags_code,
            "storeTimestamp": e.store_timestamp_ms,
            "compactedOffset": e.compacted_offset,
            "file": self.file,
            "pos": self.pos,
        }


def _recover_valid(units: np.ndarray) -> np.ndarray:
    """BatchConsumeQueue's test of a unit in its recovery: offset >= 0, size > 0, base offset >= 0, batch size > 0."""
    u = units
    return (u["phy_offset"] >= 0) & (u["size"] > 0) & (u["base_offset"] >= 0) & (u["batch_size"] > 0)


def _leading(valid: np.ndarray) -> int:
    """How many units lead ``valid`` before the first invalid one."""
    import numpy as np

    bad = np.flatnonzero(~valid)
    return int(bad[0]) if bad.size else len(valid)


@dataclass(frozen=True, slots=True)
class BatchConsumeQueue(FileQueueLifeCycle):
    """One ``batchconsumequeue/<topic>/<queueId>`` directory (``file_size``: mapperFileSizeBatchConsumeQueue,
    in whole units)."""

    unit_size: ClassVar[int] = BCQ_UNIT_SIZE

    @property
    def dtype(self) -> np.dtype:
        return codec.BCQ_DTYPE

    def files(self) -> tuple[list[Segment], list[Problem]]:
        return list_segments(self.directory, None)

    def scan(self) -> Iterator[BatchUnit]:
        """The valid units in order, with their places, up to the first empty one."""
        for seg in self.files()[0]:
            arr = self.read(seg)
            n = valid_prefix(arr)
            for i, row in enumerate(arr[:n].tolist()):
                yield BatchUnit(seg.path.name, i * BCQ_UNIT_SIZE, BcqEntry(*row))
            if n < len(arr):
                return

    def units(self) -> tuple[int, np.ndarray]:
        import numpy as np

        parts = []
        for seg in self.files()[0]:
            arr = self.read(seg)
            n = valid_prefix(arr)
            parts.append(arr[:n])
            if n < len(arr):
                break
        out = np.concatenate(parts) if parts else np.empty(0, codec.BCQ_DTYPE)
        return (int(out["base_offset"][0]) if len(out) else 0), out

    def get(self, queue_offset: int) -> np.void | None:
        """The unit whose messages hold ``queue_offset``."""
        import numpy as np

        units = self.units()[1]
        i = int(np.searchsorted(units["base_offset"], queue_offset, side="right")) - 1
        if i < 0 or queue_offset >= int(units["base_offset"][i]) + int(units["batch_size"][i]):
            return None
        return units[i]

    def tail(self) -> QueueTail:
        """The last file holding a valid unit (the first file when none does)."""
        segs, _ = self.files()
        for seg in reversed(segs):
            arr = self.read(seg)
            n = valid_prefix(arr)
            if n or seg is segs[0]:
                end = seg.base_offset + n * BCQ_UNIT_SIZE
                if not n:
                    return QueueTail(end, 0, None, -1, seg)
                u = arr[n - 1]
                phy, size = int(u["phy_offset"]), int(u["size"])
                return QueueTail(end, int(u["base_offset"]) + int(u["batch_size"]), (phy, size), phy, seg)
        return QueueTail(0, 0, None, -1)

    def last_unit(self) -> tuple[int, int] | None:
        return self.tail().last

    def _recovered(self, segs: list[Segment]) -> tuple[int, np.void | None]:
        """Where recovery finds the valid units end, reading from the third file from the end, and the last."""
        end, last = 0, None
        for seg in segs[max(0, len(segs) - 3) :]:
            arr = self.read(seg)
            k = _leading(_recover_valid(arr))
            end = seg.base_offset + k * BCQ_UNIT_SIZE
            if k:
                last = arr[k - 1]
            if k * BCQ_UNIT_SIZE < seg.size:  # a file not completely valid ends the queue
                break
        return end, last

    def queue_range(self, min_phy: int) -> QueueRange:
        """Max: after the last unit recovery keeps. Min: the first unit pointing at or after ``min_phy``
        (``correctMinOffset``); none does: the queue is empty (min = max)."""
        import numpy as np

        segs, _ = self.files()
        _, last = self._recovered(segs)
        if last is None:
            return QueueRange(self.topic, self.queue_id, 0, 0, -1, -1)
        max_offset = int(last["base_offset"]) + int(last["batch_size"])
        units = self.units()[1]
        hits = np.flatnonzero(units["phy_offset"] >= min_phy)
        min_offset = int(units["base_offset"][hits[0]]) if hits.size else max_offset
        phy = int(last["phy_offset"])
        return QueueRange(self.topic, self.queue_id, min_offset, max_offset, phy, phy + int(last["size"]))

    def recover(self) -> QueueRecovery:
        """``BatchConsumeQueue.recover()``: maxPhysicOffset is the commit log offset (not offset + size)
        of the last valid unit."""
        segs, problems = self.files()
        end, last = self._recovered(segs)
        rec = QueueRecovery(self, segs, problems, end, 0, 0, -1)
        rec.kept = [s for s in segs if not (s.base_offset + self.file_size > end and end < s.base_offset)]
        rec.cuts = truncate_dirty_files(segs, self.file_size, end, BCQ_UNIT_SIZE)
        if rec.kept:
            first = self.read(rec.kept[0], 0, 1)
            rec.first_offset = int(first["base_offset"][0]) if len(first) else 0
        if last is not None:
            rec.max_offset = int(last["base_offset"]) + int(last["batch_size"])
            rec.max_physic_offset = int(last["phy_offset"])
        return rec

    def truncate_dirty(self, phy_offset: int, recovered: QueueRecovery) -> list[QueueCut]:
        """``truncateDirtyLogicFiles(phy_offset)`` over the files as they are. From the last file back: a
        file whose first unit points at or past ``phy_offset`` is deleted (the first unit is not checked
        otherwise, zeros read as offset 0); in the first file that stays, units are kept up to the first
        one that is invalid or points at or past ``phy_offset``, and everything after them goes (the engine
        moves its write position there and overwrites the rest)."""
        import numpy as np

        out: list[QueueCut] = []
        for seg in reversed(recovered.files):
            units = self.read(seg)
            if not len(units):
                break  # nothing in it to cut (the engine maps it full of zeros: unit 0 is offset 0)
            phys, valid = units["phy_offset"], _recover_valid(units)
            if int(phys[0]) >= phy_offset:
                out.append(QueueCut(seg.path, "delete", 0, seg.size, _leading(valid)))
                continue
            stop = np.flatnonzero(~valid[1:] | (phys[1:] >= phy_offset))
            keep = 1 + (int(stop[0]) if stop.size else len(phys) - 1)
            cut = keep * BCQ_UNIT_SIZE
            end = data_end(seg.path, cut)
            if end > cut:
                out.append(QueueCut(seg.path, "zero", cut, end, _leading(valid[keep:])))
            break
        return out

    def phy_offsets_at(self, queue_offsets: np.ndarray, recovered: QueueRecovery) -> np.ndarray:
        """The unit holding each queue offset is the last one whose base offset is not after it."""
        import numpy as np

        out = np.full(len(queue_offsets), -1, dtype=np.int64)
        units = self.units()[1]
        if not len(units):
            return out
        i = np.searchsorted(units["base_offset"], queue_offsets, side="right") - 1
        at = np.maximum(i, 0)
        inside = (i >= 0) & (queue_offsets < units["base_offset"][at] + units["batch_size"][at])
        inside &= queue_offsets < recovered.max_offset
        out[inside] = units["phy_offset"][at[inside]]
        return out

    def writer(self, *, where: tuple[Path | str, int, int | None] | None = None) -> BatchConsumeQueueWriter:
        root = self.directory.parent.parent.parent  # <root>/batchconsumequeue/<topic>/<queueId>
        directory = queue_dir(root, self.topic, self.queue_id, where=where, under=BATCH_DIR)
        tail = self.tail()
        end_phy = -1 if tail.last is None else tail.last[0] + tail.last[1]
        return BatchConsumeQueueWriter(MappedFileQueue(directory, self.file_size), tail.end // BCQ_UNIT_SIZE, end_phy)


class BatchConsumeQueueWriter:
    """Appends one unit per record after the queue's last one, as the 5.x engine does (compacted offset -1)."""

    def __init__(self, files: MappedFileQueue, next_unit: int, end_phy: int):
        self.files = files
        self.next_unit = next_unit
        self.end_phy = end_phy  # commit log end of the last unit there before: records before it are in already
        self.written = 0
        self.last_ts = 0

    def put(
        self,
        phy: Sequence[int],
        size: Sequence[int],
        tags_code: Sequence[int],
        queue_offset: Sequence[int],
        store_ts: Sequence[int],
        batch_size: Sequence[int] | None = None,
    ) -> None:
        """Units for records in commit log order; ``queue_offset`` is each record's first queue offset and
        ``batch_size`` how many it takes (1 each when not given)."""
        for i, p in enumerate(phy):
            if p < self.end_phy:
                continue  # already in the queue (a re-dispatch continuing the files)
            num = 1 if batch_size is None else batch_size[i]
            unit = encode_bcq_entry(p, size[i], tags_code[i], store_ts[i], queue_offset[i], num)
            self.files.put_at(self.next_unit * BCQ_UNIT_SIZE, unit)
            self.next_unit += 1
            self.written += 1
            self.last_ts = store_ts[i]

    def close(self, sync: bool = True) -> None:
        self.files.close()
