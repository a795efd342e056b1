"""The pieces a batch's lines are made of (``codec.msglines``) against what Python writes one value at a time.

Integers against ``%d`` (negative, the int64 limits, widths that differ in a batch, leading digits all
rows share), bodies against ``b2a_base64`` and ``bytes.hex`` (every length modulo 3, lengths alike and
not, empty), the byte matrix of a line with its NUL padding taken out both ways (``bytes.replace``
for a few, numpy for many), distinct texts (topics) found by a folded key and told apart when two
fold alike, and property strings: plain ones as JSON objects, the others left out.
"""

from __future__ import annotations

import binascii
import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rmqstore.codec import msglines as ml
from rmqstore.codec.commitlog import parse_properties

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(INT64, min_size=1, max_size=40))
@example([-(2**63), 2**63 - 1, 0, -1, 9, 10])
@example([1_700_000_000_000 + i for i in range(5)])  # one prefix for all rows, then the digits that differ
@example([999, 1000, 1001])
@example([-100000000, 2100000000])  # a sign where the other row has one more digit: as wide, no padding
def test_ints_are_percent_d(values):
    line = ml.Line(len(values))
    line.text(b"[")
    line.ints(np.array(values, dtype=np.int64))
    line.text(b"]\n")
    assert line.data() == b"".join(b"[%d]\n" % v for v in values)


@given(st.lists(st.integers(0, 10**12 - 1), min_size=1, max_size=30), st.integers(12, 19))
def test_fixed_decimal_is_zero_padded(values, width):
    got = ml.fixed_decimal(np.array(values, dtype=np.int64), width)
    assert [bytes(r) for r in got] == [b"%0*d" % (width, v) for v in values]


BODIES = st.lists(st.binary(max_size=70), min_size=1, max_size=20)


def ranges_of(bodies: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bodies laid out one after the other with a few bytes between (a record's other fields)."""
    buf, start = bytearray(b"\xff\xfe"), []
    for b in bodies:
        start.append(len(buf))
        buf += b + b"\xab\xcd\xef"
    return np.frombuffer(bytes(buf), np.uint8), np.array(start, np.int64), np.array([len(b) for b in bodies], np.int64)


def padded_rows(mat: np.ndarray, nuls: int) -> list[bytes]:
    assert int(np.count_nonzero(mat == 0)) == nuls
    return [bytes(r).replace(b"\0", b"") for r in mat]


@given(BODIES)
@example([b""])
@example([b"a", b"ab", b"abc", b"", b"\xf9\x00"])
@example([b"xyz" * 5] * 3)
@example([b"xyzw" * 5] * 3)
@example([b"xy" * 5] * 3)
def test_base64_of_a_batch_is_b2a_base64_of_each_body(bodies):
    u8, start, length = ranges_of(bodies)
    mat, nuls = ml.base64_column(u8, start, length)
    assert padded_rows(mat, nuls) == [binascii.b2a_base64(b, newline=False) for b in bodies]


@given(BODIES)
def test_hex_of_a_batch_is_hex_of_each_body(bodies):
    u8, start, length = ranges_of(bodies)
    mat, nuls = ml.hex_column(u8, start, length)
    assert padded_rows(mat, nuls) == [b.hex().encode() for b in bodies]


@pytest.mark.parametrize("pad", [1, 40])  # a NUL or two a row: bytes.replace; many: numpy's compress
def test_a_line_matrix_loses_its_padding_both_ways(pad):
    texts = [b"a", b"bb" * pad, b"", b"ccc"]
    line = ml.Line(5)
    line.text(b"<")
    line.codes(texts, np.array([0, 1, 2, 3, 1]))
    line.text(b">\n")
    assert line.data() == b"<a>\n<" + b"bb" * pad + b">\n<>\n<ccc>\n<" + b"bb" * pad + b">\n"
    assert line.data(np.array([False, True, True, False, False])) == b"<" + b"bb" * pad + b">\n<>\n"


TOPICS = st.lists(st.sampled_from([b"A", b"AB", b"TopicA", b"TopicB", b"x" * 17, b"x" * 16 + b"y", b"", b"\x00"]))


@given(TOPICS.filter(bool))
def test_distinct_texts_and_codes(topics):
    u8, start, length = ranges_of(topics)
    labels, codes = ml._texts_codes(u8, start, length)
    assert len(set(labels)) == len(labels)
    assert [labels[c] for c in codes.tolist()] == topics


def test_texts_that_fold_alike_are_told_apart(monkeypatch):
    monkeypatch.setattr(ml, "_FOLD", np.uint64(0))  # every text of one length folds alike
    topics = [b"TopicA", b"TopicB", b"TopicA", b"Other1"]
    u8, start, length = ranges_of(topics)
    labels, codes = ml._texts_codes(u8, start, length)
    assert [labels[c] for c in codes.tolist()] == topics


SPELLINGS = {"json": (b'{"', b'":"', b'","', b'"}'), "csv": (b'"{""', b'"":""', b'"",""', b'""}"')}
NAME = st.sampled_from([b"KEYS", b"TAGS", b"UNIQ_KEY", b"WAIT", b"A", b"K" * 9, b"", b"a\nb", b'q"', b"\xc3\xa9"])
VALUE = st.sampled_from([b"v", b"k-1", b"", b"a b", b"\x7f", b"\\", b"\n", b"x" * 30])
PROPS = st.lists(st.tuples(NAME, VALUE), max_size=5).map(lambda kv: b"".join(k + b"\x01" + v + b"\x02" for k, v in kv))


@given(st.lists(st.one_of(PROPS, st.sampled_from([b"KEYS\x01k\x02TAGS\x01t\x02"])), min_size=1, max_size=12))
@example([b"A\x01x\ny\x02", b"KEYS\x01k1\x02TAGS\x01t\x02", b"KEYS\x01k2\x02"])  # a newline, then plain rows
@example([b"KEYS\x01a\x02TAGS\x01b\x02"] * 4)  # one layout
@example([b"KEYS\x01a\x02KEYS\x01b\x02"] * 3)  # one layout, a name twice
def test_plain_property_strings_are_their_json_objects(strings):
    u8, start, length = ranges_of(strings)
    for fmt, spelling in SPELLINGS.items():
        props = ml.property_text(u8, start, length, spelling)
        for i, raw in enumerate(strings):
            obj = bytes(props.objects[props.object_start[i] : props.object_start[i] + props.object_len[i]])
            if not props.plain[i]:
                assert not obj
                continue
            parsed = parse_properties(raw.decode(), broker="5.2.0")
            want = json.dumps(parsed, separators=(",", ":")).encode()
            assert obj == (want if fmt == "json" else b'"' + want.replace(b'"', b'""') + b'"')
            for name, d in zip(ml.DERIVED, props.derived, strict=True):
                at = np.flatnonzero(d.rows == i)
                value = bytes(props.text[d.start[at[0]] : d.start[at[0]] + d.length[at[0]]]) if len(at) else None
                assert value == (None if name.decode() not in parsed else parsed[name.decode()].encode())
