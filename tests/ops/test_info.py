"""`rmqstore info` and rmqstore.info against truth.json and against damaged copies of the real stores."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import INDEX_HEADER_FIELDS, NEWER_CASES, REAL_STORES, case_dir, copy_real_store, is_crash, load_truth
from hypothesis import example, given
from strategies import damaged
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import Record, checked_size, decode_record
from rmqstore.codec.consumequeue import ENTRY_SIZE
from rmqstore.errors import CorruptData, StoreLocked
from rmqstore.ops.info import store_info
from rmqstore.problems import ERROR, INFO, WARNING
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

CLEAN = ("clean-2topics", "delay-tx-retry")
runner = CliRunner()


def info_of(root: Path, **kw):
    with open_store(root, **kw) as st:
        return store_info(st)


def raw_queue(qdir: Path) -> tuple[int, int, int]:
    """(max queue offset, offset and size of the last entry's record), read with struct alone."""
    last_phy = last_size = -1
    max_offset = 0
    for f in sorted(qdir.iterdir()):
        data = f.read_bytes()
        for pos in range(0, len(data) - len(data) % 20, 20):
            phy, size, _ = struct.unpack_from(">qiq", data, pos)
            if phy < 0 or size <= 0:
                return int(f.name) // 20 + pos // 20, last_phy, last_size
            last_phy, last_size = phy, size
        max_offset = int(f.name) // 20 + len(data) // 20
    return max_offset, last_phy, last_size


def raw_index_header(path: Path) -> dict:
    names = ("beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount")
    return dict(zip(names, struct.unpack(">qqqqii", path.read_bytes()[:40]), strict=True))


# ---------------------------------------------------------------------------------------- truth


@pytest.mark.parametrize("case", CLEAN + tuple(c for c in NEWER_CASES if not is_crash(c)))
def test_info_matches_truth_for_clean_stores(case):
    if not case_dir(case).is_dir():
        pytest.skip("real stores not present")
    truth = load_truth(case)
    info = info_of(case_dir(case) / "store")
    assert (info.commitlog.min_phy_offset, info.commitlog.max_phy_offset) == (
        truth["minPhyOffset"],
        truth["maxPhyOffset"],
    )
    assert info.clean_shutdown and not truth["beforeOpen"]["abortExists"]
    assert not info.broker_running
    cp_truth = truth["beforeOpen"]["checkpointFile"]
    cp = info.checkpoint.to_json()
    assert {k: cp[k] for k in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")} == {
        k: cp_truth[k] for k in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")
    }
    assert {k: cp[k] for k in ("minTimestamp", "minTimestampIndex")} == {
        k: truth["recovery"]["checkpointAfterLoad"][k] for k in ("minTimestamp", "minTimestampIndex")
    }
    fields = ("topic", "queueId", "minOffset", "maxOffset", "messageTotal", "maxPhysicOffset", "lastOffset")
    # a 4.9.4 start creates the delay levels' queues in memory only (empty, no folder)
    want = [
        {k: q[k] for k in fields}
        for q in sorted(truth["queues"], key=lambda q: (q["topic"], q["queueId"]))
        if q["maxOffset"] > 0
    ]
    got = [{k: q.to_json()[k] for k in fields} for q in info.queues]
    for g, w in zip(got, want, strict=False):
        if str(w["lastOffset"]).startswith("error:"):  # the engine's own read failed (5.2.0, %LMQ% queues)
            g["lastOffset"] = w["lastOffset"]
    assert got == want
    keys = INDEX_HEADER_FIELDS
    assert [{k: f.to_json()[k] for k in keys} for f in info.index_files] == truth["indexFiles"]
    assert info.problems == ()
    # the last message of the commit log, by a full walk
    with open_store(case_dir(case) / "store") as st:
        last = [rec for _, rec in iter_commitlog(st) if hasattr(rec, "store_timestamp_ms")][-1]
    assert info.commitlog.last_store_timestamp_ms == last.store_timestamp_ms


@pytest.mark.parametrize("case", ["crash-midwrite", "4.9.4/crash-midwrite", "5.2.0/crash-5x-midwrite"])
def test_info_crash_midwrite_shows_the_state_before_recovery(case):
    if not case_dir(case).is_dir():
        pytest.skip("real stores not present")
    truth = load_truth(case)
    root = case_dir(case) / "store"
    five_one = case.startswith("4.9") or case.startswith("5.")  # maxPhysicOffset = offset + size
    info = info_of(root)
    assert info.abort_exists and not info.clean_shutdown
    # the commit log itself is not changed by recovery: its end is the same before and after
    with open_store(root) as st:
        end = max(seg.base_offset + rec.pos + rec.total_size for seg, rec in iter_commitlog(st))
    assert info.commitlog.max_phy_offset == end == truth["maxPhyOffset"]
    assert info.commitlog.min_phy_offset == 0
    assert [f.state for f in info.commitlog.files] == ["data"] * 4 + ["empty"]  # the preallocated file
    cp_truth = truth["beforeOpen"]["checkpointFile"]
    assert info.checkpoint.logics_msg_timestamp_ms == cp_truth["logicsMsgTimestamp"]
    # consume queues and index as the files are, computed without the codec
    for q in info.queues:
        max_offset, last_phy, last_size = raw_queue(root / "consumequeue" / q.topic / str(q.queue_id))
        # 4.4.0's maxPhysicOffset is the start of the last record, not its end (4.5.1+: its end)
        assert (q.min_offset, q.max_offset, q.max_physic_offset, q.last_offset) == (
            0,
            max_offset,
            last_phy + last_size if five_one else last_phy,
            last_phy + last_size,
        )
    for f in info.index_files:
        want = raw_index_header(root / "index" / f.name)
        assert {k: f.to_json()[k] for k in want} == want
    # what is odd: the abort file, and the 30 messages appended after dispatch stopped
    whats = [(p.severity, p.what) for p in info.problems]
    assert any(s == WARNING and "unclean shutdown" in w for s, w in whats)
    behind = [p for p in info.problems if "in no consume queue" in p.what]
    assert len(behind) == 1 and behind[0].what.startswith("30 message(s)")
    assert behind[0].phy_offset == max(q.last_offset for q in info.queues)
    assert info.errors() == []


def test_broker_version_changes_max_physic_offset():
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not present")
    info = info_of(REAL_STORES / "clean-2topics" / "store", broker="4.9.7")
    assert all(q.max_physic_offset == q.last_offset for q in info.queues)


def test_min_offset_follows_correct_min_offset(tmp_path):
    """After the first commit log file is gone, each queue starts at its first entry pointing into the
    remaining commit log, looked for in the first consume queue file only (4.x correctMinOffset)."""
    truth = load_truth("clean-2topics")
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "commitlog" / "00000000000000000000").unlink()
    info = info_of(root)
    assert info.commitlog.min_phy_offset == 32768
    per_file = 400 // ENTRY_SIZE
    for q in info.queues:
        entries = next(t for t in truth["queues"] if (t["topic"], t["queueId"]) == (q.topic, q.queue_id))["entries"]
        first_file = [e for e in entries if e["queueOffset"] < per_file]
        want = next((e["queueOffset"] for e in first_file if e["commitLogOffset"] >= 32768), 0)
        assert q.min_offset == want > 0
        assert q.max_offset == len(entries)


# ------------------------------------------------------------------------------------------ lock


@pytest.fixture
def broker_holding_lock(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield root, proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_info_reports_a_running_broker(broker_holding_lock):
    root, pid = broker_holding_lock
    info = info_of(root)
    assert info.broker_running and info.lock_holder_pid == pid
    assert any(p.severity == INFO and f"pid {pid}" in p.what for p in info.problems)
    assert info.verdict.result == "in use"
    result = runner.invoke(app, ["info", str(root), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["brokerRunning"], data["lockHolderPid"]) == (True, pid)


def test_writable_open_is_refused_while_a_broker_runs(broker_holding_lock):
    root, pid = broker_holding_lock
    with pytest.raises(StoreLocked) as e:
        with open_store(root, writable=True):
            pass
    assert e.value.exit_code == 4
    assert f"pid {pid}" in str(e.value)


def test_lock_released_when_the_broker_stops(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    with open_store(root, writable=True) as st:
        # while we hold it, another process sees it taken
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl,os,sys\nfd=os.open(sys.argv[1],os.O_RDWR)\n"
                "try:\n fcntl.lockf(fd, fcntl.LOCK_EX|fcntl.LOCK_NB, 1, 0); print('free')\n"
                "except OSError: print('held')",
                str(st.config.lock_path),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "held"
    assert not info_of(root).broker_running
    fd = os.open(root / "lock", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------- CLI


def test_cli_json_is_the_library_result():
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not present")
    root = REAL_STORES / "clean-2topics" / "store"
    result = runner.invoke(app, ["info", str(root), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(json.dumps(info_of(root).to_json()))


@pytest.mark.parametrize("fmt", ["plain", "table"])
def test_cli_text_sections(fmt):
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not present")
    truth = load_truth("crash-midwrite")
    result = runner.invoke(app, ["info", str(REAL_STORES / "crash-midwrite" / "store"), "--format", fmt])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for needle in ("Consume queues", "Index files", "Problems", "unclean"):
        assert needle in out
    if fmt == "plain":  # rich may wrap long cells in a table
        assert "unclean (abort file present)" in out and "not dispatched yet" in out
    assert str(truth["maxPhyOffset"]) in out
    assert result.stderr == ""


def test_cli_explicit_broker_config(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    conf = tmp_path / "other.conf"
    conf.write_text(
        "mapedFileSizeCommitLog=32768\nmapedFileSizeConsumeQueue=400\nmaxHashSlotNum=128\nmaxIndexNum=512\n"
    )
    (tmp_path / "broker.conf").unlink()
    result = runner.invoke(app, ["info", str(root), "--broker-config", str(conf), "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["brokerConfig"] == str(conf)
    assert data["commitLog"]["maxPhyOffset"] == load_truth("clean-2topics")["maxPhyOffset"]


# ------------------------------------------------------------------------------- damaged copies


def test_wrong_size_commitlog_file_is_an_error(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    victim = root / "commitlog" / "00000000000000032768"
    os.truncate(victim, 1000)
    info = info_of(root)
    assert [str(p.path) for p in info.errors()] == [str(victim)]
    result = runner.invoke(app, ["info", str(root), "-f", "plain"])
    assert result.exit_code == 3
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: 1 error(s) found; the first: ")
    assert str(victim) in first and "1000 bytes" in first


def test_stale_bytes_after_the_end_are_reported(tmp_path):
    truth = load_truth("delay-tx-retry")
    root = copy_real_store("delay-tx-retry", tmp_path)
    path = root / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    end = truth["maxPhyOffset"]
    data[end : end + 8] = struct.pack(">ii", 300, 0x0BADBEEF)  # garbage where zeros were
    path.write_bytes(data)
    info = info_of(root)
    assert info.commitlog.max_phy_offset == end
    stop = [p for p in info.problems if "ends at an invalid record" in p.what]
    assert len(stop) == 1 and (stop[0].pos, stop[0].phy_offset, stop[0].severity) == (end, end, WARNING)
    assert "magic" in stop[0].what


def test_queue_entries_past_the_commitlog_end(tmp_path):
    truth = load_truth("delay-tx-retry")
    root = copy_real_store("delay-tx-retry", tmp_path)
    qfile = root / "consumequeue" / "TopicTx" / "0" / "00000000000000000000"
    data = bytearray(qfile.read_bytes())
    struct.pack_into(">qiq", data, 20, truth["maxPhyOffset"] + 100, 200, 0)  # a second entry beyond the data
    qfile.write_bytes(data)
    info = info_of(root)
    q = next(q for q in info.queues if (q.topic, q.queue_id) == ("TopicTx", 0))
    assert (q.max_offset, q.last_offset) == (2, truth["maxPhyOffset"] + 300)
    assert any("past the commit log end" in p.what for p in info.problems)


def test_checkpoint_newer_than_the_data(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    cp = bytearray((root / "checkpoint").read_bytes())
    struct.pack_into(">q", cp, 0, 4102444800000)  # physicMsgTimestamp in 2100
    (root / "checkpoint").write_bytes(cp)
    info = info_of(root)
    assert any("physicMsgTimestamp 4102444800000 is later" in p.what for p in info.problems)


def test_truncated_checkpoint_is_an_error(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    os.truncate(root / "checkpoint", 100)
    info = info_of(root)
    assert info.checkpoint is None
    assert [(p.what, p.pos) for p in info.errors()] == [("checkpoint is 100 bytes, expected 4096", 100)]


def test_config_files(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    cfg = root / "config"
    cfg.mkdir()
    (cfg / "topics.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":1700000000000\n\t},\n\t"topicConfigTable":{\n'
        '\t\t"TopicTx":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":2,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicTx",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":2\n\t\t}\n\t}\n}'
    )
    (cfg / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n\t\t"TopicTx@g":{0:1,1:0\n\t\t}\n')  # cut short
    (cfg / "consumerOffset.json.bak").write_text('{\n\t"offsetTable":{\n\t\t"TopicTx@g":{0:1,1:0\n\t\t}\n\t}\n}')
    info = info_of(root)
    files = {c.name: c for c in info.config_files}
    assert (files["topics.json"].loaded_from, files["topics.json"].entries, files["topics.json"].bak) == (
        "file",
        1,
        False,
    )
    assert (files["consumerOffset.json"].loaded_from, files["consumerOffset.json"].entries) == ("bak", 1)
    assert [p.severity for p in info.problems if "consumerOffset.json" in str(p.path)] == [WARNING]
    assert info.errors() == []
    (cfg / "consumerOffset.json.bak").write_text("{oops")
    info = info_of(root)
    assert [c.loaded_from for c in info.config_files if c.name == "consumerOffset.json"] == ["error"]
    assert [p.severity for p in info.problems if "consumerOffset.json" in str(p.path)] == [ERROR]


def test_empty_store_directory_layout(tmp_path):
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(4096))  # preallocated, nothing written
    info = info_of(root)
    assert (info.commitlog.min_phy_offset, info.commitlog.max_phy_offset) == (0, 0)
    assert [f.state for f in info.commitlog.files] == ["empty"]
    assert info.queues == () and info.index_files == ()
    assert [p.what for p in info.problems] == ["no checkpoint file"]


def test_info_is_cheap_on_a_long_commit_log(tmp_path):
    """Only the last non-empty file is walked: damage in an earlier file is not even looked at."""
    root = copy_real_store("clean-2topics", tmp_path)
    first = root / "commitlog" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    data[100:200] = b"\xee" * 100
    first.write_bytes(data)
    start = time.perf_counter()
    info = info_of(root)
    assert time.perf_counter() - start < 5
    assert info.commitlog.walk_from_phy_offset == 98304
    assert info.commitlog.max_phy_offset == load_truth("clean-2topics")["maxPhyOffset"]


# ------------------------------------------------------------------------- the walk's record check


@given(damaged())
@example(struct.pack(">ii", 100, -626843481) + bytes(28) + struct.pack(">i", 0x30) + bytes(60))
def test_structure_check_agrees_with_decode_record(data):
    """info walks with a copy-free check; it must accept exactly what decode_record accepts."""
    buf = data + bytes(7)  # room after the record, as inside a file
    try:
        rec = decode_record(buf, 0, end=len(data))
        want = rec.total_size if isinstance(rec, Record) else None
    except CorruptData:
        want = None
    assert checked_size(buf, 0, len(data)) == want


def test_abort_written_by_a_5x_broker(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    (root / "abort").write_text("68")  # 5.x writes its pid (seen in real 5.x stores)
    info = info_of(root)
    assert (info.abort_exists, info.abort_pid) == (True, 68)
    result = runner.invoke(app, ["info", str(root), "-f", "plain"])
    assert "unclean (abort file present), written by pid 68" in result.stdout


def test_empty_queue_directory_and_empty_queue_file(tmp_path):
    root = copy_real_store("delay-tx-retry", tmp_path)
    (root / "consumequeue" / "TopicNew" / "0").mkdir(parents=True)
    (root / "consumequeue" / "TopicNew" / "1").mkdir()
    (root / "consumequeue" / "TopicNew" / "1" / "00000000000000000000").write_bytes(b"")
    info = info_of(root)
    q0, q1 = (q for q in info.queues if q.topic == "TopicNew")
    assert (q0.files, q0.min_offset, q0.max_offset, q0.last_offset) == (0, 0, 0, -1)
    assert (q1.files, q1.min_offset, q1.max_offset, q1.last_offset) == (1, 0, 0, -1)
    assert [p.what for p in info.errors()] == ["file is 0 bytes, configured size is 400 (empty last file)"]
