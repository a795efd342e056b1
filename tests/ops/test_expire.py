"""`rmqstore expire` against the broker's clean rules (store-format.md §10, §5.5) on copies of the real stores.

Expected deletions are derived in the tests themselves: commit log files from the mtimes the
test sets and from truth.json (which file holds the newest data), consume queue files from
truth.json's entries and the files' own bytes, index files from truth.json's indexFiles; never
from the code under test.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import importlib
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, REAL_CASES, copy_real_store, hold_lock, load_truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.cli.expire import CRONTAB_EXAMPLE
from rmqstore.codec.commitlog import Blank, decode_record
from rmqstore.codec.indexfile import IndexFile, is_time_matched
from rmqstore.errors import ConfigError, InputError
from rmqstore.ops import expire as ex
from rmqstore.store import open_store
from rmqstore.store.files import map_file
from rmqstore.walk import expiry
from rmqstore.walk.chain import iter_commitlog

HOUR_MS = 3_600_000
CL_SIZE = 32768  # mapedFileSizeCommitLog of the real stores
LONG_MAX = 2**63 - 1
runner = CliRunner()


def local_ms(hour: int, minute: int = 30) -> int:
    """A fixed day at ``hour:minute`` local time (the broker's deleteWhen hour is local)."""
    return int(dt.datetime(2030, 1, 15, hour, minute).timestamp() * 1000)


AT_04 = local_ms(4)  # inside the default deleteWhen "04"
AT_05 = local_ms(5)  # outside it


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def cl_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def age_commitlog(root: Path, ages_h: list[float], now_ms: int) -> None:
    """Give commit log file i the age ages_h[i] hours (the rest 1 hour)."""
    for i, f in enumerate(cl_files(root)):
        set_mtime(f, int(now_ms - (ages_h[i] if i < len(ages_h) else 1) * HOUR_MS))


def plan(root: Path, now_ms: int, *, ratio: float = 0.10, broker: str | None = None, force: bool = False, **kw):
    disk = ratio if callable(ratio) else (lambda _p: ratio)
    with open_store(root, broker=broker) as st:
        settings = expiry.expire_settings(st.config, **kw)
        return expiry.plan_expire(st, now_ms=now_ms, settings=settings, force=force, disk_usage=disk)


def names(actions) -> list[str]:
    return [a.rel_path for a in actions]


def cl_names(offsets: list[int]) -> list[str]:
    return [f"commitlog/{o:020d}" for o in offsets]


# -- expectations derived from truth.json and the bytes ----------------------------------------


def newest_data_file(case: str) -> int:
    """Base offset of the commit log file holding the last record the engine recovered."""
    last = max(r["offset"] for r in load_truth(case)["commitlog"])
    return last - last % CL_SIZE


def expected_cq(case: str, root: Path, new_min: int) -> list[str]:
    """§10.2 by hand: per queue, every file but the last whose last entry points below new_min."""
    truth = load_truth(case)
    per_file = truth["config"]["mapedFileSizeConsumeQueue"] // 20
    out = []
    for q in truth["queues"]:
        rel = f"consumequeue/{q['topic']}/{q['queueId']}"
        by_queue_offset = {e["queueOffset"]: e["commitLogOffset"] for e in q["entries"]}
        files = sorted(os.listdir(root / rel))
        for name in files[:-1]:
            data = (root / rel / name).read_bytes()
            (last_phy,) = struct.unpack_from(">q", data, len(data) - 20)
            assert last_phy == by_queue_offset[int(name) // 20 + per_file - 1]  # bytes agree with the engine
            if last_phy >= new_min:
                break
            out.append(f"{rel}/{name}")
    return sorted(out)


def expected_index(case: str, new_min: int) -> list[str]:
    """§5.5 by hand on the engine's index file list."""
    files = load_truth(case)["indexFiles"]
    if not files or files[0]["endPhyOffset"] >= new_min:
        return []
    out = []
    for f in files[:-1]:
        if f["endPhyOffset"] >= new_min:
            break
        out.append(f"index/{f['name']}")
    return out


def query(root: Path, topic: str, key: str, min_phy: int) -> list[int]:
    """queryMessage(topic, key, 64, 0, Long.MAX) through the index files on disk (§5.4), with
    the client's key filter, skipping offsets whose commit log file is gone."""
    found: list[int] = []
    for p in sorted((root / "index").iterdir(), reverse=True):
        with map_file(p) as buf:
            f = IndexFile(buf, slots=128, entries=512, path=str(p))
            h = f.header()
            if is_time_matched(h, 0, LONG_MAX):
                f.select_phy_offsets(f"{topic}#{key}", max_num=64, begin_ms=0, end_ms=LONG_MAX, found=found)
            if h.begin_timestamp_ms < 0 or len(found) >= 64:
                break
    hits = set()
    for phy in found:
        if phy < min_phy:
            continue
        seg = root / "commitlog" / f"{phy - phy % CL_SIZE:020d}"
        with map_file(seg) as buf:
            rec = decode_record(buf, phy % CL_SIZE, path=str(seg), file_from=phy - phy % CL_SIZE)
        if rec.topic == topic and (key in (rec.keys or "").split(" ") or rec.uniq_key == key):
            hits.add(phy)
    return sorted(hits)


def check_store_after(case: str, root: Path, new_min: int) -> None:
    """The store left behind still reads as the engine served it (records, queues, index queries)."""
    truth = load_truth(case)
    want = [
        (r["offset"], r["kind"], r["size"], r.get("topic"), r.get("queueOffset"), r.get("storeTimestamp"))
        for r in truth["commitlog"]
        if r["offset"] >= new_min
    ]
    got = []
    with open_store(root) as st:
        for seg, rec in iter_commitlog(st, check_crc=True):
            if isinstance(rec, Blank):
                got.append((rec.phy_offset, "blank", rec.total_size, None, None, None))
            else:
                phy = seg.base_offset + rec.pos
                got.append((phy, "message", rec.total_size, rec.topic, rec.queue_offset, rec.store_timestamp_ms))
    assert got == want
    for q in truth["queues"]:
        qdir = root / "consumequeue" / q["topic"] / str(q["queueId"])
        first = sorted(qdir.iterdir())[0]
        data = first.read_bytes()
        base = int(first.name) // 20
        live = [e for e in q["entries"] if e["commitLogOffset"] >= new_min]
        # correctMinOffset (4.x): first entry of the first file at or above the min offset.
        min_queue_offset = next(
            (base + i for i in range(len(data) // 20) if struct.unpack_from(">q", data, i * 20)[0] >= new_min), None
        )
        if live and live[0]["queueOffset"] < base + len(data) // 20:
            assert min_queue_offset == live[0]["queueOffset"], (q["topic"], q["queueId"])
        for e in q["entries"]:
            pos = (e["queueOffset"] - base) * 20
            if 0 <= pos < len(data) and struct.unpack_from(">q", data, pos)[0] != 0:
                assert struct.unpack_from(">qiq", data, pos) == (e["commitLogOffset"], e["size"], e["tagsCode"])


# -- commit log, consume queue and index selection ----------------------------------------------


@pytest.mark.parametrize("case", REAL_CASES)
def test_all_old_files_go_but_the_newest_as_the_engine_would(case, tmp_path):
    root = copy_real_store(case, tmp_path)
    before = {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    age_commitlog(root, [100] * 10, AT_04)
    newest = newest_data_file(case)
    want_cl = [o for o in range(0, newest, CL_SIZE)]  # every file before the one holding the newest data
    p = plan(root, AT_04)
    assert p.triggers.time and not p.triggers.space and not p.triggers.manual
    assert names(p.commitlog) == cl_names(want_cl)
    assert p.new_min_phy_offset == newest
    want_cq = expected_cq(case, root, newest) if newest else []
    want_index = expected_index(case, newest) if newest else []
    assert sorted(names(p.consumequeue)) == want_cq
    assert names(p.index) == want_index
    if case != "delay-tx-retry":
        assert want_cq and want_index  # the case exercises all three kinds

    result = ex.apply_expire(p)
    assert names(result.done) == names(p.actions)
    after = {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    gone = {Path(n) for n in cl_names(want_cl) + want_cq + want_index}
    assert before - after == gone
    assert after - before <= {Path(".rmqstore")} | {x for x in after if x.parts[0] == ".rmqstore"}
    check_store_after(case, root, newest)
    # A second run at the same time has nothing left to do.
    assert plan(root, AT_04).nothing_to_do


def test_index_queries_after_expiry_match_the_engine(tmp_path):
    case = "clean-2topics"
    root = copy_real_store(case, tmp_path)
    queries = load_truth(case)["queries"]
    for q in queries:  # the query helper itself reproduces the engine before expiry
        assert query(root, q["topic"], q["key"], 0) == sorted(h["commitLogOffset"] for h in q["hits"]), q
    age_commitlog(root, [100, 100, 100], AT_04)
    p = plan(root, AT_04)
    ex.apply_expire(p)
    assert names(p.index)  # some index files went
    checked = 0
    for q in queries:
        want = sorted(h["commitLogOffset"] for h in q["hits"] if h["commitLogOffset"] >= p.new_min_phy_offset)
        assert query(root, q["topic"], q["key"], p.new_min_phy_offset) == want, q
        checked += bool(want)
    assert checked > 100


def test_stops_at_the_first_file_kept_no_holes(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 1, 100, 100], AT_04)
    p = plan(root, AT_04)
    assert names(p.commitlog) == cl_names([0])
    assert "kept 00000000000000032768" in p.commitlog_stop
    assert p.new_min_phy_offset == CL_SIZE
    assert sorted(names(p.consumequeue)) == expected_cq("clean-2topics", root, CL_SIZE)
    assert names(p.index) == expected_index("clean-2topics", CL_SIZE) == []


def test_expiry_boundary_is_mtime_plus_file_reserved_time(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [], AT_04)
    f0, f1 = cl_files(root)[:2]
    set_mtime(f0, AT_04 - 72 * HOUR_MS)  # now >= mtime + 72h: expired
    set_mtime(f1, AT_04 - 72 * HOUR_MS + 1)  # one ms short
    assert names(plan(root, AT_04).commitlog) == cl_names([0])
    conf = root.parent / "broker.conf"
    conf.write_text(conf.read_text() + "fileReservedTime=10\n")
    set_mtime(f0, AT_04 - 11 * HOUR_MS)
    set_mtime(f1, AT_04 - 9 * HOUR_MS)
    assert names(plan(root, AT_04).commitlog) == cl_names([0])
    assert names(plan(root, AT_04, file_reserved_time_h=8).commitlog) == cl_names([0, CL_SIZE])


def test_time_trigger_and_manual_mode(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100, 1], AT_05)
    p = plan(root, AT_05)
    assert p.nothing_to_do and not p.triggers.triggered
    assert p.commitlog_stop.startswith("not triggered: local hour 05 is not in deleteWhen '04'")
    assert names(plan(root, AT_05, force=True).commitlog) == cl_names([0, CL_SIZE])
    assert names(plan(root, AT_05, delete_when="01;05").commitlog) == cl_names([0, CL_SIZE])
    assert names(plan(root, AT_05, delete_when="5").commitlog) == cl_names([0, CL_SIZE])  # parseInt("5")
    assert plan(root, AT_05, delete_when="04;16").nothing_to_do
    at_16 = local_ms(16)
    age_commitlog(root, [100, 100, 1], at_16)
    assert names(plan(root, at_16, delete_when="04;16").commitlog) == cl_names([0, CL_SIZE])


@pytest.mark.parametrize("value", [" 04", "4a", "", ";04", "04;;16x"])
def test_delete_when_java_cannot_parse_is_refused(value):
    with pytest.raises(ConfigError):
        expiry.parse_delete_when(value)


def test_delete_when_parsing_matches_java_split():
    assert expiry.parse_delete_when("04") == (4,)
    assert expiry.parse_delete_when("04;16") == (4, 16)
    assert expiry.parse_delete_when("04;16;") == (4, 16)  # trailing empty strings are dropped by String.split
    assert expiry.parse_delete_when("+4") == (4,)


# Ages: file 0 expired, files 1-2 fresh, file 3 newest. At 05:30 (not a deleteWhen hour) unless noted.
SPACE_CASES = [
    # broker, physic ratio, logics ratio, overrides, at, expected commit log files deleted
    ("4.4.0", 0.50, 0.50, {}, AT_05, []),
    ("4.4.0", 0.80, 0.50, {}, AT_05, [0]),  # above diskMaxUsedSpaceRatio 75: expired files only
    ("4.4.0", 0.50, 0.80, {}, AT_05, [0]),  # the consume queue's partition counts too
    ("4.4.0", 0.88, 0.50, {}, AT_05, [0, 1, 2]),  # above 0.85: cleanImmediately, age ignored
    ("4.4.0", 0.88, 0.50, {"disk_max_used_space_ratio": 95}, AT_05, []),  # 4.x: the level alone never triggers
    ("4.4.0", 0.88, 0.50, {"disk_max_used_space_ratio": 95}, AT_04, [0, 1, 2]),  # ...but applies at the hour
    ("5.3.3", 0.88, 0.50, {"disk_max_used_space_ratio": 95}, AT_05, [0, 1, 2]),  # 5.x: it triggers by itself
    ("5.3.3", 0.80, 0.50, {"disk_max_used_space_ratio": 95}, AT_05, []),
    ("4.4.0", 0.88, 0.50, {"clean_file_forcibly_enable": False}, AT_05, [0]),
    ("5.3.3", 0.88, 0.50, {"disk_space_clean_forcibly_ratio": 0.95}, AT_05, [0, 1, 2]),  # 5.x clamps to 0.85
    ("4.4.0", 0.88, 0.50, {"disk_space_clean_forcibly_ratio": 0.95}, AT_05, [0]),  # 4.x property: no clamp
    ("4.4.0", -1.0, 0.50, {}, AT_05, [0]),  # a missing path counts as full
    ("4.4.0", 0.96, 0.50, {"disk_max_used_space_ratio": 99}, AT_05, [0, 1, 2]),  # clamped to 95
]


@pytest.mark.parametrize(("broker", "physic", "logics", "overrides", "at", "want"), SPACE_CASES)
def test_disk_space_rules_per_broker_version(tmp_path, broker, physic, logics, overrides, at, want):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 1, 1, 1], at)

    def disk(path: Path) -> float:
        return logics if path.name == "consumequeue" else physic

    p = plan(root, at, ratio=disk, broker=broker, **overrides)
    assert names(p.commitlog) == cl_names([i * CL_SIZE for i in want])


def test_settings_follow_the_broker_version(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    conf = root.parent / "broker.conf"
    conf.write_text(
        conf.read_text()
        + "diskSpaceCleanForciblyRatio=70\ndiskSpaceWarningLevelRatio=80\ndeleteFileBatchMax=2\n"
        + "diskMaxUsedSpaceRatio=5\ndeleteWhen=03;15\n"
    )
    with open_store(root, broker="5.3.3") as st:
        s5 = expiry.expire_settings(st.config)
    assert (s5.disk_space_clean_forcibly_ratio, s5.disk_space_warning_level_ratio) == (0.70, 0.80)
    assert (s5.delete_file_batch_max, s5.disk_max_used_space_ratio, s5.delete_hours) == (2, 10, (3, 15))
    with open_store(root, broker="4.4.0") as st:
        s4 = expiry.expire_settings(st.config)
    assert (s4.disk_space_clean_forcibly_ratio, s4.disk_space_warning_level_ratio, s4.delete_file_batch_max) == (
        0.85,
        0.90,
        10,
    )
    assert sum("ignored by a 4.4.0 broker" in n for n in s4.notes) == 3


def synthetic_store(tmp_path: Path, n: int, size: int = 1024) -> Path:
    """n commit log files, each starting with a non-zero record header."""
    root = tmp_path / "synthetic"
    (root / "commitlog").mkdir(parents=True)
    for i in range(n):
        data = bytearray(size)
        struct.pack_into(">ii", data, 0, size, -626843481)
        (root / "commitlog" / f"{i * size:020d}").write_bytes(data)
    return root


def test_batch_limit_per_run_then_the_rest(tmp_path):
    root = synthetic_store(tmp_path, 13)
    age_commitlog(root, [100] * 13, AT_04)
    p = plan(root, AT_04)  # 4.x: DELETE_FILES_BATCH_MAX = 10
    assert names(p.commitlog) == cl_names([i * 1024 for i in range(10)])
    assert "batch limit" in p.commitlog_stop
    ex.apply_expire(p)
    assert names(plan(root, AT_04).commitlog) == cl_names([10240, 11264])  # never the 13th, the newest
    assert names(plan(root, AT_04, broker="5.3.3", delete_file_batch_max=1).commitlog) == cl_names([10240])


def test_trailing_preallocated_file_is_not_the_newest(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    files = cl_files(root)
    assert files[-1].read_bytes() == bytes(CL_SIZE)  # the all-zero pre-allocated file
    age_commitlog(root, [100] * 5, AT_04)
    p = plan(root, AT_04)
    assert names(p.commitlog) == cl_names([0, CL_SIZE, 2 * CL_SIZE])  # 98304 holds the newest data
    assert files[-1].exists()


def test_a_run_killed_after_the_commit_log_step_is_finished_by_the_next(tmp_path):
    case = "clean-2topics"
    root = copy_real_store(case, tmp_path)
    age_commitlog(root, [100, 100, 1], AT_04)
    p = plan(root, AT_04)
    for a in p.commitlog:  # killed right after the commit log files went
        a.path.unlink()
    q = plan(root, AT_05)  # next run, outside the deleteWhen hour
    assert q.commitlog == () and q.new_min_phy_offset == 2 * CL_SIZE
    assert sorted(names(q.consumequeue)) == expected_cq(case, root, 2 * CL_SIZE) != []
    assert names(q.index) == expected_index(case, 2 * CL_SIZE) != []
    ex.apply_expire(q)
    check_store_after(case, root, 2 * CL_SIZE)


def test_partition_used_ratio_per_version(tmp_path):
    sv = os.statvfs(tmp_path)
    used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
    total = sv.f_blocks * sv.f_frsize
    entire = used + sv.f_bavail * sv.f_frsize
    assert expiry.partition_used_ratio(tmp_path, "4.4.0") == pytest.approx(used / total, abs=1e-4)
    assert expiry.partition_used_ratio(tmp_path, "5.3.3") == pytest.approx(-(-used * 100 // entire) / 100, abs=0.011)
    assert expiry.partition_used_ratio(tmp_path / "missing", "4.4.0") == -1


def test_quarantine_keeps_relative_paths_and_a_manifest(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100, 1], AT_04)
    p = plan(root, AT_04)
    qdir = tmp_path / "q"
    result = ex.apply_expire(replace(p, quarantine=qdir))
    manifest = json.loads((result.quarantine_dir / "manifest.json").read_text())
    assert [Path(f["saved"]).relative_to(result.quarantine_dir).as_posix() for f in manifest["items"]] == names(
        p.actions
    )
    assert result.quarantine_dir.parent == qdir and result.quarantine_dir.name.startswith("expire-")
    for a in p.actions:
        moved = result.quarantine_dir / a.rel_path
        assert not a.path.exists() and moved.stat().st_size == a.size
        assert moved.stat().st_mtime_ns // 1_000_000 == a.mtime_ms
    with pytest.raises(InputError):
        ex.apply_expire(
            replace(plan(root, AT_04, force=True, file_reserved_time_h=0), quarantine=root / "commitlog" / "q")
        )


# -- command line ------------------------------------------------------------------------------


def run(*args: str):
    return runner.invoke(app, ["expire", *args])


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def test_cli_silent_when_nothing_to_do(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100], AT_05)
    r = run(str(root), "--now", str(AT_05), "--disk-used-ratio", "0.1")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    r = run(str(root), "--now", str(AT_05), "--disk-used-ratio", "0.1", "-v")
    assert r.exit_code == 0 and r.stdout == ""
    assert "nothing to do: not triggered: local hour 05" in first_line(r.stderr)


def test_cli_plain_one_line_per_action_and_exit_9(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100, 1], AT_04)
    want = cl_names([0, CL_SIZE]) + expected_cq("clean-2topics", root, 2 * CL_SIZE)
    want += expected_index("clean-2topics", 2 * CL_SIZE)
    r = run(str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "-f", "plain")
    assert r.exit_code == 0, r.stderr  # success, whatever was deleted (--detailed-exitcode: 9)
    lines = r.stdout.splitlines()
    assert [line.split()[2] for line in lines] == want
    assert all(line.split()[1] == "deleted" for line in lines)
    assert not any((root / w).exists() for w in want)


def test_cli_dry_run_json_changes_nothing(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100, 1], AT_04)
    before = sorted(p for p in root.rglob("*"))
    r = run(
        str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "-f", "json", "--dry-run", "--detailed-exitcode"
    )
    assert r.exit_code == ex.EXIT_DELETED, r.stderr
    assert len(r.stdout.splitlines()) == 1
    doc = json.loads(r.stdout)
    summary = doc["summary"]
    assert summary["dryRun"] and summary["exitCode"] == 9 and summary["newMinPhyOffset"] == 2 * CL_SIZE
    paths = [a["path"] for a in doc["actions"] if "/commitlog/" in a["path"]]
    assert paths == [str(root / n) for n in cl_names([0, CL_SIZE])]
    assert {a["action"] for a in doc["actions"]} == {"delete"} and len(doc["actions"]) == sum(summary["files"].values())
    assert sorted(p for p in root.rglob("*")) == before


def test_cli_still_over_the_forced_ratio(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [1, 1], AT_05)
    r = run(str(root), "--now", str(AT_05), "--disk-used-ratio", "0.9", "--no-clean-file-forcibly")
    assert r.exit_code == ex.EXIT_OVER_FORCED_RATIO
    assert (
        first_line(r.stderr) == "warning: commit log disk 90.0% used after the run, above the forced-clean level 85.0%"
    )


def test_cli_quarantine_inside_a_segment_dir_is_refused(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100], AT_04)
    r = run(str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "--quarantine", str(root / "consumequeue"))
    assert r.exit_code == 1
    assert first_line(r.stderr).startswith(f"error: --quarantine {root / 'consumequeue'} is inside")
    assert all(f.exists() for f in cl_files(root))


def test_cli_second_run_waits_for_no_one(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100], AT_04)
    lock = root / ".rmqstore" / "expire.lock"
    lock.parent.mkdir()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a run in progress
        for extra in ([], ["--dry-run"]):
            r = run(str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", *extra)
            assert r.exit_code == ex.EXIT_EXPIRE_RUNNING
            assert first_line(r.stderr) == f"error: {lock}: another rmqstore expire run is working on this store"
    finally:
        os.close(fd)
    assert all(f.exists() for f in cl_files(root))


def test_cli_refuses_a_store_a_running_broker_holds(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    age_commitlog(root, [100, 100], AT_04)
    proc = hold_lock(root)
    try:
        for extra in ([], ["--dry-run"]):
            r = run(str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", *extra)
            assert r.exit_code == ex.EXIT_LOCKED
            assert first_line(r.stderr).startswith(f"error: {root / 'lock'}: held by a running broker (pid {proc.pid})")
            assert "deletes expired files itself" in first_line(r.stderr)
    finally:
        proc.kill()
        proc.wait()
    assert all(f.exists() for f in cl_files(root))


def _tz_with_local_hour(hour: int) -> str:
    """A POSIX TZ whose local hour is ``hour`` right now (cron fires in local time)."""
    now = time.gmtime()
    if now.tm_min == 59 and now.tm_sec > 50:
        time.sleep(11)
        now = time.gmtime()
    east = (hour - now.tm_hour) % 24
    if east > 12:
        east -= 24
    return f"RMQ{-east}"  # POSIX offsets count west of UTC


def test_crontab_line_from_the_help_runs_as_cron_would(tmp_path):
    exe = Path(sys.executable).parent / "rmqstore"
    if not exe.exists():
        pytest.skip("the rmqstore console script is not installed")
    help_text = subprocess.run(
        [str(exe), "expire", "--help"], capture_output=True, text=True, env={**os.environ, "TERMINAL_WIDTH": "400"}
    ).stdout
    assert CRONTAB_EXAMPLE in help_text
    minute, hour, *_, command = CRONTAB_EXAMPLE.split(None, 5)
    assert int(hour) in expiry.parse_delete_when("04")  # cron fires inside the broker's default deleteWhen hour
    sv = os.statvfs(tmp_path)
    if (sv.f_blocks - sv.f_bfree) / sv.f_blocks > 0.84:
        pytest.skip("this disk is above the forced-clean level: the run would delete more")

    case = "clean-2topics"
    root = copy_real_store(case, tmp_path / "data")
    now = int(time.time() * 1000)
    age_commitlog(root, [100, 100, 1, 1], now)
    want = cl_names([0, CL_SIZE]) + expected_cq(case, root, 2 * CL_SIZE) + expected_index(case, 2 * CL_SIZE)
    log = tmp_path / "log" / "rmqstore-expire.log"
    log.parent.mkdir()
    paths = {
        "/data/rocketmq/store": root,
        "/opt/rocketmq/conf/broker.conf": root.parent / "broker.conf",
        "/var/log/rmqstore-expire.log": log,
    }
    for example, real in paths.items():
        assert example in command
        command = command.replace(example, shlex.quote(str(real)))
    env = {
        "PATH": f"{exe.parent}:/usr/bin:/bin",
        "SHELL": "/bin/sh",
        "HOME": str(tmp_path),
        "TZ": _tz_with_local_hour(4),
    }
    proc = subprocess.run(["/bin/sh", "-c", command], env=env, timeout=120)
    assert proc.returncode == 0, log.read_text()  # cron and job schedulers read non-zero as a failure
    (line,) = log.read_text().splitlines()
    doc = json.loads(line)
    assert [a["path"] for a in doc["done"]] == want
    assert doc["triggers"]["time"] and doc["exitCode"] == 0
    assert not any((root / w).exists() for w in want)
    check_store_after(case, root, 2 * CL_SIZE)
    # The next run finds nothing to do: exit 0 and nothing appended to the log.
    proc = subprocess.run(["/bin/sh", "-c", command], env=env, timeout=120)
    assert proc.returncode == ex.EXIT_NOTHING_TO_DO
    assert log.read_text().splitlines() == [line]


def test_a_queue_or_index_that_lags_keeps_its_last_file(tmp_path):
    case = "clean-2topics"
    root = copy_real_store(case, tmp_path)
    (root / "index" / "20261122025341409").unlink()  # the index now ends at endPhyOffset 86387 < 98304
    qdir = root / "consumequeue" / "TopicA" / "0"
    for name in ("00000000000000000800", "00000000000000001200"):
        (qdir / name).unlink()  # this queue's last file now ends below 98304 too
    age_commitlog(root, [100, 100, 100], AT_04)
    p = plan(root, AT_04)
    assert p.new_min_phy_offset == 3 * CL_SIZE
    assert names(p.index) == ["index/20261122025341299"]  # never the last index file
    assert "consumequeue/TopicA/0/00000000000000000000" in names(p.consumequeue)
    assert "consumequeue/TopicA/0/00000000000000000400" not in names(p.consumequeue)  # never a queue's last
    assert sorted(names(p.consumequeue)) == expected_cq(case, root, 3 * CL_SIZE)


def test_a_queue_stops_at_its_first_file_kept(tmp_path):
    case = "clean-2topics"
    root = copy_real_store(case, tmp_path)
    age_commitlog(root, [100, 100, 100], AT_04)
    want = expected_cq(case, root, 3 * CL_SIZE)
    first = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    with first.open("r+b") as f:  # its last entry now points past the new min offset
        f.seek(400 - 20)
        f.write(struct.pack(">q", 10**9))
    got = sorted(names(plan(root, AT_04).consumequeue))
    assert got == [w for w in want if not w.startswith("consumequeue/TopicA/0/")]


def test_info_and_query_stay_correct_after_expiry(tmp_path):
    registered = {m.__name__ for m in importlib.import_module("rmqstore.cli").SUBCOMMANDS}
    if not {"rmqstore.cli.info", "rmqstore.cli.query"} <= registered:
        pytest.skip("rmqstore info/query are not available")
    case = "clean-2topics"
    truth = load_truth(case)
    root = copy_real_store(case, tmp_path)
    age_commitlog(root, [100, 100], AT_04)
    new_min = 2 * CL_SIZE
    gone_index = expected_index(case, new_min)
    r = run(str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["newMinPhyOffset"] == new_min

    r = runner.invoke(app, ["info", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert (info["commitLog"]["minPhyOffset"], info["commitLog"]["maxPhyOffset"]) == (new_min, truth["maxPhyOffset"])
    queues = {(q["topic"], q["queueId"]): q for q in info["queues"]}
    for q in truth["queues"]:
        live = [e["queueOffset"] for e in q["entries"] if e["commitLogOffset"] >= new_min]
        got = queues[(q["topic"], q["queueId"])]
        assert (got["minOffset"], got["maxOffset"]) == (live[0], q["maxOffset"]), q["topic"]
    want_index = [f["name"] for f in truth["indexFiles"] if f"index/{f['name']}" not in gone_index]
    assert [f["name"] for f in info["indexFiles"]] == want_index

    keyed = [q for q in truth["queries"] if not q["key"].startswith("C0A8")]  # KEYS, not UNIQ_KEY
    for q in keyed[::10]:
        r = runner.invoke(app, ["query", "key", str(root), q["topic"], q["key"], "--format", "json"])
        assert r.exit_code == 0, r.output
        got = sorted(m["commitLogOffset"] for m in json.loads(r.stdout))
        assert got == sorted(h["commitLogOffset"] for h in q["hits"] if h["commitLogOffset"] >= new_min), q


def test_cli_not_a_store_creates_nothing(tmp_path):
    r = run(str(tmp_path / "missing"))
    assert r.exit_code == 5 and first_line(r.stderr) == f"error: {tmp_path / 'missing'}: no such directory"
    assert not (tmp_path / "missing").exists()
    r = run(str(tmp_path))
    assert r.exit_code == 5 and not (tmp_path / ".rmqstore").exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_exit_status_success_is_zero_and_detailed_exitcode_opts_in(tmp_path, dry_run):
    """0 whenever the run succeeded (a CronJob would retry anything else); 9 only with --detailed-exitcode."""
    common = ["--force", "--file-reserved-time", "0", "--disk-used-ratio", "0.1", "-f", "json"]
    common += ["--dry-run"] if dry_run else []
    for detailed, want in ((False, 0), (True, ex.EXIT_DELETED)):
        shutil.copytree(FIXTURES / "small", tmp_path / str(detailed))
        store = tmp_path / str(detailed) / "store"
        r = run(str(store), *common, *(["--detailed-exitcode"] if detailed else []))
        assert r.exit_code == want, r.output
        doc = json.loads(r.stdout)
        if dry_run:
            assert doc["summary"]["exitCode"] == want and len(doc["actions"]) == 16
        else:
            assert doc["exitCode"] == want and len(doc["done"]) == 16
        assert (store / "commitlog" / "00000000000000000000").exists() == dry_run
    if not dry_run:  # the next run finds nothing to do: 0 with and without the option
        for extra in ([], ["--detailed-exitcode"]):
            r = run(str(tmp_path / "True" / "store"), *common, *extra)
            assert r.exit_code == ex.EXIT_NOTHING_TO_DO and r.stdout == "", r.output
