"""The figures of ``rmqstore report``: one store's state, disk, traffic, consumers and expiry, read once.

:func:`gather_report` reads a store in one pass over its commit log (``walk.traffic.walk_traffic``, the
lenient walk as the broker reads, folding every record into counters) and cheap reads of the rest:
the commit log's extent and the queues' ranges as ``info`` finds them (``walk.extent``,
``store.queue.summary``), consumer progress as ``offsets`` shows it (``store.offsets``), the
expire plan at the next ``deleteWhen`` hour as ``expire --dry-run`` shows it (``walk.expiry``).
The verdict of ``check`` is added by the caller (:meth:`StoreReport.with_verdict`): no operation
runs another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rmqstore.ops.report.disk import disk_figures
from rmqstore.ops.report.expiry import expiry_figures
from rmqstore.ops.report.figures import (
    ExpiryFigures,
    GroupLag,
    KindBytes,
    QueueLag,
    QueueTraffic,
    Series,
    StateFigures,
    StoreReport,
    TopicFigures,
    TrafficFigures,
    Verdict,
)
from rmqstore.problems import Problem, StoreVerdict
from rmqstore.store import Store
from rmqstore.store.offsets import consumer_progress, last_consumed_ms
from rmqstore.store.queue.summary import QueueInfo, queues_info
from rmqstore.walk.extent import CommitLogInfo, commitlog_info
from rmqstore.walk.traffic import Traffic, walk_traffic

TOP_TOPICS = 8  # topics drawn one by one in the traffic chart; the rest are summed
TOP_QUEUES = 20
OTHER_TOPICS = "(other topics)"


def _state(st: Store, clog: CommitLogInfo, problems: list[Problem]) -> StateFigures:
    cfg = st.config
    cp = st.read_checkpoint()
    return StateFigures(
        None if cfg.detection is None else cfg.detection.to_json(),
        cfg.broker,
        not st.abort_exists(),
        st.lock_holder(),
        None if cp is None else cp.to_json(),
        cfg.dledger,
        clog.min_phy_offset,
        clog.max_phy_offset,
        clog.first_store_timestamp_ms,
        clog.last_store_timestamp_ms,
        tuple(p.to_json() for p in problems),
    )


def _series(traffic: Traffic, top: list[int]) -> TrafficFigures:
    """Per bucket, the messages and bytes of each top topic and of the others together."""
    traffic.for_chart()
    width = traffic.bucket_ms
    if traffic.min_ts is None or traffic.max_ts is None:
        return TrafficFigures(width, (), (), 0, 0, None, None)
    first = traffic.min_ts // width
    count = traffic.max_ts // width - first + 1
    slot = {tid: i for i, tid in enumerate(top)}
    msgs = [[0] * count for _ in range(len(top) + 1)]
    size = [[0] * count for _ in range(len(top) + 1)]
    for (tid, b), (n, s) in traffic.per_bucket.items():
        row = slot.get(tid, len(top))
        msgs[row][b - first] += n
        size[row][b - first] += s
    names = [traffic.names.names[t] for t in top] + [OTHER_TOPICS]
    series = tuple(Series(nm, tuple(m), tuple(z)) for nm, m, z in zip(names, msgs, size, strict=True) if any(m))
    total_msgs = sum(n for n, _ in traffic.per_bucket.values())
    total_bytes = sum(s for _, s in traffic.per_bucket.values())
    buckets = tuple((first + i) * width for i in range(count))
    return TrafficFigures(width, buckets, series, total_msgs, total_bytes, traffic.min_ts, traffic.max_ts)


def _topics(traffic: Traffic, cq_bytes: dict[str, int], queues: Sequence[QueueInfo]) -> tuple[TopicFigures, ...]:
    msgs: dict[str, int] = {}
    clog: dict[str, int] = {}
    for topic, _qid, n, s in traffic.queues():
        msgs[topic] = msgs.get(topic, 0) + n
        clog[topic] = clog.get(topic, 0) + s
    nq: dict[str, int] = {}
    for q in queues:
        nq[q.topic] = nq.get(q.topic, 0) + 1
    names = set(msgs) | set(cq_bytes) | set(nq)
    rows = [TopicFigures(t, msgs.get(t, 0), clog.get(t, 0), cq_bytes.get(t, 0), nq.get(t, 0)) for t in names]
    rows.sort(key=lambda r: (-(r.commit_log_bytes + r.consume_queue_bytes), r.topic))
    return tuple(rows)


def _consumers(st: Store) -> tuple[GroupLag, ...]:
    """Per group, the lag of each queue and when its last consumed message was stored; most lag first."""
    groups: dict[str, list[QueueLag]] = {}
    for r in consumer_progress(st):
        last = last_consumed_ms(st, r)
        row = QueueLag(r.topic, r.queue_id, r.consumer_offset, r.min_offset, r.max_offset, r.lag, last)
        groups.setdefault(r.group, []).append(row)
    out = []
    for g, rows in groups.items():
        times = [q.last_consumed_ms for q in rows if q.last_consumed_ms is not None]
        rows.sort(key=lambda q: (-(q.lag or 0), q.topic, q.queue_id))
        out.append(GroupLag(g, sum(q.lag or 0 for q in rows), max(times) if times else None, tuple(rows)))
    out.sort(key=lambda g: (-g.lag, g.group))
    return tuple(out)


def gather_report(
    st: Store, *, now_ms: int, progress: Callable[[int], None] | None = None, traffic: Traffic | None = None
) -> StoreReport:
    """Every figure of ``st``'s report (reads only); ``progress`` gets the commit log bytes walked.

    ``traffic``: the commit log's records already counted elsewhere (by the same walk, file by file,
    as ``rmqstore spark report`` does); the walk is then left out.
    """
    segs, problems = st.commitlog_segments()
    queues, queue_problems = queues_info(st, segs[0].base_offset if segs else -1)
    furthest = max(queues, key=lambda q: q.last_offset, default=None)
    hint = None
    if furthest is not None and furthest.last_offset >= 0:
        hint = (furthest.last_offset - furthest.last_size, furthest.last_size)
    clog, _queued_after, clog_problems = commitlog_info(st, segs, hint, None)
    if traffic is None:
        traffic = walk_traffic(segs, st.config.broker, progress)
    disk, cq_bytes = disk_figures(st.root, segs)
    per_queue = sorted(traffic.queues(), key=lambda q: (-q[2], q[0], q[1]))
    by_bytes: dict[int, int] = {}
    for key, (_n, s) in traffic.per_queue.items():
        by_bytes[key >> 32] = by_bytes.get(key >> 32, 0) + s
    top = sorted(by_bytes, key=lambda t: (-by_bytes[t], traffic.names.names[t]))[:TOP_TOPICS]
    return StoreReport(
        store=str(st.root),
        generated_ms=now_ms,
        state=_state(st, clog, [*problems, *clog_problems, *queue_problems]),
        disk=disk,
        topics=_topics(traffic, cq_bytes, queues),
        files=tuple(f.to_json() for f in traffic.files),
        traffic=_series(traffic, top),
        top_queues=tuple(QueueTraffic(*q) for q in per_queue[:TOP_QUEUES]),
        queues=tuple(queues),
        consumers=_consumers(st),
        expiry=expiry_figures(st, traffic, now_ms),
    )


def summary_rows(reports: Sequence[StoreReport]) -> list[dict[str, Any]]:
    """One row per store for the page's first table, and ``-f json``'s ``summary``."""
    rows = []
    for r in reports:
        found = r.verdict.found if r.verdict is not None else {}
        rows.append(
            {
                "store": r.store,
                "brokerFamily": None if r.state.version is None else r.state.version.get("family"),
                "result": _result(r),
                "cleanShutdown": r.state.clean_shutdown,
                "lockHolderPid": r.state.lock_holder_pid,
                "errors": found.get("error", 0) if r.verdict is not None else None,
                "warnings": found.get("warning", 0) if r.verdict is not None else None,
                "bytes": r.total_bytes,
                "commitLogBytes": sum(k.bytes for k in r.disk if k.kind == "commitLog"),
                "messages": r.traffic.messages,
                "topics": len(r.topics),
                "queues": len(r.queues),
                "lag": r.total_lag,
                "expiryFreedBytes": r.expiry.freed_bytes,
            }
        )
    return rows


def _result(r: StoreReport) -> str | None:
    """check's verdict word, as `check` and `info` give it (None: check was not run)."""
    if r.verdict is None:
        return None
    running = r.state.lock_holder_pid is not None
    return StoreVerdict.of(r.verdict.found, clean_shutdown=r.state.clean_shutdown, broker_running=running).result


__all__ = [
    "ExpiryFigures",
    "GroupLag",
    "KindBytes",
    "QueueLag",
    "QueueTraffic",
    "Series",
    "StateFigures",
    "StoreReport",
    "TopicFigures",
    "TrafficFigures",
    "Verdict",
    "gather_report",
    "summary_rows",
]
