"""The index writer's slot chain of a chunk of entries, and the files it writes, equal the broker's putKey one
entry at a time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_real_store

from rmqstore.codec import indexfile as ix
from rmqstore.dispatch.dispatcher import Dispatcher, slot_chain
from rmqstore.store import open_store
from rmqstore.walk.chain import indexed
from rmqstore.walk.columns import iter_columns
from rmqstore.walk.requests import ScanStop


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


def test_index_writer_continues_a_file_as_the_broker_puts_each_key(tmp_path: Path) -> None:
    """Two runs of the dispatcher into one index file (the second reads the slot table back from the
    file) write what ``IndexFile.put_hash`` writes one key at a time."""
    root = copy_real_store("5.2.0/crash-5x-midwrite", tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    with open_store(root) as st:
        cfg = dataclasses.replace(st.config, max_hash_slot_num=61, max_index_num=4000)
        segs, _ = st.commitlog_segments()
        batches = [c for _s, c in iter_columns(segs, cfg, workers=1) if not isinstance(c, ScanStop)]
        keys = sum(len(c.key_rec) for c in batches)
        assert keys > 200 and len(batches) > 1
        for run in (batches[:1], batches[1:]):
            with Dispatcher(cfg, root=out, consume_queue=False, clock=lambda: 1_700_000_000_000) as d:
                for c in run:
                    d.dispatch_columns(c)
    ref = ix.IndexFile(bytearray(ix.file_size(61, 4000)), slots=61, entries=4000, broker=cfg.broker)
    ref.write_header(ix.new_index_header_after(None))
    for c in batches:
        for h, r in zip(c.key_hash.tolist(), c.key_rec.tolist(), strict=True):
            if indexed(int(c.sys_flag[r])):
                assert ref.put_hash(h, int(c.phy[r]), int(c.store_ts[r]))
    (written,) = sorted((out / "index").iterdir())
    assert written.read_bytes() == bytes(ref.buf)
