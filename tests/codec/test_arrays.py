"""The record arrays (numpy, many records at a time) against the per-record decoder and property parser."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import prop_text, records

from rmqstore.codec.arrays import (
    _marks_gathered,
    _marks_in_place,
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
    BORNHOST_V6_FLAG,
    HEAD_NAMES,
    STOREHOSTADDRESS_V6_FLAG,
    Record,
    decode_record,
    encode_properties,
    encode_record,
    parse_properties,
)
from rmqstore.errors import CorruptData

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


@given(
    st.binary(min_size=1, max_size=600),
    st.lists(st.tuples(st.integers(0, 600), st.integers(0, 40)), min_size=1, max_size=12),
)
def test_marks_found_in_place_equal_the_gathered_ones(data, ranges):
    """Strings split where they lie (file order, not overlapping) give the separators and high-byte
    rows of the gathered matrix; strings out of order or far apart are left to the matrix."""
    u8 = np.frombuffer(data, np.uint8)
    start = np.sort(np.array([min(s, len(data) - 1) for s, _ in ranges], np.int64))
    lens = np.array([n for _, n in ranges], np.int64)
    lens = np.minimum(lens, np.append(start[1:], len(data)) - start)  # each string ends before the next starts
    lens = np.maximum(lens, 0)
    found = _marks_in_place(u8, start, lens)
    if found is None:
        return
    want = _marks_gathered(u8, start, lens)
    for got, exp in zip(found, want, strict=True):
        assert got.tolist() == exp.tolist()


def test_record_arrays_of_no_records():
    a = record_arrays(np.zeros(100, np.uint8), np.zeros(0, np.int64), 100)
    assert len(a.pos) == len(a.ok) == 0 and a.store_addr.shape == (0, 4)
    assert msg_id_hex(a.store_addr, a.store_port, a.phy_offset).shape == (0, 32)
    assert host_codes_v4(a.born_addr, a.born_port)[0] == []
    assert len(property_items(np.zeros(100, np.uint8), a.props_start, a.props_len).row) == 0


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


_KEYS_VALUE = st.lists(st.sampled_from([b"a", b" ", b"bc", b"  ", b"\xc3\xa9"]), max_size=160).map(b"".join)


@given(st.lists(_KEYS_VALUE, max_size=12), st.integers(0, 3))
def test_key_tokens_of_many_values_are_split_in_order(values, gap):
    """Plain values (one token), values with spaces and values past the plain width, side by side:
    the tokens come in record order, each with its place in its value."""
    buf, start = b"", []
    for v in values:
        buf += b"\x02" * gap
        start.append(len(buf))
        buf += v
    u8 = np.frombuffer(buf + b" x", np.uint8)  # a space right after the last value is not part of it
    rows = np.arange(len(values), dtype=np.int64) * 3
    got = key_tokens(u8, rows, np.array(start, np.int64), np.array([len(v) for v in values], np.int64))
    want = [(3 * i, t, k) for i, v in enumerate(values) for k, t in enumerate(t for t in v.split(b" ") if t)]
    rec, s, n, seq = (a.tolist() for a in got)
    assert [(r, buf[a : a + m], q) for r, a, m, q in zip(rec, s, n, seq, strict=True)] == want
