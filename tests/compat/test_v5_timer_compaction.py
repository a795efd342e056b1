"""5.x timer checkpoint (``config/timercheck``) and compaction store (``compaction/compactionLog``,
``compactionCq``, ``position-checkpoint``): codecs from the layout of the apache/rocketmq 5.x source
(``TimerCheckpoint``, ``CompactionLog``, ``SparseConsumeQueue``), the real files, and the dumps."""

from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

import pytest
from conftest import REAL_WORLD, case_dir, copy_real_store
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec import compaction, timercheck
from rmqstore.codec.commitlog import BLANK_MAGIC, Blank, Record, decode_record
from rmqstore.codec.javahash import tags_code
from rmqstore.errors import CorruptData

runner = CliRunner()
LONG = st.integers(-(2**63), 2**63 - 1)
REAL_TIMERCHECKS = sorted(REAL_WORLD.rglob("timercheck")) if REAL_WORLD.is_dir() else []


# ------------------------------------------------------------------------------------ timercheck


@given(st.tuples(*[LONG] * 7))
def test_timercheck_round_trip(values):
    cp = timercheck.TimerCheckpoint(*values)
    raw = timercheck.encode(cp)
    assert len(raw) == 56
    # TimerCheckpoint.flush: putLong at 0, 8, ..., 48, big-endian
    assert [struct.unpack_from(">q", raw, i)[0] for i in range(0, 56, 8)] == list(values)
    assert timercheck.decode(raw + bytes(4096 - 56)) == cp


@given(st.tuples(*[LONG] * 4))
def test_timercheck_without_data_version(values):
    """A 32-byte checkpoint (written before the data version existed) decodes with a zero data version."""
    raw = struct.pack(">4q", *values)
    cp = timercheck.decode(raw)
    assert (cp.last_read_time_ms, cp.last_timer_log_flush_pos) == values[:2]
    assert (cp.state_version, cp.data_timestamp_ms, cp.data_counter) == (0, 0, 0)


def test_timercheck_too_short_is_corrupt():
    with pytest.raises(CorruptData, match="at least 32"):
        timercheck.decode(bytes(31), path="x/timercheck")


@pytest.mark.skipif(not REAL_TIMERCHECKS, reason="no real timercheck files")
@pytest.mark.parametrize("path", REAL_TIMERCHECKS, ids=lambda p: str(p.relative_to(REAL_WORLD)))
def test_real_timercheck_files(path):
    """Every real broker's timercheck: a page, 56 bytes of fields and zeros after; re-encoding gives the
    same bytes; the data version was stamped after the last read time (both are the broker's clock)."""
    raw = path.read_bytes()
    assert len(raw) == timercheck.FILE_SIZE
    cp = timercheck.decode(raw)
    assert timercheck.encode(cp) == raw[:56]
    assert not any(raw[56:])
    assert cp.last_read_time_ms > 1_600_000_000_000
    assert cp.data_timestamp_ms >= cp.last_read_time_ms
    assert cp.data_counter >= 0


def _store_with_timercheck(tmp_path: Path) -> tuple[Path, bytes]:
    root = copy_real_store("5.2.0/clean-5x-mixed", tmp_path)
    raw = timercheck.encode(timercheck.TimerCheckpoint(1_700_000_000_000, 4096, 17, 0, 3, 1_700_000_000_123, 42))
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "timercheck").write_bytes(raw + bytes(4096 - len(raw)))
    return root, raw


def test_dump_timercheck_every_format(tmp_path):
    root, _ = _store_with_timercheck(tmp_path)
    r = runner.invoke(app, ["dump", "timercheck", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert row["lastReadTimeMs"] == 1_700_000_000_000
    assert row["lastTimerLogFlushPos"] == 4096
    assert row["lastTimerQueueOffset"] == 17
    assert (row["stateVersion"], row["dataVersionTimestamp"], row["dataVersionCounter"]) == (3, 1_700_000_000_123, 42)
    assert row["lastReadTime"].startswith("2023-11-14T22:13:20")
    r = runner.invoke(app, ["dump", "timercheck", str(root), "--format", "csv"])
    (csv_row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(csv_row) == list(row_keys())
    assert csv_row["dataVersionCounter"] == "42"
    r = runner.invoke(app, ["dump", "timercheck", str(root), "--format", "plain"])
    assert "1700000000123" in r.stdout


def row_keys():
    from commands import _fields

    return _fields.TIMER_CHECKPOINT


def test_dump_timercheck_absent_is_one_line(tmp_path):
    root = copy_real_store("5.2.0/clean-5x-mixed", tmp_path)
    r = runner.invoke(app, ["dump", "timercheck", str(root)])
    assert r.exit_code == 1
    assert "no timer checkpoint" in r.stderr and "Traceback" not in r.output


# ------------------------------------------------------------------------------------ compactionCq


UNIT = st.tuples(
    st.integers(0, 2**63 - 1),
    st.integers(1, 2**31 - 1),
    LONG,
    LONG,
    st.integers(0, 2**63 - 1),
)


@given(st.lists(UNIT, max_size=20), st.booleans())
def test_compaction_cq_round_trip(units, closed):
    raw = b"".join(compaction.encode_unit(*u) for u in units) + (compaction.END_UNIT if closed else b"")
    buf = raw + bytes(46 * 3)
    got = compaction.cq_units(buf)
    assert [(u.entry.phy_offset, u.entry.size, u.entry.tags_code, u.entry.store_timestamp_ms, u.entry.base_offset)
            for u in got if u.kind == "unit"] == units  # fmt: skip
    assert all(u.entry.batch_size == 1 and u.entry.compacted_offset == -1 for u in got if u.kind == "unit")
    assert [u.pos for u in got] == list(range(0, 46 * len(got), 46))
    assert [u.kind for u in got][len(units) :] == (["end"] if closed else [])


def test_compaction_cq_unit_layout():
    """CompactionAppendMessageCallback: offset 8, size 4, tagsCode 8, store time 8, base offset 8, batch 2,
    compacted offset 4 (-1), reserved 4; putEndPositionInfo: offset -1, size 0, zeros, compacted -1."""
    assert compaction.encode_unit(1, 2, 3, 4, 5) == struct.pack(">qiqqqhii", 1, 2, 3, 4, 5, 1, -1, 0)
    assert compaction.END_UNIT == struct.pack(">qiqqqhii", -1, 0, 0, 0, 0, 0, -1, 0)


# ------------------------------------------------------------------------------------ compactionLog


def _real_records(n: int) -> list[Record]:
    """The first ``n`` keyed records of the real 5.2.0 commit log (the test skips without it)."""
    log = case_dir("5.2.0/clean-5x-mixed") / "store" / "commitlog"
    if not log.is_dir():
        pytest.skip(f"real stores not found at {log}")
    first = sorted(log.iterdir())[0]
    buf, out, pos = first.read_bytes(), [], 0
    while len(out) < n:
        rec = decode_record(buf, pos, broker="5.2.0")
        assert isinstance(rec, Record)
        if rec.keys:
            out.append(rec)
        pos += rec.total_size
    return out


def _raw(rec: Record) -> bytes:
    first = sorted((case_dir("5.2.0/clean-5x-mixed") / "store" / "commitlog").iterdir())[0]
    return first.read_bytes()[rec.pos : rec.pos + rec.total_size]


def build_compaction_queue(root: Path, topic: str, qid: int, recs: list[Record], file_size: int) -> list[int]:
    """Files as CompactionLog.asyncPutMessage writes them: the record bytes with PHYSICALOFFSET (byte 28)
    set to the compaction log position, a blank (maxBlank, blank magic) closing a file the next record
    does not fit, and one compactionCq file per log file, named alike, closed by the end unit."""
    log_dir = root / "compaction" / "compactionLog" / topic / str(qid)
    cq_dir = root / "compaction" / "compactionCq" / topic / str(qid)
    log_dir.mkdir(parents=True)
    cq_dir.mkdir(parents=True)
    files: dict[int, tuple[bytearray, bytearray]] = {}
    base, pos, positions = 0, 0, []
    for rec in recs:
        raw = bytearray(_raw(rec))
        if pos + len(raw) + 8 > file_size:
            log, cq = files[base]
            log[pos : pos + 8] = struct.pack(">ii", file_size - pos, BLANK_MAGIC)
            cq += compaction.END_UNIT
            base, pos = base + file_size, 0
        log, cq = files.setdefault(base, (bytearray(file_size), bytearray()))
        struct.pack_into(">q", raw, 28, base + pos)
        log[pos : pos + len(raw)] = raw
        cq += compaction.encode_unit(
            base + pos, len(raw), tags_code(rec.tags), rec.store_timestamp_ms, rec.queue_offset
        )
        positions.append(base + pos)
        pos += len(raw)
    for b, (log, cq) in files.items():
        (log_dir / f"{b:020d}").write_bytes(bytes(log))
        (cq_dir / f"{b:020d}").write_bytes(bytes(cq) + bytes(46 * 10 - len(cq) % (46 * 10)))
    return positions


def test_compaction_log_records_decode(tmp_path):
    recs = _real_records(12)
    positions = build_compaction_queue(tmp_path, "TopicA", 0, recs, 2048)
    log_dir = tmp_path / "compaction" / "compactionLog" / "TopicA" / "0"
    seen: list[Record] = []
    blanks = 0
    for f in sorted(log_dir.iterdir()):
        for rec in compaction.log_records(f.read_bytes(), path=str(f), file_from=int(f.name)):
            if isinstance(rec, Blank):
                blanks += 1
                assert rec.phy_offset + rec.total_size == int(f.name) + 2048
            else:
                seen.append(rec)
    assert blanks == len(list(log_dir.iterdir())) - 1 > 0
    assert [r.phy_offset for r in seen] == positions
    assert [(r.topic, r.queue_offset, r.keys, r.body) for r in seen] == [
        (r.topic, r.queue_offset, r.keys, r.body) for r in recs
    ]


def test_compaction_log_bad_record_names_file_and_offset(tmp_path):
    recs = _real_records(2)
    build_compaction_queue(tmp_path, "TopicA", 0, recs, 4096)
    f = tmp_path / "compaction" / "compactionLog" / "TopicA" / "0" / f"{0:020d}"
    raw = bytearray(f.read_bytes())
    raw[recs[0].total_size + 4 : recs[0].total_size + 8] = b"\x12\x34\x56\x78"  # the second record's magic
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptData) as e:
        list(compaction.log_records(bytes(raw), path=str(f)))
    assert e.value.pos == recs[0].total_size


def _compacted_store(tmp_path: Path) -> tuple[Path, list[Record], list[int]]:
    root = copy_real_store("5.2.0/clean-5x-mixed", tmp_path)
    recs = [r for r in _real_records(40) if r.topic == "TopicA" and r.queue_id == 1][:8]
    return root, recs, build_compaction_queue(root, "TopicA", 1, recs, 700)


def test_dump_compaction_log_and_cq(tmp_path):
    root, recs, positions = _compacted_store(tmp_path)
    r = runner.invoke(app, ["dump", "compaction-log", str(root), "TopicA", "1", "--format", "ndjson"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    msgs = [x for x in rows if x["kind"] == "message"]
    assert [m["commitLogOffset"] for m in msgs] == positions
    assert [m["queueOffset"] for m in msgs] == [x.queue_offset for x in recs]
    assert [m["keys"] for m in msgs] == [x.keys for x in recs]
    assert {x["kind"] for x in rows} == {"message", "blank"}
    r = runner.invoke(app, ["dump", "compaction-cq", str(root), "TopicA", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    units = json.loads(r.stdout)
    assert [u["compactionLogOffset"] for u in units if u["kind"] == "unit"] == positions
    assert [u["queueOffset"] for u in units if u["kind"] == "unit"] == [x.queue_offset for x in recs]
    assert [u["size"] for u in units if u["kind"] == "unit"] == [x.total_size for x in recs]
    ends = [u for u in units if u["kind"] == "end"]
    assert len(ends) == len({u["file"] for u in units}) - 1 and all(e["compactionLogOffset"] == -1 for e in ends)
    r = runner.invoke(app, ["dump", "compaction-cq", str(root), "TopicA", "1", "--format", "csv"])
    from commands import _fields

    assert r.stdout.splitlines()[0].split(",") == list(_fields.COMPACTION_CQ)
    r = runner.invoke(app, ["dump", "compaction-log", str(root), "TopicA", "1", "--format", "plain"])
    assert r.exit_code == 0 and str(positions[-1]) in r.stdout


def test_dump_compaction_refuses_bad_topic_and_missing_queue(tmp_path):
    root, _, _ = _compacted_store(tmp_path)
    r = runner.invoke(app, ["dump", "compaction-log", str(root), "../../etc", "0"])
    assert r.exit_code == 1 and "no directory can have this name" in r.stderr
    r = runner.invoke(app, ["dump", "compaction-cq", str(root), "TopicB", "0"])
    assert r.exit_code == 1 and "no such compaction queue" in r.stderr


def test_info_lists_compaction_queues_and_timercheck(tmp_path):
    root, _, _ = _compacted_store(tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "timercheck").write_bytes(bytes(4096))
    r = runner.invoke(app, ["info", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "compaction/compactionLog/TopicA/1/00000000000000000000" in text
    assert "compaction/compactionCq/TopicA/1/00000000000000000000" in text
    assert "config/timercheck" in text


@pytest.mark.parametrize("case", ["batch-cq", "clean-5x-mixed", "crc-property", "lmq-multi-dispatch", "long-topic-v2"])
def test_real_position_checkpoint(case):
    """The 5.2.0 engine's compaction service wrote position-checkpoint (nothing compacted: empty)."""
    store = case_dir(f"5.2.0/{case}") / "store"
    if not (store / "compaction" / "position-checkpoint").is_file():
        pytest.skip("no real 5.2.0 store")
    r = runner.invoke(app, ["dump", "compaction", str(store), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"empty": True, "queueOffsetMap": {}}


def test_corrupt_position_checkpoint_is_reported_not_shown_empty(tmp_path):
    """Unparsable and no .bak: the engine would start from no positions; dump refuses (exit 6, file and
    byte named) instead of showing {}, check reports it; a good .bak is what the engine loads and shown."""
    store = copy_real_store("5.2.0/lmq-multi-dispatch", tmp_path / "s")
    cp = store / "compaction" / "position-checkpoint"
    good = cp.read_bytes()
    cp.write_bytes(b'{\n\t"empty":true,\n\t"queueOffsetMap":{x}\n}')
    r = runner.invoke(app, ["dump", "compaction", str(store), "-f", "json"])
    assert r.exit_code == 6 and r.stdout == "", r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: {cp}: does not parse") and "at byte 37" in line, line
    c = runner.invoke(app, ["check", str(store), "-f", "json"])
    found = [p for p in json.loads(c.stdout)["problems"] if p["path"].endswith("position-checkpoint")]
    assert c.exit_code == 3 and [(p["severity"], p["pos"]) for p in found] == [("error", 37)], found
    (cp.parent / "position-checkpoint.bak").write_bytes(good)
    r = runner.invoke(app, ["dump", "compaction", str(store), "-f", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"empty": True, "queueOffsetMap": {}}, r.output
