"""The index writer's slot chain of a chunk of entries equals the broker's putKey one entry at a time."""

from __future__ import annotations

import numpy as np
import pytest

from rmqstore.dispatch.dispatcher import slot_chain


def _put_one_at_a_time(table: np.ndarray, slot: np.ndarray, nums: np.ndarray) -> np.ndarray:
    prev = np.zeros(len(slot), np.int64)
    for i, (s, n) in enumerate(zip(slot.tolist(), nums.tolist(), strict=True)):
        old = int(table[s])
        prev[i] = 0 if old <= 0 or old > n else old  # indexCount at the put is the entry's own number
        table[s] = n
    return prev


@pytest.mark.parametrize("slots", [1, 2, 7, 64, 5000])
@pytest.mark.parametrize("seed", range(4))
def test_slot_chain_is_the_put_of_each_entry_in_order(slots: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = rng.integers(-3, 400, slots).astype(">i4")  # stale, negative and too-new values
    expected_table = table.copy()
    count = 1
    for k in (1, 2, 50, 300, 1):
        slot = rng.integers(0, slots, k)
        nums = np.arange(count, count + k, dtype=np.int64)
        want = _put_one_at_a_time(expected_table, slot, nums)
        got = slot_chain(table, slot, nums)
        assert got.tolist() == want.tolist()
        assert table.tolist() == expected_table.tolist()
        count += k
