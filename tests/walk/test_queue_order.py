"""Records grouped by queue with a 16-bit code sort exactly as with the 64-bit key."""

from __future__ import annotations

import numpy as np
import pytest

from rmqstore.walk.chain import queue_order


@pytest.mark.parametrize(
    ("topics", "queues", "low"), [(1, 1, 0), (3, 5, 0), (40, 1000, 0), (256, 256, 0), (300, 4, 0), (3, 5, -2)]
)
def test_queue_order_is_the_stable_sort_by_topic_then_queue(topics: int, queues: int, low: int) -> None:
    """The 16-bit code where the ids fit, the 64-bit key where they are many or a queue id is negative."""
    rng = np.random.default_rng(topics)
    tid = rng.integers(0, topics, 5000)
    qid = rng.integers(low, queues, 5000)
    got = queue_order(tid, qid)
    assert got.tolist() == np.argsort(tid * (1 << 33) + qid, kind="stable").tolist()


def test_queue_order_of_no_record_is_empty() -> None:
    assert queue_order(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
