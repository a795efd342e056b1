"""Records grouped by queue with a 16-bit code sort exactly as with the 64-bit key."""

from __future__ import annotations

import numpy as np
import pytest

from rmqstore.walk.chain import queue_order


@pytest.mark.parametrize(("topics", "queues"), [(1, 1), (3, 5), (40, 1000), (256, 256)])
def test_queue_order_is_the_stable_sort_by_topic_then_queue(topics: int, queues: int) -> None:
    rng = np.random.default_rng(topics)
    tid = rng.integers(0, topics, 5000)
    qid = rng.integers(0, queues, 5000)
    got = queue_order(tid, qid)
    assert got is not None
    assert got.tolist() == np.argsort(tid * (1 << 33) + qid, kind="stable").tolist()


def test_queue_order_leaves_negative_or_many_ids_to_the_caller() -> None:
    assert queue_order(np.array([0, 1]), np.array([3, -1])) is None
    assert queue_order(np.array([0, 300]), np.array([3, 300])) is None
    assert queue_order(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
