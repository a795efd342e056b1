"""check of a store larger than its window gives the report of a check of the whole store at once.

Every test store fits in the default window (524,288 records); here each is also checked with
windows of a few records, cursors that read two units at a time and blocks of five queue units
and four index entries, so every queue and index file is matched over many windows. The whole
JSON results must be equal, on real stores and on damaged copies (entries out of commit log order
included), in full and quick mode and with every problem listed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_REAL_CASES, case_dir, copy_real_store, load_truth

import rmqstore.ops.check as check_mod
import rmqstore.ops.check.queues as queues_mod
import rmqstore.ops.check.window as window_mod
from rmqstore.ops.check import check_store
from rmqstore.ops.check.window import Block, Cursors
from rmqstore.store import open_store

CL_SIZE = 32768
ENTRIES_POS = 40 + 128 * 4  # the index entries of the small stores' index files


def _report(root: Path, **kw: object) -> dict:
    with open_store(root) as st:
        return check_store(st, **kw).to_json()  # type: ignore[arg-type]


def _windowed(root: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> tuple[dict, dict]:
    whole = _report(root, **kw)
    with monkeypatch.context() as m:
        m.setattr(check_mod, "_BATCH", 2)
        m.setattr(check_mod, "_WINDOW", 3)
        m.setattr(check_mod, "_INDEX_CHUNK", 4)
        m.setattr(queues_mod, "QUEUE_BLOCK", 5)
        m.setattr(window_mod, "READ_UNITS", 2)
        small = _report(root, **kw)
    return whole, small


def _patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


@pytest.mark.parametrize("case", [*ALL_REAL_CASES, "5.2.0/rocksdb-cq-clean"])
def test_real_stores_in_small_windows(case, monkeypatch):
    if not case_dir(case).is_dir():
        pytest.skip(f"real store not found at {case_dir(case)}")
    root = case_dir(case) / "store"
    whole, small = _windowed(root, monkeypatch)
    assert whole["summary"]["records"] > 3  # more than one window
    assert small == whole
    whole, small = _windowed(root, monkeypatch, quick=True)
    assert small == whole


def test_damaged_store_in_small_windows(tmp_path, monkeypatch):
    root = copy_real_store("delay-tx-retry", tmp_path)
    msgs = [r for r in load_truth("delay-tx-retry")["commitlog"] if r["kind"] == "message"]
    log = root / "commitlog" / f"{0:020d}"
    _patch(log, msgs[3]["offset"] + 88 + 2, b"\x00\x01")  # a body CRC
    _patch(log, msgs[7]["offset"] + 12, struct.pack(">i", 6))  # a queue id: its entry no longer matches
    cq = root / "consumequeue" / "RMQ_SYS_TRANS_HALF_TOPIC" / "0" / f"{0:020d}"
    units = bytearray(cq.read_bytes()[:80])  # its four entries
    units[0:20], units[40:60] = units[40:60], units[0:20]  # two entries out of commit log order
    phy1 = struct.unpack(">q", units[20:28])[0]
    units[20:28] = struct.pack(">q", phy1 + 3)  # an entry where no record starts
    units[60:68] = struct.pack(">q", 1 << 40)  # an entry past the end of the data
    _patch(cq, 0, bytes(units))
    index = sorted((root / "index").iterdir())[0]
    _patch(index, ENTRIES_POS + 2 * 20, struct.pack(">i", 12345))  # a wrong key hash
    _patch(index, ENTRIES_POS + 3 * 20 + 12, struct.pack(">i", 999))  # a time difference
    first = index.read_bytes()[ENTRIES_POS + 20 : ENTRIES_POS + 40]
    _patch(index, ENTRIES_POS + 7 * 20, first)  # an entry out of order (a copy of entry 1)
    for kw in ({}, {"limit": 1}, {"limit": 0}, {"quick": True}):
        whole, small = _windowed(root, monkeypatch, **kw)
        assert small == whole, kw
    found = " | ".join(p["what"] for p in _report(root, limit=0)["problems"])
    for expected in ("does not match the record", "where no record starts", "past the end of the commit log data",
                     "no key with that hash", "timeDiff"):  # fmt: skip
        assert expected in found


def test_records_missing_from_queues_in_small_windows(tmp_path, monkeypatch):
    """Queues cut short: records behind their end are listed, records after it spilled and counted."""
    root = copy_real_store("clean-2topics", tmp_path)
    for qdir in sorted((root / "consumequeue").glob("*/*")):
        last = sorted(qdir.iterdir())[-1]
        data = last.read_bytes()
        last.write_bytes(data[:20] + bytes(20) + data[40:])  # a gap after the first entry
    whole, small = _windowed(root, monkeypatch, limit=3)
    assert any("gap at queue offset" in p["what"] for p in whole["problems"])
    assert small == whole


def test_cursors_give_each_entry_to_one_window():
    """Blocks in and out of order: over windows that cover every offset, each entry comes once."""
    phys = {0: np.array([5, 9, 9, 14, 30, 31], np.int64), 1: np.array([20, 3, 40, 8], np.int64)}
    cur = Cursors()
    for owner, phy in phys.items():
        cur.add(Block(owner, 0, 0, len(phy), True), phy)
    cur.freeze()
    assert [b.in_order for b in cur.blocks] == [True, False]

    def read(block: Block, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = phys[block.owner][a:b]
        return np.arange(a, b, dtype=np.int64), p, p

    seen: list[tuple[int, int]] = []
    for lo, hi in ((window_mod.OFFSET_MIN, 9), (9, 10), (10, 31), (31, window_mod.OFFSET_MAX)):
        for block, num, phy, _ in cur.pieces(lo, hi, read):
            assert ((phy >= lo) & (phy < hi)).all()
            seen += [(block.owner, n) for n in num.tolist()]
    assert sorted(seen) == [(o, i) for o, p in phys.items() for i in range(len(p))]
