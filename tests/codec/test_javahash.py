"""Java's String.hashCode as tagsCode and index key hash: the store-format.md §15.1 vectors, scalar and batch."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import hx

from rmqstore.codec.consumequeue import encode_entry
from rmqstore.codec.indexfile import HEADER_SIZE
from rmqstore.codec.javahash import index_key_hash, java_hash, java_hash_batch, tags_code

# ----------------------------------------------------------------------------------------- §15.1

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


# ----------------------------------------------------------------------------------- round trips


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
