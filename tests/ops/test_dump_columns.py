"""The ndjson lines and csv records formatted from columns (``codec.msglines``) equal the per-record ones.

On every real store (4.4.0, 4.9.4 and 5.2.0 engines: DLedger, compressed bodies, LMQ, V2 records,
crashed tails, BLANK ends), on the commit log files collected from other brokers, on a store with a
flipped body byte, and on generated records whose topics, properties and keys hold hostile text.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_REAL_CASES, REPLICA_PAIRS, REPLICAS, case_dir, copy_real_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.codec.commitlog import COMPRESSED_FLAG, HEAD_V4, Record, decode_record, encode_record
from rmqstore.codec.framing import PLAIN
from rmqstore.codec.rows import ROW_FIELDS, csv_line, message_row
from rmqstore.ops import dump as lib
from rmqstore.store import open_store
from rmqstore.store.layout import Segment
from rmqstore.walk.lenient import Run, walk_files

MODES = [("base64", False), ("base64", True), ("hex", False), ("none", True)]


def both_paths(buf, path: str, base: int, positions, opts: lib.MessageOptions, framing=PLAIN) -> list[bytes]:
    """The ndjson lines of both paths, then the csv records of both; asserts each pair is equal, CRC
    mismatches included, and that the text written (``format_data``) is those lines. Returns the
    ndjson lines."""
    cols, bad = lib.NdjsonFormatter(opts).format(buf, path, base, positions, framing=framing)
    ref, ref_bad = lib.NdjsonFormatter(opts, columnar=False).format(buf, path, base, positions, framing=framing)
    assert cols == ref
    assert [b.problem() for b in bad] == [b.problem() for b in ref_bad]
    text, count, _ = lib.NdjsonFormatter(opts).format_data(buf, path, base, np.asarray(positions), framing=framing)
    assert (text, count) == (b"".join(line + b"\n" for line in ref), len(ref))
    columns = [*ROW_FIELDS, *framing.frame_fields]
    csv_cols, csv_bad = lib.CsvFormatter(opts, columns).format(buf, path, base, positions, framing=framing)
    csv_ref, _ = lib.CsvFormatter(opts, columns, columnar=False).format(buf, path, base, positions, framing=framing)
    assert csv_cols == csv_ref
    assert [b.problem() for b in csv_bad] == [b.problem() for b in ref_bad]
    text, _, _ = lib.CsvFormatter(opts, columns).format_data(buf, path, base, np.asarray(positions), framing=framing)
    assert text == b"".join(line + b"\n" for line in csv_ref)
    return cols


def compare_segments(segs, broker: str) -> int:
    """Every run of every file through both paths, in every body mode; the number of records seen."""
    seen = 0
    for seg, buf, items in walk_files(segs, broker=broker):
        for item in items:
            if not isinstance(item, Run):
                continue
            for body, verify in MODES:
                opts = lib.MessageOptions(body=body, verify_crc=verify, broker=broker)
                both_paths(buf, str(seg.path), seg.base_offset, item.positions, opts, seg.framing)
            seen += len(item.positions)
    return seen


def store_root(case_path: Path) -> Path:
    return case_path / "store" if (case_path / "store").is_dir() else case_path


@pytest.mark.parametrize("case", ALL_REAL_CASES)
def test_columns_equal_the_per_record_lines_on_every_real_store(case):
    where = case_dir(case)
    if not where.is_dir():
        pytest.skip(f"real stores not found at {where}")
    with open_store(store_root(where)) as st_:
        segs, _ = st_.commitlog_segments()
        assert compare_segments(segs, st_.config.broker) > 0


@pytest.mark.parametrize("pair", REPLICA_PAIRS)
def test_columns_equal_the_per_record_lines_on_the_replicas(pair):
    for side in ("a", "b"):
        root = REPLICAS / pair / side / "store"
        if not root.is_dir():
            pytest.skip(f"replicas not found at {root}")
        with open_store(root) as st_:
            segs, _ = st_.commitlog_segments()
            assert compare_segments(segs, st_.config.broker) > 0


def test_columns_equal_the_per_record_lines_on_files_of_other_brokers():
    from conftest import REAL_WORLD

    files = sorted(REAL_WORLD.glob("*/*/**/commitlog/" + "[0-9]" * 20))
    if not files:
        pytest.skip(f"real-world files not found at {REAL_WORLD}")
    segs = [Segment(p, int(p.name), p.stat().st_size) for p in files]
    assert sum(compare_segments([s], "4.9.7") for s in segs) > 0


def test_a_flipped_body_byte_is_the_same_crc_mismatch_on_both_paths(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    first = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    rec = decode_record(data, 0)
    assert isinstance(rec, Record) and len(rec.body) > 4
    data[HEAD_V4.size + 3] ^= 0x40  # a byte of the first record's body
    first.write_bytes(bytes(data))
    opts = lib.MessageOptions(verify_crc=True)
    lines = both_paths(bytes(data), str(first), 0, np.array([0, rec.total_size]), opts)
    assert b'"crcOk":false,"why":"CRC MISMATCH"' in lines[0] and b'"crcOk":true' in lines[1]
    with open_store(root) as st_:
        segs, _ = st_.commitlog_segments()
        compare_segments(segs, st_.config.broker)


# ----------------------------------------------------------------------------- generated records

# Text a producer may put in a topic, a property name or value: quotes, backslashes, control
# characters, the separators 0x01/0x02 and '=', what a spreadsheet reads as a formula, commas,
# non-ASCII and bytes that are not UTF-8.
HOSTILE = st.lists(
    st.sampled_from(
        [
            b'"',
            b"\\",
            b"\x00",
            b"\n",
            b"\x1f",
            b"\x7f",
            b"\x01",
            b"\x02",
            b"=",
            b"&",
            b"%",
            b"%d",
            "é".encode(),
            "\u2028".encode(),
            "日本".encode(),
            b"\xff",
            b"\xc3",
            b"\xed\xa0\x80",
            b"a",
            b"Z",
            b"KEYS",
            b"TAGS",
            b"UNIQ_KEY",
            b" ",
        ]
    ),  # fmt: skip
    max_size=6,
).map(b"".join)
PLAIN = st.text(alphabet="abcXYZ019-_. ", min_size=1, max_size=8).map(str.encode)
NAME = st.one_of(st.sampled_from([b"KEYS", b"TAGS", b"UNIQ_KEY", b"WAIT"]), PLAIN, HOSTILE)
ITEMS = st.lists(st.tuples(NAME, st.one_of(PLAIN, HOSTILE)), max_size=6)
PROPS = st.one_of(
    ITEMS.map(lambda items: b"".join(n + b"\x01" + v + b"\x02" for n, v in items)),
    ITEMS.map(lambda items: b"\x02".join(n + b"\x01" + v for n, v in items)),  # no trailing 0x02
    HOSTILE,
)
INT32 = st.one_of(st.integers(0, 9), st.integers(-(2**31), 2**31 - 1))
INT64 = st.one_of(st.integers(0, 99), st.integers(-(2**63), 2**63 - 1), st.integers(10**12, 10**12 + 999))
RECORD = st.fixed_dictionaries(
    {
        "topic": st.one_of(PLAIN, HOSTILE.filter(lambda t: 0 < len(t) <= 127)),
        "properties": PROPS,
        "body": st.one_of(st.binary(max_size=40), st.binary(max_size=8).map(lambda b: b"\xf9" + b)),  # base64 '+...'
        "store_ts": st.sampled_from([1_700_000_000_123, 0, -1, 1_700_000_001_999, 253_402_300_800_000]),
        "queue_id": st.integers(0, 3),
        "compressed": st.booleans(),
    },
    optional={  # the head's integers, each of any value it may hold
        "queue_offset": INT64, "flag": INT32, "born_ts": INT64, "reconsume": INT32, "prepared": INT64, "crc": INT32,
        "sys_flag": st.sampled_from([0, 4, 8, 12, 128, 2**31 - 1 - 48 - 1]),
    },
)  # fmt: skip


def _record(at: int, i: int, r: dict) -> bytes:
    topic = r["topic"]
    out = bytearray(
        encode_record(
            topic="t" * len(topic), queue_id=r["queue_id"], queue_offset=r.get("queue_offset", i), phy_offset=at,
            flag=r.get("flag", 0), sys_flag=r.get("sys_flag", 0) | (COMPRESSED_FLAG if r["compressed"] else 0),
            born_timestamp_ms=r.get("born_ts", 1_700_000_000_000), born_addr=bytes([10, 0, 0, i % 3]),
            born_port=40000 + i, store_timestamp_ms=r["store_ts"], store_addr=bytes([192, 168, 0, 1 + i % 2]),
            store_port=10911, reconsume_times=r.get("reconsume", 0), prepared_transaction_offset=r.get("prepared", 0),
            body=r["body"], properties=r["properties"], crc=r.get("crc"),
        )
    )  # fmt: skip
    at_topic = len(out) - 2 - len(r["properties"]) - len(topic)
    out[at_topic : at_topic + len(topic)] = topic  # bytes that need not be UTF-8
    return bytes(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, min_size=1, max_size=12), st.sampled_from(MODES))
def test_columns_equal_the_rows_on_hostile_text(records, mode):
    buf = bytearray()
    positions = []
    for i, r in enumerate(records):
        positions.append(len(buf))
        buf += _record(len(buf), i, r)
    buf = bytes(buf)
    body, verify = mode
    opts = lib.MessageOptions(body=body, verify_crc=verify)
    lines = both_paths(buf, "gen", 0, np.array(positions, dtype=np.int64), opts)
    for pos, line in zip(positions, lines, strict=True):
        rec = decode_record(buf, pos)
        assert isinstance(rec, Record)
        row = message_row(rec, body=body, verify_crc=verify, path="gen")
        assert line == json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()
    got, _ = lib.CsvFormatter(opts, ROW_FIELDS).format(buf, "gen", 0, np.array(positions, dtype=np.int64))
    for pos, line in zip(positions, got, strict=True):
        rec = decode_record(buf, pos)
        row = message_row(rec, body=body, verify_crc=verify, path="gen")
        assert line + b"\n" == csv_line(row, ROW_FIELDS)


def test_a_record_far_larger_than_its_batch_keeps_its_place():
    """A record more than twice the batch's median size goes through the per-record path (the batch's
    matrix stays as wide as its usual records), between the others' lines."""
    records = [{"topic": b"T", "properties": b"KEYS\x01k\x02", "body": b"b" * n, "store_ts": 1_700_000_000_123,
                "queue_id": 0, "compressed": False} for n in (10, 11, 5000, 12, 0, 13)]  # fmt: skip
    buf, positions = bytearray(), []
    for i, r in enumerate(records):
        positions.append(len(buf))
        buf += _record(len(buf), i, r)
    pos = np.array(positions, dtype=np.int64)
    for body, verify in MODES:
        lines = both_paths(bytes(buf), "gen", 0, pos, lib.MessageOptions(body=body, verify_crc=verify))
        assert len(lines) == len(records)
