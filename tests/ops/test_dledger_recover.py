"""recover on DLedger stores crashed and damaged on purpose (copies of the real 4.9.4 and 5.2.0 DLedger
stores): every intact record is served afterwards, the member's index holds one unit per entry kept
and its checkpoint names the last one, the quarantine holds every byte removed, and the store is
checked clean."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from conftest import (
    copy_real_store,
    dledger_case,
    dledger_crashed,
    dledger_torn_tail,
    load_truth,
)
from test_recover import assert_serves, served
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.dledger import DLEDGER, INDEX_UNIT_SIZE, parse_member_file
from rmqstore.store import open_store
from rmqstore.store.dledger import DLedgerIndex
from rmqstore.store.layout import Segment
from rmqstore.walk.dledger import entry_findings, iter_entries

runner = CliRunner()
VERSIONS = ("4.9.4", "5.2.0")


def run(*argv: str) -> tuple[int, str]:
    r = runner.invoke(app, list(argv))
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r.exit_code, r.output


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.resolve()): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}


def assert_kept_in_quarantine(qbase: Path, before: dict[str, bytes]) -> None:
    """Every byte range and file the run removed or replaced is in the quarantine, as it was."""
    (manifest,) = qbase.glob("*/manifest.json")
    items = json.loads(manifest.read_text())["items"]
    assert items
    for item in items:
        if item["kind"] == "range":
            assert Path(item["saved"]).read_bytes() == before[item["path"]][item["from"] : item["to"]]
        elif item["kind"] == "file":
            assert Path(item["saved"]).read_bytes() == before[item["path"]]


def member(root: Path) -> dict[str, str]:
    return parse_member_file((root / "dledger-n0" / "checkpoint").read_text())


def assert_member_agrees(root: Path, last_index: int) -> None:
    """The member's checkpoint names the last entry kept, and its index has one unit per entry, no more."""
    assert member(root) == {"committedIndex": str(last_index), "endIndex": str(last_index)}
    with open_store(root) as st:
        segs, _ = st.commitlog_segments()
        entries = [e for e in iter_entries(segs) if e.kind == "entry"]
        with DLedgerIndex(st.config) as index:
            assert list(entry_findings(entries, index)) == []
            assert entries[-1].header is not None and entries[-1].header.index == last_index
            assert index.write_pos() == (last_index + 1) * INDEX_UNIT_SIZE


def recover_checked(root: Path, q: Path, version: str = "auto") -> str:
    before = snapshot(root)
    code, out = run("recover", str(root), "-q", "--quarantine", str(q), "--broker-version", version)
    assert code == 0, out
    code, out2 = run("check", str(root))
    assert code == 0, out2
    assert_kept_in_quarantine(q, before)
    code, again = run("recover", str(root), "-q", "--dry-run", "-f", "json")
    assert code == 0 and json.loads(again)["summary"]["steps"] == [], again
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_torn_last_entry_is_cut_and_everything_else_served(tmp_path: Path, version: str) -> None:
    root, last = dledger_torn_tail(tmp_path / "s", version)
    recover_checked(root, tmp_path / "q")
    truth = load_truth(dledger_case(version))
    assert_serves(root, truth, without={last["pos"] + 48})
    assert_member_agrees(root, last["index"] - 1)
    seg = root / "dledger-n0" / "data" / f"{last['pos'] // 32768 * 32768:020d}"
    assert not any(seg.read_bytes()[last["pos"] % 32768 :])  # the torn entry is gone, zeros left


@pytest.mark.parametrize("version", VERSIONS)
def test_deleted_consume_queue_with_abort_is_rebuilt(tmp_path: Path, version: str) -> None:
    root = dledger_crashed(tmp_path / "s", version)
    last = load_truth(dledger_case(version))["dledger"]["entries"][-1]
    out = recover_checked(root, tmp_path / "q")
    assert "abnormal" in out
    assert not (root / "abort").exists()
    assert_serves(root, load_truth(dledger_case(version)), without={last["pos"] + 48})
    assert_member_agrees(root, last["index"] - 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_data_file_is_filled_up_and_cut_at_its_last_whole_entry(tmp_path: Path, version: str) -> None:
    case = dledger_case(version)
    root = copy_real_store(case, tmp_path / "s")
    truth = load_truth(case)
    seg = root / "dledger-n0" / "data" / "00000000000000098304"
    with open(seg, "r+b") as f:
        f.truncate(20000)  # a copy cut short, in the middle of an entry
    end = 98304 + 20000
    gone = {e["pos"] + 48 for e in truth["dledger"]["entries"] if e["pos"] + e["size"] > end}
    kept = [e for e in truth["dledger"]["entries"] if e["pos"] + e["size"] <= end]
    recover_checked(root, tmp_path / "q")
    assert seg.stat().st_size == 32768  # DLedger loads full-size data files only
    assert_serves(root, truth, without=gone)
    assert_member_agrees(root, kept[-1]["index"])


def test_broken_index_units_are_rewritten(tmp_path: Path) -> None:
    case = dledger_case("4.9.4")
    root = copy_real_store(case, tmp_path / "s")
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    buf = bytearray(index.read_bytes())
    buf[10 * 32 : 12 * 32] = b"\xff" * 64  # units of entries 10 and 11
    index.write_bytes(bytes(buf))
    code, out = run("recover", str(root), "-q", "--dry-run")
    assert code == 0 and "rewrite" in out and "disagree" in out, out
    recover_checked(root, tmp_path / "q")
    assert index.read_bytes() == (copy_real_store(case, tmp_path / "orig") / index.relative_to(root)).read_bytes()


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    root = dledger_crashed(tmp_path / "s", "4.9.4")
    before = snapshot(root)
    code, out = run(
        "recover", str(root), "-q", "--dry-run", "--quarantine", str(tmp_path / "q"), "--broker-version", "4.9.4"
    )
    assert code == 0, out
    assert "member-checkpoint" in out and "dledger-index" in out
    assert snapshot(root) == before and not (tmp_path / "q").exists()


@pytest.mark.parametrize("where", ["index", "term"])
def test_entry_out_of_sequence_is_refused_with_its_place(tmp_path: Path, where: str) -> None:
    """DLedger's recovery truncates the log at such an entry and every entry after it: recover refuses."""
    root = copy_real_store(dledger_case("4.9.4"), tmp_path / "s")
    truth = load_truth(dledger_case("4.9.4"))
    e = truth["dledger"]["entries"][120]
    seg = root / "dledger-n0" / "data" / f"{e['pos'] // 32768 * 32768:020d}"
    at = e["pos"] % 32768
    buf = bytearray(seg.read_bytes())
    if where == "index":
        buf[at + 8 : at + 16] = struct.pack(">q", 7)
    else:
        for x in truth["dledger"]["entries"][:120]:  # earlier entries of a later term
            if x["pos"] // 32768 * 32768 == int(seg.name):
                buf[x["pos"] % 32768 + 16 : x["pos"] % 32768 + 24] = struct.pack(">q", 3)
    seg.write_bytes(bytes(buf))
    before = snapshot(root)
    code, out = run("recover", str(root), "-q")
    assert code == 6, out
    line = out.strip().splitlines()[-1]
    assert str(seg.name) in line and f"byte {at}" in line
    assert ("expected 120" in line) if where == "index" else ("lower than the previous entry's 3" in line)
    assert snapshot(root) == before


@pytest.mark.parametrize("damage", ["magic", "size"])
def test_damaged_entry_inside_the_log_is_refused_with_its_place(tmp_path: Path, damage: str) -> None:
    """A bad entry followed by intact ones is not a torn tail: nothing is cut, the line says where and why."""
    root = copy_real_store(dledger_case("5.2.0"), tmp_path / "s")
    e = load_truth(dledger_case("5.2.0"))["dledger"]["entries"][30]
    seg = root / "dledger-n0" / "data" / f"{e['pos'] // 32768 * 32768:020d}"
    at = e["pos"] % 32768
    buf = bytearray(seg.read_bytes())
    buf[at : at + 8] = struct.pack(">ii", 7, e["size"]) if damage == "magic" else struct.pack(">ii", 1, 1 << 20)
    seg.write_bytes(bytes(buf))
    before = snapshot(root)
    code, out = run("recover", str(root), "-q")
    assert code == 6, out
    line = out.strip().splitlines()[-1]
    assert seg.name in line and f"byte {at}" in line and "not a torn tail" in line
    assert ("expected 1" in line) if damage == "magic" else ("at most the" in line)
    assert snapshot(root) == before
    for cmd in (["check", str(root)], ["dump", "commitlog", str(root), "--count"]):
        code, out = run(*cmd)
        assert code in (3, 6), out
        assert f"{seg.name} at byte {at}" in out, out


# -- a migrated store: a plain commit log first, then DLedger entries -------------------------------


def migrated_store(tmp: Path) -> tuple[Path, dict[tuple[str, int], int], int]:
    """The real 4.9.4 plain store clean-2topics, then switched to DLedger mode as DLedgerCommitLog.recover
    does it: the old last file closed with a plain blank, the DLedger data files starting at
    dividedCommitlogOffset (the end of that file), holding the entries of the real DLedger store moved
    there (positions, physical and queue offsets following the plain part); the DLedger records never
    reached the consume queues and the index (the broker died before dispatching them).
    Returns the root, the plain part's queue sizes and dividedCommitlogOffset."""
    root = copy_real_store("4.9.4/clean-2topics", tmp)
    src = copy_real_store(dledger_case("4.9.4"), tmp / "src")
    plain = load_truth("4.9.4/clean-2topics")
    shutil.copy2(src.parent / "broker.conf", root.parent / "broker.conf")
    files = sorted((root / "commitlog").iterdir())
    end = plain["maxPhyOffset"] - int(files[-1].name)
    with open(files[-1], "r+b") as f:
        f.seek(end)
        f.write(struct.pack(">iI", 32768 - end, 0xCBD43194))
    divided = int(files[-1].name) + 32768
    sizes = {(q["topic"], q["queueId"]): q["maxOffset"] for q in plain["queues"]}
    shutil.copytree(src / "dledger-n0", root / "dledger-n0")
    data = root / "dledger-n0" / "data"
    for seg in sorted(data.iterdir()):
        buf = bytearray(seg.read_bytes())
        for e in iter_entries([_seg(seg)]):
            if e.kind != "entry":
                continue
            at = e.pos
            struct.pack_into(">q", buf, at + 24, e.header.pos + divided)  # type: ignore[union-attr]
            rec = at + 48
            qid = struct.unpack_from(">i", buf, rec + 12)[0]
            tlen = buf[rec + _topic_at(buf, rec)]
            topic = bytes(buf[rec + _topic_at(buf, rec) + 1 : rec + _topic_at(buf, rec) + 1 + tlen]).decode()
            qoff = struct.unpack_from(">q", buf, rec + 20)[0]
            struct.pack_into(">qq", buf, rec + 20, qoff + sizes.get((topic, qid), 0), e.header.pos + divided + 48)  # type: ignore[union-attr]
        seg.unlink()
        (data / f"{int(seg.name) + divided:020d}").write_bytes(bytes(buf))
    for ixf in (root / "dledger-n0" / "index").iterdir():
        buf = bytearray(ixf.read_bytes())
        for at in range(0, len(buf), 32):
            if any(buf[at : at + 32]):
                struct.pack_into(">q", buf, at + 4, struct.unpack_from(">q", buf, at + 4)[0] + divided)
        ixf.write_bytes(bytes(buf))
    shutil.rmtree(tmp / "src")
    return root, sizes, divided


def _seg(p: Path) -> Segment:
    return Segment(p, int(p.name), p.stat().st_size, DLEDGER)


def _topic_at(buf: bytearray, rec: int) -> int:
    """Offset of the topic length byte inside the record at ``rec`` (IPv4 hosts, as these stores hold)."""
    body_len = struct.unpack_from(">i", buf, rec + 84)[0]
    return 88 + body_len


def uniq(message: dict) -> str:
    return message["properties"]["UNIQ_KEY"]


def test_migrated_store_recovers_both_parts(tmp_path: Path) -> None:
    root, sizes, divided = migrated_store(tmp_path / "s")
    dl = load_truth(dledger_case("4.9.4"))
    last = dl["dledger"]["entries"][-1]
    seg = root / "dledger-n0" / "data" / f"{last['pos'] // 32768 * 32768 + divided:020d}"
    buf = bytearray(seg.read_bytes())
    at = last["pos"] % 32768
    buf[at + 48 + 80 : at + last["size"]] = bytes(last["size"] - 48 - 80)  # and a torn last entry
    seg.write_bytes(bytes(buf))
    recover_checked(root, tmp_path / "q")
    plain = load_truth("4.9.4/clean-2topics")
    want: dict[tuple[str, int], list[str]] = {}
    for q in plain["queues"]:
        want[(q["topic"], q["queueId"])] = [uniq(m) for m in q["messages"]]
    for q in dl["queues"]:
        want.setdefault((q["topic"], q["queueId"]), [])
        want[(q["topic"], q["queueId"])] += [uniq(m) for m in q["messages"] if m["commitLogOffset"] != last["pos"] + 48]
    code, out = run("dump", "commitlog", str(root), "-f", "ndjson")
    assert code == 0, out
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    got: dict[tuple[str, int], list[str]] = {}
    for r in (r for r in rows if "topic" in r):  # blanks are rows too
        got.setdefault((r["topic"], r["queueId"]), []).append(uniq(r))
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    for (topic, qid), (max_offset, msgs) in served(root).items():
        assert [uniq(m) for m in msgs] == want[(topic, qid)], (topic, qid)
        assert max_offset == len(want[(topic, qid)])
    assert_member_agrees(root, last["index"] - 1)
