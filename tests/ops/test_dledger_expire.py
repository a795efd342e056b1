"""`rmqstore expire` on DLedger stores (copies of the real 4.9.4 and 5.2.0 DLedger stores, file mtimes set):
the member's clean service as DLedger runs it, then the consume queues and index files after the new
min offset.

Expected deletions come from the tests' own reading of the engines' rules and from truth.json (entry
positions and indexes, queue offsets, index files' endPhyOffset), never from the code under test:
data files oldest first, never the last, kept from the first whose mtime + fileReservedTime + 1 hours
is after now; the DLedger index files that end at or before the unit of the new first entry; consume
queue and index files as on a plain store.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import copy_real_store, dledger_case, load_truth
from test_dledger_recover import migrated_store
from test_expire import AT_04, HOUR_MS, expected_index, plan, set_mtime
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.ops.query import query_key, query_uniq
from rmqstore.store import lookup, open_store
from rmqstore.walk.expiry import dledger_cleaning

runner = CliRunner()
VERSIONS = ("4.9.4", "5.2.0")
DATA_SIZE = 32768  # mappedFileSizeCommitLog of the real DLedger stores
UNIT = 32


def run(*argv: str) -> tuple[int, str]:
    r = runner.invoke(app, list(argv))
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r.exit_code, r.output


def aged_store(tmp: Path, version: str, ages_h: list[float], *, now_ms: int = AT_04) -> Path:
    """A copy of the real DLedger store whose data file i is ages_h[i] hours old (the rest 1 hour)."""
    root = copy_real_store(dledger_case(version), tmp)
    for i, f in enumerate(sorted((root / "dledger-n0" / "data").iterdir())):
        set_mtime(f, int(now_ms - (ages_h[i] if i < len(ages_h) else 1) * HOUR_MS))
    return root


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def expected(version: str, deleted: int) -> tuple[list[str], int, list[str], list[str]]:
    """By hand from truth.json: the data files, the new begin index, the DLedger index files and the
    consume queue files that go when the first ``deleted`` data files expire."""
    truth = load_truth(dledger_case(version))
    new_min = deleted * DATA_SIZE
    data = [f"dledger-n0/data/{i * DATA_SIZE:020d}" for i in range(deleted)]
    begin = min(e["index"] for e in truth["dledger"]["entries"] if e["pos"] >= new_min)
    index = [f"dledger-n0/index/{f['name']}" for f in truth["dledger"]["indexFiles"]
             if f["fileFromOffset"] + f["fileSize"] <= begin * UNIT]  # fmt: skip
    per_file = truth["config"]["mapedFileSizeConsumeQueue"] // 20
    cq = []
    for q in truth["queues"]:
        offsets = [m["commitLogOffset"] for m in q["messages"]]
        files = range(0, len(offsets), per_file)
        for first in list(files)[:-1]:  # never a queue's last file; stop at the first kept
            if offsets[first + per_file - 1] >= new_min:
                break
            cq.append(f"consumequeue/{q['topic']}/{q['queueId']}/{first * 20:020d}")
    return data, begin, index, sorted(cq)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_plan_is_the_dledger_clean_service(tmp_path: Path, version: str) -> None:
    root = aged_store(tmp_path, version, [100, 100, 73])  # 73h: fileReservedTime 72 + 1, just expired
    p = plan(root, AT_04)
    data, begin, index, cq = expected(version, 3)
    assert [a.rel_path for a in p.commitlog] == data
    assert [a.rel_path for a in p.dledger_index] == index == ["dledger-n0/index/00000000000000000000"]
    assert sorted(a.rel_path for a in p.consumequeue) == cq
    assert [a.rel_path for a in p.index] == expected_index(dledger_case(version), 3 * DATA_SIZE)
    assert (p.min_phy_offset, p.new_min_phy_offset) == (0, 3 * DATA_SIZE)
    assert f"the ledger's begin index moves to {begin}" in p.notes
    assert any("checkpoint is not changed (endIndex 399, committedIndex 399)" in n for n in p.notes)
    assert p.dledger is not None and p.dledger.file_reserved_hours == 73


def test_fileReservedTime_plus_one_stops_at_the_first_file_kept(tmp_path: Path) -> None:
    root = aged_store(tmp_path, "5.2.0", [100, 72.9, 100])  # 72.9h: not yet (DLedger keeps 73h)
    p = plan(root, AT_04)
    assert [a.rel_path for a in p.commitlog] == expected("5.2.0", 1)[0]
    assert p.dledger_index == ()  # the begin index moved inside the first index file
    assert "DLedger: kept 00000000000000032768" in p.commitlog_stop


def test_triggers_are_deleteWhen_and_the_disk_never_a_manual_delete(tmp_path: Path) -> None:
    root = aged_store(tmp_path, "4.9.4", [100, 100, 100])
    at_05 = AT_04 + HOUR_MS
    assert plan(root, at_05, force=True).actions == ()  # mqadmin deleteExpiredCommitLog does not reach DLedger
    assert plan(root, at_05, ratio=0.75).actions == ()  # not above diskMaxUsedSpaceRatio 75
    assert len(plan(root, at_05, ratio=0.76).commitlog) == 3  # above it: check expired
    fresh = aged_store(tmp_path / "fresh", "4.9.4", [1, 1, 1])
    assert plan(fresh, at_05, ratio=0.85).actions == ()  # 0.85 is not above DLedger's 0.85f
    assert len(plan(fresh, at_05, ratio=0.86).commitlog) == 3  # forced clean: any age
    assert plan(fresh, at_05, ratio=0.86, clean_file_forcibly_enable=False).actions == ()
    with open_store(root) as st:
        old = dledger_cleaning(st.config, broker="4.9.3", file_reserved_time_h=72, disk_max_used_space_ratio=90,
                               clean_file_forcibly_enable=True, time_up=False, manual=False, disabled=False,
                               disk_usage=lambda _p: 0.75)  # fmt: skip
    assert old.check_expired  # before 4.9.4 DLedger checks above its own 0.70


@pytest.mark.parametrize("version", VERSIONS)
def test_expire_then_every_remaining_record_is_served_and_check_is_clean(tmp_path: Path, version: str) -> None:
    root = aged_store(tmp_path / "s", version, [100, 100, 100])
    checkpoint = (root / "dledger-n0" / "checkpoint").read_bytes()
    before = tree(root)
    code, out = run("expire", str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "--dry-run", "-f", "json")
    assert code == 0 and json.loads(out)["summary"]["files"]["dledger-index"] == 1, out
    assert tree(root) == before and not (root / ".rmqstore").exists()  # the dry run wrote nothing
    q = tmp_path / "q"
    code, out = run("expire", str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "--quarantine", str(q))
    assert code == 0, out
    data, begin, index, cq = expected(version, 3)
    gone = set(data + index + cq)
    assert {k for k in before if k not in tree(root)} == gone | {f"index/{n.split('/')[1]}" for n in
                                                                 expected_index(dledger_case(version), 3 * DATA_SIZE)}  # fmt: skip
    (manifest,) = q.glob("*/manifest.json")
    for item in json.loads(manifest.read_text())["items"]:  # every removed file kept as it was
        rel = str(Path(item["path"]).relative_to(root.resolve()))
        assert hashlib.sha256(Path(item["saved"]).read_bytes()).hexdigest() == before[rel]
    assert (root / "dledger-n0" / "checkpoint").read_bytes() == checkpoint
    code, out = run("check", str(root))
    assert code == 0, out
    code, out = run("info", str(root), "-f", "json")
    assert code == 0 and json.loads(out)["dledger"]["ledgerBeginIndex"] == begin, out
    assert_served(root, version, 3 * DATA_SIZE)


def assert_served(root: Path, version: str, new_min: int) -> None:
    """Every message at or after the new min offset is served at its queue offset and found by its keys."""
    truth = load_truth(dledger_case(version))
    live = [(q, m) for q in truth["queues"] for m in q["messages"] if m["commitLogOffset"] >= new_min]
    assert live
    with open_store(root) as st:
        for q, m in live:
            hit = lookup.query_queue_offset(st, q["topic"], q["queueId"], m["queueOffset"])
            assert hit.record is not None and hit.record.phy_offset == m["commitLogOffset"]
            uniq = m["properties"]["UNIQ_KEY"]
            assert [r.phy_offset for r in query_uniq(st, q["topic"], uniq).hits] == [m["commitLogOffset"]]
            for key in m["properties"].get("KEYS", "").split():
                assert m["commitLogOffset"] in {r.phy_offset for r in query_key(st, q["topic"], key).hits}


def test_a_migrated_store_expires_its_old_commitlog_part_first(tmp_path: Path) -> None:
    root, _, divided = migrated_store(tmp_path / "s")
    old = sorted((root / "commitlog").iterdir())
    data = sorted((root / "dledger-n0" / "data").iterdir())
    for f in [*old, *data[:-1]]:
        set_mtime(f, AT_04 - 100 * HOUR_MS)
    p = plan(root, AT_04)
    # the broker's own rules on the old part (never its newest file in this pass), DLedger disabled
    assert [a.rel_path for a in p.commitlog] == [f"commitlog/{f.name}" for f in old[:-1]]
    assert p.dledger is not None and p.dledger.disabled and p.dledger.file_reserved_hours == 24 * 365 * 10
    assert "deletion disabled while the old commit log part exists" in p.commitlog_stop
    q = tmp_path / "q"
    argv = ["expire", str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "--quarantine", str(q)]
    assert run(*argv)[0] == 0
    p = plan(root, AT_04)  # the old part's last file goes once it is the only one (DLedgerCommitLog)
    assert [a.rel_path for a in p.commitlog] == [f"commitlog/{old[-1].name}"]
    assert p.new_min_phy_offset == divided
    assert run(*argv)[0] == 0
    p = plan(root, AT_04)  # then DLedger deletes with the broker's settings again
    assert [a.rel_path for a in p.commitlog] == [f"dledger-n0/data/{f.name}" for f in data[:-1]]
    assert p.dledger is not None and not p.dledger.disabled and p.dledger.file_reserved_hours == 73
    assert run(*argv)[0] == 0
    r = runner.invoke(app, ["check", str(root), "-f", "json"])
    code, out = r.exit_code, r.stdout
    summary = json.loads(out)["summary"]
    # the migrated part was never dispatched in this copy: its queues are behind (a warning), nothing else
    assert summary["errors"] == 0 and code == (3 if summary["warnings"] else 0), out
    warned = [p["what"] for p in json.loads(out)["problems"] if p["severity"] == "warning"]
    assert all("not in any consume queue yet; the broker dispatches them" in w for w in warned), warned
    assert not any(os.scandir(root / "commitlog"))
