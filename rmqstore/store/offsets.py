"""Committed consumer offsets as the broker loads them: consumerOffset.json, or lmqConsumerOffset.json
when its offset manager is the LMQ one (store-format.md §11.4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rmqstore.rules import rules_for
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store import config as cfgjson
from rmqstore.store.lookup import query_queue_offset
from rmqstore.store.queue.interface import QueueRange

CONSUMER_OFFSET_FILE = "consumerOffset.json"
LMQ_OFFSET_FILE = "lmqConsumerOffset.json"


def lmq_offset_manager(st: Store) -> bool:
    """Whether the broker keeps its offsets in lmqConsumerOffset.json: with ``enableLmq`` (4.9.3+) its
    offset manager is ``LmqConsumerOffsetManager``, which persists every group there (consumerOffset.json
    is then neither read nor written) and an LMQ group's one offset per queue in ``lmqOffsetTable``."""
    return st.config.enable_lmq and rules_for(st.config.broker).multi_dispatch


def offsets_file(st: Store) -> str:
    """The name of the committed offsets file the broker of this store loads and persists."""
    return LMQ_OFFSET_FILE if lmq_offset_manager(st) else CONSUMER_OFFSET_FILE


def _offset_table(cf: cfgjson.ConfigFile, lmq: bool) -> dict[tuple[str, str], dict[int, int]]:
    path = cf.path if cf.source != "bak" else cf.path.with_name(cf.path.name + ".bak")
    table = cfgjson.load_consumer_offsets(cf.data, path=path)
    if lmq:
        table.update(cfgjson.load_lmq_offsets(cf.data, path=path))
    return table


def read_consumer_offsets(st: Store) -> tuple[cfgjson.ConfigFile, dict[tuple[str, str], dict[int, int]]]:
    """The committed offsets file as the broker loads it (:func:`offsets_file`), and its table
    ``{(topic, group): {queue: offset}}`` (an LMQ group's offset from lmqOffsetTable at queue 0)."""
    name = offsets_file(st)
    cf = cfgjson.read_config(st.config.config_dir, name)
    return cf, _offset_table(cf, name == LMQ_OFFSET_FILE)


def read_lmq_offsets(st: Store) -> dict[tuple[str, str], dict[int, int]]:
    """4.9.3+/5.x ``lmqConsumerOffset.json`` (``offsetTable`` as in consumerOffset.json, plus
    ``lmqOffsetTable``: ``topic@group`` -> one offset, shown at queue 0); empty when the file is absent."""
    d = st.config.config_dir
    if not (d / LMQ_OFFSET_FILE).exists() and not (d / f"{LMQ_OFFSET_FILE}.bak").exists():
        return {}
    return _offset_table(cfgjson.read_config(d, LMQ_OFFSET_FILE), True)


# ------------------------------------------------------------------------- consumer progress


@dataclass(frozen=True, slots=True)
class ConsumerProgress(JsonModel):
    """One row of consumer progress: a group's committed offset on one queue."""

    group: str
    topic: str
    queue_id: int
    consumer_offset: int | None  # None: the group has no committed offset for this queue
    min_offset: int
    max_offset: int

    json_keys = "group topic queue_id consumer_offset min_offset max_offset lag"

    @property
    def lag(self) -> int | None:
        """Messages not consumed yet (mqadmin's "Diff"); negative when committed is past the max."""
        return None if self.consumer_offset is None else self.max_offset - self.consumer_offset


def queue_ids_on_disk(st: Store) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for q in st.consume_queues.queues():
        out.setdefault(q.topic, []).append(q.queue_id)
    return out


def consumer_progress(st: Store, *, group: str | None = None, topic: str | None = None) -> list[ConsumerProgress]:
    """Progress of every group in consumerOffset.json (optionally one group and/or topic).

    Each ``topic@group`` gets one row per queue that has a committed offset or a consume queue
    on disk; rows are sorted by group, topic and queue id.
    """
    _, table = read_consumer_offsets(st)
    table = {**table, **read_lmq_offsets(st)}
    on_disk = queue_ids_on_disk(st)
    min_phy = st.min_phy_offset()
    ranges: dict[tuple[str, int], QueueRange] = {}
    rows: list[ConsumerProgress] = []
    for (t, g), committed in table.items():
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        for qid in sorted(set(committed) | set(on_disk.get(t, ()))):
            rng = ranges.get((t, qid))
            if rng is None:
                rng = ranges[(t, qid)] = st.consume_queues.queue(t, qid).queue_range(min_phy)
            rows.append(ConsumerProgress(g, t, qid, committed.get(qid), rng.min_offset, rng.max_offset))
    rows.sort(key=lambda r: (r.group, r.topic, r.queue_id))
    return rows


def progress_totals(rows: Sequence[ConsumerProgress]) -> list[dict[str, Any]]:
    """Lag totals per group and topic, then per group, like consumerProgress's "Diff Total"."""
    per_pair: dict[tuple[str, str], int] = {}
    per_group: dict[str, int] = {}
    for r in rows:
        lag = r.lag or 0
        per_pair[(r.group, r.topic)] = per_pair.get((r.group, r.topic), 0) + lag
        per_group[r.group] = per_group.get(r.group, 0) + lag
    out = [{"group": g, "topic": t, "lag": v} for (g, t), v in per_pair.items()]
    out += [{"group": g, "topic": None, "lag": v} for g, v in per_group.items()]
    out.append({"group": None, "topic": None, "lag": sum(per_group.values())})
    return out


def last_consumed_ms(st: Store, row: ConsumerProgress) -> int | None:
    """Store time of the last consumed message (at committed - 1), as consumerProgress's LastTime
    shows it; None when nothing before the committed offset is in the queue."""

    committed = row.consumer_offset
    if committed is None or committed <= row.min_offset or committed - 1 >= row.max_offset:
        return None
    hit = query_queue_offset(st, row.topic, row.queue_id, committed - 1)
    return None if hit.record is None else hit.record.store_timestamp_ms
