"""One verdict for `info` and `check`, and dry runs that predict the real run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import copy_real_store, hold_lock, is_crash
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import Blank
from rmqstore.ops.check import check_store
from rmqstore.ops.info import store_info
from rmqstore.problems import ERROR, WARNING
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def test_info_and_check_give_the_same_verdict(any_real_store_copy):
    case, root = any_real_store_copy
    with open_store(root) as st:
        seen = store_info(st).verdict
        quick, full = check_store(st, quick=True).verdict, check_store(st).verdict
    assert seen.result == quick.result == full.result
    assert seen.clean_shutdown == full.clean_shutdown and not seen.broker_running
    assert full.result == ("warnings" if is_crash(case) else "clean")


def test_a_crashed_store_is_never_clean(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    info = json.loads(cli("info", str(root), "-f", "json").stdout)
    r = cli("check", str(root), "-f", "json")
    summary = json.loads(r.stdout)["summary"]
    assert r.exit_code == 3 and r.stderr.startswith("error: check found 0 error(s), 2 warning(s)")
    assert info["verdict"]["result"] == summary["result"] == "warnings"
    assert info["verdict"]["warnings"] == summary["warnings"] == 2
    assert (summary["cleanShutdown"], info["cleanShutdown"]) == (False, False)
    other = copy_real_store("crash-midwrite", tmp_path / "b")
    many = cli("check", str(root), str(other), "-f", "json")
    assert [row["result"] for row in json.loads(many.stdout)] == ["warnings"] * 2 and many.exit_code == 3
    plain = cli("info", str(root), str(other), "-f", "plain")
    assert plain.stdout.splitlines()[1].split()[1:3] == ["warnings", "unclean"]


def test_a_store_only_in_use_is_reported_as_such(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    broker = hold_lock(root)
    try:
        r = cli("check", str(root), "-f", "json")
        info = cli("info", str(root), "-f", "json")
    finally:
        broker.kill()
        broker.wait()
    summary = json.loads(r.stdout)["summary"]
    assert (summary["result"], summary["errors"], summary["warnings"], summary["brokerRunning"]) == (
        "in use", 0, 0, True,
    )  # fmt: skip
    assert r.exit_code == 4 and f"in use by a running broker (pid {broker.pid})" in r.stderr
    assert "problems" not in r.stderr and "warning(s)" not in r.stderr
    assert info.exit_code == 0 and json.loads(info.stdout)["verdict"]["result"] == "in use"


def test_cq_entries_are_entries_not_slots(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    summary = json.loads(cli("check", str(root), "-f", "json").stdout)["summary"]
    with open_store(root) as st:
        messages = sum(q.message_total for q in store_info(st).queues)
    assert summary["cqEntries"] == messages == 400
    assert summary["cqSlots"] > summary["cqEntries"]  # the preallocated rest of the last files
    plan = json.loads(cli("redispatch", str(root), "--dry-run", "-q", "-f", "json").stdout)
    assert plan["summary"]["cqEntries"] == summary["records"]  # every record gets its entry back


def test_paths_relative_in_human_formats_absolute_in_machine_ones(tmp_path, monkeypatch):
    copy_real_store("crash-midwrite", tmp_path)
    monkeypatch.chdir(tmp_path)
    for cmd in ("check", "info"):
        rows = [ln for ln in cli(cmd, "store", "-f", "plain").stdout.splitlines() if ln.startswith(("warning", "info"))]
        assert rows and not [ln for ln in rows if str(tmp_path) in ln]
        assert {ln.split()[1] for ln in rows} >= {"abort"}
    rows = json.loads(cli("check", "store", "-f", "json").stdout)["problems"]
    assert rows and all(os.path.isabs(p["path"]) and p["path"].startswith(str(tmp_path)) for p in rows)
    csv = cli("check", "store", "-f", "csv").stdout.splitlines()[1:]
    assert csv and all(line.split(",")[1].startswith(str(tmp_path)) for line in csv)
    info = json.loads(cli("info", "store", "-f", "json").stdout)
    assert info["store"] == str(tmp_path / "store") and all(os.path.isabs(p["path"]) for p in info["problems"])


# ----------------------------------------------------------- what the dry run and check predict


def _rename_pending_topic(root: Path, new: bytes) -> int:
    """Give the records not dispatched yet (past every consume queue) of TopicA the topic ``new``
    (same length, so each record stays whole)."""
    with open_store(root) as st:
        (lo,) = [p.phy_offset for p in check_store(st).problems if "not in any consume queue yet" in p.what]
        size = st.config.commitlog_file_size
        places = [
            (rec.phy_offset, len(rec.body))
            for _, rec in iter_commitlog(st)
            if not isinstance(rec, Blank) and rec.phy_offset >= lo and rec.topic == "TopicA"
        ]
    for phy, body in places:
        f = root / "commitlog" / f"{phy - phy % size:020d}"
        at = phy % size + 89 + body  # V1 record: the topic follows the body and its 1-byte length
        with open(f, "r+b") as out:
            out.seek(at)
            assert out.read(6) == b"TopicA"
            out.seek(at)
            out.write(new)
    return len(places)


@pytest.mark.parametrize("topic", [b"Topi/A", b"../abc"])
def test_dry_run_and_check_refuse_what_recover_refuses(tmp_path, topic):
    root = copy_real_store("crash-midwrite", tmp_path)
    assert _rename_pending_topic(root, topic) > 0
    dry = cli("recover", str(root), "--dry-run", "-q")
    checked = cli("check", str(root), "-f", "json")
    real = cli("recover", str(root), "-q", "--quarantine", str(tmp_path / "q"))
    assert dry.exit_code == real.exit_code == 6
    line = dry.stderr.splitlines()[-1]
    assert line.startswith("error: ") and "is not a topic name the broker accepts" in line
    assert real.stderr.splitlines()[-1].startswith(line)  # the run adds that it rolled back
    assert checked.exit_code == 3
    (bad,) = [p for p in json.loads(checked.stdout)["problems"] if "not a topic name" in p["what"]]
    assert bad["severity"] == ERROR and bad["phyOffset"] == int(line.split("phy offset ")[1].rstrip(")"))
    assert (root / "abort").exists()  # nothing was changed


def test_check_warns_no_more_than_info(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    with open_store(root) as st:
        info = {(Path(p.path).name, p.severity) for p in store_info(st).problems}
        full = {(Path(p.path).name, p.severity) for p in check_store(st).problems if p.severity == WARNING}
    assert ("abort", WARNING) in info and ("abort", WARNING) in full
    assert len(full) == len(info)
