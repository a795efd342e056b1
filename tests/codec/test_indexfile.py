"""Index files (§5): the §15.8 vectors, hash slot counts by version, headers and entries both ways, queries."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import INT32, INT64, UNIQ, hx

from rmqstore.codec.indexfile import (
    ENTRY_DTYPE,
    HEADER_SIZE,
    IndexFile,
    IndexHeader,
    decode_header,
    encode_header,
    file_size,
    write_header,
)
from rmqstore.codec.javahash import index_key_hash
from rmqstore.errors import CorruptData
from rmqstore.store.layout import StoreConfig

# ----------------------------------------------------------------------------------------- §15.8


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


# ----------------------------------------------------------------------------------- round trips


@given(st.tuples(INT64, INT64, INT64, INT64, INT32, INT32))
def test_index_header_round_trip(values):
    h = IndexHeader(*values)
    data = encode_header(h)
    assert len(data) == 40
    assert decode_header(data) == h


@given(st.lists(st.tuples(INT32, INT64, INT32, INT32), max_size=20))
def test_index_entries_both_ways(entries: list[tuple[int, int, int, int]]) -> None:
    slots, count = 4, len(entries) + 1
    buf = bytearray(file_size(slots, count))
    arr = np.array([(0, 0, 0, 0), *entries], dtype=ENTRY_DTYPE)
    buf[HEADER_SIZE + slots * 4 :] = arr.tobytes()
    write_header(buf, IndexHeader(1, 2, 3, 4, 0, count))
    f = IndexFile(buf, slots=slots, entries=count)
    assert [(e.key_hash, e.phy_offset, e.time_diff_s, e.prev) for e in map(f.entry, range(1, count))] == entries
    assert f.entries_array()[1:].tolist() == entries


@given(st.tuples(INT64, INT64, INT64, INT64, INT32, INT32))
def test_index_header_both_ways(values: tuple[int, ...]) -> None:
    h = IndexHeader(*values)
    assert decode_header(encode_header(h)) == h
    buf = bytearray(HEADER_SIZE)
    write_header(buf, h)
    assert bytes(buf) == encode_header(h)


# -------------------------------------------------------------------------------- only our error


@given(st.binary(min_size=file_size(4, 8), max_size=file_size(4, 8)), st.text(max_size=10))
def test_random_index_file_query_raises_only_corrupt_data(data, key):
    ix = IndexFile(bytearray(data), slots=4, entries=8, path="ix")
    try:
        found = ix.select_phy_offsets(key, max_num=64, begin_ms=-(2**62), end_ms=2**62)
    except CorruptData as e:
        assert str(e.path) == "ix"
        return
    assert len(found) <= 64
