"""The report's counters merged file by file (as Spark tasks count them) equal one walk of every file."""

from __future__ import annotations

import numpy as np
from conftest import case_dir

from rmqstore.ops.report import gather_report
from rmqstore.store import open_store
from rmqstore.walk.traffic import BUCKET_LADDER, HOUR_MS, Traffic, walk_traffic

NOW_MS = 1_767_225_600_000  # 2026-01-01, fixed so the expiry figures compare


def test_files_counted_apart_and_merged_give_the_report_of_one_walk(any_real_case):
    with open_store(case_dir(any_real_case) / "store") as st:
        segs, _ = st.commitlog_segments()
        broker = st.config.broker
        parts = [walk_traffic([seg], broker) for seg in reversed(segs)]  # any order
        merged = Traffic()
        for part in parts:
            merged = merged.merge(part)
        one = walk_traffic(segs, broker)
        assert merged.files == one.files and (merged.min_ts, merged.max_ts) == (one.min_ts, one.max_ts)
        assert sorted(merged.queues()) == sorted(one.queues())
        assert gather_report(st, now_ms=NOW_MS, traffic=merged) == gather_report(st, now_ms=NOW_MS)


def _named(t: Traffic, topics: np.ndarray, *cols: np.ndarray) -> None:
    """Add records whose topics are indexes into TOPICS (each count numbers its topics its own way)."""
    t.add(np.array([t.names.id(name) for name in TOPICS])[topics], *cols)


def _by_name(t: Traffic) -> tuple[dict, dict]:
    buckets = {(t.names.names[k], b): v for (k, b), v in t.per_bucket.items()}
    return buckets, {(topic, q): (n, s) for topic, q, n, s in t.queues()}


TOPICS = ("TopicA", "TopicB", "%RETRY%GroupC")


def test_parts_of_different_widths_merge_into_the_chart_of_one_count():
    """A part that saw a day (wide buckets) and one that saw a minute (100 ms buckets), their topics
    numbered in another order, merge as one count of both: the same buckets at the chart's width."""
    rng = np.random.default_rng(7)
    start = 1_700_000_000_000
    day = start + rng.integers(0, 24 * HOUR_MS, 5000)
    minute = start + 5 * HOUR_MS + rng.integers(0, 60_000, 5000)
    cols = [(rng.integers(0, 3, len(ts)), rng.integers(0, 4, len(ts)), rng.integers(100, 900, len(ts)), ts) for ts in (day, minute)]  # fmt: skip
    wide, fine, both = Traffic(), Traffic(), Traffic()
    fine.names.id(TOPICS[2])
    _named(wide, *cols[0])
    _named(fine, *cols[1])
    _named(both, *(np.concatenate(c) for c in zip(*cols, strict=True)))
    assert fine.bucket_ms == BUCKET_LADDER[0] < wide.bucket_ms
    merged = fine.merge(wide)
    for t in (merged, both):
        t.for_chart()
    assert merged.bucket_ms == both.bucket_ms == HOUR_MS // 4  # 24 h drawn in 96 buckets
    assert _by_name(merged) == _by_name(both)
