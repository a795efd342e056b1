"""The RocksDB consume queue (5.2.0 ``storeType=defaultRocksDB``) behind the consume queue store interface, on
the store the 5.2.0 engine wrote: every unit and row decoded as truth.json lists them, the queues' bounds as
the engine reports them, a read-only open that leaves the directory as it was, and the one line naming the
``rocksdb`` extra when rocksdict is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdbcq import decoded, engine_rows, need_rocksdict, rocksdb_store, tree_digest, truth

from rmqstore.codec import rocksdbcq as codec
from rmqstore.errors import CorruptData
from rmqstore.store import open_store
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueues

REPO = Path(__file__).resolve().parents[2]


def test_codec_round_trips_and_names_bad_keys() -> None:
    key = codec.unit_key("TopicA", 3, 49)
    assert codec.decode_unit_key(key) == codec.UnitKey("TopicA", 3, 49)
    assert codec.decode_unit(codec.encode_unit(101666, 258, -5, 1795672199574)) == (101666, 258, -5, 1795672199574)
    row = codec.decode_offset_row(codec.offset_key("TopicB", 2, codec.MIN), codec.encode_offset(1172, 0))
    assert (row.topic, row.queue_id, row.kind, row.phy_offset, row.queue_offset) == ("TopicB", 2, "min", 1172, 0)
    with pytest.raises(CorruptData, match="topic length 99 does not frame"):
        codec.decode_unit_key(b"\x00\x00\x00\x63\x01TopicA\x01")
    with pytest.raises(CorruptData, match="unit value of 20 bytes, expected 28"):
        codec.decode_unit(bytes(20))


def test_every_unit_and_row_as_the_engine_wrote_them(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    assert decoded(root) == engine_rows()


def test_queues_through_the_interface_as_the_engine_reports_them(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    t = truth()
    with open_store(root) as st:
        assert isinstance(st.consume_queues, RocksDBConsumeQueues)
        listed = [(q.topic, q.queue_id) for q in st.consume_queues.queues()]
        assert listed == [(q["topic"], q["queueId"]) for q in t["queues"]]
        for tq in t["queues"]:
            q = st.consume_queues.queue(tq["topic"], tq["queueId"])
            rng = q.queue_range(st.min_phy_offset())
            assert (rng.min_offset, rng.max_offset) == (tq["minOffset"], tq["maxOffset"])
            assert q.tail().max_physic_offset == tq["maxPhysicOffset"]  # the record's start, as the engine says
            first, units = q.units()
            got = [
                {
                    "queueOffset": first + i,
                    "commitLogOffset": int(u["phy_offset"]),
                    "size": int(u["size"]),
                    "tagsCode": int(u["tags_code"]),
                    "storeTimestamp": int(u["store_timestamp_ms"]),
                }  # fmt: skip
                for i, u in enumerate(units)
            ]
            assert got == tq["entries"]
            # files() pages the queue as mappedFileSizeConsumeQueue would: 400 bytes = 20 units a run
            segs, problems = q.files()
            assert [s.base_offset for s in segs] == [0, 400, 800] and problems == []
            assert len(q.read(segs[1])) == 20 and int(q.read(segs[1])[0]["phy_offset"]) == got[20]["commitLogOffset"]
        assert st.consume_queues.checkpoint() == t["maxPhyOffset"]


def test_a_read_only_open_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    before = tree_digest(root)
    dirs = set(os.listdir(tmp_path))
    for argv in (["info", str(root)], ["check", str(root)], ["dump", "consumequeue", str(root), "TopicA", "0"]):
        p = subprocess.run([sys.executable, "-m", "rmqstore.cli", *argv], capture_output=True, text=True, cwd=REPO)
        assert p.returncode == 0, p.stderr
    assert tree_digest(root) == before  # bytes and modification times: no LOCK taken, no file added
    assert set(os.listdir(tmp_path)) == dirs


def test_without_rocksdict_one_line_names_the_extra(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    hidden = tmp_path / "hidden" / "rocksdict"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": f"{hidden.parent}{os.pathsep}{REPO}"}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rmqstore.cli", *argv], capture_output=True, text=True, env=env)

    for argv in (["info"], ["check"], ["offsets"], ["dump", "consumequeue"], ["query", "offset"]):
        extra = ["TopicA", "0"] if argv[0] == "dump" else (["TopicA", "0", "1"] if argv[0] == "query" else [])
        p = run(*argv, str(root), *extra)
        assert p.returncode == 1, (argv, p.stderr)
        assert p.stderr.strip().splitlines() == [
            "error: the consume queues are a RocksDB database (storeType=defaultRocksDB); reading it needs the "
            "'rocksdb' extra: pip install 'rmqstore[rocksdb]'"
        ]
    for argv in (["dump", "commitlog", str(root)], ["dump", "index", str(root)], ["dump", "checkpoint", str(root)],
                 ["query", "key", str(root), "TopicA", "order-0"]):  # fmt: skip
        p = run(*argv)
        assert p.returncode == 0, (argv, p.stderr)


def test_rocksdict_is_imported_only_where_the_database_is_opened() -> None:
    need_rocksdict()
    code = "import sys, rmqstore.store, rmqstore.ops.check, rmqstore.ops.redispatch; print('rocksdict' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "False", p.stderr


def test_offsets_lag_against_the_database_and_write_refused(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rmqstore.cli import app

    root = rocksdb_store(tmp_path)
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"TopicA@G":{0:7,1:50}}}')
    r = CliRunner().invoke(app, ["offsets", str(root), "--format", "ndjson"])
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if '"queueId"' in line]
    assert '"consumerOffset":7' in rows[0] and '"maxOffset":50' in rows[0] and '"lag":43' in rows[0], rows
    r = CliRunner().invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x"])
    assert r.exit_code == 7 and "RocksDB database" in r.output


def test_query_offset_and_time_through_the_units_as_the_engine_answers(tmp_path: Path) -> None:
    from rmqstore.store import lookup

    root = rocksdb_store(tmp_path)
    with open_store(root) as st:
        for tq in truth()["queues"][:2]:
            topic, qid, entries = tq["topic"], tq["queueId"], tq["entries"]
            for e in entries:
                hit = lookup.query_queue_offset(st, topic, qid, e["queueOffset"])
                assert hit.entry is not None and hit.entry.phy_offset == e["commitLogOffset"]
                assert hit.record is not None and hit.record.store_timestamp_ms == e["storeTimestamp"]
                # binarySearchInCQByTime: an exact store time answers a unit holding it
                at = lookup.offset_by_time(st, topic, qid, e["storeTimestamp"]).queue_offset
                assert entries[at]["storeTimestamp"] == e["storeTimestamp"]
            assert lookup.offset_by_time(st, topic, qid, entries[0]["storeTimestamp"] - 10_000).queue_offset == 0
            assert lookup.offset_by_time(st, topic, qid, entries[-1]["storeTimestamp"] + 10_000).queue_offset == 49
            a, b = entries[10]["storeTimestamp"], entries[11]["storeTimestamp"]
            if b - a >= 2:  # between two units: the nearer one, the earlier on a tie
                want = 10 if (b - a) % 2 == 0 else 11
                assert lookup.offset_by_time(st, topic, qid, a + (b - a + 1) // 2).queue_offset == want
