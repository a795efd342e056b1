"""Consume queue entries (§4): the §15.7 vectors, file positions, entries one at a time and as arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import INT32, INT64, hx

from rmqstore.codec.commitlog import decode_batch
from rmqstore.codec.consumequeue import (
    ENTRY_DTYPE,
    ENTRY_SIZE,
    FILLER_SIZE,
    CqEntry,
    decode_entry,
    effective_file_size,
    encode_entry,
    entries_array,
    filler_entry,
    write_entry,
)
from rmqstore.codec.indexfile import decode_header
from rmqstore.codec.javahash import tags_code
from rmqstore.errors import CorruptData
from rmqstore.store.layout import Segment, StoreConfig, file_name, segment_for

# ----------------------------------------------------------------------------------------- §15.7


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


# ----------------------------------------------------------------------------------- round trips


@given(INT64, INT32, INT64)
def test_cq_entry_round_trip(phy, size, code):
    data = encode_entry(phy, size, code)
    assert len(data) == 20
    assert decode_entry(data, 0) == CqEntry(phy, size, code)


CQ_ENTRY = st.tuples(INT64, INT32, INT64)


@given(st.lists(CQ_ENTRY, max_size=20))
@example([(0, FILLER_SIZE, 0), (-1, 0, 0)])
def test_consume_queue_entries_both_ways(entries: list[tuple[int, int, int]]) -> None:
    per_entry = b"".join(encode_entry(*e) for e in entries)
    arr = np.array(entries, dtype=ENTRY_DTYPE) if entries else np.zeros(0, ENTRY_DTYPE)
    assert arr.tobytes() == per_entry
    view = entries_array(per_entry)
    assert [decode_entry(per_entry, i * ENTRY_SIZE) for i in range(len(entries))] == [
        CqEntry(*map(int, row)) for row in view.tolist()
    ]
    buf = bytearray(len(per_entry))
    for i, e in enumerate(entries):
        write_entry(buf, i * ENTRY_SIZE, *e)
    assert bytes(buf) == per_entry


# -------------------------------------------------------------------------------- only our error


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
