"""Each consume queue's range as ``info`` and ``report`` show it (store-format.md §4.4, §4.7, §8.4).

The max queue offset comes from the valid prefix of the last file (§8.4), the min by the 4.x
``correctMinOffset`` rule (§4.4), both with numpy over mapped files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqstore.codec.consumequeue import ENTRY_SIZE, valid_prefix
from rmqstore.problems import INFO, Problem
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store.layout import Segment
from rmqstore.store.queue.interface import ConsumeQueue

_MIN_SCAN_CHUNK = 4096  # entries read at a time when looking for the first live CQ entry


@dataclass(frozen=True, slots=True)
class QueueInfo(JsonModel):
    topic: str
    queue_id: int
    files: int
    min_offset: int  # minOffsetInQueue
    max_offset: int  # maxOffsetInQueue: the next queue offset to be written
    max_physic_offset: int  # the broker's maxPhysicOffset (4.4.0: start of the last record; 4.5.1+: its end)
    last_offset: int  # end (offset + size) of the record of the last entry; -1 when empty
    last_size: int = 0  # size of that record

    json_keys = "topic queue_id files min_offset max_offset message_total max_physic_offset last_offset"

    @property
    def message_total(self) -> int:
        return self.max_offset - self.min_offset


def _batch_queue_info(q: ConsumeQueue) -> QueueInfo:
    """A 5.x batch consume queue (§4.7): offsets count messages; maxPhysicOffset is the last unit's offset."""
    segs, _ = q.files()
    first = next((arr[0] for arr in map(q.read, segs) if valid_prefix(arr)), None)
    tail = q.tail()
    if first is None or tail.last is None:
        return QueueInfo(q.topic, q.queue_id, len(segs), 0, 0, -1, -1)
    phy, size = tail.last
    base = int(first["base_offset"])
    return QueueInfo(q.topic, q.queue_id, len(segs), base, tail.max_offset, tail.max_physic_offset, phy + size, size)


def _queue_info(q: ConsumeQueue, commitlog_min: int, file_size: int) -> tuple[QueueInfo, list[Problem]]:
    segs, problems = q.files()
    if not segs:
        return QueueInfo(q.topic, q.queue_id, 0, 0, 0, -1, -1), problems
    # Max: the valid prefix of the last file (§8.4; earlier files are taken as complete).
    last = segs[-1]
    tail = q.tail()
    # Min: the 4.x correctMinOffset scan of the first file (§4.4); minLogicOffset stays 0 if nothing matches.
    first = segs[0]
    scan_end = tail.end - last.base_offset if first is last else min(first.size, file_size)
    min_logic = _first_live_entry(q, first, scan_end, commitlog_min)
    if min_logic is None:
        min_logic = 0
        if scan_end:
            problems.append(
                Problem(
                    first.path,
                    None,
                    f"no entry of the first file points at or after the commit log min offset {commitlog_min}: "
                    "every message of this queue has expired",
                    INFO,
                )
            )
    last_size = 0
    last_end = -1
    if tail.last is not None:
        last_size = tail.last[1]
        last_end = tail.last[0] + tail.last[1]
    return (
        QueueInfo(
            q.topic,
            q.queue_id,
            len(segs),
            min_logic // ENTRY_SIZE,
            tail.max_offset,
            tail.max_physic_offset,
            last_end,
            last_size,
        ),
        problems,
    )


def _first_live_entry(q: ConsumeQueue, seg: Segment, scan_end: int, commitlog_min: int) -> int | None:
    """Byte offset in the queue stream of the first entry pointing at or after ``commitlog_min``."""
    count = max(0, scan_end) // ENTRY_SIZE
    for start in range(0, count, _MIN_SCAN_CHUNK):
        hits = np.flatnonzero(q.read(seg, start, start + _MIN_SCAN_CHUNK)["phy_offset"] >= commitlog_min)
        if hits.size:
            return seg.base_offset + (start + int(hits[0])) * ENTRY_SIZE
    return None


def queues_info(st: Store, commitlog_min: int) -> tuple[list[QueueInfo], list[Problem]]:
    queues: list[QueueInfo] = []
    problems: list[Problem] = []
    for q in st.consume_queues.queues():
        info, qp = _queue_info(q, commitlog_min, st.config.cq_file_size)
        queues.append(info)
        problems += qp
    queues += [_batch_queue_info(q) for q in st.batch_queues.queues()]
    queues.sort(key=lambda q: (q.topic, q.queue_id))
    return queues, problems
