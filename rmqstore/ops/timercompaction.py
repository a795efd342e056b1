"""Reading the 5.x timer checkpoint and the compaction store of a store (formats in
:mod:`rmqstore.codec.timercheck` and :mod:`rmqstore.codec.compaction`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rmqstore.codec import compaction, timercheck
from rmqstore.codec.commitlog import Blank
from rmqstore.codec.topic import queue_path_problem, shown
from rmqstore.errors import InputError
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import list_segments

TIMER_CHECKPOINT = "config/timercheck"
COMPACTION_LOG_DIR = "compaction/compactionLog"
COMPACTION_CQ_DIR = "compaction/compactionCq"


def timer_checkpoint_path(st: Store) -> Path:
    """``timercheck`` in the store's config directory (``BrokerPathConfigHelper`` puts it there)."""
    return Path(st.config.config_dir) / "timercheck"


def read_timer_checkpoint(st: Store) -> tuple[Path, timercheck.TimerCheckpoint]:
    """The timer checkpoint and where it was read. Raises InputError when the store has none."""
    path = timer_checkpoint_path(st)
    if not path.is_file():
        raise InputError(f"{path}: no timer checkpoint (timerWheelEnable was never on)")
    with map_file(path) as buf:
        return path, timercheck.decode(buf, path=str(path))


def _queue_dir(st: Store, sub: str, topic: str, queue_id: int) -> Path:
    why = queue_path_problem(topic, queue_id)
    if why is not None:
        raise InputError(f"topic '{shown(topic)}' queue {queue_id}: no directory can have this name ({why})")
    d = Path(st.root) / sub / topic / str(int(queue_id))
    if not d.is_dir():
        raise InputError(f"{d}: no such compaction queue")
    return d


def compaction_log_rows(st: Store, topic: str, queue_id: int, *, body: str = "base64") -> Iterator[dict[str, Any]]:
    """Every record (and end-of-file blank) of a compaction log queue, file by file.

    Raises CorruptData naming the file and position of a record that does not decode.
    """

    segs, _ = list_segments(_queue_dir(st, COMPACTION_LOG_DIR, topic, queue_id), None)
    for seg in segs:
        with map_file(seg.path) as buf:
            recs = compaction.log_records(buf, path=str(seg.path), file_from=seg.base_offset, broker=st.config.broker)
            for rec in recs:
                head = {"kind": "blank" if isinstance(rec, Blank) else "message", "file": seg.path.name, "pos": rec.pos}
                if isinstance(rec, Blank):
                    yield {**head, "commitLogOffset": rec.phy_offset, "storeSize": rec.total_size}
                else:
                    row = rec.to_row(body=body, path=str(seg.path))
                    yield {**head, **row, "keys": rec.keys, "tags": rec.tags, "uniqKey": rec.uniq_key}


def compaction_cq_rows(st: Store, topic: str, queue_id: int) -> Iterator[dict[str, Any]]:
    """Every unit (and end unit) of a compactionCq queue, file by file."""
    segs, _ = list_segments(_queue_dir(st, COMPACTION_CQ_DIR, topic, queue_id), None)
    for seg in segs:
        with map_file(seg.path) as buf:
            units = compaction.cq_units(buf)
        for u in units:
            e = u.entry
            yield {"kind": u.kind, "file": seg.path.name, "pos": u.pos, "compactionLogOffset": e.phy_offset,
                   "size": e.size, "tagsCode": e.tags_code, "storeTimestamp": e.store_timestamp_ms,
                   "queueOffset": e.base_offset, "batchSize": e.batch_size,
                   "compactedOffset": e.compacted_offset}  # fmt: skip
