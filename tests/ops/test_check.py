"""`rmqstore check`: clean on the real 4.4.0 stores, and every fault of a corruption corpus found,
named with its file and byte position (computed here from the bytes and truth.json)."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest
from conftest import copy_real_store, is_crash, load_spec, load_truth
from hypothesis import given
from hypothesis import strategies as hst
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import parse_properties
from rmqstore.ops.check import CheckReport, check_store, fast_properties
from rmqstore.problems import ERROR, INFO, WARNING
from rmqstore.store import open_store

runner = CliRunner()
CL_SIZE = 32768  # the real stores' mapedFileSizeCommitLog
CQ_SIZE = 400
SLOTS, ENTRIES = 128, 512
ENTRIES_POS = 40 + SLOTS * 4


def check(root: Path, *, quick: bool = False) -> CheckReport:
    with open_store(root) as st:
        return check_store(st, quick=quick)


def matching(report: CheckReport, path: Path, pos: int | None = None, severity: str | None = None, text: str = ""):
    return [
        p
        for p in report.problems
        if Path(p.path) == path
        and (pos is None or p.pos == pos)
        and (severity is None or p.severity == severity)
        and text.lower() in p.what.lower()
    ]


def messages(case: str) -> list[dict]:
    return [r for r in load_truth(case)["commitlog"] if r["kind"] == "message"]


def log_file(root: Path, phy: int) -> tuple[Path, int]:
    base = phy - phy % CL_SIZE
    return root / "commitlog" / f"{base:020d}", phy - base


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(path: Path, pos: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))


# ------------------------------------------------------------------------------ real stores


def test_real_store_is_clean_and_forecast_matches_the_broker(any_real_store_copy):
    case, root = any_real_store_copy
    truth = load_truth(case)
    for quick in (False, True):
        report = check(root, quick=quick)
        if is_crash(case):  # never clean: the abort and the records not dispatched yet are warnings
            assert report.verdict.result == "warnings" and not report.found.get(ERROR)
            warned = [p.what for p in report.problems if p.severity == WARNING]
            assert all(w.startswith("unclean shutdown") or "not in any consume queue yet" in w for w in warned)
        else:
            assert report.clean, [str(p) for p in report.problems if p.severity != INFO]
            assert not [p for p in report.problems if p.severity in (ERROR, WARNING)]
        fc = report.recovery
        assert fc is not None
        assert fc.last_exit_ok == truth["recovery"]["lastExitOK"]
        assert fc.stop_phy_offset == truth["recovery"]["maxPhyOffsetAfterLoad"] == truth["maxPhyOffset"]
        assert fc.dropped_records == 0
        before = {f["path"] for f in truth["beforeOpen"]["files"]}
        after = {f["path"] for f in truth["afterRecovery"]["files"]}
        gone = before - after
        assert {f"commitlog/{n}" for n in fc.deleted_files} == {p for p in gone if p.startswith("commitlog/")}
        assert {f"index/{n}" for n in fc.deleted_index_files} == {p for p in gone if p.startswith("index/")}
    full = check(root)
    records = [r for r in truth["commitlog"] if r["kind"] == "message"]
    assert full.counts["records"] == len(records)
    assert full.counts["blanks"] == sum(r["kind"] == "blank" for r in truth["commitlog"])
    # a 4.9.4 start creates the delay levels' queues in memory only (empty, no folder)
    assert full.counts["queues"] == sum(q["maxOffset"] > 0 for q in truth["queues"])
    if truth["recovery"]["lastExitOK"]:  # the index truth.json shows is the one on disk
        assert full.counts["indexEntries"] == sum(f["indexCount"] - 1 for f in truth["indexFiles"])


def test_crashed_store_is_never_clean(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    report = check(root)
    assert report.verdict.result == "warnings" and not report.clean and not report.verdict.clean_shutdown
    spec = load_spec("crash-midwrite")
    dispatched = int(re.search(r"after (\d+) messages", spec["description"]).group(1))
    puts = [p for p in spec["engineResult"]["puts"] if p["status"] == "PUT_OK"]
    (undispatched,) = [p for p in report.problems if "not in any consume queue yet" in p.what]
    assert undispatched.severity == WARNING  # abnormal recovery dispatches them: nothing lost, queues behind
    assert undispatched.phy_offset == puts[dispatched]["wroteOffset"]
    assert undispatched.what.startswith(f"{len(puts) - dispatched} record(s)")
    assert matching(report, root / "abort", severity=WARNING)
    assert matching(report, root / "checkpoint", 8, INFO, "behind")  # stale logicsMsgTimestamp


# ----------------------------------------------------------------------------- commit log


def test_bit_flip_in_body_is_a_crc_error_where_recovery_stops(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    rec = next(r for r in messages("clean-2topics") if r["offset"] >= 40000)
    path, pos = log_file(root, rec["offset"])
    flip(path, pos + 88 + 3)  # IPv4 hosts: the body starts at byte 88
    report = check(root)
    (crc,) = matching(report, path, pos, ERROR, "CRC")
    assert crc.phy_offset == rec["offset"]
    # the file is inside normal recovery's last three files: the broker truncates from there
    assert report.recovery.stop_phy_offset == rec["offset"]
    later = [r for r in messages("clean-2topics") if r["offset"] >= rec["offset"]]
    assert report.recovery.dropped_records == len(later)
    assert matching(report, path, pos, ERROR, "truncates")
    quick = check(root, quick=True)
    assert matching(quick, path, pos, ERROR, "CRC")
    assert quick.recovery.stop_phy_offset == rec["offset"]


def test_bit_flip_in_magic_is_reported_and_the_walk_resyncs(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    recs = messages("clean-2topics")
    rec = recs[100]
    path, pos = log_file(root, rec["offset"])
    flip(path, pos + 5)
    report = check(root)
    assert matching(report, path, pos, ERROR, "magic")
    assert report.counts["records"] == len(recs) - 1  # every other record is still read
    # the consume queue entry of that record now points where no record starts
    q = next(
        q for q in load_truth("clean-2topics")["queues"] if (q["topic"], q["queueId"]) == (rec["topic"], rec["queueId"])
    )
    cq_byte = rec["queueOffset"] * 20
    cq_file = root / "consumequeue" / rec["topic"] / str(rec["queueId"]) / f"{cq_byte - cq_byte % CQ_SIZE:020d}"
    assert q["entries"][rec["queueOffset"]]["commitLogOffset"] == rec["offset"]
    assert matching(report, cq_file, cq_byte % CQ_SIZE, ERROR, "no record starts")


def test_header_field_flips_are_found_through_offsets_and_queues(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    recs = messages("clean-2topics")
    a, b = recs[10], recs[20]
    path_a, pos_a = log_file(root, a["offset"])
    flip(path_a, pos_a + 35)  # PHYSICALOFFSET (bytes 28-35), not covered by any CRC
    path_b, pos_b = log_file(root, b["offset"])
    flip(path_b, pos_b + 27, 0x02)  # QUEUEOFFSET (bytes 20-27)
    report = check(root)
    assert matching(report, path_a, pos_a, ERROR, "PHYSICALOFFSET")
    cq_byte = b["queueOffset"] * 20
    cq_file = root / "consumequeue" / b["topic"] / str(b["queueId"]) / f"{cq_byte - cq_byte % CQ_SIZE:020d}"
    (bad,) = matching(report, cq_file, cq_byte % CQ_SIZE, ERROR, "queue offset differ")
    assert bad.phy_offset == b["offset"]


def test_truncated_commit_log_file(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    path = root / "commitlog" / f"{2 * CL_SIZE:020d}"
    cut = 20000
    os.truncate(path, cut)
    recs = messages("clean-2topics")
    cut_record = max(r["offset"] for r in recs if r["offset"] < 2 * CL_SIZE + cut)
    report = check(root)
    assert matching(report, path, cut, ERROR, f"file is {cut} bytes")
    assert matching(report, path, cut_record - 2 * CL_SIZE, ERROR, "TOTALSIZE")
    assert matching(report, path, cut_record - 2 * CL_SIZE, ERROR, "without a BLANK")
    # 4.4.0 stops loading at the short file: recovery ends at the BLANK closing the file before it
    assert matching(report, path, cut, ERROR, "stops loading the commit log at this file")
    blank = next(r for r in load_truth("clean-2topics")["commitlog"] if r["kind"] == "blank" and CL_SIZE <= r["offset"])
    assert report.recovery.stop_phy_offset == blank["offset"]
    still_there = [r for r in recs if 2 * CL_SIZE <= r["offset"] < cut_record or r["offset"] >= 3 * CL_SIZE]
    assert report.recovery.dropped_records == len(still_there)
    with open_store(root, broker="4.9.7") as st:
        newer = check_store(st)
    assert matching(newer, path, cut, ERROR, "refuses to start")


def test_wrong_commit_log_file_name(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    good = root / "commitlog" / f"{2 * CL_SIZE:020d}"
    bad = root / "commitlog" / f"{2 * CL_SIZE + 1:020d}"
    good.rename(bad)
    report = check(root)
    assert matching(report, bad, None, ERROR, "not a multiple of the file size")
    (shift,) = matching(report, bad, 0, ERROR, "file name does not match")
    assert f"{2 * CL_SIZE:020d}" in shift.what


def test_zeroed_record_inside_the_data(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    recs = messages("clean-2topics")
    rec = recs[300]
    path, pos = log_file(root, rec["offset"])
    patch(path, pos, bytes(rec["size"]))
    report = check(root)
    assert matching(report, path, pos, ERROR, "zero bytes")
    assert report.counts["records"] == len(recs) - 1


def test_dirty_tail_is_a_warning(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    end = load_truth("clean-2topics")["maxPhyOffset"]
    path, pos = log_file(root, end)
    patch(path, pos + 100, b"\xff\x01garbage")
    report = check(root)
    (tail,) = matching(report, path, pos + 100, WARNING, "dirty tail")
    assert not [p for p in report.problems if p.severity == ERROR]
    assert report.recovery.stop_phy_offset == end and report.recovery.dropped_records == 0


# --------------------------------------------------------------------------- consume queues


def test_cq_entry_pointing_elsewhere(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    truth = load_truth("clean-2topics")
    qa = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicA", 0))
    qb = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicB", 1))
    other = qb["entries"][7]
    path = root / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    patch(path, 3 * 20, struct.pack(">qi", other["commitLogOffset"], other["size"]))
    assert qa["entries"][3]["commitLogOffset"] != other["commitLogOffset"]
    report = check(root)
    (p,) = matching(report, path, 60, ERROR, "does not match")
    assert "topic" in p.what and "queue id" in p.what and p.phy_offset == other["commitLogOffset"]


def test_cq_gap(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    path = root / "consumequeue" / "TopicA" / "1" / f"{0:020d}"
    patch(path, 5 * 20, bytes(20))
    report = check(root)
    (gap,) = matching(report, path, 100, ERROR, "gap at queue offset 5")
    q = next(q for q in load_truth("clean-2topics")["queues"] if (q["topic"], q["queueId"]) == ("TopicA", 1))
    assert f"followed by {q['maxOffset'] - 6} valid entries" in gap.what


def test_cq_entry_past_the_commit_log_and_wrong_size_file(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    truth = load_truth("clean-2topics")
    q = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicA", 0))
    byte = q["maxOffset"] * 20
    path = root / "consumequeue" / "TopicA" / "0" / f"{byte - byte % CQ_SIZE:020d}"
    patch(path, byte % CQ_SIZE, struct.pack(">qiq", truth["maxPhyOffset"] + 500, 200, 0))
    short = root / "consumequeue" / "TopicB" / "2" / f"{CQ_SIZE:020d}"
    os.truncate(short, 390)
    report = check(root)
    assert matching(report, path, byte % CQ_SIZE, ERROR, "past the end of the commit log")
    assert report.recovery.truncated_queues == 1
    assert matching(report, short, 390, ERROR, "file is 390 bytes")
    assert matching(report, short, 380, ERROR, "inside an entry")


def _expire_first_file_and_fill(root: Path) -> tuple[Path, int]:
    """Delete the first commit log file (as expiry does) and turn TopicA/0's entries that pointed
    into it into fillPreBlank fillers; returns the CQ file and how many entries were replaced."""
    (root / "commitlog" / f"{0:020d}").unlink()
    q = queue_truth("TopicA", 0)
    expired = [e for e in q["entries"] if e["commitLogOffset"] < CL_SIZE]
    assert [e["queueOffset"] for e in expired] == list(range(len(expired)))
    path = root / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    patch(path, 0, struct.pack(">qiq", 0, 0x7FFFFFFF, 0) * len(expired))
    return path, len(expired)


def queue_truth(topic: str, qid: int) -> dict:
    return next(q for q in load_truth("clean-2topics")["queues"] if (q["topic"], q["queueId"]) == (topic, qid))


def test_expired_head_with_filler_prefix_is_clean(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    _expire_first_file_and_fill(root)
    report = check(root)
    assert report.clean, [str(p) for p in report.problems if p.severity != INFO]
    assert report.counts["minPhyOffset"] == CL_SIZE


def test_filler_over_a_record_and_after_real_entries(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    path, n = _expire_first_file_and_fill(root)
    q = queue_truth("TopicA", 0)
    rec = q["entries"][n]  # the first entry that still has its record: make it a filler too
    patch(path, n * 20, struct.pack(">qiq", 0, 0x7FFFFFFF, 0))
    later = q["entries"][n + 3]
    patch(path, (n + 3) * 20, struct.pack(">qiq", 0, 0x7FFFFFFF, 0))
    report = check(root)
    (over,) = [p for p in report.problems if "filler as its consume queue entry" in p.what]
    assert over.phy_offset == rec["commitLogOffset"]
    assert matching(report, path, (n + 3) * 20, ERROR, "filler entry after real entries")
    assert later["queueOffset"] == n + 3


def test_delay_queue_tags_code_is_the_delivery_time(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    truth = load_truth("delay-tx-retry")
    q = next(q for q in truth["queues"] if q["topic"] == "SCHEDULE_TOPIC_XXXX" and q["queueId"] == 2)
    e = q["entries"][0]
    m = q["messages"][0]
    assert e["tagsCode"] == m["storeTimestamp"] + 10_000  # level 3 = 10 s
    path = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "2" / f"{0:020d}"
    patch(path, 12, struct.pack(">q", e["tagsCode"] + 1000))
    report = check(root)
    (p,) = matching(report, path, 0, ERROR, "tagsCode")
    assert str(e["tagsCode"]) in p.what  # what the record's store time and delay level give


# ----------------------------------------------------------------------------------- index


def _index_entry(root: Path, name: str, n: int) -> tuple[Path, int, tuple[int, int, int, int]]:
    path = root / "index" / name
    pos = ENTRIES_POS + n * 20
    with open(path, "rb") as f:
        f.seek(pos)
        return path, pos, struct.unpack(">iqii", f.read(20))


def test_index_entry_for_a_wrong_key(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    name = load_truth("clean-2topics")["indexFiles"][1]["name"]
    path, pos, (key_hash, phy, diff, prev) = _index_entry(root, name, 10)
    wrong = key_hash + SLOTS if key_hash + SLOTS < 2**31 else key_hash - SLOTS  # same slot: the chain stays valid
    patch(path, pos, struct.pack(">i", wrong))
    report = check(root)
    (p,) = matching(report, path, pos, ERROR, "no key with that hash")
    assert p.phy_offset == phy
    assert [x for x in report.problems if Path(x.path) == path] == [p]


def test_index_chain_and_header_faults(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    name = load_truth("clean-2topics")["indexFiles"][0]["name"]
    path, pos, (_, _, _, prev) = _index_entry(root, name, 30)
    patch(path, pos + 16, struct.pack(">i", 400))  # prev must link to an earlier entry
    patch(path, 36, struct.pack(">i", ENTRIES + 5))  # indexCount > maxIndexNum
    report = check(root)
    assert matching(report, path, pos, ERROR, "not an earlier one")
    assert matching(report, path, 36, ERROR, "indexCount")


# ---------------------------------------------------------------------- checkpoint, config


def test_checkpoint_newer_than_the_data(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    newest = max(r["storeTimestamp"] for r in messages("clean-2topics"))
    patch(root / "checkpoint", 8, struct.pack(">q", newest + 60_000))
    report = check(root)
    (p,) = matching(report, root / "checkpoint", 8, ERROR, "newer than the newest record")
    assert str(newest) in p.what


def test_checkpoint_of_wrong_size(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    os.truncate(root / "checkpoint", 100)
    assert matching(check(root), root / "checkpoint", 100, WARNING, "extends it with zeros")


def test_unparsable_config_is_named_with_its_byte(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    cfg = root / "config"
    cfg.mkdir()
    bad = b'{\n\t"dataVersion":{\n\t\t"counter":2\n\t\t"timestamp":1700000000000\n\t},\n\t"topicConfigTable":{}\n}'
    (cfg / "topics.json").write_bytes(bad)
    (cfg / "topics.json.bak").write_bytes(b'{\n\t"topicConfigTable":{\n\t\t"TopicA":{"perm":"six"}\n\t}\n}')
    (cfg / "consumerOffset.json").write_bytes(b'{\n\t"offsetTable":{\n\t\t"TopicA@G":{0:5,1:6\n\t\t}\n\t}\n}')
    report = check(root)
    (p,) = matching(report, cfg / "topics.json", bad.index(b'"timestamp"'), ERROR, "does not parse")
    assert matching(report, cfg / "topics.json.bak", None, WARNING, "does not parse")
    assert not matching(report, cfg / "consumerOffset.json", severity=ERROR)
    assert report.counts["configFiles"] == 3 and report.counts["committedOffsets"] == 2


def test_committed_offset_past_the_queue_max(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    q = next(q for q in load_truth("clean-2topics")["queues"] if (q["topic"], q["queueId"]) == ("TopicB", 3))
    (root / "config").mkdir()
    committed = q["maxOffset"] + 4
    raw = f'{{\n\t"offsetTable":{{\n\t\t"TopicB@G1":{{3:{committed}\n\t\t}}\n\t}}\n}}'.encode()
    (root / "config" / "consumerOffset.json").write_bytes(raw)
    report = check(root)
    (p,) = matching(report, root / "config" / "consumerOffset.json", raw.index(b'"TopicB@G1"'), WARNING, "past")
    assert f"max offset {q['maxOffset']}" in p.what


# -------------------------------------------------------------------------------------- CLI


def test_cli_exit_codes_and_json(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    ok = runner.invoke(app, ["check", str(root), "--format", "json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.stdout)
    assert doc["summary"]["errors"] == 0 and doc["summary"]["records"] == len(messages("clean-2topics"))
    rec = messages("clean-2topics")[50]
    path, pos = log_file(root, rec["offset"])
    flip(path, pos + 88)
    bad = runner.invoke(app, ["check", str(root), "--format", "json"])
    assert bad.exit_code == 3
    assert bad.stderr.splitlines()[0].startswith("error: check found 1 error(s), 0 warning(s)")
    doc = json.loads(bad.stdout)
    crc = [p for p in doc["problems"] if "CRC" in p["what"]]
    assert crc == [
        {
            "severity": "error",
            "path": str(path),  # machine formats: absolute
            "pos": pos,
            "phyOffset": rec["offset"],
            "what": crc[0]["what"],
        }
    ]
    plain = runner.invoke(app, ["check", str(root), "--format", "plain"])
    assert plain.exit_code == 3 and f"commitlog/{path.name}" in plain.stdout


def test_cli_quick_on_a_crashed_store(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    truth = load_truth("crash-midwrite")
    res = runner.invoke(app, ["check", str(root), "--quick", "--format", "json"])
    assert res.exit_code == 3, res.output  # a crashed store: warnings
    assert json.loads(res.stdout)["summary"]["result"] == "warnings"
    rec = json.loads(res.stdout)["summary"]["recovery"]
    assert rec["mode"] == "abnormal" and rec["lastExitOK"] is False
    assert rec["stopPhyOffset"] == truth["maxPhyOffset"]
    assert rec["startFile"] == f"{0:020d}"  # no file starts with a record older than the checkpoint


def test_cli_not_a_store(tmp_path):
    res = runner.invoke(app, ["check", str(tmp_path / "nope")])
    assert res.exit_code == 5
    assert res.stderr.splitlines()[0].startswith("error:")


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_undispatched_records_after_a_clean_stop_depend_on_the_version(tmp_path, version):
    """Without abort, 4.5.1-4.9.x catch up from the consume queues' end; 5.0-5.3.1 do not, and
    5.3.2+ dispatch them in normal recovery (§9.3)."""
    root = copy_real_store("crash-midwrite", tmp_path)
    (root / "abort").unlink()
    with open_store(root, broker=version) as st:
        report = check_store(st)
    (p,) = [p for p in report.problems if "not in any consume queue yet" in p.what]
    assert p.severity == WARNING
    with open_store(root, broker="4.4.0") as st:
        report = check_store(st)
    (p,) = [p for p in report.problems if "not in any consume queue yet" in p.what]
    assert p.severity == WARNING  # 4.4.0 resumes dispatch at the commit log end


@given(hst.text(alphabet="ab\x01\x02", max_size=24))
def test_fast_property_parsing_agrees_with_every_parser(raw):
    for broker in ("4.4.0", "4.9.7"):
        assert fast_properties(raw, broker=broker) == parse_properties(raw, broker=broker)


# ------------------------------------------------------------------ 5.x: LMQ and batch consume queues


def test_lmq_entry_naming_a_record_that_does_not_list_the_queue_is_an_error(tmp_path):
    root = copy_real_store("5.2.0/lmq-multi-dispatch", tmp_path)
    truth = load_truth("5.2.0/lmq-multi-dispatch")
    room1 = next(q for q in truth["queues"] if q["topic"] == "%LMQ%room-1")
    listed = {e["commitLogOffset"] for e in room1["entries"]}
    other = next(
        r for r in truth["commitlog"] if r["kind"] == "message" and r["offset"] not in listed and r["topic"] == "TopicA"
    )
    path = root / "consumequeue" / "%LMQ%room-1" / "0" / f"{0:020d}"
    with open(path, "r+b") as f:
        f.write(struct.pack(">qiq", other["offset"], other["size"], other["tagsCode"]))
    report = check(root)
    errors = [p for p in report.problems if p.severity == ERROR]
    assert len(errors) == 1 and errors[0].pos == 0 and "does not match the record there: topic" in errors[0].what


def test_batch_unit_pointing_between_records_is_an_error(tmp_path):
    root = copy_real_store("5.2.0/batch-cq", tmp_path)
    path = root / "batchconsumequeue" / "TopicBatchCQ" / "0" / f"{0:020d}"
    with open(path, "r+b") as f:
        f.seek(46)
        f.write(struct.pack(">q", 5))  # the second unit's commit log offset: inside the first record
    report = check(root)
    errors = [p for p in report.problems if p.severity == ERROR]
    assert [(e.path, e.pos) for e in errors] == [(path, 46)] and "no record starts" in errors[0].what


def test_crc_property_is_checked_when_the_broker_verifies_it(tmp_path):
    case = "5.2.0/crc-property"
    root = copy_real_store(case, tmp_path)
    truth = load_truth(case)
    victim = [r for r in truth["commitlog"] if r["kind"] == "message"][200]
    base = victim["offset"] - victim["offset"] % 32768
    path = root / "commitlog" / f"{base:020d}"
    pos = victim["offset"] - base
    at = path.read_bytes().index(b"WAIT\x01true", pos, pos + victim["size"])
    flip(path, at + 5)  # the WAIT value: no body CRC, tag or key covers it, the property CRC does
    conf = root.parent / "broker.conf"
    plain = check(root)
    assert plain.recovery.stop_phy_offset == truth["maxPhyOffset"]
    assert not [p for p in plain.problems if p.severity == ERROR]
    conf.write_text(conf.read_text() + "forceVerifyPropCRC=true\n")
    report = check(root)
    crc = [p for p in report.problems if "__CRC32#" in p.what]
    assert [(Path(p.path), p.pos) for p in crc] == [(path, victim["offset"] - base)]
    assert report.recovery.stop_phy_offset == victim["offset"]
