"""redispatch: rebuilt consume queues and index files equal the real 4.4.0 engine's rebuild."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from conftest import REAL_STORES, copy_real_store, load_rebuild, load_truth, small_record
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec import arrays as property_arrays
from rmqstore.codec import indexfile as ix
from rmqstore.codec.commitlog import encode_blank, encode_properties, encode_record
from rmqstore.codec.framing import PLAIN
from rmqstore.codec.javahash import index_key_hash
from rmqstore.errors import UnsupportedStore
from rmqstore.ops import redispatch as op
from rmqstore.store import open_store
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.walk import columns as columnar
from rmqstore.walk.columns import iter_columns, scan_columns
from rmqstore.walk.requests import ScanStop, scan_requests

runner = CliRunner()


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def files_of(root: Path) -> dict[Path, str]:
    return {p: sha(p) for p in root.rglob("*") if p.is_file() and ".rmqstore" not in p.parts}


def rebuilt_matches(root: Path, case: str) -> None:
    reb = load_rebuild(case)
    assert reb["redispatchExpectation"] == "engine-rebuild"
    want = {f["path"]: f for f in reb["consumeQueueFiles"]}
    got = sorted(
        p.relative_to(root).as_posix()
        for d in ("consumequeue", "batchconsumequeue")
        for p in (root / d).rglob("*")
        if p.is_file()
    )
    assert got == sorted(want)
    for path, f in want.items():
        assert (root / path).stat().st_size == f["size"]
        assert sha(root / path) == f["sha256"], path
    files = sorted(p for p in (root / "index").iterdir() if p.name.isdigit())
    assert [sha(p) for p in files] == [f["sha256"] for f in reb["indexFiles"]]


def comparable(case: str) -> str:
    if load_rebuild(case)["redispatchExpectation"] != "engine-rebuild":
        pytest.skip(load_rebuild(case)["redispatchExpectationReason"])
    return case


def test_cli_rebuild_equals_engine(any_real_case: str, tmp_path: Path) -> None:
    """Consume queues (with the %LMQ% queues and batch consume queues) and index byte for byte."""
    real_case = comparable(any_real_case)
    root = copy_real_store(real_case, tmp_path)
    shutil.rmtree(root / "batchconsumequeue", ignore_errors=True)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    r = runner.invoke(app, ["redispatch", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    rebuilt_matches(root, real_case)
    # what was replaced went to quarantine with a manifest, not lost
    q = list((tmp_path / "store.quarantine").iterdir())
    assert len(q) == 1 and (q[0] / "manifest.json").exists()


def test_queries_answer_as_engine_after_rebuild(any_real_case: str, tmp_path: Path) -> None:
    real_case = comparable(any_real_case)
    root = copy_real_store(real_case, tmp_path)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    assert runner.invoke(app, ["redispatch", str(root)]).exit_code == 0
    truth = load_truth(real_case)
    with open_store(root) as s:
        cfg = s.config
        files, _ = s.index_files()
        maps = [ix.IndexFile(f.read_bytes(), slots=cfg.max_hash_slot_num, entries=cfg.max_index_num) for f in files]
    for q in truth["queries"]:
        found: list[int] = []
        for f in reversed(maps):  # the broker's walk, newest first (§5.4)
            f.select_phy_offsets(f"{q['topic']}#{q['key']}", max_num=64, begin_ms=0, end_ms=2**63 - 1, found=found)
            if len(found) >= 64:
                break
        assert sorted(set(found)) == sorted({h["commitLogOffset"] for h in q["hits"]}), q["key"]


def test_dry_run_reports_missing_entries_and_changes_nothing(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    files = len(list((root / "consumequeue" / "TopicA" / "1").iterdir()))
    shutil.rmtree(root / "consumequeue" / "TopicA" / "1")
    before = files_of(root)
    r = runner.invoke(app, ["redispatch", str(root), "--dry-run", "--format", "json"])
    assert r.exit_code == 0
    plan = json.loads(r.stdout)
    diff = [q for q in plan["queues"] if q["missing"] or q["extra"] or q["different"]]
    truth = load_truth("clean-2topics")
    want = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicA", 1))
    assert diff == [
        {
            "topic": "TopicA",
            "queueId": 1,
            "currentEntries": 0,
            "rebuiltEntries": want["maxOffset"],
            "missing": want["maxOffset"],
            "extra": 0,
            "different": 0,
            "filesDiffer": files,  # every file the rebuild has, none in the store
        }
    ]
    assert files_of(root) == before


def test_stray_tail_bytes_are_a_difference_and_go_to_the_quarantine(tmp_path: Path) -> None:
    """A queue file with 3 bytes more holds the same entries, but the broker refuses a file of the
    wrong size: redispatch rewrites it, and the old file with its stray bytes is kept."""
    root = copy_real_store("clean-2topics", tmp_path / "s")
    q = tmp_path / "q"
    f = sorted((root / "consumequeue" / "TopicB" / "2").iterdir())[-1]
    old = f.read_bytes()
    f.write_bytes(old + b"\x01\x02\x03")
    r = runner.invoke(app, ["redispatch", str(root), "--dry-run", "-f", "json"])
    assert r.exit_code == 0, r.output
    diff = [d for d in json.loads(r.stdout)["queues"] if d["filesDiffer"]]
    assert [(d["topic"], d["queueId"], d["filesDiffer"], d["missing"], d["different"]) for d in diff] == [
        ("TopicB", 2, 1, 0, 0)
    ]
    r = runner.invoke(app, ["redispatch", str(root), "-q", "--quarantine", str(q)])
    assert r.exit_code == 0 and "identical" not in r.stderr, r.output
    assert f.read_bytes() == old
    kept = [p for p in q.rglob(f.name) if p.parent.name == "2" and p.parent.parent.name == "TopicB"]
    assert [p.read_bytes() for p in kept] == [old + b"\x01\x02\x03"]
    again = runner.invoke(app, ["redispatch", str(root), "-q"])
    assert again.exit_code == 0 and "identical to the current ones" in again.stderr


def test_nothing_to_do_on_a_consistent_store(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    before = files_of(root)
    r = runner.invoke(app, ["redispatch", str(root)])
    assert r.exit_code == 0
    assert "nothing to do" in r.stderr
    assert files_of(root) == before


def test_topic_filter_rebuilds_only_that_topic(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicB")
    index_before = {p.name: sha(p) for p in (root / "index").iterdir()}
    a_before = files_of(root / "consumequeue" / "TopicA")
    r = runner.invoke(app, ["redispatch", str(root), "--topic", "TopicB"])
    assert r.exit_code == 0, r.output
    assert {p.name: sha(p) for p in (root / "index").iterdir()} == index_before
    assert files_of(root / "consumequeue" / "TopicA") == a_before
    reb = {f["path"]: f["sha256"] for f in load_rebuild("clean-2topics")["consumeQueueFiles"]}
    got = files_of(root / "consumequeue" / "TopicB")
    assert got and all(h == reb[p.relative_to(root).as_posix()] for p, h in got.items())


def test_output_dir_builds_beside_and_leaves_store(tmp_path: Path) -> None:
    root = copy_real_store("delay-tx-retry", tmp_path)
    before = files_of(root)
    out = tmp_path / "out"
    r = runner.invoke(app, ["redispatch", str(root), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert files_of(root) == before
    rebuilt_matches(out, "delay-tx-retry")


def test_killed_swap_is_finished_by_rerun(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    shutil.rmtree(root / "index")
    q = tmp_path / "q"
    with open_store(root, writable=True) as s:
        plan = op.plan_redispatch(s)
    journal = root / ".rmqstore" / "redispatch" / "redispatch.journal.json"  # where earlier versions kept it
    # as if killed after the journal was written and the old consume queue moved to quarantine
    journal.write_text(
        json.dumps(
            {
                "build": str(plan.build_root),
                "quarantine": str(q),
                "parts": ["consumequeue", "index"],
                "checkpoint": plan.checkpoint_after,
                "done": [],
            }
        )
    )
    q.mkdir()
    os.replace(root / "consumequeue", q / "consumequeue")
    r = runner.invoke(app, ["redispatch", str(root)])
    assert r.exit_code == 0, r.output
    assert "interrupted" in r.stderr
    rebuilt_matches(root, "clean-2topics")
    assert not journal.exists()


def test_refuses_a_locked_store(tmp_path: Path) -> None:
    root = copy_real_store("delay-tx-retry", tmp_path)
    code = (
        "import fcntl,os,sys,time; fd=os.open(sys.argv[1],os.O_RDWR); fcntl.lockf(fd,fcntl.LOCK_EX,1,0); "
        "print('locked',flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = files_of(root)
        r = runner.invoke(app, ["redispatch", str(root)])
        assert r.exit_code == 4
        assert "held by a running broker" in r.stderr
        assert files_of(root) == before
    finally:
        holder.kill()
        holder.wait()


# --- the vectorised scanner equals the exact per-record path --------------------------------

_names = st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "WAIT", "DELAY", "X", "", "KEYS\x01", "中"])
_values = st.text(alphabet=st.sampled_from(list("ab  \x01\x02中😀Z9")), max_size=12)


@st.composite
def records(draw: st.DrawFn) -> list[bytes]:
    out = []
    phy = 0
    for i in range(draw(st.integers(1, 12))):
        items = draw(st.lists(st.tuples(_names, _values), max_size=5))
        raw = encode_properties(items)
        if draw(st.booleans()):
            raw = raw[: draw(st.integers(0, 60))]
        topic = draw(st.sampled_from(["TopicA", "TopicB", "SCHEDULE_TOPIC_XXXX", "Tö"]))
        flag = draw(st.sampled_from([0, 0, 0x10 | 0x20, 0x4, 0x8, 0xC]))
        born = b"\x20\x01" + bytes(14) if flag & 0x10 else b"\x7f\0\0\1"
        store = b"\x20\x01" + bytes(13) + b"\x02" if flag & 0x20 else b"\x7f\0\0\2"
        rec = encode_record(
            topic=topic,
            queue_id=i % 3,
            queue_offset=i,
            phy_offset=phy,
            sys_flag=flag,
            born_timestamp_ms=1700000000000 + i,
            born_addr=born,
            born_port=1,
            store_timestamp_ms=1700000000000 + i,
            store_addr=store,
            store_port=10911,
            body=draw(st.binary(max_size=20)),
            properties=raw,
            v2=draw(st.booleans()) and i % 4 == 0,
        )
        out.append(rec)
        phy += len(rec)
    return out


def _add_columns(c, rows: list[tuple], keys: list[tuple[int, int]]) -> None:
    """The requests and index keys of one column batch, as ``_via_records`` lists them."""
    base = len(rows)
    columns = (c.queue_id, c.phy, c.size, c.tags_code, c.store_ts, c.queue_offset, c.sys_flag)
    for k, values in enumerate(zip(*(a.tolist() for a in columns), strict=True)):
        rows.append((c.topics[c.topic_id[k]], *values))
    keys += [(base + int(r), int(h)) for r, h in zip(c.key_rec, c.key_hash, strict=True)]


def _via_columns(buf: bytes, cfg: StoreConfig) -> tuple[list[tuple], list[tuple[int, int]], int, str]:
    batches, stop = scan_columns(buf, Segment(Path("f"), 0, len(buf)), cfg)
    rows, keys = [], []
    for c in batches:
        _add_columns(c, rows, keys)
    return rows, keys, stop.pos, stop.reason


def _via_records(buf: bytes, cfg: StoreConfig) -> tuple[list[tuple], list[tuple[int, int]], int, str]:
    reqs, stop = scan_requests(buf, Segment(Path("f"), 0, len(buf)), cfg)
    rows, keys = [], []
    for i, r in enumerate(reqs):
        rows.append(
            (r.topic, r.queue_id, r.phy_offset, r.size, r.tags_code, r.store_timestamp_ms, r.queue_offset, r.sys_flag)
        )
        if r.uniq_key is not None:
            keys.append((i, index_key_hash(f"{r.topic}#{r.uniq_key}")))
        for k in (r.keys or "").split(" "):
            if k:
                keys.append((i, index_key_hash(f"{r.topic}#{k}")))
    return rows, keys, stop.pos, stop.reason


@pytest.mark.parametrize("broker", ["4.4.0", "4.9.7"])
@settings(max_examples=60, deadline=None)
@given(recs=records(), tail=st.sampled_from(["zeros", "blank", "garbage"]))
def test_columnar_scan_equals_per_record_scan(broker: str, recs: list[bytes], tail: str) -> None:
    cfg = StoreConfig(store_root=Path("."), broker=broker)
    buf = b"".join(recs)
    buf += {"zeros": bytes(16), "blank": encode_blank(16) + bytes(8), "garbage": b"\x00\x00\x00\x99junkjunk"}[tail]
    assert _via_columns(buf, cfg) == _via_records(buf, cfg)


@settings(max_examples=40, deadline=None)
@given(recs=records())
def test_columnar_scan_without_layouts_equals_per_record_scan(recs: list[bytes]) -> None:
    """The property items of the record arrays (the path for batches of many layouts) give the same scan."""
    cfg = StoreConfig(store_root=Path("."), broker="4.9.7")
    buf = b"".join(recs) + bytes(16)
    with mock.patch.object(property_arrays, "_MAX_LAYOUTS", 0):
        assert _via_columns(buf, cfg) == _via_records(buf, cfg)


def test_columnar_scan_tells_the_two_separators_apart() -> None:
    """Two property strings with separators at the same places, 0x01 and 0x02 swapped: only the first has TAGS."""
    recs, phy = [], 0
    for props in (b"TAGS\x01abc\x02", b"TAGS\x02abc\x01") * 3:
        recs.append(
            encode_record(
                topic="T",
                queue_id=0,
                queue_offset=len(recs),
                phy_offset=phy,
                born_timestamp_ms=1,
                born_addr=b"\x7f\0\0\1",
                born_port=1,
                store_timestamp_ms=1,
                store_addr=b"\x7f\0\0\1",
                store_port=1,
                body=b"x",
                properties=props,
            )
        )
        phy += len(recs[-1])
    cfg = StoreConfig(store_root=Path("."), broker="4.9.7")
    got, want = _via_columns(b"".join(recs) + bytes(16), cfg), _via_records(b"".join(recs) + bytes(16), cfg)
    assert got == want
    assert [row[4] != 0 for row in got[0]] == [True, False] * 3


def _real_commitlog() -> bytes:
    src = REAL_STORES / "clean-2topics" / "store" / "commitlog" / "00000000000000000000"
    if not src.exists():
        pytest.skip("real stores absent")
    return src.read_bytes()


def _corrupted(data: bytes, rnd: random.Random) -> bytes:
    """A copy with a few flipped bits and, sometimes, a random int written over a head field."""
    b = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        pos = rnd.randrange(len(b))
        b[pos] ^= 1 << rnd.randrange(8)
    if rnd.random() < 0.3:
        struct.pack_into(">i", b, rnd.randrange(0, 3000, 4), rnd.randint(-5, 400))
    return bytes(b)


def test_columnar_scan_on_random_corruption_of_a_real_file() -> None:
    data = _real_commitlog()
    cfg = StoreConfig(store_root=Path("."))
    rnd = random.Random(7)
    for _ in range(40):
        b = _corrupted(data, rnd)
        assert _via_columns(b, cfg) == _via_records(b, cfg)


# --- the parallel scan (ranges walked and decoded by worker processes) equals the serial one ---


def _via_parallel(buf: bytes, cfg: StoreConfig, part_size: int) -> tuple[list[tuple], list[tuple[int, int]], int, str]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000"
        path.write_bytes(buf)
        rows, keys = [], []
        stop = None
        seg = Segment(path, 0, len(buf))
        for _, item in iter_columns([seg], cfg, workers=2, part_size=part_size):
            if isinstance(item, ScanStop):
                stop = item
                continue
            _add_columns(item, rows, keys)
    assert stop is not None
    return rows, keys, stop.pos, stop.reason


@settings(max_examples=40, deadline=None)
@given(
    recs=records(),
    tail=st.sampled_from(["zeros", "blank", "garbage"]),
    part=st.integers(32, 600),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3),
)
def test_parallel_scan_equals_per_record_scan(recs: list[bytes], tail: str, part: int, flips: list) -> None:
    cfg = StoreConfig(store_root=Path("."))
    buf = bytearray(b"".join(recs))
    buf += {"zeros": bytes(16), "blank": encode_blank(16) + bytes(8), "garbage": b"\x00\x00\x00\x99junkjunk"}[tail]
    for at, bit in flips:  # damage: the walk must stop, or a worker's pick-up be refused, as the broker's scan
        buf[at % len(buf)] ^= 1 << bit
    assert _via_parallel(bytes(buf), cfg, part) == _via_records(bytes(buf), cfg)


def test_a_totalsize_below_the_head_is_skipped_as_a_size_mismatch() -> None:
    """The dispatcher reads every field from the file's buffer and only then compares TOTALSIZE: a size
    smaller than the fixed head is a mismatch it skips by that size, in every scan alike."""
    cfg = StoreConfig(store_root=Path("."))
    rec = bytearray(small_record(topic="TopicA", body=b""))
    rec[0:4] = (65).to_bytes(4, "big")
    buf = bytes(rec) + bytes(16)
    expected = ([], [], 65, "invalid")  # skipped to byte 65, where no record starts
    assert _via_records(buf, cfg) == expected
    assert _via_columns(buf, cfg) == expected
    assert _via_parallel(buf, cfg, 32) == expected


def test_parallel_scan_on_random_corruption_of_a_real_file() -> None:
    data = _real_commitlog()
    cfg = StoreConfig(store_root=Path("."))
    rnd = random.Random(11)
    assert _via_parallel(data, cfg, 1000) == _via_records(data, cfg)
    for _ in range(25):
        b = _corrupted(data, rnd)
        assert _via_parallel(b, cfg, rnd.randint(200, 5000)) == _via_records(b, cfg)


def test_parallel_pick_up_refused_when_a_body_holds_a_record_copy() -> None:
    """A body that carries a whole record whose stored offset equals the body's own position
    looks like a record start to a worker; the chain check must refuse it."""
    cfg = StoreConfig(store_root=Path("."))

    def rec(phy: int, body: bytes, i: int) -> bytes:
        return encode_record(
            topic="T", queue_id=0, queue_offset=i, phy_offset=phy, sys_flag=0,
            born_timestamp_ms=1, born_addr=b"\x7f\0\0\1", born_port=1, store_timestamp_ms=1,
            store_addr=b"\x7f\0\0\2", store_port=2, body=body, properties=encode_properties([("KEYS", f"k{i}")]),
        )  # fmt: skip

    first = rec(0, b"x" * 40, 0)
    probe = rec(0, b"", 9)
    # the inner copy sits 4 bytes into the second record's body (88 header bytes + 4)
    inner_at = len(first) + 88 + 4
    inner = rec(inner_at, b"", 9)
    assert len(inner) == len(probe)
    second = rec(len(first), b"pad!" + inner + b"tail", 1)
    third = rec(len(first) + len(second), b"z", 2)
    buf = first + second + third + bytes(64)
    # a worker whose range starts just before the copy picks it up: a real decoy
    assert PLAIN.find_chained(np.frombuffer(buf, np.uint8), 0, inner_at - 10, len(buf)) == inner_at
    for part in (inner_at - 10, inner_at - 1, inner_at, len(first) + 10):
        assert _via_parallel(buf, cfg, part) == _via_records(buf, cfg)


def test_redispatch_from_parallel_ranges_equals_engine(
    real_case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "PART_SIZE", 1500)  # many ranges per 32 KiB file
    root = copy_real_store(real_case, tmp_path)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    r = runner.invoke(app, ["redispatch", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    rebuilt_matches(root, real_case)


@pytest.mark.parametrize("case", ["5.2.0/batch-cq", "5.2.0/lmq-multi-dispatch"])
def test_redispatch_from_an_offset_continues_batch_and_lmq_queues(case: str, tmp_path: Path) -> None:
    """--from-offset continues the current files: a batch or %LMQ% queue keeps what it has and gets
    the rest once, as the engine's own files."""
    root = copy_real_store(case, tmp_path)
    truth = load_truth(case)
    recs = [r for r in truth["commitlog"] if r["kind"] == "message"]
    middle = recs[len(recs) // 2]["offset"]
    want = files_of(root)
    for d in ("batchconsumequeue", "consumequeue"):
        for p in (root / d).rglob("*") if (root / d).is_dir() else ():
            if p.is_file() and ("%LMQ%" in p.as_posix() or d == "batchconsumequeue"):
                data = bytearray(p.read_bytes())
                unit = 46 if d == "batchconsumequeue" else 20
                keep = next(
                    (
                        i
                        for i in range(0, len(data) - unit + 1, unit)
                        if int.from_bytes(data[i : i + 8], "big") >= middle
                    ),
                    len(data),
                )
                data[keep:] = bytes(len(data) - keep)  # the entries of the second half never written
                p.write_bytes(bytes(data))
    r = runner.invoke(app, ["redispatch", str(root), "--from-offset", str(recs[len(recs) // 4]["offset"]), "-q"])
    assert r.exit_code == 0, r.output
    got = {p: h for p, h in files_of(root).items() if "consumequeue" in p.as_posix()}
    assert got == {p: h for p, h in want.items() if "consumequeue" in p.as_posix()}


@pytest.mark.parametrize("case", ["5.2.0/batch-cq", "5.2.0/lmq-multi-dispatch"])
def test_other_engines_refuse_stores_needing_lmq_or_batch_queues(case: str, tmp_path: Path) -> None:
    root = copy_real_store(case, tmp_path)
    before = files_of(root)
    with open_store(root) as st, pytest.raises(UnsupportedStore, match="use --engine local"):
        op.plan_redispatch(st, engine="spark", dry_run=True)
    assert files_of(root) == before
