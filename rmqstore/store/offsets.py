"""Committed consumer offsets as the broker loads them: consumerOffset.json, or lmqConsumerOffset.json
when its offset manager is the LMQ one (store-format.md §11.4)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rmqstore.rules import rules_for
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store import config as cfgjson
from rmqstore.store.lookup import query_queue_offset, store_times_at

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

    def to_json(self) -> dict[str, Any]:
        """The ``json_keys`` fields, built directly: ``offsets show`` writes one per committed queue."""
        c = self.consumer_offset
        return {
            "group": self.group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "consumerOffset": c,
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "lag": None if c is None else self.max_offset - c,
        }


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
    return list(iter_consumer_progress(st, group=group, topic=topic))


def committed_table(
    st: Store, group: str | None = None, topic: str | None = None
) -> dict[tuple[str, str], dict[int, int]]:
    """``{(topic, group): {queue id: committed offset}}`` of the offsets file and lmqConsumerOffset.json."""
    _, table = read_consumer_offsets(st)
    table = {**table, **read_lmq_offsets(st)}
    return {k: v for k, v in table.items() if (group is None or k[1] == group) and (topic is None or k[0] == topic)}


def iter_consumer_progress(
    st: Store,
    *,
    group: str | None = None,
    topic: str | None = None,
    table: dict[tuple[str, str], dict[int, int]] | None = None,
) -> Iterator[ConsumerProgress]:
    """:func:`consumer_progress` one row at a time (in the same order): each queue's range is read once;
    ``table`` is :func:`committed_table` when the caller has read it already."""
    table = committed_table(st, group, topic) if table is None else table
    for row in progress_tuples(st, table):
        yield ConsumerProgress(*row)


def progress_tuples(
    st: Store, table: dict[tuple[str, str], dict[int, int]]
) -> Iterator[tuple[str, str, int, int | None, int, int]]:
    """The fields of :func:`iter_consumer_progress`'s rows as plain tuples (group, topic, queue id,
    committed offset or None, min offset, max offset): what ``offsets show`` streams."""
    min_phy = st.min_phy_offset()
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    disk = {t: set(ids) for t, ids in queue_ids_on_disk(st).items()}
    for t, g in sorted(table, key=lambda k: (k[1], k[0])):
        committed = table[(t, g)]
        for qid in sorted(disk.get(t, set()).union(committed)):
            rng = ranges.get((t, qid))
            if rng is None:
                r = st.consume_queues.queue(t, qid).queue_range(min_phy)
                rng = ranges[(t, qid)] = (r.min_offset, r.max_offset)
            yield g, t, qid, committed.get(qid), rng[0], rng[1]


def last_consumed_times(st: Store, table: dict[tuple[str, str], dict[int, int]]) -> LastConsumed:
    """:func:`last_consumed_ms` for every row of :func:`iter_consumer_progress` over ``table``
    (:func:`committed_table`): the committed offsets of all groups are gathered per queue first, and
    each record is read once however many groups stopped there."""
    wanted: dict[tuple[str, int], set[int]] = {}
    for (t, _g), committed in table.items():
        for qid, off in committed.items():
            wanted.setdefault((t, qid), set()).add(off - 1)
    times = {key: store_times_at(st, key[0], key[1], offs) for key, offs in wanted.items()}
    return LastConsumed(times)


@dataclass(frozen=True, slots=True)
class LastConsumed:
    times: dict[tuple[str, int], dict[int, int | None]]

    def of(self, row: ConsumerProgress) -> int | None:
        return self.at(row.topic, row.queue_id, row.consumer_offset, row.min_offset, row.max_offset)

    def at(self, topic: str, queue_id: int, committed: int | None, min_offset: int, max_offset: int) -> int | None:
        if committed is None or committed <= min_offset or committed - 1 >= max_offset:
            return None
        return self.times.get((topic, queue_id), {}).get(committed - 1)


def progress_totals(rows: Sequence[ConsumerProgress]) -> list[dict[str, Any]]:
    """Lag totals per group and topic, then per group, like consumerProgress's "Diff Total"."""
    totals = LagTotals()
    for r in rows:
        totals.add(r)
    return totals.rows()


class LagTotals:
    """The lag totals of :func:`progress_totals`, added one row at a time (for streamed rows)."""

    def __init__(self) -> None:
        self.per_pair: dict[tuple[str, str], int] = {}
        self.per_group: dict[str, int] = {}

    def add(self, r: ConsumerProgress) -> None:
        self.add_lag(r.group, r.topic, 0 if r.consumer_offset is None else r.max_offset - r.consumer_offset)

    def add_lag(self, group: str, topic: str, lag: int) -> None:
        self.per_pair[(group, topic)] = self.per_pair.get((group, topic), 0) + lag
        self.per_group[group] = self.per_group.get(group, 0) + lag

    def rows(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"group": g, "topic": t, "lag": v} for (g, t), v in self.per_pair.items()]
        out += [{"group": g, "topic": None, "lag": v} for g, v in self.per_group.items()]
        out.append({"group": None, "topic": None, "lag": sum(self.per_group.values())})
        return out


def last_consumed_ms(st: Store, row: ConsumerProgress) -> int | None:
    """Store time of the last consumed message (at committed - 1), as consumerProgress's LastTime
    shows it; None when nothing before the committed offset is in the queue."""

    committed = row.consumer_offset
    if committed is None or committed <= row.min_offset or committed - 1 >= row.max_offset:
        return None
    hit = query_queue_offset(st, row.topic, row.queue_id, committed - 1)
    return None if hit.record is None else hit.record.store_timestamp_ms
