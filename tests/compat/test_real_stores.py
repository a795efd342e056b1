"""Every record, consume queue entry and index header of the real 4.4.0 stores against truth.json.

The stores under ``../shared/real-stores`` were written and recovered by the RocketMQ 4.4.0 engine;
``truth.json`` is what that engine read back. The stores are opened read-only here; tests that
damage bytes work on a private copy.
"""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import crcmod.predefined
import pytest
from conftest import REAL_WORLD, case_dir, copy_real_store, is_crash, load_truth
from helpers import truth_message_head

from rmqstore.codec.commitlog import PROP_DELAY, PROP_TAGS, SCHEDULE_TOPIC, Blank, Record, body_crc
from rmqstore.codec.consumequeue import BCQ_UNIT_SIZE, ENTRY_SIZE, decode_bcq_entry, decode_entry
from rmqstore.codec.describe import index_header_json
from rmqstore.codec.dledger import HEADER_SIZE
from rmqstore.codec.dledger import decode_header as decode_entry_header
from rmqstore.codec.indexfile import IndexFile, decode_header
from rmqstore.codec.javahash import java_hash
from rmqstore.codec.msgid import decode_offset_msg_id
from rmqstore.errors import ChecksumMismatch, CorruptData
from rmqstore.store import open_store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.walk.chain import iter_commitlog, walk_segment

CRC32 = crcmod.predefined.mkCrcFun("crc-32")  # reference implementation, independent of zlib
MAX_INLINE_BODY = 64 * 1024  # truth.json gives bodies over 64 KiB as bodySha256


def open_real(case: str):
    return open_store(case_dir(case) / "store")


def expected_tags_code(rec: Record, cfg: StoreConfig) -> int:
    """§4.2: hash of TAGS, or the delivery time for a delay-topic record with DELAY."""
    props = rec.properties
    tags = props.get(PROP_TAGS)
    code = java_hash(tags) if tags else 0
    if rec.topic == SCHEDULE_TOPIC and PROP_DELAY in props:
        levels = cfg.delay_levels_ms()
        level = min(int(props[PROP_DELAY]), len(levels))
        if level > 0:
            code = rec.store_timestamp_ms + levels[level - 1]
    return code


def walk_all(case: str) -> list[tuple[Segment, Record | Blank]]:
    with open_real(case) as st:
        return list(iter_commitlog(st, check_crc=True))


def _entry_fields(seg: Segment, rec: Record) -> dict:
    """A DLedger record's entry as truth.json gives it: where the entry is, its size and its header."""
    with map_file(seg.path) as buf:
        h = decode_entry_header(buf, rec.pos - HEADER_SIZE)
    head = {"magic": h.magic, "size": h.size, "index": h.index, "term": h.term, "pos": h.pos, "channel": h.channel,
            "chainCrc": h.chain_crc, "bodyCrc": h.body_crc, "bodyLength": h.body_length}  # fmt: skip
    return {"entryOffset": seg.base_offset + rec.pos - HEADER_SIZE, "entrySize": h.size, "dledger": head}


def as_truth_row(seg: Segment, rec: Record | Blank, cfg: StoreConfig) -> dict:
    dledger = seg.framing.name == "dledger"
    if isinstance(rec, Blank):
        row = {"offset": rec.phy_offset, "kind": "blank", "size": seg.size - rec.pos}
        return {**row, "blankMagic": "ffffffff"} if dledger else row
    return {
        **truth_message_head(rec, seg.base_offset + rec.pos, expected_tags_code(rec, cfg)),
        **(_entry_fields(seg, rec) if dledger else {}),
        "magic": f"{rec.magic & 0xFFFFFFFF:08x}",
        "keys": rec.keys,
        "uniqKey": rec.uniq_key,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
        "crcOk": rec.crc_ok(),
    }


def test_every_commitlog_record_matches_truth(any_real_case):
    truth = load_truth(any_real_case)
    with open_real(any_real_case) as st:
        cfg = st.config
        rows = [as_truth_row(seg, rec, cfg) for seg, rec in iter_commitlog(st, check_crc=True)]
    lo, hi = truth["minPhyOffset"], truth["maxPhyOffset"]
    inside = [r for r in rows if lo <= r["offset"] < hi]
    if not any("magic" in r for r in truth["commitlog"]):  # the 4.4.0 truth does not give it
        for r in inside:
            r.pop("magic", None)
    assert inside == truth["commitlog"]
    # nothing valid beyond the recovered end (crash-midwrite: the walk stops at the zeros)
    assert [r for r in rows if r["offset"] >= hi] == []
    blanks = [r for r in rows if r["kind"] == "blank"]
    assert all((r["offset"] + r["size"]) % cfg.commitlog_file_size == 0 for r in blanks)


def test_record_offset_field_equals_position(any_real_case):
    for seg, rec in walk_all(any_real_case):
        if isinstance(rec, Record):
            assert rec.phy_offset == seg.base_offset + rec.pos
            assert rec.pos + rec.total_size <= seg.size


def test_iterate_from_a_physical_offset(any_real_case):
    truth = load_truth(any_real_case)["commitlog"]
    start = truth[len(truth) // 2]["offset"]
    with open_real(any_real_case) as st:
        got = [seg.base_offset + rec.pos for seg, rec in iter_commitlog(st, from_phy=start)]
    assert got == [r["offset"] for r in truth if r["offset"] >= start]


def test_served_messages_match_truth_field_for_field(any_real_case):
    truth = load_truth(any_real_case)
    records = {seg.base_offset + rec.pos: rec for seg, rec in walk_all(any_real_case) if isinstance(rec, Record)}
    served = 0
    for queue in truth["queues"]:
        for want in queue["messages"]:
            rec = records[want["commitLogOffset"]]
            got = rec.to_json()
            if "bodySha256" in want:
                assert len(rec.body) > MAX_INLINE_BODY
                got.pop("body")
                got["bodySha256"] = hashlib.sha256(rec.body).hexdigest()
            assert got == want
            # the broker's msgId is the offset id: store host + port + this record's offset
            decoded = decode_offset_msg_id(got["msgId"])
            assert (decoded.phy_offset, f"{decoded.store_host}:{decoded.store_port}") == (
                rec.phy_offset,
                rec.store_host,
            )
            served += 1
    assert served == sum(len(q["messages"]) for q in truth["queues"]) > 0


def test_body_crc_against_crcmod_reference(any_real_case):
    checked = 0
    for _, rec in walk_all(any_real_case):
        if isinstance(rec, Record):
            assert CRC32(rec.body) & 0x7FFFFFFF == rec.body_crc == body_crc(rec.body)
            checked += 1
    assert checked > 0


def _units(segs, size: int, decode) -> list:
    """The valid units of a queue's files as they are on disk, in queue order (§8.4 validity)."""
    out = []
    for seg in segs:
        with map_file(seg.path) as buf:
            for pos in range(0, len(buf) - size + 1, size):
                e = decode(buf, pos, path=str(seg.path))
                if e.ends_queue:
                    return out
                out.append((seg.base_offset + pos, e))
    return out


def on_disk_entries(st, topic: str, queue_id: int) -> list[dict]:
    """The valid entries of a queue as truth.json lists them."""
    segs, problems = st.consume_queues.queue(topic, queue_id).files()
    assert problems == []
    return [
        {"queueOffset": at // ENTRY_SIZE, "commitLogOffset": e.phy_offset, "size": e.size, "tagsCode": e.tags_code}
        for at, e in _units(segs, ENTRY_SIZE, decode_entry)
    ]


def on_disk_batch_entries(st, topic: str, queue_id: int) -> list[dict]:
    """The units of a 5.x batch consume queue as truth.json lists them (§4.7)."""
    segs, problems = st.batch_queues.queue(topic, queue_id).files()
    assert problems == []
    units = [e for _, e in _units(segs, BCQ_UNIT_SIZE, decode_bcq_entry)]
    assert all((e.compacted_offset, e.reserved) == (-1, 0) for e in units)
    return [
        {"queueOffset": e.base_offset, "commitLogOffset": e.phy_offset, "size": e.size, "tagsCode": e.tags_code,
         "batchNum": e.batch_size}
        for e in units
    ]  # fmt: skip


def test_consume_queue_entries_match_truth(any_real_case):
    truth = load_truth(any_real_case)
    with open_real(any_real_case) as st:
        batch = {(q.topic, q.queue_id) for q in st.batch_queues.queues()}
        on_disk = {(q.topic, q.queue_id) for q in st.consume_queues.queues()} | batch
        # a 4.9.4 start creates the delay levels' queues in memory only: empty, no folder
        assert on_disk == {(q["topic"], q["queueId"]) for q in truth["queues"] if q["maxOffset"] > 0}
        assert batch == {(q["topic"], q["queueId"]) for q in truth["queues"] if q.get("cqType") == "BatchCQ"}
        for queue in truth["queues"]:
            if queue["maxOffset"] == 0:
                continue
            if (queue["topic"], queue["queueId"]) in batch:
                assert on_disk_batch_entries(st, queue["topic"], queue["queueId"]) == queue["entries"]
                continue
            got = on_disk_entries(st, queue["topic"], queue["queueId"])
            if is_crash(any_real_case):
                # truth.json is the state AFTER the abnormal recovery, which dispatched the 30 messages
                # that never reached the consume queues: only the entries on disk before recovery are
                # compared, and recovery must have only appended to them.
                assert 0 < len(got) < len(queue["entries"])
                assert got == queue["entries"][: len(got)]
            else:
                assert got == queue["entries"]
                assert len(got) == queue["maxOffset"] - queue["minOffset"]


def test_crash_midwrite_undispatched_tail():
    truth = load_truth("crash-midwrite")
    with open_real("crash-midwrite") as st:
        on_disk = sum(len(on_disk_entries(st, q["topic"], q["queueId"])) for q in truth["queues"])
    assert sum(len(q["entries"]) for q in truth["queues"]) - on_disk == 30  # README: 30 appended, not dispatched


def test_index_headers_match_truth(any_real_case):
    truth = load_truth(any_real_case)
    with open_real(any_real_case) as st:
        cfg = st.config
        on_disk = {p.name: p for p in st.index_files()[0]}
        compared = 0
        for want in truth["indexFiles"]:
            path = on_disk.get(want["name"])
            if path is None:
                # crash-midwrite: recovery dropped the last, non-full file and wrote a new one
                assert is_crash(any_real_case) and not want["writeFull"]
                continue
            with map_file(path) as buf:
                h = IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path)).header()
            got = {"name": path.name, **index_header_json(h), "writeFull": h.index_count >= cfg.max_index_num}
            assert got == want
            compared += 1
    assert compared == len(truth["indexFiles"]) - (1 if is_crash(any_real_case) else 0)


def test_index_chain_walk_finds_every_truth_hit(any_real_case):
    """selectPhyOffset over every file: each offset the engine's query returned is found."""
    truth = load_truth(any_real_case)
    with open_real(any_real_case) as st:
        cfg = st.config
        maps = []
        for path in st.index_files()[0]:
            with open(path, "rb") as f:
                maps.append(IndexFile(bytearray(f.read()), slots=cfg.max_hash_slot_num, entries=cfg.max_index_num))
    present = {p["name"] for p in truth["indexFiles"]}
    checked = 0
    for query in truth["queries"]:
        found: set[int] = set()
        for ix in maps:
            found.update(
                ix.select_phy_offsets(f"{query['topic']}#{query['key']}", max_num=64, begin_ms=0, end_ms=2**62)
            )
        want = {hit["commitLogOffset"] for hit in query["hits"]}
        if is_crash(any_real_case) and not want <= found:
            # the keys of the rebuilt last index file are not on disk before recovery
            assert present - {p.name for p in st.index_files()[0]}
            continue
        assert want <= found
        checked += 1
    assert checked > 0


def _victim(tmp_path, after: int) -> tuple[dict, Path, dict, bytearray, int]:
    """A copy of clean-2topics and its first message after offset ``after``: (truth, file, message,
    the file's bytes, the message's position in it)."""
    truth = load_truth("clean-2topics")
    root = copy_real_store("clean-2topics", tmp_path)
    victim = next(r for r in truth["commitlog"] if r["kind"] == "message" and r["offset"] > after)
    seg_base = victim["offset"] - victim["offset"] % 32768
    path = root / "commitlog" / f"{seg_base:020d}"
    return truth, path, victim, bytearray(path.read_bytes()), victim["offset"] - seg_base


def test_first_bad_record_is_reported_with_file_and_offset(tmp_path):
    truth, path, victim, data, pos = _victim(tmp_path, 40000)
    root = path.parents[1]
    struct.pack_into(">i", data, pos + 4, 0x12345678)  # MAGICCODE
    path.write_bytes(data)
    with open_store(root) as st:
        walked = []
        with pytest.raises(CorruptData) as e:
            for seg, rec in iter_commitlog(st):
                walked.append(seg.base_offset + rec.pos)
    assert (e.value.path, e.value.pos, e.value.phy_offset) == (path, pos, victim["offset"])
    assert "magic" in e.value.what
    assert walked == [r["offset"] for r in truth["commitlog"] if r["offset"] < victim["offset"]]


def test_body_crc_checked_only_when_asked(tmp_path):
    truth, path, victim, data, pos = _victim(tmp_path, 70000)
    root = path.parents[1]
    data[pos + 88] ^= 0x01  # first body byte (IPv4 hosts: body starts at 88)
    path.write_bytes(data)
    with open_store(root) as st:
        assert len(list(iter_commitlog(st))) == len(truth["commitlog"])
        with pytest.raises(ChecksumMismatch) as e:
            for _ in iter_commitlog(st, check_crc=True):
                pass
    assert (e.value.path, e.value.pos, e.value.phy_offset) == (path, pos, victim["offset"])


# ------------------------------------------------------------------------------ files from real brokers

_ROW = re.compile(
    r"^\| `(?P<path>[^`]*/commitlog/\d{20})` \|.*?\| (?P<size>\d+) \|[^|]*\| commitlog file \(mapped size \d+\) "
    r"with (?P<count>\d+) V1 records of (?P<rec>\d+) bytes, .*?queueOffset (?P<q0>\d+)–(?P<q1>\d+)"
)


def real_world_commitlogs() -> list[dict]:
    readme = REAL_WORLD / "README.md"
    if not readme.is_file():
        return []
    return [m.groupdict() for line in readme.read_text().splitlines() if (m := _ROW.match(line))]


@pytest.mark.parametrize("row", real_world_commitlogs(), ids=lambda r: r["path"].split("/")[0])
def test_real_world_commitlog_files(row):
    """Commit log files from other brokers' unit-test stores (4.x and 5.x): record count, sizes,
    queue offsets and CRC as the collection's README lists them."""
    path = REAL_WORLD / row["path"]
    seg = Segment(path, int(path.name), path.stat().st_size)
    with map_file(path) as buf:
        recs = [r for r in walk_segment(buf, seg, check_crc=True, broker="4.9.7") if isinstance(r, Record)]
    assert len(recs) == int(row["count"])
    assert {r.total_size for r in recs} == {int(row["rec"])}
    assert [r.queue_offset for r in recs] == list(range(int(row["q0"]), int(row["q1"]) + 1))
    assert all(r.phy_offset == seg.base_offset + r.pos and r.crc_ok() for r in recs)


def test_real_world_index_file():
    path = REAL_WORLD / "apache__rocketmq" / "65a086a2fe55" / "store" / "100"
    if not path.is_file():
        pytest.skip("real-world files not present")
    data = bytearray(path.read_bytes())
    h = decode_header(data)
    assert (h.begin_timestamp_ms, h.end_timestamp_ms, h.begin_phy_offset, h.end_phy_offset) == (
        1679290200025,
        1679290200025,
        0,
        0,
    )
    assert (h.hash_slot_count, h.index_count) == (1, 2)
    ix = IndexFile(data, slots=100, entries=400)
    assert ix.slot_value(48) == 1
    e = ix.entry(1)
    assert (e.key_hash, e.phy_offset) == (48, 0)


def test_read_only_walk_changes_nothing(real_case):
    src = case_dir(real_case) / "store"
    before = {p: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).digest()) for p in src.rglob("*") if p.is_file()}
    walk_all(real_case)
    after = {p: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).digest()) for p in src.rglob("*") if p.is_file()}
    assert after == before
