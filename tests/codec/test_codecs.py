"""Codec tests: the store-format.md §15 vectors byte for byte, round trips, and "only our error"."""

from __future__ import annotations

import struct
import zlib

import crcmod.predefined
import numpy as np
import pytest
from conftest import small_record
from hypothesis import example, given
from hypothesis import strategies as st

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.arrays import (
    duplicate_name_rows,
    host_codes_v4,
    key_tokens,
    msg_id_hex,
    named,
    named_values,
    property_items,
    record_arrays,
)
from rmqstore.codec.commitlog import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    HEAD_NAMES,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    BatchItem,
    Blank,
    Record,
    body_crc,
    cal_msg_length,
    compress_body,
    decode_batch,
    decode_record,
    encode_batch,
    encode_blank,
    encode_properties,
    encode_record,
    offset_msg_id,
    parse_host,
    parse_properties,
    parse_properties_by_rules,
    store_timestamp_at,
)
from rmqstore.codec.consumequeue import (
    FILLER_SIZE,
    CqEntry,
    decode_entry,
    effective_file_size,
    encode_entry,
    filler_entry,
)
from rmqstore.codec.describe import (
    describe_cq_entry,
    describe_perm,
    describe_sys_flag,
    describe_tags_code,
    human_size,
    magic_name,
    perm_string,
    sys_flag_words,
    tags_code_kind,
)
from rmqstore.codec.indexfile import HEADER_SIZE, IndexFile, IndexHeader, decode_header, encode_header, file_size
from rmqstore.codec.javahash import index_key_hash, java_hash, java_hash_batch, tags_code
from rmqstore.codec.msgid import decode_offset_msg_id, decode_uniq_key
from rmqstore.errors import ChecksumMismatch, CorruptData, RecordSizeMismatch
from rmqstore.store.layout import Segment, StoreConfig, file_name, segment_for


def hx(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ---------------------------------------------------------------------------------------- §15.1

HASHES = [
    # string, hashCode, tagsCode bytes, index keyHash, slot (5,000,000 slots), slot byte position
    ("TagA", 2598919, "000000000027A807", 2598919, 2598919, 10395716),
    ("TagB", 2598920, "000000000027A808", 2598920, 2598920, 10395720),
    ("", 0, "0000000000000000", 0, 0, 40),
    ("TopicTest#k1", 2746024, "000000000029E6A8", 2746024, 2746024, 10984136),
    ("中文", 646394, "000000000009DCFA", 646394, 646394, 2585616),
    ("\U0001f600", 1772899, "00000000001B0D63", 1772899, 1772899, 7091636),
    ("a\U0001f600b", 57849694, "000000000372B75E", 57849694, 2849694, 11398816),
    ("polygenelubricants", -2147483648, "FFFFFFFF80000000", 0, 0, 40),
    ("TopicTest#polygenelubricants", 26908034, "00000000019A9582", 26908034, 1908034, 7632176),
    ("TopicTest#ORDER_42", -87714511, "FFFFFFFFFAC59531", 87714511, 2714511, 10858084),
    ("TopicTest#order-20231114-000123", -1726443732, "FFFFFFFF99188F2C", 1726443732, 1443732, 5774968),
]


@pytest.mark.parametrize(("text", "code", "tags_bytes", "key_hash", "slot", "slot_pos"), HASHES)
def test_string_hashcode_vectors(text, code, tags_bytes, key_hash, slot, slot_pos):
    assert java_hash(text) == code
    # tagsCode is the int hash sign-extended into the CQ's 8-byte field
    assert encode_entry(0, 1, tags_code(text))[12:] == hx(tags_bytes)
    assert index_key_hash(text) == key_hash
    assert key_hash % 5_000_000 == slot
    assert HEADER_SIZE + slot * 4 == slot_pos
    assert java_hash_batch([text]).tolist() == [code]


def test_hash_batch_matches_table():
    texts = [row[0] for row in HASHES]
    assert java_hash_batch(texts).tolist() == [row[1] for row in HASHES]


# ---------------------------------------------------------------------------------------- §15.2

CRC32 = crcmod.predefined.mkCrcFun("crc-32")


@pytest.mark.parametrize(
    ("body", "java_crc", "stored"),
    [(b"", 0, 0), (b"Hello RocketMQ", 1774740973, 1774740973), (b"123456789", 3421780262, 1274296614)],
)
def test_body_crc_vectors(body, java_crc, stored):
    assert CRC32(body) == java_crc == zlib.crc32(body)
    assert body_crc(body) == stored


# ---------------------------------------------------------------------------------------- §15.3

V1_HEX = """
000000BB DAA320A7 69C865ED 00000001 00000000 00000000 00000005 00000000 00001000 00000000 0000018B CFE56800
C0A8010A 0000D431 0000018B CFE5687B C0A80102 00002A9F 00000000 00000000 00000000 0000000E 48656C6C 6F20526F
636B6574 4D510954 6F706963 54657374 00494B45 5953016B 31206B32 02554E49 515F4B45 59014330 41383031 30413330
33393138 42344141 43323746 42354138 45353030 30300257 41495401 74727565 02544147 53015461 674102
"""
V1_PROPS = [
    ("KEYS", "k1 k2"),
    ("UNIQ_KEY", "C0A8010A303918B4AAC27FB5A8E50000"),
    ("WAIT", "true"),
    ("TAGS", "TagA"),
]


def v1_record() -> bytes:
    return encode_record(
        topic="TopicTest",
        queue_id=1,
        flag=0,
        queue_offset=5,
        phy_offset=4096,
        sys_flag=0,
        born_timestamp_ms=1700000000000,
        born_addr=bytes([192, 168, 1, 10]),
        born_port=54321,
        store_timestamp_ms=1700000000123,
        store_addr=bytes([192, 168, 1, 2]),
        store_port=10911,
        body=b"Hello RocketMQ",
        properties=encode_properties(V1_PROPS),
    )


def test_v1_record_encodes_byte_for_byte():
    data = v1_record()
    assert len(data) == 187 == cal_msg_length(0, 14, 9, 73)
    assert data == hx(V1_HEX)


def test_v1_record_decodes_every_field():
    buf = bytes(4096) + hx(V1_HEX)  # the record sits at position 4096 of the first file
    rec = decode_record(buf, 4096, check_crc=True)
    assert isinstance(rec, Record)
    assert (rec.total_size, rec.magic, rec.body_crc, rec.queue_id, rec.flag) == (187, MAGIC_V1, 1774740973, 1, 0)
    assert (rec.queue_offset, rec.phy_offset, rec.sys_flag) == (5, 4096, 0)
    assert (rec.born_timestamp_ms, rec.born_host) == (1700000000000, "192.168.1.10:54321")
    assert (rec.store_timestamp_ms, rec.store_host) == (1700000000123, "192.168.1.2:10911")
    assert (rec.reconsume_times, rec.prepared_transaction_offset, rec.body) == (0, 0, b"Hello RocketMQ")
    assert rec.topic == "TopicTest"
    assert rec.properties == dict(V1_PROPS)
    assert (rec.tags, rec.keys, rec.uniq_key) == ("TagA", "k1 k2", "C0A8010A303918B4AAC27FB5A8E50000")
    assert rec.msg_id == "C0A8010200002A9F0000000000001000"
    assert store_timestamp_at(buf, 4096) == 1700000000123
    assert rec.crc_ok()


# ---------------------------------------------------------------------------------------- §15.4

V6_HEX = """
00000076 DAA320A7 0CDC1683 00000000 00000000 00000000 00000000 00000000 00000000 00000030 0000018B CFE56800
20010DB8 00000000 00000000 00000001 00009C40 0000018B CFE56801 20010DB8 00000000 00000000 00000002 00002A9F
00000000 00000000 00000000 00000001 78025436 0000
"""


def test_ipv6_record_round_trip():
    born, born_port = parse_host("[2001:db8::1]:40000")
    store, store_port = parse_host("[2001:db8::2]:10911")
    hosts = {"born_addr": born, "born_port": born_port, "store_addr": store, "store_port": store_port}
    data = small_record(
        topic="T6",
        sys_flag=BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG,
        born_timestamp_ms=1700000000000,
        store_timestamp_ms=1700000000001,
        body=b"x",
        **hosts,
    )
    assert data == hx(V6_HEX)
    assert len(data) == 118
    rec = decode_record(data, 0, check_crc=True)
    assert isinstance(rec, Record)
    assert (rec.born_host, rec.store_host) == ("[2001:db8::1]:40000", "[2001:db8::2]:10911")
    assert rec.store_timestamp_ms == store_timestamp_at(data, 0) == 1700000000001
    assert struct.unpack_from(">q", data, 68)[0] == 1700000000001  # §3.1: offset 68 with an IPv6 born host
    assert rec.msg_id == "20010DB800000000000000000000000200002A9F0000000000000000"


# ---------------------------------------------------------------------------------------- §15.5

V2_HEX = """
0000005D DAA320AB 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001
7F000001 00000001 00000000 00000002 7F000001 00002A9F 00000000 00000000 00000000 00000000 00015400 00
"""


def test_v2_record_round_trip():
    lo = bytes([127, 0, 0, 1])
    data = small_record(born_addr=lo, store_addr=lo, store_port=10911, v2=True)
    assert data == hx(V2_HEX)
    rec = decode_record(data, 0, broker="5.3.3")
    assert isinstance(rec, Record)
    assert (rec.magic, rec.version, rec.topic, rec.total_size) == (MAGIC_V2, 2, "T", 93)


def test_v2_size_for_a_long_topic():
    assert cal_msg_length(0, 10, 200, 0, v2=True) == 302
    data = small_record(topic="t" * 200, body=b"0123456789", v2=True)
    assert len(data) == 302
    assert decode_record(data, 0).topic == "t" * 200
    with pytest.raises(ValueError, match="127"):
        small_record(topic="t" * 200)


# ---------------------------------------------------------------------------------------- §15.6


def test_blank_record():
    assert encode_blank(124) == hx("0000007C CBD43194")
    # a file whose last 124 bytes hold a blank: the reader jumps to the next file
    buf = bytearray(1024)
    buf[900:908] = encode_blank(124)
    blank = decode_record(buf, 900, file_from=1073741824)
    assert blank == Blank(pos=900, phy_offset=1073741824 + 900, total_size=124)
    assert struct.unpack(">i", hx("CBD43194"))[0] == BLANK_MAGIC


# ---------------------------------------------------------------------------------------- §15.7


def test_consume_queue_vectors():
    assert encode_entry(4096, 187, tags_code("TagA")) == hx("00000000 00001000 000000BB 00000000 0027A807")
    assert encode_entry(8192, 300, tags_code("TopicTest#ORDER_42")) == hx(
        "00000000 00002000 0000012C FFFFFFFF FAC59531"
    )
    assert filler_entry() == hx("00000000 00000000 7FFFFFFF 00000000 00000000")
    delivery = 1700000000123 + StoreConfig(store_root=".").delay_levels_ms()[3 - 1]  # DELAY=3 -> 10 s
    assert delivery == 1700000010123
    assert encode_entry(12288, 250, delivery) == hx("00000000 00003000 000000FA 0000018B CFE58F8B")
    zero = decode_entry(bytes(20), 0)
    assert zero.ends_queue and not zero.is_filler
    filler = decode_entry(filler_entry(), 0)
    assert filler == CqEntry(0, FILLER_SIZE, 0) and filler.is_filler and not filler.ends_queue
    assert decode_entry(hx("00000000 00002000 0000012C FFFFFFFF FAC59531"), 0).tags_code == -87714511


@pytest.mark.parametrize(
    ("queue_offset", "name", "pos"),
    [(0, "00000000000000000000", 0), (299999, "00000000000000000000", 5999980), (300001, "00000000000006000000", 20)],
)
def test_consume_queue_file_positions(queue_offset, name, pos):
    size = effective_file_size(6_000_000)
    byte = queue_offset * 20
    assert (file_name(byte - byte % size), byte % size) == (name, pos)


def test_file_sizes_and_commitlog_lookup():
    assert effective_file_size(1001) == 1020
    assert effective_file_size(6_000_000) == 6_000_000
    gib = 1073741824
    segs = [Segment(f"/c/{file_name(i * gib)}", i * gib, gib) for i in range(3)]
    seg = segment_for(segs, 1073745920, gib)
    assert seg is not None and seg.path.endswith("00000000001073741824")
    assert 1073745920 - seg.base_offset == 4096
    assert segment_for(segs, 3 * gib, gib) is None


# ---------------------------------------------------------------------------------------- §15.8

UNIQ = "C0A8010A303918B4AAC27FB5A8E50000"


def index_with_first_message(broker: str = "4.9.7") -> IndexFile:
    # 5,000,000 slots as in the vectors; only 8 entries so the buffer stays 20 MB (entry positions
    # depend on the slot count only).
    ix = IndexFile(bytearray(file_size(5_000_000, 8)), slots=5_000_000, entries=8, broker=broker)
    for key in (f"TopicTest#{UNIQ}", "TopicTest#k1", "TopicTest#k2"):
        assert ix.put_key(key, 4096, 1700000000123)
    return ix


def test_index_vectors():
    ix = index_with_first_message()
    buf = ix.buf
    expected = [
        (1, f"TopicTest#{UNIQ}", 735264332, 264332, 1057368, 20000060, "2BD33E4C 00000000 00001000 00000000 00000000"),
        (2, "TopicTest#k1", 2746024, 2746024, 10984136, 20000080, "0029E6A8 00000000 00001000 00000000 00000000"),
        (3, "TopicTest#k2", 2746025, 2746025, 10984140, 20000100, "0029E6A9 00000000 00001000 00000000 00000000"),
    ]
    for n, key, key_hash, slot, slot_pos, entry_pos, entry_hex in expected:
        assert index_key_hash(key) == key_hash
        assert key_hash % 5_000_000 == slot
        assert struct.unpack_from(">i", buf, slot_pos)[0] == n
        assert ix.slot_value(slot) == n
        assert bytes(buf[entry_pos : entry_pos + 20]) == hx(entry_hex)
    assert bytes(buf[:40]) == hx(
        "0000018B CFE5687B 0000018B CFE5687B 00000000 00001000 00000000 00001000 00000003 00000004"
    )
    assert ix.header() == IndexHeader(1700000000123, 1700000000123, 4096, 4096, 3, 4)
    # a later message with KEYS k1 and no UNIQ_KEY, 7.5 s later
    assert ix.put_key("TopicTest#k1", 8192, 1700000007623)
    assert bytes(buf[20000120:20000140]) == hx("0029E6A8 00000000 00002000 00000007 00000002")
    assert ix.slot_value(2746024) == 4
    found = ix.select_phy_offsets("TopicTest#k1", max_num=64, begin_ms=1700000000000, end_ms=1700000010000)
    assert sorted(found) == [4096, 8192]
    assert ix.select_phy_offsets("TopicTest#k1", max_num=64, begin_ms=1700000005000, end_ms=1700000010000) == [8192]
    assert ix.select_phy_offsets("TopicTest#nope", max_num=64, begin_ms=0, end_ms=2**62) == []


def test_index_hash_slot_count_by_version():
    # <= 4.7.0 counted every put, 4.7.1+ only newly used slots (§5.2)
    for broker, want in (("4.4.0", 4), ("4.7.1", 3)):
        ix = index_with_first_message(broker)
        ix.put_key("TopicTest#k1", 8192, 1700000007623)
        assert ix.header().hash_slot_count == want


def test_index_file_size_default():
    assert file_size(5_000_000, 20_000_000) == 420_000_040
    assert StoreConfig(store_root=".").index_file_size() == 420_000_040


def test_index_wrong_size_is_corrupt_data():
    with pytest.raises(CorruptData) as e:
        IndexFile(bytearray(100), slots=4, entries=4, path="/x/index/1")
    assert str(e.value.path) == "/x/index/1" and e.value.pos == 0


# ---------------------------------------------------------------------------------------- §15.9


def test_checkpoint_vector():
    cp = cpmod.Checkpoint(1700000000123, 1700000000100, 1699999990000)
    data = cpmod.encode(cp)
    assert len(data) == 4096
    assert data[:24] == hx("0000018B CFE5687B 0000018B CFE56864 0000018B CFE540F0")
    assert data[24:] == bytes(4096 - 24)
    back = cpmod.decode(data)
    assert back == cp
    assert back.min_timestamp_ms == 1699999997100
    assert back.min_timestamp_index_ms == 1699999990000


def test_checkpoint_min_timestamp_never_negative():
    assert cpmod.Checkpoint(1000, 5000, 0).min_timestamp_ms == 0
    assert cpmod.Checkpoint(0, 0, 0).min_timestamp_index_ms == 0


def test_checkpoint_truncated_is_corrupt_data():
    with pytest.raises(CorruptData) as e:
        cpmod.decode(bytes(10), path="/s/checkpoint")
    assert (str(e.value.path), e.value.pos) == ("/s/checkpoint", 10)


# --------------------------------------------------------------------------------------- §15.10


def test_message_id_vectors():
    assert offset_msg_id(bytes([192, 168, 1, 2]), 10911, 4096) == "C0A8010200002A9F0000000000001000"
    v6, _ = parse_host("[2001:db8::2]:10911")
    assert offset_msg_id(v6, 10911, 4096) == "20010DB800000000000000000000000200002A9F0000000000001000"
    d4 = decode_offset_msg_id("C0A8010200002A9F0000000000001000")
    assert (d4.store_host, d4.store_port, d4.phy_offset) == ("192.168.1.2", 10911, 4096)
    d6 = decode_offset_msg_id("20010DB800000000000000000000000200002A9F0000000000001000")
    assert (d6.store_host, d6.store_port, d6.phy_offset) == ("2001:db8::2", 10911, 4096)


def test_uniq_key_vector():
    uk = decode_uniq_key(UNIQ)
    assert (uk.ip, uk.pid, uk.class_loader_hash, uk.month_ms, uk.counter) == (
        "192.168.1.10",
        12345,
        0x18B4AAC2,
        2142611685,
        0,
    )
    # 24 d 19:10:11.685 after the start of the producer's month
    assert uk.month_ms == ((24 * 24 + 19) * 3600 + 10 * 60 + 11) * 1000 + 685


# --------------------------------------------------------------------------------------- §15.11

PROPERTY_CASES = [
    ("A\x01\x02B\x01x\x02", {"B": "x"}, {"B": "x"}),
    ("K\x01v\x01w\x02", {}, {"K": "v\x01w"}),
    ("K\x01\x02", {}, {}),
    ("\x01v\x02", {"": "v"}, {}),
    ("K1\x01v1\x02K2\x01v2", {"K1": "v1", "K2": "v2"}, {"K1": "v1", "K2": "v2"}),
]


@pytest.mark.parametrize(("raw", "old", "new"), PROPERTY_CASES)
def test_property_parsing_by_version(raw, old, new):
    assert parse_properties(raw, broker="4.4.0") == old
    assert parse_properties(raw, broker="4.9.7") == new
    assert parse_properties(raw, broker="5.3.3") == new


@given(st.text(alphabet="ab\x01\x02é", max_size=24))
@example("K\x01v\x02")
@example("K\x01v\x01w\x02")
@example("\x01v\x02K\x01w")
def test_property_shortcut_equals_each_versions_parser(raw):
    for broker in ("4.4.0", "4.9.7", "5.3.3"):
        assert parse_properties(raw, broker=broker) == parse_properties_by_rules(raw, broker=broker)


_PROPERTY_ITEMS = st.lists(
    st.tuples(
        st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "A", "", "KEYSX"]), st.sampled_from(["v", "", "x\x01y", "ab c"])
    ),
    max_size=4,
)


@given(st.lists(_PROPERTY_ITEMS, min_size=1, max_size=6), st.lists(st.integers(0, 5), max_size=40))
def test_named_values_equal_parse_properties(shapes, picks):
    """Strings sharing a few layouts (the layout shortcut) and every string's values as the per-record parser reads them."""
    chosen = [shapes[i % len(shapes)] for i in picks or [0]]
    strings = [encode_properties(items) for items in chosen]
    buf = b"".join(strings) + bytes(8)
    starts = np.cumsum([0] + [len(x) for x in strings[:-1]]).astype(np.int64)
    lens = np.array([len(x) for x in strings], np.int64)
    names = (b"TAGS", b"KEYS", b"UNIQ_KEY")
    u8 = np.frombuffer(buf, np.uint8)
    values, bad = named_values(u8, starts, lens, names)
    for i, raw in enumerate(strings):
        assert bad[i] == any(not k or not v or "\x01" in v for k, v in chosen[i])
        if bad[i]:
            continue
        want = parse_properties(raw.decode(), broker="4.4.0")
        for name in names:
            rows, vstart, vlen = values[name]
            got = [buf[a : a + n].decode() for r, a, n in zip(rows, vstart, vlen, strict=True) if r == i]
            assert got == ([want[name.decode()]] if name.decode() in want else []), (raw, name)


def test_duplicate_property_later_wins():
    assert parse_properties("K\x01a\x02K\x01b\x02", broker="4.4.0") == {"K": "b"}
    assert parse_properties("K\x01a\x02K\x01b\x02", broker="5.3.3") == {"K": "b"}


# --------------------------------------------------------------------------------------- §15.12

CRC_PROP_HEX = """
00000084 DAA320A7 58932AAC 00000000 00000000 00000000 00000000 00000000 00000000 00000000 0000018B CFE56800
0A000001 0000C350 0000018B CFE56801 0A000002 00002A9F 00000000 00000000 00000000 00000002 68690954 6F706963
54657374 001E5441 47530154 61674102 5F5F4352 43333223 01343336 30343330 37343102
"""


def test_whole_record_crc_property():
    data = hx(CRC_PROP_HEX)
    rec = decode_record(data, 0, broker="5.3.3", check_crc=True)
    assert rec.properties == {"__CRC32#": "4360430741", "TAGS": "TagA"}
    crc = zlib.crc32(data[: len(data) - 20]) & 0x7FFFFFFF
    assert crc == 1470340634
    assert str(crc)[::-1].ljust(10, "0") == rec.properties["__CRC32#"]


# --------------------------------------------------------------------------- §3.8, §3.9: batch, compression


def test_batch_wire_format_round_trip():
    items = [
        BatchItem(0, b"first", encode_properties({"UNIQ_KEY": "A" * 32, "KEYS": "k1"}).decode()),
        BatchItem(7, b"", ""),
        BatchItem(-1, bytes(range(256)), "TAGS\x01t\x02"),
    ]
    wire = encode_batch(items)
    # first item: totalSize, magic 0, crc 0, flag, bodyLen, body, propsLen, props
    props0 = encode_properties({"UNIQ_KEY": "A" * 32, "KEYS": "k1"})
    assert wire[: 20 + 5 + 2 + len(props0)] == (
        struct.pack(">iiiii", 20 + 5 + 2 + len(props0), 0, 0, 0, 5) + b"first" + struct.pack(">h", len(props0)) + props0
    )
    back = decode_batch(wire, path="batch")
    assert [(b.flag, b.body, b.properties_raw) for b in back] == [(i.flag, i.body, i.properties_raw) for i in items]
    assert back[1].pos == 20 + 5 + 2 + len(props0)
    assert back[0].properties() == {"UNIQ_KEY": "A" * 32, "KEYS": "k1"}


def test_batch_corruption_names_the_item():
    wire = encode_batch([(0, b"abc", "K\x01v\x02"), (0, b"de", "")])
    first = struct.unpack_from(">i", wire, 0)[0]
    bad = bytearray(wire)
    struct.pack_into(">i", bad, first + 16, 1000)  # second item's body length
    with pytest.raises(CorruptData) as e:
        decode_batch(bad, path="batch.bin")
    assert (str(e.value.path), e.value.pos) == ("batch.bin", first)
    with pytest.raises(CorruptData):
        decode_batch(wire[:-1], path="batch.bin")


@given(st.lists(st.tuples(INT32, st.binary(max_size=64), st.text(max_size=20)), max_size=8))
def test_batch_round_trip_property(items):
    back = decode_batch(encode_batch(items))
    assert [(b.flag, b.body, b.properties_raw) for b in back] == [
        (f, b, p.encode("utf-8", "surrogatepass").decode("utf-8", "replace")) for f, b, p in items
    ]


@pytest.mark.parametrize("type_bits", [True, False])
def test_compressed_body_round_trip(type_bits):
    body = b"payload " * 1000
    stored, flags = compress_body(body, type_bits=type_bits)
    assert flags == (0x301 if type_bits else COMPRESSED_FLAG)
    data = small_record(sys_flag=flags, body=stored)
    rec = decode_record(data, 0, check_crc=True)
    assert rec.body == stored and rec.body_crc == body_crc(stored)  # CRC of the stored (compressed) bytes
    assert rec.decompressed_body() == body


def test_bad_compressed_body_is_corrupt_data():
    data = small_record(phy_offset=77, sys_flag=COMPRESSED_FLAG, body=b"not zlib")
    rec = decode_record(data, 0)
    with pytest.raises(CorruptData) as e:
        rec.decompressed_body(path="f")
    assert (str(e.value.path), e.value.pos, e.value.phy_offset) == ("f", 0, 77)


# ------------------------------------------------------------------------------------------ record checks


def test_checksum_mismatch_only_when_asked():
    data = bytearray(v1_record())
    data[100] ^= 0xFF  # inside the body
    assert decode_record(data, 0).body != b"Hello RocketMQ"
    with pytest.raises(ChecksumMismatch) as e:
        decode_record(data, 0, path="cl", file_from=1000, check_crc=True)
    assert (e.value.stored, e.value.pos, e.value.phy_offset) == (1774740973, 0, 1000)


def test_size_mismatch_is_reported():
    data = bytearray(v1_record()) + bytes(8)
    struct.pack_into(">i", data, 0, 195)  # TOTALSIZE 8 bigger than the fields add up to
    with pytest.raises(RecordSizeMismatch) as e:
        decode_record(data, 0, path="cl")
    assert (e.value.total_size, e.value.computed) == (195, 187)


def test_zero_header_is_not_a_record():
    with pytest.raises(CorruptData, match="magic"):
        decode_record(bytes(200), 0, path="cl")


# ------------------------------------------------------------------------------------------ round trips

hosts_v4 = st.binary(min_size=4, max_size=4)
hosts_v6 = st.binary(min_size=16, max_size=16)
prop_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=12
)


@st.composite
def records(draw):
    sys_flag = draw(INT32)
    v2 = draw(st.booleans())
    topic = draw(st.text(min_size=0, max_size=40 if v2 else 30).filter(lambda t: len(t.encode("utf-8")) <= 127))
    props = draw(st.dictionaries(prop_text, prop_text, max_size=4))
    return dict(
        topic=topic,
        queue_id=draw(INT32),
        flag=draw(INT32),
        queue_offset=draw(INT64),
        phy_offset=draw(INT64),
        sys_flag=sys_flag,
        born_timestamp_ms=draw(INT64),
        born_addr=draw(hosts_v6 if sys_flag & BORNHOST_V6_FLAG else hosts_v4),
        born_port=draw(INT32),
        store_timestamp_ms=draw(INT64),
        store_addr=draw(hosts_v6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else hosts_v4),
        store_port=draw(INT32),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
        body=draw(st.binary(max_size=300)),
        properties=encode_properties(props),
        v2=v2,
    )


@given(records())
@example(
    dict(
        topic="t" * 127,
        queue_id=2**31 - 1,
        flag=-(2**31),
        queue_offset=2**63 - 1,
        phy_offset=-(2**63),
        sys_flag=0x30,
        born_timestamp_ms=-(2**63),
        born_addr=bytes(16),
        born_port=-(2**31),
        store_timestamp_ms=2**63 - 1,
        store_addr=b"\xff" * 16,
        store_port=2**31 - 1,
        reconsume_times=-1,
        prepared_transaction_offset=2**63 - 1,
        body=b"",
        properties=b"",
        v2=False,
    )
)
def test_record_round_trip(fields):
    data = encode_record(**fields)
    pos = 13
    buf = bytes(pos) + data + bytes(5)
    rec = decode_record(buf, pos, file_from=0, check_crc=True, broker="5.3.3")
    assert isinstance(rec, Record)
    assert rec.total_size == len(data)
    got = {
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "flag": rec.flag,
        "queue_offset": rec.queue_offset,
        "phy_offset": rec.phy_offset,
        "sys_flag": rec.sys_flag,
        "born_timestamp_ms": rec.born_timestamp_ms,
        "born_addr": rec.born_addr,
        "born_port": rec.born_port,
        "store_timestamp_ms": rec.store_timestamp_ms,
        "store_addr": rec.store_addr,
        "store_port": rec.store_port,
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "body": rec.body,
        "properties": rec.properties_raw.encode("utf-8"),
        "v2": rec.version == 2,
    }
    assert got == fields
    assert store_timestamp_at(buf, pos) == fields["store_timestamp_ms"]
    # re-encoding the decoded record gives the same bytes
    assert encode_record(**{**got, "crc": rec.body_crc}) == data


# Property strings with the separators anywhere: empty items, items without or with two 0x01, empty
# names or values, duplicate names, spaces in KEYS, non-ASCII and invalid UTF-8.
raw_properties = st.one_of(
    st.builds(encode_properties, st.dictionaries(prop_text, prop_text, max_size=4)),
    st.lists(
        st.sampled_from([b"KEYS", b"TAGS", b"UNIQ_KEY", b"a", b"k", b" ", b"\xc3\xa9", b"\xff", b"\x01", b"\x02"]),
        max_size=14,
    ).map(b"".join),
)


@st.composite
def record_runs(draw):
    """Records laid end to end (V1/V2, IPv4/IPv6 hosts), maybe with one byte of one of them changed."""
    runs = []
    for fields in draw(st.lists(records(), min_size=1, max_size=4)):
        if draw(st.booleans()):
            fields = {**fields, "sys_flag": fields["sys_flag"] & ~0x30, "born_addr": fields["born_addr"][:4]}
            fields["store_addr"] = fields["store_addr"][:4]
        runs.append(encode_record(**{**fields, "properties": draw(raw_properties)}))
    lead = draw(st.integers(0, 9))
    buf = bytearray(bytes(lead) + b"".join(runs))
    starts = [lead + sum(map(len, runs[:i])) for i in range(len(runs))]
    if draw(st.booleans()):
        at = draw(st.integers(0, len(buf) - 1 - lead)) + lead
        buf[at] = draw(st.integers(0, 255))
    return bytes(buf), starts


@given(record_runs())
def test_record_arrays_equal_decode_record(run):
    """The array decoder reads every field as ``decode_record`` does, and leaves to it what it does not cover."""
    buf, starts = run
    u8 = np.frombuffer(buf, np.uint8)
    pos = np.array(starts, np.int64)
    a = record_arrays(u8, pos, len(buf))
    items = property_items(u8, a.props_start, a.props_len)
    dup = duplicate_name_rows(u8, items, len(pos))
    for i, p in enumerate(starts):
        try:
            rec = decode_record(buf, p, broker="5.3.3")
        except CorruptData:
            rec = None
        plain = isinstance(rec, Record) and not rec.sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        props_len = a.props_len[i]
        assert a.ok[i] == (plain and props_len >= 0), (i, rec)
        if not a.ok[i]:
            continue
        for name in HEAD_NAMES:
            want = len(rec.body) if name == "body_len" else getattr(rec, name)
            got = getattr(a, name)[i]
            assert (bytes(got) if name.endswith("_addr") else int(got)) == want, name
        assert buf[a.body_start[i] : a.body_start[i] + a.body_len[i]] == rec.body
        topic = buf[a.topic_start[i] : a.topic_start[i] + a.topic_len[i]]
        assert topic.decode("utf-8", "replace") == rec.topic
        assert msg_id_hex(a.store_addr[i : i + 1], a.store_port[i : i + 1], a.phy_offset[i : i + 1]).tobytes() == (
            rec.msg_id.encode()
        )
        labels, codes = host_codes_v4(a.born_addr[i : i + 1], a.born_port[i : i + 1])
        assert labels[codes[0]] == rec.born_host
        # Properties: rows not marked bad have only plain items, which every broker version parses alike.
        raw = buf[a.props_start[i] : a.props_start[i] + props_len]
        mine = items.row == i
        pairs = [
            (buf[s : s + n], buf[v : v + m])
            for s, n, v, m in zip(
                items.name_start[mine],
                items.name_len[mine],
                items.value_start[mine],
                items.value_len[mine],
                strict=True,
            )
        ]
        if items.bad[i]:
            assert not pairs
            continue
        names = [k for k, _ in pairs]
        assert dup[i] or len(set(names)) == len(names)
        assert items.high[i] == any(b >= 0x80 for b in raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # the reader sends these rows to decode_record
        parsed = {k.decode(): v.decode() for k, v in pairs}
        assert parsed == parse_properties(text, broker="4.4.0") == parse_properties(text, broker="5.3.3")
        keys = named(u8, items, b"KEYS")
        kv = items.row[keys] == i
        tok_rec, tok_start, tok_len, _ = key_tokens(
            u8, items.row[keys][kv], items.value_start[keys][kv], items.value_len[keys][kv]
        )
        tokens = [buf[s : s + n].decode() for s, n in zip(tok_start, tok_len, strict=True)]
        assert tokens == [t for t in parsed.get("KEYS", "").split(" ") if t]
        assert list(tok_rec) == [i] * len(tokens)


def test_record_arrays_of_no_records():
    a = record_arrays(np.zeros(100, np.uint8), np.zeros(0, np.int64), 100)
    assert len(a.pos) == len(a.ok) == 0 and a.store_addr.shape == (0, 4)
    assert msg_id_hex(a.store_addr, a.store_port, a.phy_offset).shape == (0, 32)
    assert host_codes_v4(a.born_addr, a.born_port)[0] == []
    assert len(property_items(np.zeros(100, np.uint8), a.props_start, a.props_len).row) == 0


@given(INT64, INT32, INT64)
def test_cq_entry_round_trip(phy, size, code):
    data = encode_entry(phy, size, code)
    assert len(data) == 20
    assert decode_entry(data, 0) == CqEntry(phy, size, code)


@given(st.tuples(INT64, INT64, INT64, INT64, INT32, INT32))
def test_index_header_round_trip(values):
    h = IndexHeader(*values)
    data = encode_header(h)
    assert len(data) == 40
    assert decode_header(data) == h


@given(st.tuples(INT64, INT64, INT64, INT64, INT64))
def test_checkpoint_round_trip(values):
    cp = cpmod.Checkpoint(*values)
    assert cpmod.decode(cpmod.encode(cp)) == cp


@given(st.lists(st.text(max_size=30), max_size=20))
@example(["\ud83d", "a\U0001f600b", "polygenelubricants", "", "中文"])
@example(["0\x00", "a"])
def test_java_hash_batch_equals_scalar(texts):
    assert java_hash_batch(texts).tolist() == [java_hash(t) for t in texts]


@given(st.text(max_size=40))
def test_java_hash_matches_utf16_definition(text):
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) % 2**32
    assert java_hash(text) == (h - 2**32 if h >= 2**31 else h)


@given(st.dictionaries(prop_text, prop_text, max_size=6))
def test_properties_round_trip(props):
    raw = encode_properties(props).decode("utf-8")
    assert parse_properties(raw, broker="4.4.0") == props
    assert parse_properties(raw, broker="4.9.7") == props


@pytest.mark.parametrize(
    ("field", "value"),
    [("queue_id", 2**31), ("queue_offset", 2**63), ("born_port", -(2**31) - 1), ("reconsume_times", 2**40)],
)
def test_encode_out_of_range_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        small_record(**{field: value})


# ------------------------------------------------------------------------------------- only our error


@st.composite
def damaged(draw):
    fields = draw(records())
    data = bytearray(encode_record(**fields))
    how = draw(st.sampled_from(["flip", "truncate", "overwrite", "garbage"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            bit = draw(st.integers(0, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
    elif how == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "overwrite":
        start = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=16))
        data[start : start + len(chunk)] = chunk
    else:
        data = bytearray(draw(st.binary(max_size=400)))
    return bytes(data)


@given(damaged(), st.booleans())
@example(struct.pack(">ii", 91, MAGIC_V1) + bytes(83), False)  # minimal size, every length zero
@example(struct.pack(">ii", 120, MAGIC_V1) + bytes(32) + struct.pack(">i", 0x30) + bytes(80), True)
def test_damaged_record_raises_only_corrupt_data(data, check_crc):
    try:
        rec = decode_record(data, 0, path="/store/commitlog/00000000000000000000", file_from=0, check_crc=check_crc)
    except CorruptData as e:
        assert str(e.path) == "/store/commitlog/00000000000000000000"
        assert e.pos == 0
        assert e.phy_offset == 0
        return
    if isinstance(rec, Record):
        rec.to_json()  # every derived field must work on whatever decoded
        rec.keys, rec.tags, rec.uniq_key  # noqa: B018


@given(st.binary(max_size=200), st.integers(0, 40))
def test_random_cq_and_index_bytes_raise_only_corrupt_data(data, pos):
    try:
        decode_entry(data, pos, path="cq")
    except CorruptData as e:
        assert (str(e.path), e.pos) == ("cq", pos)
    try:
        decode_header(data, path="ix")
    except CorruptData as e:
        assert str(e.path) == "ix"
    try:
        decode_batch(data, path="b")
    except CorruptData as e:
        assert str(e.path) == "b"


@given(st.binary(min_size=file_size(4, 8), max_size=file_size(4, 8)), st.text(max_size=10))
def test_random_index_file_query_raises_only_corrupt_data(data, key):
    ix = IndexFile(bytearray(data), slots=4, entries=8, path="ix")
    try:
        found = ix.select_phy_offsets(key, max_num=64, begin_ms=-(2**62), end_ms=2**62)
    except CorruptData as e:
        assert str(e.path) == "ix"
        return
    assert len(found) <= 64


# ------------------------------------------------------------------------------------ codes as words


def test_sys_flag_words():
    assert sys_flag_words(0) == ["not transactional"]
    assert sys_flag_words(0x301) == ["not transactional", "compressed (zlib)"]
    assert sys_flag_words(0x101) == ["not transactional", "compressed (lz4)"]
    assert sys_flag_words(0x201) == ["not transactional", "compressed (zstd)"]
    assert sys_flag_words(0x1) == ["not transactional", "compressed (zlib)"]  # legacy producers set no type
    assert describe_sys_flag(0x8 | 0x30) == "transaction commit, born host IPv6, store host IPv6"
    assert sys_flag_words(0xC) == ["transaction rollback"]
    assert sys_flag_words(0x4 | 0x2) == ["transaction prepared", "multi tags"]
    assert sys_flag_words(0xC0) == ["not transactional", "inner batch", "needs unwrap"]
    assert sys_flag_words(0x1000) == ["not transactional", "unknown bits 0x1000"]
    assert sys_flag_words(-1)[-1].startswith("unknown bits 0xFFFFF8")


def test_tags_code_words():
    assert describe_tags_code(tags_code("TagA")) == "tag hash 2598919"
    assert describe_tags_code(0) == "no tag"
    assert describe_tags_code(1700000010123, "SCHEDULE_TOPIC_XXXX") == "delivery at 2023-11-14T22:13:30.123Z"
    assert tags_code_kind(-(2**63) + 4096) == "ext address"
    assert describe_tags_code(-(2**63) + 4096) == "ext address 4096"
    assert tags_code_kind(-(2**31)) == "tag hash"  # the smallest real hash is not an ext address


def test_magic_perm_and_entry_words():
    assert magic_name(MAGIC_V1) == "message V1"
    assert magic_name(MAGIC_V2).startswith("message V2")
    assert magic_name(BLANK_MAGIC) == "BLANK (end of file)"
    assert magic_name(0) == "zeros (unwritten space)"
    assert magic_name(0x12345678) == "unknown magic 0x12345678"
    assert [perm_string(p) for p in (0, 2, 4, 6, 7, 1)] == ["---", "-W-", "R--", "RW-", "RWX", "--X"]
    assert describe_perm(6) == "RW- (read, write)"
    assert describe_perm(0) == "--- (no access)"
    assert describe_cq_entry(0, FILLER_SIZE, 0) == "filler (fillPreBlank)"
    assert describe_cq_entry(0, 0, 0) == "end of data"
    assert describe_cq_entry(4096, 187, 1) == "message at 4096, 187 bytes"
    assert human_size(1073741824) == "1.0 GiB" and human_size(400) == "400 B"
