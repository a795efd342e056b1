"""The index lane (the index half of a dispatch in a thread of its own) writes what the caller's thread writes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_real_store

from rmqstore.codec.columnar import gather
from rmqstore.dispatch.dispatcher import Dispatcher
from rmqstore.errors import FileAccessError
from rmqstore.store import open_store
from rmqstore.walk.columns import iter_columns
from rmqstore.walk.requests import ScanStop


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _build(st, out: Path, lane: bool, cfg) -> dict[str, bytes]:
    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    segs, _ = st.commitlog_segments()
    with Dispatcher(cfg, root=out, clock=lambda: next(ticks), index_lane=lane) as d:
        for _seg, item in iter_columns(segs, cfg, workers=1):
            if not isinstance(item, ScanStop):
                d.dispatch_columns(item)
    assert d.stats.index_entries > 0 and d.stats.cq_entries > 0
    return _files(out)


@pytest.mark.parametrize("case", ["crash-midwrite", "5.2.0/crash-5x-midwrite"])
def test_lane_writes_the_same_bytes(case: str, tmp_path: Path) -> None:
    root = copy_real_store(case, tmp_path / "src")
    with open_store(root) as st:
        # small index files: the lane rolls to new files several times
        cfg = dataclasses.replace(st.config, max_hash_slot_num=64, max_index_num=50)
        plain = _build(st, tmp_path / "plain", False, cfg)
        laned = _build(st, tmp_path / "lane", True, cfg)
    assert sum(1 for name in plain if name.startswith("index/")) > 2
    assert laned == plain


def test_lane_error_is_raised_by_the_dispatcher(tmp_path: Path) -> None:
    root = copy_real_store("crash-midwrite", tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    (out / "index").write_text("not a directory")  # the index writer cannot list or create its files
    with open_store(root) as st:
        segs, _ = st.commitlog_segments()
        batches = [c for _s, c in iter_columns(segs, st.config, workers=1) if not isinstance(c, ScanStop)]
        errors = []
        for lane in (False, True):
            d = Dispatcher(st.config, root=out, index_lane=lane, consume_queue=False)
            with pytest.raises(FileAccessError) as e:
                for c in batches:
                    d.dispatch_columns(c)
                d.close()
            errors.append(str(e.value))
            d.close(sync=False)  # after a failure: nothing more is raised
        assert errors[0] == errors[1]


def test_gather_reads_rows_and_zero_pads_past_the_end() -> None:
    rng = np.random.default_rng(7)
    u8 = rng.integers(0, 256, 1000, dtype=np.uint8)
    for width in (1, 3, 8, 76):
        idx = rng.integers(-5, 1000, 300)
        got = gather(u8, idx, width)
        want = np.zeros((len(idx), width), np.uint8)
        for i, a in enumerate(idx.tolist()):
            if a >= 0:
                row = u8[a : a + width]
                want[i, : len(row)] = row
        assert got.shape == (len(idx), width) and got.flags.c_contiguous
        assert (got == want).all()
        inside = idx[(idx >= 0) & (idx <= 1000 - width)]
        assert (gather(u8, inside, width) == want[(idx >= 0) & (idx <= 1000 - width)]).all()
