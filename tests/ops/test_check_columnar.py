"""check's columnar record walk and chunked index check give the report of the per-record path.

Each damaged store is checked twice: with plain records decoded as numpy columns (the default) and
with every record through the per-record path (``_Walker.columnar`` off), and with index entries
read a few at a time; the two reports must be equal problem for problem (code, severity, message,
file, position, order) and count for count.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import copy_real_store, load_truth

import rmqstore.ops.check as check_mod
from rmqstore.ops.check import CheckReport, check_store
from rmqstore.store import open_store

CL_SIZE = 32768
SLOTS, ENTRIES = 128, 512
ENTRIES_POS = 40 + SLOTS * 4


def _check(root: Path) -> CheckReport:
    with open_store(root) as st:
        return check_store(st)


def _both(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[CheckReport, CheckReport]:
    fast = _check(root)
    with monkeypatch.context() as m:
        m.setattr(check_mod._Walker, "columnar", False)
        m.setattr(check_mod, "_BATCH", 7)
        m.setattr(check_mod, "_INDEX_CHUNK", 5)
        slow = _check(root)
    return fast, slow


def _same(fast: CheckReport, slow: CheckReport) -> None:
    assert [p.to_json() for p in fast.problems] == [p.to_json() for p in slow.problems]
    assert fast.found == slow.found
    assert fast.summary() == slow.summary()


def _patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 1]))


def _messages(case: str) -> list[dict]:
    return [r for r in load_truth(case)["commitlog"] if r["kind"] == "message"]


def _log(root: Path, phy: int) -> tuple[Path, int]:
    base = phy - phy % CL_SIZE
    return root / "commitlog" / f"{base:020d}", phy - base


@pytest.mark.parametrize("case", ["clean-2topics", "crash-midwrite", "delay-tx-retry"])
def test_real_stores_give_the_same_report(case, tmp_path, monkeypatch):
    root = copy_real_store(case, tmp_path)
    fast, slow = _both(root, monkeypatch)
    _same(fast, slow)


def test_damaged_records_entries_and_index_give_the_same_report(tmp_path, monkeypatch):
    root = copy_real_store("delay-tx-retry", tmp_path)
    msgs = _messages("delay-tx-retry")
    # a body bit flipped (CRC), a stored PHYSICALOFFSET off, a queue id changed (its entry no longer matches)
    path, pos = _log(root, msgs[3]["offset"])
    _flip(path, pos + 88 + 2)
    path, pos = _log(root, msgs[5]["offset"])
    _patch(path, pos + 28, struct.pack(">q", msgs[5]["offset"] + 8))
    path, pos = _log(root, msgs[7]["offset"])
    _patch(path, pos + 12, struct.pack(">i", 6))
    # a topic name the broker refuses (the body CRC does not cover it)
    path, pos = _log(root, msgs[9]["offset"])
    data = path.read_bytes()
    at = pos + 88 + int.from_bytes(data[pos + 84 : pos + 88], "big") + 1
    _patch(path, at + 1, b"/")
    # a consume queue entry pointing at the next record, another at no record
    cq = root / "consumequeue" / "TopicOrder" / "0" / f"{0:020d}"
    _patch(cq, 0, struct.pack(">q", msgs[1]["offset"]))
    _patch(cq, 20, struct.pack(">q", msgs[1]["offset"] + 3))
    # index entries: a wrong key hash, a time difference, a broken chain link
    index = sorted((root / "index").iterdir())[0]
    _patch(index, ENTRIES_POS + 2 * 20, struct.pack(">i", 12345))
    _patch(index, ENTRIES_POS + 3 * 20 + 12, struct.pack(">i", 999))
    _patch(index, ENTRIES_POS + 4 * 20 + 16, struct.pack(">i", 400))
    fast, slow = _both(root, monkeypatch)
    kinds = " | ".join(p.what for p in fast.problems)
    for expected in ("body CRC mismatch", "PHYSICALOFFSET", "does not match the record",
                     "no key with that hash", "timeDiff", "not an earlier one", "not dispatched there"):  # fmt: skip
        assert expected in kinds
    _same(fast, slow)


def test_many_findings_of_one_kind_are_listed_and_counted_the_same(tmp_path, monkeypatch):
    root = copy_real_store("clean-2topics", tmp_path)
    for r in _messages("clean-2topics")[:40]:  # more CRC errors than are listed
        path, pos = _log(root, r["offset"])
        _flip(path, pos + 88 + 1)
    index = sorted((root / "index").iterdir())[0]
    for n in range(1, 30):  # more wrong keys than are listed, over several chunks
        _patch(index, ENTRIES_POS + n * 20, struct.pack(">i", 7 + n * SLOTS))
    fast, slow = _both(root, monkeypatch)
    assert any("more problem(s) like 'crc'" in p.what for p in fast.problems)
    _same(fast, slow)


def test_committed_offsets_of_missing_topics_are_placed_as_a_search_would(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    items = ",\n".join(f'\t\t"Gone{i}@G{i % 3}":{{0:{i + 1},1:0}}' for i in range(300))
    raw = ('{\n\t"offsetTable":{\n' + items + ',\n\t\t"TopicB@G1":{3:999999}\n\t}\n}').encode()
    (root / "config" / "consumerOffset.json").write_bytes(raw)
    report = check_store_limitless(root)
    past = [p for p in report.problems if "past the queue's max offset" in p.what]
    assert len(past) == 301
    for p in past:
        key = p.what.split(":")[0].split(" on ")
        group, topic = key[0], key[1].split(" queue ")[0]
        assert p.pos == raw.find(f'"{topic}@{group}"'.encode())


def check_store_limitless(root: Path) -> CheckReport:
    with open_store(root) as st:
        return check_store(st, limit=0)
