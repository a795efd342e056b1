"""Batch consume queues (5.x topics whose queue.type is BatchCQ): which topics have one, their units as
arrays, and where their valid units end (store-format.md §4.7)."""

from __future__ import annotations

from rmqstore.codec.consumequeue import BCQ_DTYPE, BCQ_UNIT_SIZE
from rmqstore.errors import ConfigError
from rmqstore.store.config import read_config
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig

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


def bcq_units(buf: object) -> object:
    """Every whole 46-byte unit of a mapped batch consume queue file, as a numpy record array."""
    import numpy as np

    n = len(buf) // BCQ_UNIT_SIZE  # type: ignore[arg-type]
    return np.frombuffer(buf, dtype=BCQ_DTYPE, count=n)  # type: ignore[call-overload]


def bcq_valid(units: object) -> object:
    """BatchConsumeQueue's test of a unit: offset >= 0, size > 0, base offset >= 0, batch size > 0."""
    u = units  # numpy record array
    return (u["phy_offset"] >= 0) & (u["size"] > 0) & (u["base_offset"] >= 0) & (u["batch_size"] > 0)  # type: ignore[index]


def batch_queue_max_phy(segs: list[Segment]) -> int:
    """``BatchConsumeQueue.getMaxPhysicOffset`` after its ``recover()``: the commit log offset (not offset
    + size) of the last valid unit, reading from the third file from the end; -1 without units."""
    import numpy as np

    best = -1
    for seg in segs[max(0, len(segs) - 3) :]:
        with map_file(seg.path) as buf:
            units = bcq_units(buf)
            bad = np.flatnonzero(~bcq_valid(units))  # type: ignore[operator]
            k = int(bad[0]) if bad.size else len(units)  # type: ignore[arg-type]
            if k:
                best = int(units["phy_offset"][k - 1])  # type: ignore[index]
            del units
        if k * BCQ_UNIT_SIZE < seg.size:  # a file not completely valid ends the queue
            break
    return best
