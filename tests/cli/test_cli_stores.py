"""Which stores a command works on: several and globs, a parent-of-store folder, one segment file;
check's warning for a queue directory lost with abort present; dump paging; query id --body-out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec import checkpoint
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()
SMALL = FIXTURES / "small" / "store"
CASES = sorted(p.parent.name for p in FIXTURES.glob("*/store"))


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})


def copy_small(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "small", tmp_path / "small")
    return tmp_path / "small" / "store"


# ---------------------------------------------------------------------------- several stores


def test_info_on_several_stores_and_a_glob_is_one_summary_table(tmp_path):
    r = invoke("info", str(FIXTURES / "*" / "store"), "-f", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert all(row["shutdown"] == ("clean" if "small" in row["store"] else "unclean") for row in rows)
    bad = invoke("info", str(SMALL), str(tmp_path), "-f", "json")
    assert bad.exit_code == 5 and json.loads(bad.stdout)[1]["exitCode"] == 5
    assert [Path(row["store"]).parent.name for row in rows] == CASES
    small = next(row for row in rows if "small" in row["store"])
    assert (small["minPhyOffset"], small["maxPhyOffset"], small["messages"]) == (0, 111082, 340)
    plain = invoke(
        "info", str(FIXTURES / "small" / "store"), str(FIXTURES / "crashed-cq-behind" / "store"), "-f", "plain"
    )
    assert plain.exit_code == 0, plain.output
    lines = plain.stdout.splitlines()
    assert lines[0].split()[0] == "store" and len(lines) == 3


def test_check_on_several_stores_reports_each_and_exits_with_the_worst(tmp_path):
    missing = tmp_path / "gone"
    r = invoke("check", str(SMALL), str(FIXTURES / "crashed-dirty-tail" / "store"), str(missing), "-f", "json")
    rows = json.loads(r.stdout)
    assert [row["result"] for row in rows] == ["clean", "warnings", "exit 5"]
    assert r.exit_code == 5


def test_dump_commitlog_of_several_stores_labels_each_row():
    r = invoke("dump", "commitlog", str(FIXTURES / "*" / "store"), "--count", "-f", "json")
    rows = json.loads(r.stdout)
    assert {Path(row["store"]).parent.name for row in rows} == set(CASES)
    msgs = {Path(row["store"]).parent.name: row["count"] for row in rows if row["kind"] == "message"}
    assert msgs["small"] == 340
    r = invoke("dump", "commitlog", str(SMALL), str(FIXTURES / "crashed-cq-behind" / "store"), "-f", "ndjson")
    stores = {json.loads(line)["store"] for line in r.stdout.splitlines()}
    assert stores == {str(SMALL), str(FIXTURES / "crashed-cq-behind" / "store")}


def test_a_pattern_matching_nothing_is_not_a_store(tmp_path):
    r = invoke("info", str(tmp_path / "nothing-*"))
    assert r.exit_code == 5 and "no store matches" in r.stderr


# ------------------------------------------------------------------------------ parent of store


@pytest.mark.parametrize(
    "argv",
    [
        ["info"],
        ["check"],
        ["dump", "commitlog"],
        ["dump", "index"],
        ["offsets"],
        ["recover", "--dry-run"],
        ["query", "offset"],
        ["write", "--dry-run", "--topic", "TopicA", "--body", "x"],
    ],
)
def test_a_folder_that_holds_a_store_is_refused_with_the_store_named(argv):
    extra = ["TopicA", "0", "0"] if argv[0] == "query" else []
    r = invoke(*argv, str(FIXTURES / "small"), *extra)
    assert r.exit_code == 5, r.output
    assert "not a store, but the folder that holds one" in r.stderr
    assert str(FIXTURES / "small" / "store") in r.stderr


# ------------------------------------------------------------------------------- segment files


def test_dump_one_commitlog_file_lists_only_its_records():
    seg = SMALL / "commitlog" / "00000000000000065536"
    r = invoke("dump", "commitlog", str(seg), "-f", "json", "--body", "none")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    with open_store(SMALL) as st:
        want = [rec.phy_offset for s, rec in iter_commitlog(st) if s.path.name == seg.name and hasattr(rec, "topic")]
    assert [row["commitLogOffset"] for row in rows if "msgId" in row] == want


def test_dump_one_consume_queue_file_and_paging():
    whole = json.loads(invoke("dump", "consumequeue", str(SMALL), "TopicA", "0", "-f", "json").stdout)
    entries = [row for row in whole if "commitLogOffset" in row]
    page = json.loads(
        invoke("dump", "consumequeue", str(SMALL), "TopicA", "0", "-i", "5", "--count", "7", "-f", "json").stdout
    )
    assert page == entries[5:12]
    seg = SMALL / "consumequeue" / "TopicA" / "0" / "00000000000000000400"  # queue offsets 20..39
    got = json.loads(invoke("dump", "consumequeue", str(seg), "-f", "json").stdout)
    assert [row for row in got if "commitLogOffset" in row] == [e for e in entries if 20 <= e["queueOffset"] < 40]
    r = invoke("dump", "consumequeue", str(SMALL / "commitlog" / "00000000000000000000"))
    assert r.exit_code == 1 and "dump commitlog" in r.stderr


# ----------------------------------------------------------------------------- lost queue dirs


def _abnormal_from_file(store: Path, file_index: int) -> int:
    """abort present and a checkpoint that makes abnormal recovery start at the ``file_index``-th file."""
    with open_store(store) as st:
        first = {}
        for seg, rec in iter_commitlog(st):
            if hasattr(rec, "topic"):
                first.setdefault(seg.base_offset, rec.store_timestamp_ms)
    base = sorted(first)[file_index]
    ts = first[base] + 3_000 + 1  # the recovery margin (3 s) is taken off the checkpoint time
    (store / "checkpoint").write_bytes(checkpoint.encode(checkpoint.Checkpoint(ts, ts, ts)))
    (store / "abort").write_bytes(b"")
    return base


def test_check_warns_when_a_queue_dir_is_gone_with_abort_present(tmp_path):
    store = copy_small(tmp_path)
    start = _abnormal_from_file(store, 2)
    clean = invoke("check", str(store), "-f", "json")
    summary = json.loads(clean.stdout)["summary"]
    # abort present (the only warning): the queues are all there
    assert summary["recovery"]["dispatchFrom"] == start and summary["warnings"] == 1, clean.stdout
    shutil.rmtree(store / "consumequeue" / "TopicA")
    r = invoke("check", str(store), "-f", "json")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    warned = [p for p in doc["problems"] if p["severity"] == "warning" and "missing while abort" in p["what"]]
    assert {p["path"] for p in warned} == {str(store / f"consumequeue/TopicA/{q}") for q in range(4)}
    assert all("rmqstore redispatch" in p["what"] and p["phyOffset"] < start for p in warned)
    with open_store(store) as st:
        before = sum(
            1 for _, rec in iter_commitlog(st) if getattr(rec, "topic", None) == "TopicA" and rec.phy_offset < start
        )
    assert sum(int(p["what"].split("its ")[1].split(" earlier")[0]) for p in warned) == before


def test_no_warning_without_abort(tmp_path):
    store = copy_small(tmp_path)
    shutil.rmtree(store / "consumequeue" / "TopicA")
    r = invoke("check", str(store), "-f", "json")
    assert not [p for p in json.loads(r.stdout)["problems"] if "missing while abort" in p["what"]]


# --------------------------------------------------------------------------------- body-out


def test_query_id_body_out_writes_the_body(tmp_path):
    out = tmp_path / "body.bin"
    mid = "C0A800C800002A9F0000000000000000"
    r = invoke("query", "id", str(SMALL), mid, "--body-out", str(out), "-f", "json")
    assert r.exit_code == 0, r.output
    with open_store(SMALL) as st:
        rec = next(rec for _, rec in iter_commitlog(st))
    assert out.read_bytes() == rec.decompressed_body() and rec.msg_id == mid
    assert json.loads(r.stdout)[0]["msgId"] == mid
    two = invoke("query", "id", str(SMALL), mid, "C0A800C800002A9F00000000000000D5", "--body-out", str(tmp_path / "x"))
    assert two.exit_code == 1 and "exactly one message, 2 found" in two.stderr
    assert not (tmp_path / "x").exists()


def test_dump_one_index_file():
    name = sorted(p.name for p in (SMALL / "index").iterdir())[-1]
    one = json.loads(invoke("dump", "index", str(SMALL / "index" / name), "-f", "json").stdout)
    every = json.loads(invoke("dump", "index", str(SMALL), "-f", "json").stdout)
    assert one == [row for row in every if row["name"] == name] and len(every) == 2
    entries = invoke("dump", "index", str(SMALL / "index" / name), "--entries", "-f", "ndjson").stdout.splitlines()
    all_entries = invoke("dump", "index", str(SMALL), "--entries", "-f", "ndjson").stdout.splitlines()
    assert entries == [e for e in all_entries if json.loads(e)["file"] == name] and 0 < len(entries) < len(all_entries)


def test_body_out_dash_writes_the_raw_body_to_stdout():
    r = runner.invoke(app, ["query", "id", str(SMALL), "C0A800C800002A9F0000000000000000", "--body-out", "-"])
    assert r.exit_code == 0, r.output
    with open_store(SMALL) as st:
        rec = next(rec for _, rec in iter_commitlog(st))
    assert r.stdout_bytes == rec.decompressed_body()
