"""The figures of a report, as rows with one JSON model each (``-f json`` writes them as they are)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rmqstore.safety.plan import JsonModel
from rmqstore.store.queue.summary import QueueInfo


@dataclass(frozen=True, slots=True)
class KindBytes(JsonModel):
    """Bytes on disk of one kind of file (commit log, consume queues, index, config, quarantine, ...)."""

    kind: str
    files: int
    bytes: int


@dataclass(frozen=True, slots=True)
class TopicFigures(JsonModel):
    """One topic: its records in the commit log and the bytes of its consume queue files."""

    topic: str
    messages: int
    commit_log_bytes: int
    consume_queue_bytes: int
    queues: int


@dataclass(frozen=True, slots=True)
class QueueTraffic(JsonModel):
    topic: str
    queue_id: int
    messages: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Series(JsonModel):
    """Messages and bytes of one topic (or of every other topic together) per time bucket."""

    topic: str
    messages: tuple[int, ...]
    bytes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TrafficFigures(JsonModel):
    bucket_ms: int
    buckets: tuple[int, ...]  # the start of each bucket, epoch ms
    series: tuple[Series, ...]  # the top topics, then "(other topics)"
    messages: int
    bytes: int
    first_store_timestamp_ms: int | None
    last_store_timestamp_ms: int | None

    json_keys = (
        "bucket_ms=bucketMs buckets series messages bytes first_store_timestamp_ms=firstStoreTimestamp "
        "last_store_timestamp_ms=lastStoreTimestamp"
    )


@dataclass(frozen=True, slots=True)
class QueueLag(JsonModel):
    """One queue of a group, as ``offsets`` shows it."""

    topic: str
    queue_id: int
    consumer_offset: int | None
    min_offset: int
    max_offset: int
    lag: int | None
    last_consumed_ms: int | None

    json_keys = "topic queue_id consumer_offset min_offset max_offset lag last_consumed_ms=lastConsumedAt"


@dataclass(frozen=True, slots=True)
class GroupLag(JsonModel):
    group: str
    lag: int
    last_consumed_ms: int | None
    queues: tuple[QueueLag, ...]

    json_keys = "group lag last_consumed_ms=lastConsumedAt queues"


@dataclass(frozen=True, slots=True)
class ForecastDay(JsonModel):
    """The commit log's bytes at a day's clean-up hour, at the current rate."""

    at_ms: int
    bytes: int
    expired_bytes: int  # removed by the clean-ups up to then

    json_keys = "at_ms=atMs bytes expired_bytes"


@dataclass(frozen=True, slots=True)
class ExpiryFigures(JsonModel):
    """What the broker's clean-up deletes at its next ``deleteWhen`` hour, and the days after."""

    next_run_ms: int | None  # None: no deleteWhen hour is ever a local hour
    plan: dict[str, Any] | None  # the expire plan's summary (as `expire --dry-run -f json` prints it)
    freed_bytes: int
    rate_bytes_per_day: int  # commit log bytes written per day over the records' span
    rate_note: str
    forecast: tuple[ForecastDay, ...]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StateFigures(JsonModel):
    """The store at a glance: version, shutdown, lock, checkpoint, the commit log's range."""

    version: dict[str, Any] | None
    broker_version: str
    clean_shutdown: bool
    lock_holder_pid: int | None
    checkpoint: dict[str, Any] | None
    dledger: bool
    min_phy_offset: int
    max_phy_offset: int
    first_store_timestamp_ms: int | None
    last_store_timestamp_ms: int | None
    problems: tuple[dict[str, Any], ...]  # what the commit log's end and the segment lists show

    json_keys = (
        "version broker_version clean_shutdown lock_holder_pid checkpoint dledger min_phy_offset max_phy_offset "
        "first_store_timestamp_ms=firstStoreTimestamp last_store_timestamp_ms=lastStoreTimestamp problems"
    )


@dataclass(frozen=True, slots=True)
class Verdict(JsonModel):
    """What ``check`` found: problems by severity, the first ones, and what the broker's recovery would do."""

    quick: bool
    found: dict[str, int]
    problems: tuple[dict[str, Any], ...]
    recovery: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class StoreReport(JsonModel):
    """Every figure of one store's report."""

    store: str
    generated_ms: int
    state: StateFigures
    disk: tuple[KindBytes, ...]
    topics: tuple[TopicFigures, ...]
    files: tuple[dict[str, Any], ...]  # commit log files (traffic.FileFigures as JSON)
    traffic: TrafficFigures
    top_queues: tuple[QueueTraffic, ...]
    queues: tuple[QueueInfo, ...]
    consumers: tuple[GroupLag, ...]
    expiry: ExpiryFigures
    verdict: Verdict | None = None

    json_keys = (
        "store generated_ms=generatedAt state disk topics files=commitLogFiles traffic top_queues queues consumers "
        "expiry verdict"
    )

    @property
    def total_bytes(self) -> int:
        return sum(k.bytes for k in self.disk)

    @property
    def total_lag(self) -> int:
        return sum(g.lag for g in self.consumers)

    def with_verdict(self, verdict: Verdict) -> StoreReport:
        return dataclasses.replace(self, verdict=verdict)
