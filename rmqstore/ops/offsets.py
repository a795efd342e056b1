"""Consumer progress offline, and rewriting committed offsets (store-format.md §4.4, §8.4, §11.4).

``mqadmin consumerProgress`` without a broker: for every ``topic@group`` in consumerOffset.json
the committed offset (the next offset to consume), the queue's min and max offsets as a broker
would report them after loading the store, and the lag (max - committed).

* max offset: ``(last.from + valid end) / 20``, the valid end found the way consume queue
  recovery finds it (§8.4: from the third-to-last file, stop at the first entry with offset < 0
  or size <= 0).
* min offset: ``correctMinOffset`` (§4.4): the first entry of the first file whose commit log
  offset is at least the commit log's min offset; 4.x keeps 0 when no entry qualifies, 5.x then
  treats the queue as empty (min = max).
* offset for a time: :func:`rmqstore.store.lookup.offset_by_time`, the broker's ``getOffsetInQueueByTime``
  (what ``mqadmin resetOffsetByTime`` uses): the entry stored at that time, else the nearer of
  its neighbours in the consume queue file picked for the time.

Consumer progress itself (``consumer_progress``, ``last_consumed_ms``) is read in
:mod:`rmqstore.store.offsets`.

Writing follows the broker's persist sequence for the chosen version (``.bak`` rotation, §11.1)
through :func:`rmqstore.config.write_config`, and is a :func:`plan_reset_offsets` /
:func:`apply_reset_offsets` pair.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rmqstore.errors import ConfigError, InputError, UnsafePlan
from rmqstore.rules import rules_for
from rmqstore.safety.actions import PlannedAction
from rmqstore.safety.openfile import read_file
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store import config as cfgjson
from rmqstore.store.lookup import offset_by_time
from rmqstore.store.offsets import (
    LMQ_OFFSET_FILE,
    queue_ids_on_disk,
    read_consumer_offsets,
)
from rmqstore.store.queue.interface import QueueRange

# --------------------------------------------------------------------------- setting offsets


@dataclass(frozen=True, slots=True)
class OffsetChange(JsonModel):
    """One committed offset a plan sets, with the queue's range it was checked against."""

    json_keys = "group topic queue_id before after min_offset max_offset"

    topic: str
    group: str
    queue_id: int  # an LMQ group's one offset is shown as queue 0
    before: int | None  # None: nothing committed yet
    after: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class ResetOffsetsPlan(JsonModel):
    """A rewrite of the offsets file (consumerOffset.json, or lmqConsumerOffset.json with enableLmq)."""

    operation: ClassVar[str] = "offsets"
    json_codecs = {"data": (cfgjson.dumps, cfgjson.loads)}  # fastjson's form: int keys, key order

    path: Path  # config/consumerOffset.json
    broker_version: str
    changes: tuple[OffsetChange, ...]
    data: Any  # the whole new document (fastjson form kept: int keys, key order)
    source_raw: bytes | None  # the main file's bytes when planned, to detect a concurrent change

    def new_text(self) -> str:
        return cfgjson.dumps(self.data)

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        """The rewrite in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
        why = f"{len(self.changes)} committed offset(s) set; the previous file is kept as .bak"
        return (PlannedAction("offsets", "rewrite", self.path, why),) if self.changes else ()

    def summary(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "offsetsChanged": len(self.changes),
            "previousFileKeptAs": f"{self.path.name}.bak",
        }

    def details(self) -> dict[str, list[dict[str, Any]]]:
        return {"changes": [c.to_json() for c in self.changes]}


RESET_MODES = ("offset", "earliest", "latest", "time")


def _set_one(
    data: Any, topic: str, group: str, qid: int, old: int | None, target: int, rng: Any, force: bool, lmq: bool
) -> OffsetChange:
    """Set one committed offset in ``data``; outside the queue's [min, max] only with ``force``.
    ``lmq``: the document is lmqConsumerOffset.json, where an LMQ group's offset goes to lmqOffsetTable."""
    if not rng.min_offset <= target <= rng.max_offset and not force:
        raise UnsafePlan(
            f"offset {target} is outside {topic} queue {qid}'s range [{rng.min_offset}, {rng.max_offset}]; "
            "use --force to write it anyway"
        )
    if lmq and cfgjson.is_lmq(group):
        if qid != 0:
            raise InputError(f"LMQ group {group!r} has one offset, kept for queue 0 (lmqOffsetTable): give --queue 0")
        cfgjson.set_lmq_offset(data, topic, group, target)
    else:
        cfgjson.set_consumer_offset(data, topic, group, qid, target)
    return OffsetChange(topic, group, qid, old, target, rng.min_offset, rng.max_offset)


def _document_to_write(st: Store) -> tuple[cfgjson.ConfigFile, dict[tuple[str, str], dict[int, int]], Any, bool]:
    """The offsets file as loaded, its table, a copy of its document to change, and whether it is
    lmqConsumerOffset.json. A missing file starts as the broker's empty manager would write it.

    Raises:
        ConfigError: the file exists but the broker would load its ``.bak`` instead.
    """
    cf, table = read_consumer_offsets(st)
    if cf.skipped is not None:
        raise ConfigError(
            f"{cf.skipped.what}; the broker would load {cf.path.name}.bak instead: repair the file first",
            path=cf.skipped.path,
            line=cf.skipped.line,
        )
    lmq = cf.path.name == LMQ_OFFSET_FILE
    data = copy.deepcopy(cf.data) if isinstance(cf.data, dict) and cf.data else None
    if data is None and lmq and rules_for(st.config.broker).five:
        version = cfgjson.bean(counter=0, stateVersion=0, timestamp=int(time.time() * 1000))
        data = cfgjson.bean(dataVersion=version, groupTopicMap={}, lmqOffsetTable={}, offsetTable={})
    elif data is None:
        data = cfgjson.bean(lmqOffsetTable={}, offsetTable={}) if lmq else cfgjson.bean(offsetTable={})
    return cf, table, data, lmq


def apply_reset_offsets(st: Store, plan: ResetOffsetsPlan) -> None:
    """Write exactly ``plan`` (the store must be open writable, so no broker runs).

    Raises:
        StoreLocked: the store was not opened writable (the lock is not ours).
        UnsafePlan: consumerOffset.json changed since the plan was made.
    """
    if not st.writable:
        raise UnsafePlan("the store is open read-only; open it writable (taking the broker's lock) to write")
    try:
        now = read_file(plan.path)
    except FileNotFoundError:
        now = None
    if now != plan.source_raw and not (now is not None and plan.source_raw is None and not now):
        raise UnsafePlan(f"{plan.path} changed since the plan was made; plan again")
    cfgjson.write_config(plan.path.parent, plan.path.name, plan.data, broker_version=plan.broker_version)


# ------------------------------------------------------- last consumed time, reset over many pairs


RESET_MODES_ALL = (*RESET_MODES, "shift")


def plan_reset_offsets(
    st: Store,
    *,
    pairs: Sequence[tuple[str, str]],
    mode: str,
    queue_id: int | None = None,
    offset: int | None = None,
    time_ms: int | None = None,
    shift_by: int | None = None,
    force: bool = False,
    broker_version: str = "4.4.0",
) -> ResetOffsetsPlan:
    """Plan new committed offsets for every ``(topic, group)`` of ``pairs`` in one rewrite (reads only).

    ``mode``: ``offset`` (``queue_id`` and ``offset`` required), ``earliest`` (min offset),
    ``latest`` (max offset), ``time`` (the broker's offset for ``time_ms``) or ``shift`` (the
    committed offset moved by ``shift_by``, kept inside the queue's [min, max]; a queue without a
    committed offset starts from its min). Without ``queue_id`` a mode applies to every queue of
    the topic (on disk or already committed).

    Raises:
        InputError: bad arguments, or nothing to set.
        UnsafePlan: an offset outside the queue's [min, max] without ``force``.
        ConfigError: consumerOffset.json exists but neither it nor its ``.bak`` can be used.
    """
    if mode not in RESET_MODES_ALL:
        raise InputError(f"unknown reset mode {mode!r}; one of {', '.join(RESET_MODES_ALL)}")
    if mode == "offset" and (queue_id is None or offset is None):
        raise InputError("--offset needs --queue")
    if mode == "time" and time_ms is None:
        raise InputError("--to-time needs a time")
    if not pairs:
        raise InputError("no group and topic to set: consumerOffset.json has none that match")
    cf, table, data, lmq = _document_to_write(st)
    on_disk = queue_ids_on_disk(st)
    min_phy = st.min_phy_offset()
    changes = []
    for topic, group in pairs:
        committed = table.get((topic, group), {})
        qids = [queue_id] if queue_id is not None else sorted(set(committed) | set(on_disk.get(topic, ())))
        for qid in qids:
            rng = st.consume_queues.queue(topic, qid).queue_range(min_phy)
            target = _reset_target(st, rng, committed.get(qid), mode, offset, time_ms, shift_by)
            changes.append(_set_one(data, topic, group, qid, committed.get(qid), target, rng, force, lmq))
    raw = cf.raw if cf.source == "file" else None
    return ResetOffsetsPlan(cf.path, broker_version, tuple(changes), data, raw)


def _reset_target(
    st: Store,
    rng: QueueRange,
    before: int | None,
    mode: str,
    offset: int | None,
    time_ms: int | None,
    shift_by: int | None,
) -> int:
    if mode == "offset":
        assert offset is not None
        return offset
    if mode == "earliest":
        return rng.min_offset
    if mode == "latest":
        return rng.max_offset
    if mode == "shift":
        assert shift_by is not None
        start = rng.min_offset if before is None else before
        return min(max(start + shift_by, rng.min_offset), rng.max_offset)
    assert time_ms is not None
    return offset_by_time(st, rng.topic, rng.queue_id, time_ms).queue_offset


__all__ = [
    "RESET_MODES",
    "RESET_MODES_ALL",
    "OffsetChange",
    "ResetOffsetsPlan",
    "apply_reset_offsets",
    "plan_reset_offsets",
]
