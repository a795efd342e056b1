"""The rows of a RocksDB consume queue that are not units: each queue's ``max`` and ``min`` rows against its
units, and the dispatch checkpoint row against the commit log's end (5.x ``storeType=defaultRocksDB``).

The engine serves a queue up to its ``max`` row and from its ``min`` row (``RocksDBConsumeQueueOffsetTable``),
and on start dispatches the commit log from the checkpoint row on: a row that disagrees with the units or
with the commit log changes what consumers get.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rmqstore.codec.consumequeue import ENTRY_SIZE
from rmqstore.problems import ERROR, INFO, WARNING
from rmqstore.store import Store
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueue, RocksDBConsumeQueues

# (path, pos, what, severity, phy_offset)
Add = Callable[..., None]


def check_rows(st: Store, data_end: int, first_phy: int, add: Add) -> None:
    """Problems of the database's rows; nothing for a store whose consume queues are files."""
    queues = st.consume_queues
    if not isinstance(queues, RocksDBConsumeQueues):
        return
    if not queues.exists():
        if data_end > first_phy:
            add(queues.directory, None, "no consume queue database: the engine creates an empty one and "
                f"re-dispatches the commit log from {first_phy} on its next start", WARNING)  # fmt: skip
        return
    _check_checkpoint(queues, data_end, first_phy, add)
    for q in queues.queues():
        _check_queue(q, data_end, add)


def dispatch_checkpoint(st: Store, cq_max: int) -> int:
    """Where the engine's dispatch resumes: a RocksDB consume queue's checkpoint row (0 without one, as
    ``getMaxPhyOffsetInConsumeQueue`` reads it), else ``cq_max``, the end of the file queues' units."""
    queues = st.consume_queues
    if not isinstance(queues, RocksDBConsumeQueues):
        return cq_max
    cp = queues.checkpoint() if queues.exists() else None
    return 0 if cp is None else cp


def database_dispatch_from(st: Store, first_phy: int, stop: int, checkpoint: int) -> int | None:
    """Where the engine's dispatch starts on a RocksDB consume queue: its checkpoint row (cut back to where
    recovery stops the commit log); None for file queues, whose rule is the version's."""
    if not isinstance(st.consume_queues, RocksDBConsumeQueues):
        return None
    return max(first_phy, min(checkpoint, stop))


def _check_checkpoint(queues: RocksDBConsumeQueues, data_end: int, first_phy: int, add: Add) -> None:
    cp = queues.checkpoint()
    where = queues.directory
    if cp is None:
        if data_end > first_phy:
            add(where, None, "no dispatch checkpoint row (CHECKPOINT_TOPIC max 0): the database holds nothing the "
                "engine trusts (its write-ahead log is off, a crash loses what was not flushed); it re-dispatches "
                f"the commit log from {first_phy}", WARNING)  # fmt: skip
        return
    if cp > data_end:
        add(where, None, f"dispatch checkpoint row {cp} is past the commit log end {data_end}: units after the "
            "end point at missing records", ERROR, cp)  # fmt: skip
    elif cp < data_end:
        add(where, None, f"dispatch checkpoint row {cp} is behind the commit log end {data_end}: the engine "
            "dispatches the records after it on its next start", INFO, cp)  # fmt: skip


def _check_queue(q: RocksDBConsumeQueue, data_end: int, add: Add) -> None:
    first, last = q.first_key(), q.last_key()
    mx, mn = q.max_row(), q.min_row()
    name = f"{q.topic} queue {q.queue_id}"
    path: Path = q.directory
    if first is None or last is None:
        if mx is not None:
            add(path, None, f"{name}: max row (queue offset {mx.queue_offset}) but no unit rows", ERROR, mx.phy_offset)
        return
    if mx is None:
        add(path, None, f"{name}: units up to queue offset {last} but no max row: the engine serves the queue as "
            "empty (max offset 0)", ERROR)  # fmt: skip
    else:
        _check_max(q, mx.queue_offset, mx.phy_offset, last, name, add)
    if mn is not None:
        u = q.get(mn.queue_offset)
        if u is None and mn.queue_offset <= last:
            add(path, mn.queue_offset * ENTRY_SIZE, f"{name}: min row names queue offset {mn.queue_offset}, which "
                "has no unit", WARNING, mn.phy_offset)  # fmt: skip
        elif u is not None and int(u["phy_offset"]) != mn.phy_offset:
            add(path, mn.queue_offset * ENTRY_SIZE, f"{name}: min row says commit log offset {mn.phy_offset} for "
                f"queue offset {mn.queue_offset}, the unit says {int(u['phy_offset'])}", ERROR, mn.phy_offset)  # fmt: skip
    tail = q.get(last)
    if tail is not None and int(tail["phy_offset"]) + int(tail["size"]) > data_end:
        add(path, last * ENTRY_SIZE, f"{name}: unit at queue offset {last} points past the commit log end "
            f"{data_end}", ERROR, int(tail["phy_offset"]))  # fmt: skip


def _check_max(q: RocksDBConsumeQueue, max_q: int, max_phy: int, last: int, name: str, add: Add) -> None:
    path = q.directory
    u = q.get(max_q)
    if u is None:
        add(path, max_q * ENTRY_SIZE, f"{name}: max row names queue offset {max_q}, which has no unit", ERROR, max_phy)
    elif int(u["phy_offset"]) != max_phy:
        add(path, max_q * ENTRY_SIZE, f"{name}: max row says commit log offset {max_phy} for queue offset {max_q}, "
            f"the unit says {int(u['phy_offset'])}", ERROR, max_phy)  # fmt: skip
    if last > max_q:
        add(path, (max_q + 1) * ENTRY_SIZE, f"{name}: {last - max_q} unit(s) after the max row (queue offsets "
            f"{max_q + 1}..{last}) are never served", WARNING)  # fmt: skip
