"""`rmqstore recover` against what the real 4.4.0 engine recovered (truth.json, rebuild.json)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    NEWER_CASES,
    REAL_STORES,
    REPO,
    case_dir,
    copy_real_store,
    crash_batch_store,
    is_crash,
    load_rebuild,
    load_truth,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec import indexfile as ix
from rmqstore.codec.commitlog import Record, decode_record
from rmqstore.codec.consumequeue import entries_array, valid_prefix
from rmqstore.ops import recover as rec
from rmqstore.safety.journal import journal_file
from rmqstore.store import open_store
from rmqstore.store.files import map_file
from rmqstore.walk import columns as columnar
from rmqstore.walk.checked import TopicIds, walk_file_checked
from rmqstore.walk.requests import scan_requests

runner = CliRunner()
CLOCK_MS = 1_795_400_000_000


# ------------------------------------------------------------------------------------ helpers


def recover(root: Path, **kw) -> tuple[rec.RecoverPlan, rec.RecoverResult]:
    apply_kw = {"clock": kw.pop("clock", lambda: CLOCK_MS)}
    with open_store(root, writable=True) as s:
        plan = rec.plan_recover(s, now_ms=CLOCK_MS, **kw)
        return plan, rec.apply_recover(s, plan, **apply_kw)


def plan_of(root: Path, **kw) -> rec.RecoverPlan:
    with open_store(root) as s:
        return rec.plan_recover(s, now_ms=CLOCK_MS, **kw)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def store_files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): sha(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".rmqstore" not in p.parts and p.name != "lock"
    }


def index_contents(root: Path) -> list[str]:
    """Index files' sha256 in name order: names are creation times, so only content and order count."""
    return [h for k, h in sorted(store_files(root).items()) if k.startswith("index/")]


def data_files(files: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in files.items() if k.startswith(("commitlog/", "consumequeue/")) or k == "checkpoint"}


def truth_files(truth: dict, when: str = "afterShutdown") -> dict[str, str]:
    return {f["path"]: f["sha256"] for f in truth[when]["files"] if f["path"] not in ("lock",)}


def messages(truth: dict) -> list[dict]:
    return [r for r in truth["commitlog"] if r["kind"] == "message"]


def served(root: Path) -> dict[tuple[str, int], tuple[int, list[dict]]]:
    """Every consume queue's max offset and the records its entries point at, decoded."""
    out = {}
    with open_store(root) as s:
        cfg = s.config
        segs, _ = s.commitlog_segments()
        for queue in s.consume_queues.queues():
            topic, qid = queue.topic, queue.queue_id
            cq, _ = queue.files()
            entries = []
            for seg in cq:
                arr = entries_array(seg.path.read_bytes())
                n = valid_prefix(arr)
                entries += [(int(e["phy_offset"]), int(e["size"])) for e in arr[:n]]
                if n < len(arr):
                    break
            msgs = []
            for phy, size in entries:
                cl = next(c for c in segs if c.base_offset <= phy < c.base_offset + c.size)
                with map_file(cl.path) as buf:
                    r = decode_record(buf, phy - cl.base_offset, file_from=cl.base_offset, broker=cfg.broker)
                assert isinstance(r, Record) and r.total_size == size
                msgs.append(r.to_json())
            max_offset = (cq[-1].base_offset // 20 + len(entries) - sum(c.size // 20 for c in cq[:-1])) if cq else 0
            out[(topic, qid)] = (max_offset, msgs)
    return out


def assert_serves(root: Path, truth: dict, *, without: set[int] = frozenset(), changed: set[int] = frozenset()):
    """The store serves exactly truth's messages, minus the commit log offsets in ``without``."""
    got = served(root)
    for q in truth["queues"]:
        want = [m for m in q["messages"] if m["commitLogOffset"] not in without]
        max_offset, msgs = got.get((q["topic"], q["queueId"]), (0, []))
        assert max_offset == q["minOffset"] + len(want), (q["topic"], q["queueId"])
        assert len(msgs) == len(want)
        for m, w in zip(msgs, want, strict=True):
            if w["commitLogOffset"] in changed:
                m, w = {k: v for k, v in m.items() if k != "body"}, {k: v for k, v in w.items() if k != "body"}
            assert {k: m[k] for k in w} == w


def record_at(root: Path, phy: int) -> tuple[Path, int]:
    fs = 32768
    return root / "commitlog" / f"{phy - phy % fs:020d}", phy % fs


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    code = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def first_err(result) -> str:
    lines = result.stderr.splitlines()
    assert lines, f"nothing on stderr (exit {result.exit_code})"
    return lines[0]


# --------------------------------------------------------------------- the crashed real store


CRASH_CASES = ["crash-midwrite", "4.9.4/crash-midwrite", "5.2.0/crash-5x-midwrite"]
CLEAN_CASES = ["clean-2topics", "delay-tx-retry"] + [c for c in NEWER_CASES if not is_crash(c)]


@pytest.fixture(scope="module")
def crash_truth() -> dict:
    return load_truth("crash-midwrite")


@pytest.fixture(params=CRASH_CASES)
def crash_case(request: pytest.FixtureRequest) -> tuple[str, dict]:
    if not case_dir(request.param).is_dir():
        pytest.skip("real stores not found")
    return request.param, load_truth(request.param)


def test_crash_midwrite_plan_is_the_engines_abnormal_recovery(tmp_path, crash_case):
    case, crash_truth = crash_case
    root = copy_real_store(case, tmp_path)
    before = store_files(root)
    plan = plan_of(root)
    assert store_files(root) == before  # planning reads only
    assert crash_truth["recovery"]["lastExitOK"] is False and plan.path == "abnormal"
    assert plan.process_offset == crash_truth["maxPhyOffset"]
    assert plan.min_phy == crash_truth["minPhyOffset"]
    # The engine dropped the pre-allocated next file and the last, unfilled index file.
    gone = {f["path"] for f in crash_truth["beforeOpen"]["files"]} - {
        f["path"] for f in crash_truth["afterShutdown"]["files"]
    }
    planned = {a.path for a in plan.actions if a.verb == "delete"}
    assert {p for p in gone if p.startswith(("commitlog/", "index/"))} == planned
    assert plan.dispatch is not None and plan.dispatch.records == len(messages(crash_truth))
    assert plan.records_lost == 0
    assert plan.steps() == ["quarantine", "index-delete", "dispatch", "commitlog-truncate", "checkpoint", "abort"]


def test_crash_midwrite_recovers_to_the_engines_files(tmp_path, crash_case):
    case, crash_truth = crash_case
    root = copy_real_store(case, tmp_path)
    plan, result = recover(root)
    want = truth_files(crash_truth)
    got = store_files(root)
    # Commit log, consume queues and the checkpoint: same names, lengths and bytes as the engine leaves.
    assert data_files(got) == data_files(want)
    assert "abort" not in got and not (root / ".rmqstore").exists()
    # Index files: same headers as the engine's, same bytes (the rebuilt file's name is a creation time).
    assert index_contents(root) == [h for k, h in sorted(want.items()) if k.startswith("index/")]
    names = sorted(n for n in os.listdir(root / "index"))
    with open_store(root) as s:
        for name, t in zip(names, crash_truth["indexFiles"], strict=True):
            with map_file(s.config.index_dir / name) as buf:
                h = ix.decode_header(buf)
            assert (h.begin_timestamp_ms, h.end_timestamp_ms, h.begin_phy_offset, h.end_phy_offset) == (
                t["beginTimestamp"],
                t["endTimestamp"],
                t["beginPhyOffset"],
                t["endPhyOffset"],
            )
            assert (h.hash_slot_count, h.index_count) == (t["hashSlotCount"], t["indexCount"])
    cp = crash_truth["afterShutdown"]["checkpointFile"]
    keys = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")
    keys += ("confirmPhyOffset",) if "confirmPhyOffset" in cp else ()  # 5.1.1+: the last valid record
    assert result.checkpoint == {k: cp[k] for k in keys}
    assert_serves(root, crash_truth)
    # The quarantine holds what was removed, with a manifest.
    q = Path(result.quarantine_dir)
    assert q.parent == tmp_path / "store.quarantine" and q.name.startswith("recover-")
    manifest = json.loads((q / "manifest.json").read_text())
    saved = {Path(i["path"]).name: q / i["saved"] for i in manifest["items"] if i["kind"] == "file"}
    src = copy_real_store(case, tmp_path / "orig")
    dropped_index = sorted(os.listdir(src / "index"))[-1]
    assert sha(saved["00000000000000131072"]) == sha(src / "commitlog" / "00000000000000131072")
    assert sha(saved[dropped_index]) == sha(src / "index" / dropped_index)
    assert sha(saved["checkpoint"]) == sha(src / "checkpoint")


def test_rerun_after_recovery_has_nothing_to_do(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    recover(root)
    assert plan_of(root).is_empty


@pytest.mark.parametrize("case", CLEAN_CASES)
def test_clean_real_stores_need_nothing(tmp_path, case):
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    truth = load_truth(case)
    root = copy_real_store(case, tmp_path)
    before = {p: (sha(p), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}
    plan = plan_of(root)
    assert plan.path == "normal" and truth["recovery"]["lastExitOK"]
    assert plan.process_offset == truth["maxPhyOffset"]
    assert plan.is_empty and not plan.actions and not plan.losses
    r = runner.invoke(app, ["recover", str(root)])
    assert r.exit_code == 0, r.output
    assert "nothing to do" in r.stderr
    assert {p: (sha(p), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()} == before
    assert not (root.parent / "store.quarantine").exists()


def test_rebuild_both_gives_the_engines_rebuild(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    rebuild = load_rebuild("crash-midwrite")
    plan, result = recover(root, rebuild_index=True, rebuild_consume_queue=True)
    assert plan.steps()[-4:] == ["rebuild", "swap", "checkpoint", "abort"]
    got = store_files(root)
    assert {k: v for k, v in got.items() if k.startswith("consumequeue/")} == {
        f["path"]: f["sha256"] for f in rebuild["consumeQueueFiles"]
    }
    assert index_contents(root) == [f["sha256"] for f in rebuild["indexFiles"]]
    for k in ("logicsMsgTimestamp", "indexMsgTimestamp"):
        assert result.checkpoint[k] == rebuild["checkpoint"][k]
    # The old directories went to the quarantine whole.
    q = Path(result.quarantine_dir) / "files"
    assert len(list((q / "index").iterdir())) == 3 and (q / "consumequeue" / "TopicA" / "0").is_dir()


# ------------------------------------------------------------------------------- corruption


@pytest.fixture(scope="module")
def clean_truth() -> dict:
    return load_truth("clean-2topics")


def test_torn_last_record(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    last = messages(clean_truth)[-1]
    f, pos = record_at(root, last["offset"])
    patch(f, pos + 100, bytes(last["size"] - 100))  # only the first 100 bytes reached the disk
    plan, _ = recover(root)
    assert plan.path == "normal" and plan.process_offset == last["offset"]
    cut = next(a for a in plan.actions if a.step == "commitlog-truncate")
    assert (cut.verb, cut.from_pos, cut.to_pos) == ("zero", pos, pos + 100)
    (torn,) = cut.records
    assert torn.torn and (torn.queue_id, torn.queue_offset) == (last["queueId"], last["queueOffset"])
    assert any(a.step == "cq-truncate" and a.entries_total == 1 for a in plan.actions)
    assert not plan.write_checkpoint and not plan.remove_abort
    assert_serves(root, clean_truth, without={last["offset"]})
    with map_file(f) as buf:
        assert not np.frombuffer(buf, np.uint8)[pos:].any()


def test_zero_tail(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    tail = messages(clean_truth)[-3:]
    f, pos = record_at(root, tail[0]["offset"])
    patch(f, pos, bytes(clean_truth["maxPhyOffset"] - tail[0]["offset"]))
    plan, _ = recover(root)
    assert plan.process_offset == tail[0]["offset"] and plan.stop.startswith("end of data (zeros)")
    assert not [a for a in plan.actions if a.kind == "commitlog"]  # nothing but zeros after it
    assert sum(a.entries_total for a in plan.actions if a.step == "cq-truncate") == 3
    assert_serves(root, clean_truth, without={m["offset"] for m in tail})


def flip_middle_record(root: Path, truth: dict) -> dict:
    """Flip one body bit of a record in the middle of file 2 (walked by normal recovery)."""
    victim = [m for m in messages(truth) if 65536 <= m["offset"] < 98304][10]
    f, pos = record_at(root, victim["offset"])
    with open(f, "r+b") as fh:
        fh.seek(pos + 90)
        b = fh.read(1)
        fh.seek(pos + 90)
        fh.write(bytes([b[0] ^ 0x10]))
    return victim


def test_bit_flip_with_crc_check_drops_everything_after(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    original = {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()}
    victim = flip_middle_record(root, clean_truth)
    plan, result = recover(root)
    assert plan.process_offset == victim["offset"] and "CRC" in plan.stop
    after = {m["offset"] for m in messages(clean_truth) if m["offset"] >= victim["offset"]}
    assert plan.records_lost == len(after)
    by_offset = {m["commitLogOffset"]: m for q in clean_truth["queues"] for m in q["messages"]}
    listed = [r for a in plan.actions for r in a.records]
    assert {r.phy_offset for r in listed} == after
    for r in listed:
        m = by_offset[r.phy_offset]
        assert (r.topic, r.queue_id, r.queue_offset, r.msg_id) == (
            m["topic"],
            m["queueId"],
            m["queueOffset"],
            m["msgId"],
        )
    assert [a.path for a in plan.actions if a.verb == "delete" and a.kind == "commitlog"] == [
        "commitlog/00000000000000098304"
    ]
    assert_serves(root, clean_truth, without=after)
    # The manifest puts every removed byte back.
    manifest = json.loads((Path(result.quarantine_dir) / "manifest.json").read_text())
    for item in manifest["items"]:
        saved = Path(item["saved"]) if "saved" in item else None
        if item["kind"] == "range":
            patch(Path(item["path"]), item["from"], saved.read_bytes())
        elif item["kind"] == "file" and "commitlog" in item["path"]:
            shutil.copyfile(saved, item["path"])
    restored = {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()}
    assert restored.keys() == original.keys()
    assert [k for k in original if restored[k] != original[k]] == ["00000000000000065536"]  # the flipped bit only


def test_bit_flip_without_crc_check_keeps_the_record(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    victim = flip_middle_record(root, clean_truth)
    plan = plan_of(root, check_crc=False)
    assert plan.process_offset == clean_truth["maxPhyOffset"] and plan.is_empty
    r = runner.invoke(app, ["recover", str(root), "--no-check-crc", "-f", "json", "--dry-run"])
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["steps"] == []
    assert_serves(root, clean_truth, changed={victim["offset"]})


def test_consume_queue_ahead_of_the_commit_log(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    want = truth_files(clean_truth)
    qfile = root / "consumequeue" / "TopicA" / "0" / "00000000000000001200"
    n = valid_prefix(entries_array(qfile.read_bytes()))
    patch(qfile, n * 20, np.array([(clean_truth["maxPhyOffset"] + 500, 250, 7)], dtype=">i8,>i4,>i8").tobytes())
    plan, _ = recover(root)
    assert plan.truncate_logic_files and plan.max_phy_offset_cq == clean_truth["maxPhyOffset"] + 500
    (cut,) = plan.actions
    assert (cut.step, cut.path, cut.from_pos, cut.to_pos) == (
        "cq-truncate",
        str(qfile.relative_to(root)),
        n * 20,
        n * 20 + 20,
    )
    assert data_files(store_files(root)) == data_files(want)


def test_missing_consume_queue_normal_path(tmp_path, clean_truth):
    root = copy_real_store("clean-2topics", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicA" / "1")
    plan = plan_of(root)
    (loss,) = plan.losses
    walked = [
        m
        for m in messages(clean_truth)
        if (m["topic"], m["queueId"]) == ("TopicA", 1) and m["offset"] >= plan.start_phy
    ]
    assert loss.what == "cq-entries" and loss.count == len(walked) and loss.repaired_by == "--rebuild-consumequeue"
    assert plan.is_empty  # 4.4.0 never rebuilds them on a clean start: by default nothing changes
    plan, _ = recover(root, rebuild_consume_queue=True)
    rebuilt = {f["path"]: f["sha256"] for f in load_rebuild("clean-2topics")["consumeQueueFiles"]}
    assert {k: v for k, v in store_files(root).items() if k.startswith("consumequeue/")} == rebuilt
    assert_serves(root, clean_truth)


def test_missing_consume_queue_abnormal_path_is_redispatched(tmp_path, crash_truth):
    root = copy_real_store("crash-midwrite", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicB" / "2")
    recover(root)
    assert data_files(store_files(root)) == data_files(truth_files(crash_truth))


def test_garbage_index_file(tmp_path, crash_truth):
    root = copy_real_store("crash-midwrite", tmp_path)
    garbage = root / "index" / "20261122025344691"
    garbage.write_bytes(np.random.default_rng(7).integers(0, 256, garbage.stat().st_size, dtype=np.uint8).tobytes())
    plan, _ = recover(root)
    act = next(a for a in plan.actions if a.path == "index/20261122025344691")
    assert act.verb == "delete" and act.why.startswith("not an index file")
    assert any(x.what == "index-keys" and x.repaired_by == "--rebuild-index" for x in plan.losses)
    # Re-dispatched from the first file, the index finds every message's UNIQ_KEY again.
    with open_store(root) as s:
        files = []
        for name in sorted(os.listdir(s.config.index_dir)):
            with map_file(s.config.index_dir / name) as buf:
                files.append(ix.IndexFile(bytes(buf), slots=s.config.max_hash_slot_num, entries=s.config.max_index_num))
    for m in messages(crash_truth):
        key = f"{m['topic']}#{m['uniqKey']}"
        hits = [p for f in files for p in f.select_phy_offsets(key, max_num=64, begin_ms=0, end_ms=2**62)]
        assert m["offset"] in hits


def test_garbage_index_file_rebuilt(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    garbage = root / "index" / "20261122025344691"
    garbage.write_bytes(b"\xff" * 40 + bytes(garbage.stat().st_size - 40))
    recover(root, rebuild_index=True)
    assert index_contents(root) == [f["sha256"] for f in load_rebuild("crash-midwrite")["indexFiles"]]


@pytest.mark.parametrize("part_size", [None, 1500], ids=["serial", "parallel-ranges"])
def test_missing_checkpoint_is_the_engines_rebuild(tmp_path, crash_truth, part_size, monkeypatch):
    # rebuild.json is the engine opening this store after an abnormal stop with no checkpoint.
    if part_size:  # the re-dispatch walked by worker processes, many byte ranges per file
        monkeypatch.setattr(columnar, "PART_SIZE", part_size)
    root = copy_real_store("crash-midwrite", tmp_path)
    (root / "checkpoint").unlink()
    rebuild = load_rebuild("crash-midwrite")
    plan, result = recover(root)
    assert plan.checkpoint_before is None and plan.start_file == "00000000000000000000"
    assert {a.path for a in plan.actions if a.step == "index-delete"} == {
        f"index/{n}" for n in ("20261122025344616", "20261122025344691", "20261122025344710")
    }
    assert index_contents(root) == [f["sha256"] for f in rebuild["indexFiles"]]
    assert result.checkpoint == rebuild["checkpoint"]
    assert (root / "checkpoint").stat().st_size == 4096
    got = store_files(root)
    assert {k: v for k, v in got.items() if k.startswith("consumequeue/")} == {
        f["path"]: f["sha256"] for f in rebuild["consumeQueueFiles"]
    }


# ------------------------------------------------------- the fast walk is the recovery check


@pytest.fixture(scope="module")
def clean_file() -> bytes:
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    return (
        copy_real_store.__globals__["REAL_STORES"]
        .joinpath("clean-2topics", "store", "commitlog", "00000000000000032768")
        .read_bytes()
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bits=st.lists(st.integers(0, 32768 * 8 - 1), min_size=1, max_size=3), crc=st.booleans())
def test_walk_stops_where_the_record_decoder_does(clean_file, bits, crc):
    buf = bytearray(clean_file)
    for b in bits:
        buf[b // 8] ^= 1 << (b % 8)
    data = bytes(buf)
    with open_store(REAL_STORES / "clean-2topics" / "store") as s:
        cfg = s.config
        seg = s.commitlog_segments()[0][1]
    # The record decoder reads IPv6 host flags (4.6.0+): compare with a 4.6.0+ broker's walk.
    walk = walk_file_checked(data, seg, cfg, rec.broker_rules("4.9.7"), TopicIds(), start_pos=0, check_crc=crc)
    reqs, stop = scan_requests(data, seg, cfg, check_crc=crc, skip_size_mismatch=False)
    assert walk.stop_pos == stop.pos
    assert [int(x) for x in walk.phy] == [r.phy_offset for r in reqs]
    assert (walk.reason == "invalid") == (stop.reason == "invalid")


# ------------------------------------------------------------------------ CLI and safety


def test_dry_run_changes_nothing(tmp_path, crash_truth):
    root = copy_real_store("crash-midwrite", tmp_path)
    before = {p: (sha(p), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["summary"]
    assert plan["path"] == "abnormal" and plan["processOffset"] == crash_truth["maxPhyOffset"]
    assert plan["redispatchRecords"] == len(messages(crash_truth))
    assert {p: (sha(p), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "store.quarantine").exists()
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "--format", "plain"])
    assert r.exit_code == 0 and "abnormal" in r.stdout and "index/20261122025344710" in r.stdout


def test_refuses_a_store_a_broker_holds(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = store_files(root)
        for extra in ([], ["--dry-run"]):
            r = runner.invoke(app, ["recover", str(root), *extra])
            assert r.exit_code == 4
            assert first_err(r).startswith(f"error: {root / 'lock'}: held by a running broker (pid {holder.pid})")
        assert store_files(root) == before
    finally:
        holder.kill()
        holder.wait()


def test_wrong_size_commit_log_file_is_refused(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    victim = root / "commitlog" / "00000000000000032768"
    os.truncate(victim, 1000)
    r = runner.invoke(app, ["recover", str(root)])
    assert r.exit_code == 6
    assert first_err(r).startswith(f"error: {victim}: file is 1000 bytes, configured size is 32768")


# ----------------------------------------------------------------- killed and run again


def final_state(root: Path) -> tuple[dict, list[str], bool]:
    files = store_files(root)
    return data_files(files), index_contents(root), (root / ".rmqstore").exists()


def quarantine_state(q: Path) -> dict[str, str]:
    """Saved files by their path inside the run's folder (one run folder per run)."""
    (run,) = [d for d in q.iterdir() if d.is_dir()]
    return {
        str(p.relative_to(run)): sha(p) for p in sorted(run.rglob("*")) if p.is_file() and p.name != "manifest.json"
    }


def killed_at(step: str, *args: str, count: int = 1) -> subprocess.CompletedProcess:
    """The CLI with a step hook that SIGKILLs it the ``count``-th time ``step`` is reported."""
    code = [sys.executable, str(REPO / "tests" / "killrun.py"), step, str(count), "-", *args]
    return subprocess.run(code, cwd=REPO, capture_output=True, text=True, timeout=120)


def kill_chain(root: Path, q: Path, points: list[str]) -> list[str]:
    """Run the CLI once per kill point (each killed by SIGKILL), then once to the end."""
    seen = []
    for step in points:
        p = killed_at(f"recover:{step}", "recover", str(root), "-q", "--quarantine", str(q))
        assert p.returncode == -9, (step, p.returncode, p.stderr)
        assert journal_file(root, "recover").exists()
        seen.append(f"{step}: done {json.loads(journal_file(root, 'recover').read_text())['done']}")
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(q)])
    assert r.exit_code == 0, r.output
    return seen


def test_killed_at_every_step_of_the_crash_recovery(tmp_path, crash_truth):
    ref = copy_real_store("crash-midwrite", tmp_path / "ref")
    assert runner.invoke(app, ["recover", str(ref), "-q", "--quarantine", str(tmp_path / "q-ref")]).exit_code == 0
    root = copy_real_store("crash-midwrite", tmp_path / "run")
    q = tmp_path / "q-run"
    # in and after quarantine, after index-delete, twice in dispatch, after it, commitlog-truncate, checkpoint
    kill_chain(
        root,
        q,
        [
            "quarantine#1",
            "quarantine",
            "index-delete",
            "dispatch#1",
            "dispatch#1",
            "dispatch",
            "commitlog-truncate",
            "checkpoint",
        ],
    )
    assert final_state(root) == final_state(ref)
    assert data_files(store_files(root)) == data_files(truth_files(crash_truth))
    assert quarantine_state(q) == quarantine_state(tmp_path / "q-ref")


def test_killed_while_truncating(tmp_path, clean_truth):
    ref = copy_real_store("clean-2topics", tmp_path / "ref")
    flip_middle_record(ref, clean_truth)
    assert runner.invoke(app, ["recover", str(ref), "-q", "--quarantine", str(tmp_path / "q-ref")]).exit_code == 0
    root = copy_real_store("clean-2topics", tmp_path / "run")
    flip_middle_record(root, clean_truth)
    q = tmp_path / "q-run"
    kill_chain(root, q, ["commitlog-truncate#1", "commitlog-truncate", "cq-truncate#1"])
    assert final_state(root) == final_state(ref)
    assert quarantine_state(q) == quarantine_state(tmp_path / "q-ref")


def test_resume_uses_the_journal_not_a_new_plan(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    p = killed_at("recover:commitlog-truncate", "recover", str(root), "-q")  # commit log already truncated
    assert p.returncode == -9
    pending = rec.pending_plan(root)
    assert pending is not None and pending.path == "abnormal"
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "-f", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["createdAt"] == pending.created_ms
    r = runner.invoke(app, ["recover", str(root)])
    assert r.exit_code == 0 and "resuming" in r.stderr
    assert rec.pending_plan(root) is None and not (root / "abort").exists()


def test_recover_command_help():
    r = runner.invoke(app, ["recover", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert r.exit_code == 0
    for opt in ("--dry-run", "--check-crc", "--rebuild-index", "--rebuild-consumequeue", "--quarantine"):
        assert opt in r.output


def test_no_quarantine_and_a_4_9_7_broker(tmp_path, crash_truth):
    # 4.9.7 differs in the duplicate rule and maxPhysicOffset (offset + size); on this store the
    # commit log, the consume queues and the checkpoint come out the same as the 4.4.0 engine's.
    root = copy_real_store("crash-midwrite", tmp_path)
    r = runner.invoke(app, ["recover", str(root), "--no-quarantine", "--broker-version", "4.9.7", "-q"])
    assert r.exit_code == 0, r.output
    assert data_files(store_files(root)) == data_files(truth_files(crash_truth))
    assert not (tmp_path / "store.quarantine").exists()


def test_quarantine_inside_a_data_directory_is_refused(tmp_path):
    root = copy_real_store("crash-midwrite", tmp_path)
    before = store_files(root)
    r = runner.invoke(app, ["recover", str(root), "--quarantine", str(root / "commitlog" / "q")])
    assert r.exit_code == 1
    assert first_err(r).startswith(f"error: --quarantine {root / 'commitlog' / 'q'} is inside {root / 'commitlog'}")
    assert store_files(root) == before


def test_data_ending_at_a_file_boundary(tmp_path, clean_truth):
    # The last file was pre-allocated but never written: the walk ends at its first byte.
    root = copy_real_store("clean-2topics", tmp_path)
    last = root / "commitlog" / "00000000000000098304"
    last.write_bytes(bytes(last.stat().st_size))
    (root / "abort").touch()
    plan, _ = recover(root)
    assert plan.path == "abnormal" and plan.process_offset == 98304
    assert not [a for a in plan.actions if a.kind == "commitlog"]  # the empty file stays, as the broker keeps it
    assert last.stat().st_size == 32768
    assert_serves(root, clean_truth, without={m["offset"] for m in messages(clean_truth) if m["offset"] >= 98304})
    assert plan_of(root).is_empty


# ------------------------------------------------------------- 5.2.0+: the __CRC32# property


def _crc_store(tmp_path: Path, force: bool) -> tuple[Path, dict]:
    root = copy_real_store("5.2.0/crc-property", tmp_path)
    conf = root.parent / "broker.conf"
    conf.write_text(conf.read_text() + f"forceVerifyPropCRC={'true' if force else 'false'}\n")
    truth = load_truth("5.2.0/crc-property")
    victim = [r for r in truth["commitlog"] if r["kind"] == "message"][200]
    path, pos = record_at(root, victim["offset"])
    flip_at = pos + victim["size"] - 25  # a property byte: outside the body, inside the CRC's range
    data = bytearray(path.read_bytes())
    data[flip_at] ^= 0x01
    path.write_bytes(bytes(data))
    (root / "abort").write_text("1")  # abnormal recovery walks every file with the CRC checks
    return root, victim


def test_prop_crc_verified_when_forced(tmp_path):
    root, victim = _crc_store(tmp_path, force=True)
    plan = plan_of(root)
    assert plan.process_offset == victim["offset"]
    assert "CRC" in plan.stop or "checksum" in plan.stop.lower()


def test_prop_crc_not_verified_unless_forced(tmp_path):
    root, victim = _crc_store(tmp_path, force=False)
    plan = plan_of(root)
    assert plan.process_offset == load_truth("5.2.0/crc-property")["maxPhyOffset"] > victim["offset"]


def test_abnormal_recovery_re_dispatches_the_lmq_queues(tmp_path):
    """A 5.2.0 multi-dispatch store that crashed before its %LMQ% queue was written: recovery's
    re-dispatch writes it again, byte for byte as the engine had it."""
    case = "5.2.0/lmq-multi-dispatch"
    root = copy_real_store(case, tmp_path)
    want = {p.relative_to(root).as_posix(): sha(p) for p in (root / "consumequeue").rglob("*") if p.is_file()}
    shutil.rmtree(root / "consumequeue" / "%LMQ%room-1")
    (root / "abort").write_text("4242")
    plan, _ = recover(root)
    assert plan.path == "abnormal" and plan.dispatch is not None
    got = {p.relative_to(root).as_posix(): sha(p) for p in (root / "consumequeue").rglob("*") if p.is_file()}
    assert got == want


def test_abnormal_recovery_re_dispatches_the_batch_queues(tmp_path):
    root = crash_batch_store(tmp_path / "crashed")
    orig = copy_real_store("5.2.0/batch-cq", tmp_path / "orig")
    bcq = "batchconsumequeue/TopicBatchCQ"
    assert {p.name: sha(p) for p in (root / bcq).rglob("*") if p.is_file()} != {
        p.name: sha(p) for p in (orig / bcq).rglob("*") if p.is_file()
    }
    plan, _ = recover(root)
    assert plan.path == "abnormal" and plan.dispatch is not None and plan.records_lost == 0
    for d in ("batchconsumequeue", "consumequeue"):
        want = {p.relative_to(orig).as_posix(): sha(p) for p in (orig / d).rglob("*") if p.is_file()}
        assert {p.relative_to(root).as_posix(): sha(p) for p in (root / d).rglob("*") if p.is_file()} == want
