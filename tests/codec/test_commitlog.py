"""Commit log records (§3): the §15 vectors byte for byte, properties, CRCs, batches, compression, record
checks, round trips, and damaged records raising only CorruptData."""

from __future__ import annotations

import base64
import struct
import zlib

import crcmod.predefined
import numpy as np
import pytest
from conftest import small_record
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import INT32, damaged, hx, prop_text, records

from rmqstore.codec.commitlog import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    BatchItem,
    Blank,
    Record,
    body_crc,
    cal_msg_length,
    checked_size,
    checked_sizes,
    compress_body,
    decode_batch,
    decode_record,
    encode_batch,
    encode_blank,
    encode_properties,
    encode_record,
    parse_host,
    parse_properties,
    parse_properties_by_rules,
    store_timestamp_at,
)
from rmqstore.errors import ChecksumMismatch, CorruptData, MissingExtra, RecordSizeMismatch

# ----------------------------------------------------------------------------------------- §15.2

CRC32 = crcmod.predefined.mkCrcFun("crc-32")


@pytest.mark.parametrize(
    ("body", "java_crc", "stored"),
    [(b"", 0, 0), (b"Hello RocketMQ", 1774740973, 1774740973), (b"123456789", 3421780262, 1274296614)],
)
def test_body_crc_vectors(body, java_crc, stored):
    assert CRC32(body) == java_crc == zlib.crc32(body)
    assert body_crc(body) == stored


# ----------------------------------------------------------------------------------------- §15.3

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


# ----------------------------------------------------------------------------------------- §15.4

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


# ----------------------------------------------------------------------------------------- §15.5

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


# ----------------------------------------------------------------------------------------- §15.6


def test_blank_record():
    assert encode_blank(124) == hx("0000007C CBD43194")
    # a file whose last 124 bytes hold a blank: the reader jumps to the next file
    buf = bytearray(1024)
    buf[900:908] = encode_blank(124)
    blank = decode_record(buf, 900, file_from=1073741824)
    assert blank == Blank(pos=900, phy_offset=1073741824 + 900, total_size=124)
    assert struct.unpack(">i", hx("CBD43194"))[0] == BLANK_MAGIC


# ---------------------------------------------------------------------------------------- §15.11

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


def test_duplicate_property_later_wins():
    assert parse_properties("K\x01a\x02K\x01b\x02", broker="4.4.0") == {"K": "b"}
    assert parse_properties("K\x01a\x02K\x01b\x02", broker="5.3.3") == {"K": "b"}


# ---------------------------------------------------------------------------------------- §15.12

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


# ---------------------------------------------------------------- §3.8, §3.9: batch, compression


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


def _zstd_stream(body: bytes) -> bytes:
    """Bytes as RocketMQ 5.x's ZstdCompressor writes them: ZstdOutputStream write, flush, close,
    so the frame header holds no content size."""
    import io

    zstandard = pytest.importorskip("zstandard")
    buf = io.BytesIO()
    w = zstandard.ZstdCompressor(level=5).stream_writer(buf, closefd=False)
    w.write(body)
    w.flush()
    w.close()
    out = buf.getvalue()
    assert zstandard.get_frame_parameters(out).content_size == zstandard.CONTENTSIZE_UNKNOWN
    return out


def _lz4_frame(body: bytes) -> bytes:
    """An LZ4 frame as lz4-java's LZ4FrameOutputStream writes it by default (RocketMQ's
    Lz4Compressor): 4 MB independent blocks, no content size, no content checksum."""
    lz4_frame = pytest.importorskip("lz4.frame")
    return lz4_frame.compress(
        body, block_size=lz4_frame.BLOCKSIZE_MAX4MB, block_linked=False, content_checksum=False, store_size=False
    )


@pytest.mark.parametrize(
    ("type_bits", "compress"),
    [(0x101, _lz4_frame), (0x201, _zstd_stream), (0x301, lambda b: zlib.compress(b, 5))],
    ids=["lz4", "zstd-no-content-size", "zlib"],
)
def test_rocketmq_5x_compressed_bodies_decode(type_bits, compress):
    body = b"order-42 shipped " * 500
    stored = compress(body)
    rec = decode_record(small_record(sys_flag=type_bits, body=stored), 0, check_crc=True)
    assert rec.decompressed_body() == body
    assert rec.to_row(body="base64")["body"] == base64.b64encode(body).decode()
    assert "bodyError" not in rec.to_row()


def test_two_zstd_frames_decode_as_one_body():
    body = b"abc" * 100
    rec = decode_record(small_record(sys_flag=0x201, body=_zstd_stream(body) + _zstd_stream(body)), 0)
    assert rec.decompressed_body() == body + body


def test_truncated_zstd_body_is_corrupt_data():
    rec = decode_record(small_record(phy_offset=5, sys_flag=0x201, body=_zstd_stream(b"x" * 4000)[:-4]), 0)
    with pytest.raises(CorruptData, match="zstd, type 2"):
        rec.decompressed_body(path="f")


def test_missing_codec_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_zstd(name, *args, **kwargs):
        if name == "zstandard":
            raise ImportError("no zstandard", name="zstandard")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstd)
    rec = decode_record(small_record(sys_flag=0x201, body=b"\x28\xb5\x2f\xfd"), 0)
    with pytest.raises(MissingExtra, match=r"pip install 'rmqstore\[compression\]'"):
        rec.decompressed_body()
    row = rec.to_row()
    assert "rmqstore[compression]" in row["bodyError"] and row["body"] == base64.b64encode(rec.body).decode()


def test_bad_compressed_body_is_corrupt_data():
    data = small_record(phy_offset=77, sys_flag=COMPRESSED_FLAG, body=b"not zlib")
    rec = decode_record(data, 0)
    with pytest.raises(CorruptData) as e:
        rec.decompressed_body(path="f")
    assert (str(e.value.path), e.value.pos, e.value.phy_offset) == ("f", 0, 77)


# --------------------------------------------------------------------------------- record checks


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


# ----------------------------------------------------------------------------------- round trips


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


# -------------------------------------------------------------------------------- only our error


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


# ------------------------------------------------------------------------- many records' structure


def _each_checked_size(buf: bytes, end: int) -> list[int]:
    size = checked_size
    return [-1 if (n := size(buf, p, end)) is None else n for p in range(len(buf))]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(records().map(lambda f: encode_record(**f)), damaged()), max_size=6), st.floats(0, 1))
def test_checked_sizes_are_checked_size_at_every_position(pieces, cut):
    buf = b"".join(pieces)
    end = int(len(buf) * cut)
    assert checked_sizes(buf, np.arange(len(buf)), end).tolist() == _each_checked_size(buf, end)


def _v1(body_len: int, tail: bytes, total: int | None = None) -> bytes:
    """A V1 record head with IPv4 hosts and BODYLENGTH ``body_len``, then ``tail`` (body and the rest)."""
    head = bytearray(88)
    struct.pack_into(">ii", head, 0, total or 88 + len(tail), MAGIC_V1)
    struct.pack_into(">i", head, 84, body_len)
    return bytes(head) + tail


@pytest.mark.parametrize(
    "buf",
    [
        _v1(1, b"b" + b"\xff\xff"),  # a TOPICLENGTH of -1 that makes the lengths add up to TOTALSIZE
        _v1(0, b"\x00"),  # the topic length is the last byte of the buffer
        _v1(0, b"\x00\x00\x00", total=91)[:90],  # a record cut one byte short
        _v1(-5, b"\x00\x00\x00"),  # a negative BODYLENGTH counts as none
        _v1(0, b"\x00\x00\x05abcde"),  # properties
        _v1(0, b"\x00\x00\x06abcde"),  # properties running past the record
        struct.pack(">ii", 95, MAGIC_V1) + bytes(28) + struct.pack(">i", 0x30) + bytes(60),  # IPv6 heads past it
        struct.pack(">ii", 200, MAGIC_V2) + bytes(192),
    ],
)
def test_checked_sizes_at_the_edges(buf):
    for end in (len(buf), len(buf) - 1, min(91, len(buf))):
        assert checked_sizes(buf, np.arange(len(buf)), end).tolist() == _each_checked_size(buf, end)
