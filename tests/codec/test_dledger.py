"""DLedger entries, index units and the DLedger framing of the commit log."""

from __future__ import annotations

import struct

from conftest import small_record
from hypothesis import given
from hypothesis import strategies as st
from strategies import INT32, INT64

from rmqstore.codec.dledger import (
    BLANK_MAGIC,
    DLEDGER,
    HEADER_SIZE,
    EntryHeader,
    IndexUnit,
    blank_bytes,
    decode_header,
    decode_unit,
    encode_member_file,
    header_for,
    parse_member_file,
)
from rmqstore.codec.framing import BLANK, END, INVALID, RECORD

FILE = 4096


@given(st.tuples(INT32, INT32, INT64, INT64, INT64, INT32, INT32, INT32, INT32))
def test_header_round_trips(fields: tuple[int, ...]) -> None:
    head = EntryHeader(*fields)
    raw = head.encode()
    assert len(raw) == HEADER_SIZE
    assert decode_header(raw, 0) == head
    assert raw == struct.pack(">iiqqqiiii", *fields)  # Java's big-endian fields, in DLedger's order


@given(INT32, INT64, INT32, INT64, INT64)
def test_index_unit_round_trips(magic: int, pos: int, size: int, index: int, term: int) -> None:
    unit = IndexUnit(magic, pos, size, index, term)
    raw = unit.encode()
    assert len(raw) == 32 and decode_unit(raw, 0) == unit
    assert raw == struct.pack(">iqiqq", magic, pos, size, index, term)


def test_member_files_keep_their_key_order() -> None:
    raw = b"committedIndex=399\nendIndex=399\n"  # as dledger writes its checkpoint
    values = parse_member_file(raw.decode())
    assert values == {"committedIndex": "399", "endIndex": "399"}
    assert encode_member_file(values) == raw


def build_file(sizes: list[int], *, base: int = 0, term: int = 0) -> tuple[bytearray, list[int], int]:
    """A DLedger data file of records of ``sizes`` topics' lengths; returns (bytes, record positions, end)."""
    buf = bytearray(FILE)
    pos, out = 0, []
    for i, n in enumerate(sizes):
        rec = small_record(topic="T" * n, phy_offset=base + pos + HEADER_SIZE)
        entry = header_for(len(rec), i, term, base + pos).encode() + rec
        if pos + len(entry) + 8 > FILE:
            buf[pos:] = blank_bytes(FILE - pos)
            return buf, out, pos
        buf[pos : pos + len(entry)] = entry
        out.append(pos + HEADER_SIZE)
        pos += len(entry)
    return buf, out, pos


@given(st.lists(st.integers(1, 100), max_size=40), st.integers(0, 3))
def test_chain_finds_every_record_and_the_blank(sizes: list[int], files_before: int) -> None:
    base = files_before * FILE
    buf, records, end = build_file(sizes, base=base)
    positions, stop, reason = DLEDGER.chain(buf, 0, len(buf))
    assert positions.tolist() == records
    assert stop == end
    full = end < FILE and buf[end : end + 4] == struct.pack(">i", BLANK_MAGIC)
    assert reason == (BLANK if full else END)
    for rec in records:
        kind, at, frame_end = DLEDGER.step(buf, rec - HEADER_SIZE, len(buf))
        assert (kind, at) == (RECORD, rec)
        assert DLEDGER.frame_values(buf, rec)[2] == base + rec - HEADER_SIZE  # the entry's own position field


@given(st.lists(st.integers(1, 60), min_size=2, max_size=20), st.data())
def test_a_torn_last_entry_ends_the_chain_before_it(sizes: list[int], data: st.DataObject) -> None:
    buf, records, end = build_file(sizes)
    last = records[-1] - HEADER_SIZE
    # the chain reads the entry header and the record's TOTALSIZE and MAGICCODE (the decoder the rest):
    # cut somewhere in those 56 bytes, before one of them that is not zero
    last_byte = max(i for i in range(last, last + HEADER_SIZE + 8) if buf[i])
    cut = data.draw(st.integers(last + 1, last_byte))
    buf[cut:] = bytes(len(buf) - cut)  # the write stopped at ``cut``
    positions, stop, reason = DLEDGER.chain(buf, 0, len(buf))
    assert positions.tolist() == records[:-1]
    assert stop == last and reason in (INVALID, END)


def test_an_entry_whose_position_field_is_off_the_chain_stops_it() -> None:
    buf, records, _ = build_file([5, 6, 7])
    struct.pack_into(">q", buf, records[1] - HEADER_SIZE + 24, 999)
    positions, stop, reason = DLEDGER.chain(buf, 0, len(buf))
    assert positions.tolist() == records[:1] and reason == INVALID
    error = DLEDGER.explain(buf, stop, path="f", file_from=0, end=len(buf))
    assert error.pos == stop and "position field 999" in error.what


def test_explain_names_what_is_wrong_with_an_entry() -> None:
    buf, records, _ = build_file([5, 6])
    struct.pack_into(">i", buf, records[1] - HEADER_SIZE, 3)
    assert "entry magic 3, expected 1" in DLEDGER.explain(buf, records[1] - HEADER_SIZE, path="f").what
    buf2, records2, _ = build_file([5, 6])
    struct.pack_into(">i", buf2, records2[0] + 4, 0)  # the record's MAGICCODE inside a sound entry
    assert "magic" in DLEDGER.explain(buf2, records2[0] - HEADER_SIZE, path="f").what
