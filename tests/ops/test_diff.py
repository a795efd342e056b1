"""`diff` on pairs built from the real 4.9.4 replica stores: divergent records of the same sizes, topics
and queues (only bodies and times differ), two unrelated stores, other file sizes, an empty side and a
damaged record in the middle of one side."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from conftest import copy_real_store, copy_replica, hold_lock, load_replica_expect
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import MAGIC_V2, Blank, encode_record
from rmqstore.ops.diff import DIVERGED, diff_stores
from rmqstore.store import open_store
from rmqstore.store.files import first_difference
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()
CUT = 106790  # the slave's end in replica-slave-behind: the 421st message


def _rewrite_bodies(root: Path, from_phy: int) -> int:
    """Every record from ``from_phy`` on gets another body of the same length and a later store time."""
    n = 0
    with open_store(root) as st:
        recs = [(seg, r) for seg, r in iter_commitlog(st, from_phy=from_phy) if not isinstance(r, Blank)]
    for seg, r in recs:
        data = encode_record(
            topic=r.topic, queue_id=r.queue_id, flag=r.flag, queue_offset=r.queue_offset, phy_offset=r.phy_offset,
            sys_flag=r.sys_flag, born_timestamp_ms=r.born_timestamp_ms, born_addr=r.born_addr, born_port=r.born_port,
            store_timestamp_ms=r.store_timestamp_ms + 1000, store_addr=r.store_addr, store_port=r.store_port,
            reconsume_times=r.reconsume_times, prepared_transaction_offset=r.prepared_transaction_offset,
            body=bytes(x ^ 0x5A for x in r.body), properties=r.properties_raw.encode(), v2=r.magic == MAGIC_V2,
        )  # fmt: skip
        assert len(data) == r.total_size
        with open(seg.path, "r+b") as f:
            f.seek(r.pos)
            f.write(data)
        n += 1
    return n


def test_same_sizes_topics_and_queues_only_bodies_and_times_differ(tmp_path: Path) -> None:
    master = copy_replica("replica-slave-behind", "b", tmp_path / "m")
    other = copy_replica("replica-slave-behind", "b", tmp_path / "s")
    assert _rewrite_bodies(other, CUT) == 60
    with open_store(master) as a, open_store(other) as b:
        r = diff_stores(a, b)
    assert (r.relation, r.common_end, r.exit_code) == (DIVERGED, CUT, 3)
    assert r.a.records == r.b.records == 60 and r.a.bytes == r.b.bytes and r.a.matching == 0
    assert r.first_a is not None and r.first_b is not None
    assert (r.first_a.size, r.first_a.topic, r.first_a.queue_id) == (
        r.first_b.size,
        r.first_b.topic,
        r.first_b.queue_id,
    )
    assert r.first_b.store_timestamp == r.first_a.store_timestamp + 1000
    want = {(q["topic"], q["queueId"]): q for q in load_replica_expect("replica-slave-behind")["queues"]}
    for q in r.queues:
        w = want[(q.topic, q.queue_id)]
        assert (q.common_end, q.only_a, q.only_b) == (w["commonEnd"], w["onlyB"], w["onlyB"])
    assert r.cut_side == "a"  # its records past commonEnd were stored first: the old master


def test_stores_of_different_brokers_diverge_at_the_first_offset(tmp_path: Path) -> None:
    a = copy_replica("replica-slave-behind", "a", tmp_path / "a")
    other = copy_real_store("4.9.4/clean-2topics", tmp_path / "o")
    r = runner.invoke(app, ["diff", str(a), str(other), "-f", "json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert (doc["relation"], doc["commonEnd"]) == ("diverged", 0)
    assert any("no common first record" in n for n in doc["notes"])


def test_different_file_sizes_are_said_and_compared(tmp_path: Path) -> None:
    a = copy_replica("replica-slave-behind", "a", tmp_path / "a")
    b = copy_replica("replica-slave-behind", "a", tmp_path / "b")
    files = sorted((b / "commitlog").iterdir())
    for f in files[1:]:
        f.unlink()
    os.truncate(files[0], 65536)
    (tmp_path / "b" / "broker.conf").unlink()
    r = runner.invoke(app, ["diff", str(a), str(b), "-f", "json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    # the same blank bytes end A's file and are damage in B's longer one: they part at the blank
    assert doc["commonEnd"] == 32524 and doc["commonEndBlank"] is None
    assert "file 00000000000000000000 is 32768 bytes in A and 65536 in B" in doc["notes"]
    assert [(d["side"], d["pos"]) for d in doc["damaged"]][:1] == [("b", 32524)]


def test_an_empty_side_is_behind(tmp_path: Path) -> None:
    a = copy_replica("replica-slave-behind", "a", tmp_path / "a")
    empty = copy_replica("replica-slave-behind", "a", tmp_path / "e")
    for f in (empty / "commitlog").iterdir():
        f.unlink()
    r = runner.invoke(app, ["diff", str(empty), str(a), "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["relation"], doc["commonEnd"], doc["b"]["messagesAfterCommonEnd"]) == ("a-behind", 0, 420)
    assert "side A holds no record" in doc["notes"]


def test_a_damaged_record_in_the_middle_is_reported_and_walked_past(tmp_path: Path) -> None:
    a = copy_replica("replica-slave-behind", "b", tmp_path / "a")
    b = copy_replica("replica-slave-behind", "b", tmp_path / "b")
    with open_store(b) as st:
        seg, rec = next((s, r) for s, r in iter_commitlog(st) if not isinstance(r, Blank) and r.phy_offset > 50_000)
    with open(seg.path, "r+b") as f:
        f.seek(rec.pos + 4)  # MAGICCODE
        f.write(b"\x00\x00\x00\x00")
    r = runner.invoke(app, ["diff", str(a), str(b), "-f", "json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert doc["commonEnd"] == rec.phy_offset and doc["relation"] == "diverged"
    [damage] = doc["damaged"]
    assert (damage["side"], damage["file"], damage["pos"]) == ("b", str(seg.path), rec.pos)
    assert doc["firstDifferenceB"]["kind"] == "damage"
    assert doc["b"]["matchingAfterCommonEnd"] == doc["a"]["matchingAfterCommonEnd"] > 200  # the rest is the same
    only = [q for q in doc["queues"] if q["onlyA"] or q["onlyB"]]
    assert [(q["topic"], q["queueId"], q["onlyA"], q["onlyB"]) for q in only] == [(rec.topic, rec.queue_id, 1, 0)]


def test_first_difference_of_files(tmp_path: Path) -> None:
    x, y = tmp_path / "x", tmp_path / "y"
    data = os.urandom(20 << 20)
    x.write_bytes(data)
    y.write_bytes(data)
    assert first_difference(x, y) is None
    y.write_bytes(data[:-5] + bytes(b ^ 0xFF for b in data[-5:]))  # every one of the last 5 bytes differs
    assert first_difference(x, y) == len(data) - 5
    y.write_bytes(data[: 9 << 20])
    assert first_difference(x, y) == 9 << 20


def test_a_crashed_side_is_compared_from_its_commit_log_and_a_running_one_only_read(tmp_path: Path) -> None:
    """abort present and no consume queue at all: the same figures, from the records; a broker holding
    the other side's lock does not stop the comparison."""
    a = copy_replica("replica-diverged-midfile", "a", tmp_path / "a")
    b = copy_replica("replica-diverged-midfile", "b", tmp_path / "b")
    with open_store(a) as sa, open_store(b) as sb:
        want = diff_stores(sa, sb)
    shutil.rmtree(b / "consumequeue")
    (b / "abort").write_bytes(b"")
    proc = hold_lock(a)
    try:
        r = runner.invoke(app, ["diff", str(a), str(b), "-f", "json"])
    finally:
        proc.kill()
        proc.wait()
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert (doc["relation"], doc["commonEnd"]) == (want.relation, want.common_end)
    assert doc["queues"] == [q.to_json() for q in want.queues]
