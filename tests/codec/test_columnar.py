"""The one codec, two speeds: the columnar (numpy) record codec against the per-record reference, both ways.

Records: V1/V2, IPv4/IPv6 hosts, batch bodies, properties with separators in odd places. The consume
queue, index and checkpoint entries both ways are in their formats' modules.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import INT32, INT64

from rmqstore.codec.columnar import HEAD_V4_DTYPE, RecordColumns, decode_heads, decode_records, encode_records
from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    HEAD_V4,
    INNER_BATCH_FLAG,
    MAGIC_V2,
    OFFSETS_V4,
    RECORD_HEAD,
    STOREHOSTADDRESS_V6_FLAG,
    BatchItem,
    Record,
    decode_batch,
    decode_record,
    encode_batch,
    encode_record,
)
from rmqstore.errors import CorruptData

# Property strings around the separators: empty names or values, doubled and trailing separators.
PROP_TEXT = st.lists(st.sampled_from(["A", "K", "é", "\x01", "\x02", " ", "TAGS", "KEYS", "UNIQ_KEY"])).map("".join)

PROPS = st.one_of(
    PROP_TEXT.map(lambda t: t.encode("utf-8")[:32767]),
    st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "x"]), st.text(max_size=20))).map(
        lambda kv: "".join(f"{k}\x01{v}\x02" for k, v in kv).encode("utf-8")
    ),
)


@st.composite
def record_rows(draw: st.DrawFn) -> dict:
    v2 = draw(st.booleans())
    sys_flag = draw(INT32) & ~(0x30 | INNER_BATCH_FLAG) | draw(
        st.sampled_from([0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, 0x30])
    )
    batch = draw(st.booleans())
    if batch:
        sys_flag |= INNER_BATCH_FLAG
        items = draw(st.lists(st.tuples(INT32, st.binary(max_size=40), PROP_TEXT), max_size=4))
        body = encode_batch(items)
    else:
        body = draw(st.binary(max_size=300))
    topic = draw(st.text(max_size=200 if v2 else 40)).encode("utf-8")
    if not v2:
        topic = topic[:127]
    return {
        "v2": v2,
        "sys_flag": sys_flag,
        "queue_id": draw(INT32),
        "flag": draw(INT32),
        "queue_offset": draw(INT64),
        "phy_offset": draw(INT64),
        "born_timestamp_ms": draw(INT64),
        "born_addr": draw(
            st.binary(min_size=16, max_size=16) if sys_flag & 0x10 else st.binary(min_size=4, max_size=4)
        ),
        "born_port": draw(INT32),
        "store_timestamp_ms": draw(INT64),
        "store_addr": draw(
            st.binary(min_size=16, max_size=16) if sys_flag & 0x20 else st.binary(min_size=4, max_size=4)
        ),
        "store_port": draw(INT32),
        "reconsume_times": draw(INT32),
        "prepared_transaction_offset": draw(INT64),
        "body": body,
        "topic": topic,
        "properties": draw(PROPS),
    }


def _per_record(r: dict) -> bytes:
    args = {k: v for k, v in r.items() if k != "topic"}
    return encode_record(topic=r["topic"].decode("utf-8"), **args)


def _columns(rs: list[dict]) -> RecordColumns:
    ints = {
        f.name: np.array([r[f.name] for r in rs], dtype=np.int64)
        for f in RECORD_HEAD
        if f.code != "addr" and f.name in rs[0]
    } if rs else {f.name: np.zeros(0, np.int64) for f in RECORD_HEAD if f.code != "addr"}  # fmt: skip
    return RecordColumns(
        ints,
        [r["born_addr"] for r in rs],
        [r["store_addr"] for r in rs],
        [r["body"] for r in rs],
        [r["topic"] for r in rs],
        [r["properties"] for r in rs],
        np.array([r["v2"] for r in rs], dtype=bool),
    )


def _check_record(rec: Record, r: dict) -> None:
    assert isinstance(rec, Record)
    assert rec.version == (2 if r["v2"] else 1)
    for name in (
        "queue_id",
        "flag",
        "queue_offset",
        "phy_offset",
        "sys_flag",
        "born_timestamp_ms",
        "born_addr",
        "born_port",
        "store_timestamp_ms",
        "store_addr",
        "store_port",
        "reconsume_times",
        "prepared_transaction_offset",
        "body",
    ):
        assert getattr(rec, name) == r[name], name
    assert rec.topic == r["topic"].decode("utf-8")
    assert rec.properties_raw == r["properties"].decode("utf-8")
    assert rec.crc_ok()
    if r["sys_flag"] & INNER_BATCH_FLAG:
        items = decode_batch(rec.body)
        assert all(isinstance(i, BatchItem) for i in items)
        assert encode_batch(items) == rec.body


@given(st.lists(record_rows(), min_size=1, max_size=6))
def test_columnar_encoder_is_the_per_record_encoder(rs: list[dict]) -> None:
    """Encoded by columns, the bytes are those of encode_record, and decode_record reads them back."""
    data = encode_records(_columns(rs))
    assert data == b"".join(_per_record(r) for r in rs)
    pos = 0
    for r in rs:
        rec = decode_record(data, pos, check_crc=True)
        _check_record(rec, r)  # type: ignore[arg-type]
        pos += rec.total_size  # type: ignore[union-attr]
    assert pos == len(data)


@given(st.lists(record_rows(), min_size=1, max_size=6))
def test_columnar_decoder_reads_what_the_per_record_encoder_wrote(rs: list[dict]) -> None:
    parts = [_per_record(r) for r in rs]
    data = b"".join(parts)
    positions = np.cumsum([0] + [len(p) for p in parts[:-1]])
    cols = decode_records(data, positions)
    want = _columns(rs)
    for name, values in want.ints.items():
        assert cols.ints[name].tolist() == values.tolist(), name
    assert cols.born_addr == want.born_addr and cols.store_addr == want.store_addr
    assert cols.body == want.body and cols.topic == want.topic and cols.properties == want.properties
    assert cols.v2.tolist() == want.v2.tolist()
    assert (cols.ints["magic"] == MAGIC_V2).tolist() == want.v2.tolist()


def test_head_struct_and_dtype_come_from_one_declaration() -> None:
    assert HEAD_V4.size == HEAD_V4_DTYPE.itemsize == 88
    assert [HEAD_V4_DTYPE.fields[f.name][1] for f in RECORD_HEAD] == [OFFSETS_V4[f.name] for f in RECORD_HEAD]
    assert OFFSETS_V4["sys_flag"] == 36 and OFFSETS_V4["store_timestamp_ms"] == 56 and OFFSETS_V4["body_len"] == 84


@given(record_rows())
def test_decode_heads_matches_decode_record(r: dict) -> None:
    data = _per_record(r)
    heads = decode_heads(np.frombuffer(data, np.uint8), np.array([0]), r["sys_flag"])
    rec = decode_record(data, 0)
    assert int(heads["queue_offset"][0]) == rec.queue_offset  # type: ignore[union-attr]
    assert int(heads["store_timestamp_ms"][0]) == rec.store_timestamp_ms  # type: ignore[union-attr]
    assert heads["store_addr"][:1].tobytes() == rec.store_addr  # type: ignore[union-attr]


@given(st.binary(min_size=0, max_size=400), st.lists(st.integers(0, 400), max_size=4))
@example(
    encode_record(
        topic="T", queue_id=1, queue_offset=2, phy_offset=0, born_timestamp_ms=1, born_addr=bytes(4), born_port=1,
        store_timestamp_ms=2, store_addr=bytes(4), store_port=3, body=b"x", properties=b"KEYS\x01k\x02",
    ) * 2,
    [0, 100],
)  # fmt: skip
def test_columnar_decoder_raises_only_corrupt_data(data: bytes, positions: list[int]) -> None:
    """Random bytes either decode or raise the library's CorruptData, as the per-record decoder does."""
    try:
        cols = decode_records(data, np.array(positions, dtype=np.int64))
    except CorruptData:
        return
    for i, pos in enumerate(positions):  # what the columnar decoder accepts, the reference accepts alike
        rec = decode_record(data, pos)
        assert isinstance(rec, Record)
        assert rec.body == cols.body[i]
        assert rec.topic == cols.topic[i].decode("utf-8", "replace")
        assert rec.total_size == int(cols.ints["total_size"][i])
