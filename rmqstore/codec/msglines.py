"""Message records as JSON lines, a batch at a time from columns (the rows of :mod:`.rows`).

A batch of record positions is decoded with :func:`.arrays.record_arrays`; each field of the line
becomes a column (integers as arrays; hosts, topics and store times as codes into a few texts;
properties, keys, tags and bodies cut from one text per batch), a field that holds one value in the
whole batch is written into the line's template once, and every line is then one ``%`` of the
template over its row. A line is byte for byte ``json.dumps(message_row(...))`` compact; the records
this path does not format (V2 or IPv6 records, compressed bodies, store times no calendar holds,
records whose fields do not decode as arrays) are returned as ``slow`` for the per-record path.
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmqstore.codec.arrays import (
    PropertyItems,
    RecordArrays,
    distinct_hosts_v4,
    duplicate_name_rows,
    host_codes_v4,
    named,
    record_arrays,
)
from rmqstore.codec.columnar import body_crcs, gather
from rmqstore.codec.commitlog import BORNHOST_V6_FLAG, COMPRESSED_FLAG, MAGIC_V1, STOREHOSTADDRESS_V6_FLAG, host_str
from rmqstore.codec.rows import CRC_MISMATCH, FORMULA_START, csv_cell, store_time

_PORT = struct.Struct(">i")
DERIVED = (b"KEYS", b"TAGS", b"UNIQ_KEY")  # the properties behind keys, tags and uniqKey
_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
# Bytes a property name or value may hold for its JSON text to be the bytes themselves: printable
# ASCII but '"' and '\', and the two separators (§3.7).
_PLAIN = np.zeros(256, dtype=bool)
_PLAIN[0x20:0x7F] = True
_PLAIN[[ord('"'), ord("\\")]] = False
_PLAIN[[1, 2]] = True
_MAX_PROPS = 2048  # longer property strings go through the property parser (a batch's text stays small)
_NL = ord("\n")
_FORMULA = np.zeros(256, dtype=bool)
_FORMULA[[ord(c) for c in FORMULA_START]] = True


class Times(dict[int, tuple[bytes, bytes]]):
    """Per second of store time: the JSON text of storeTime before and after its milliseconds."""

    def __init__(self, local: bool) -> None:
        super().__init__()
        self.local = local

    def __missing__(self, sec: int) -> tuple[bytes, bytes]:
        text = store_time(sec * 1000, self.local)
        dot = -1 if text is None else text.find(".", text.find("T"))
        if text is None or dot < 0:  # no calendar time: the milliseconds alone would be wrong
            v = self[sec] = (b"", b"")
        else:
            v = self[sec] = (b'"' + text[: dot + 1].encode(), text[dot + 4 :].encode() + b'"')
        return v


class Hosts(dict[tuple[bytes, int, bytes, int], tuple[bytes, bytes, bytes]]):
    """(born host, store host, msgId prefix) as JSON-ready bytes, per born and store address."""

    def __missing__(self, key: tuple[bytes, int, bytes, int]) -> tuple[bytes, bytes, bytes]:
        born_addr, born_port, store_addr, store_port = key
        v = self[key] = (
            host_str(born_addr, born_port).encode(),
            host_str(store_addr, store_port).encode(),
            msg_id_prefix(store_addr, store_port),
        )
        return v


def msg_id_prefix(store_addr: bytes, store_port: int) -> bytes:
    """The first half of an offset msgId (§3.10): the store host's address and port in hex."""
    return (store_addr + _PORT.pack(store_port)).hex().upper().encode()


class Topics(dict[bytes, bytes]):
    """A topic's stored bytes as its JSON string (bytes that are not UTF-8 replaced, as the row does)."""

    def __missing__(self, key: bytes) -> bytes:
        v = self[key] = json.dumps(key.decode("utf-8", "replace"), ensure_ascii=False).encode()
        return v


@dataclass
class Template:
    """A line template and the columns of its varying fields; a field whose column holds one value is
    written into the template instead."""

    rows: int
    parts: list[bytes] = field(default_factory=list)
    columns: list[list[Any]] = field(default_factory=list)

    def text(self, literal: bytes) -> None:
        self.parts.append(literal.replace(b"%", b"%%"))

    def ints(self, spec: bytes, col: np.ndarray) -> None:
        if len(col) and col[0] == col[-1] and (col == col[0]).all():
            self.text(spec % int(col[0]))
        else:
            self.parts.append(spec)
            self.columns.append(col.tolist())

    def codes(self, spec: bytes, labels: list[bytes], inverse: np.ndarray) -> None:
        """A field whose row ``i`` is ``labels[inverse[i]]``."""
        if len(labels) == 1 or (len(inverse) and (inverse == inverse[0]).all()):
            self.text(spec % labels[int(inverse[0])] if len(inverse) else b"")
        else:
            table = np.empty(len(labels), dtype=object)
            table[:] = labels
            self.parts.append(spec)
            self.columns.append(table[inverse].tolist())

    def texts(self, spec: bytes, col: list[bytes]) -> None:
        self.parts.append(spec)
        self.columns.append(col)

    def lines(self) -> list[bytes]:
        tpl = b"".join(self.parts)
        if not self.columns:
            return [tpl % ()] * self.rows
        return list(map(tpl.__mod__, zip(*self.columns, strict=True)))


def _unique_codes(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct key and each row's code."""
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _texts_codes(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """The distinct byte strings at ``start``/``length`` and each row's code."""
    width = max(int(length.max(initial=0)), 1)
    mat = gather(u8, start, width) * (np.arange(width) < length[:, None])
    key = np.concatenate([length.astype("<u2").view(np.uint8).reshape(-1, 2), mat], axis=1)
    first, inverse = _unique_codes(np.ascontiguousarray(key).view(f"V{width + 2}").ravel())
    return [
        u8[s : s + n].tobytes() for s, n in zip(start[first].tolist(), length[first].tolist(), strict=True)
    ], inverse


def _concat(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges one after the other, each followed by a newline, and where each starts in that text."""
    width = int(length.max()) + 1
    mat = gather(u8, start, width).copy()
    mat[np.arange(len(start)), length] = _NL
    offs = np.zeros(len(start), dtype=np.int64)
    np.cumsum(length[:-1] + 1, out=offs[1:])
    return mat[np.arange(width) <= length[:, None]], offs


def _joined(u8: np.ndarray, start: np.ndarray, length: np.ndarray, head: bytes, tail: bytes) -> list[bytes]:
    """``head + bytes + tail`` for each range, cut from one text; the bytes must hold no newline."""
    if not len(start):
        return []
    text = _concat(u8, start, length)[0].tobytes()[:-1]
    return (head + text.replace(b"\n", tail + b"\n" + head) + tail).split(b"\n")


@dataclass
class Properties:
    """The JSON texts of properties, keys, tags and uniqKey of a batch's rows."""

    props: Any  # list[bytes], an object array while filled
    keys: Any
    tags: Any
    uniq: Any
    odd: np.ndarray  # csv: rows the per-record path formats


PropsJson = Callable[[bytes], tuple[bytes, bytes, bytes, bytes]]


def _plain_items(text: np.ndarray, offs: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, PropertyItems]:
    """Which rows of ``text`` (each a property string without its last 0x02, ended by a newline at
    ``ends``) are plain, and their items. Plain: ``name 0x01 value`` items, both non-empty, apart by
    0x02, only bytes whose JSON text is themselves, no name twice. Every broker version's parser reads
    such a string the same way (§3.7), and its JSON object is the string with the separators replaced."""
    m = len(offs)
    ok = np.ones(m, dtype=bool)
    odd = ~_PLAIN[text]
    odd[ends] = False
    if odd.any():
        ok[np.searchsorted(offs, np.flatnonzero(odd), "right") - 1] = False
    seps = np.flatnonzero(((text - np.uint8(1)) <= np.uint8(1)) | (text == _NL))
    kind = text[seps]
    row = np.searchsorted(offs, seps, "right") - 1
    ordinal = np.arange(len(seps)) - np.searchsorted(row, np.arange(m))[row]
    prev = np.empty_like(seps)
    prev[1:] = seps[:-1]
    prev = np.where(ordinal == 0, offs[row] - 1, prev)
    fits = np.where(ordinal % 2 == 0, kind == 1, kind != 1) & (seps - prev > 1)
    ok[row[~fits]] = False
    ones = np.flatnonzero(kind == 1)
    after = seps[np.minimum(ones + 1, len(seps) - 1)]
    items = PropertyItems(
        row[ones], prev[ones] + 1, seps[ones] - prev[ones] - 1, seps[ones] + 1, after - seps[ones] - 1, ~ok, ~ok
    )
    ok &= ~duplicate_name_rows(text, items, m)
    return ok, items


def properties_json(
    u8: np.ndarray, buf: Any, start: np.ndarray, length: np.ndarray, props_json: PropsJson | None
) -> Properties:
    """Properties, keys, tags and uniqKey as JSON texts; strings that are not plain through ``props_json``
    (None: as csv cells, and the rows whose cells need more than the plain strings give are ``odd``)."""
    m = len(start)
    as_csv = props_json is None
    out = Properties(*(np.empty(m, dtype=object) for _ in range(4)), odd=np.zeros(m, dtype=bool))
    empty = length <= 0
    nulls = (b"{}", b"", b"", b"") if as_csv else (b"{}", b'""', b"null", b"null")  # no properties: KEYS is "" (§3.11)
    for col, v in zip((out.props, out.keys, out.tags, out.uniq), nulls, strict=True):
        col[:] = nulls[3]
        col[empty] = v
    plain = (length > 1) & (length <= _MAX_PROPS)
    plain[plain] = u8[start[plain] + length[plain] - 1] == 2  # the last 0x02 closes the object
    rows = np.flatnonzero(plain)
    if len(rows):
        n = length[rows] - 1
        text, offs = _concat(u8, start[rows], n)
        ok, items = _plain_items(text, offs, offs + n)
        plain[rows[~ok]] = False
        if ok.any():  # a newline inside a string that is not plain would cut the text in the wrong place
            big = text.tobytes() if ok.all() else _concat(u8, start[rows[ok]], n[ok])[0].tobytes()
            big = b'{"' + big[:-1].replace(b"\x01", b'":"').replace(b"\x02", b'","').replace(b"\n", b'"}\n{"') + b'"}'
            if as_csv:  # the JSON text as one quoted cell
                big = b'"' + big.replace(b'"', b'""').replace(b"\n", b'"\n"') + b'"'
            put = np.empty(int(ok.sum()), dtype=object)
            put[:] = big.split(b"\n")
            out.props[rows[ok]] = put
        quote = b"" if as_csv else b'"'
        for name, col in zip(DERIVED, (out.keys, out.tags, out.uniq), strict=True):
            hit = named(text, items, name)
            hit = hit[ok[items.row[hit]]]
            if len(hit):
                put = np.empty(len(hit), dtype=object)
                put[:] = _joined(text, items.value_start[hit], items.value_len[hit], quote, quote)
                col[rows[items.row[hit]]] = put
                if as_csv:
                    out.odd[rows[items.row[hit[_csv_odd(text, items.value_start[hit], items.value_len[hit])]]]] = True
    if as_csv:
        out.odd |= ~plain & ~empty
    else:
        for i in np.flatnonzero(~plain & ~empty).tolist():
            a = int(start[i])
            raw = buf[a : a + int(length[i])]
            out.props[i], out.keys[i], out.tags[i], out.uniq[i] = props_json(raw)
    return Properties(out.props.tolist(), out.keys.tolist(), out.tags.tolist(), out.uniq.tolist(), out.odd)


def _csv_odd(text: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Plain values that are not their own csv cell: holding a comma, or read as a formula (``csv_cell``)."""
    commas = np.zeros(len(text) + 1, dtype=np.int64)
    np.cumsum(text == ord(","), out=commas[1:])
    return (commas[start + length] > commas[start]) | _FORMULA[text[start]]


@dataclass
class LineOptions:
    body: str  # base64 | hex | none (text bodies: the per-record path)
    verify_crc: bool
    times: Times
    topics: Topics
    props_json: PropsJson | None  # None with csv
    csv: bool = False  # csv records of ``ROW_FIELDS`` instead of JSON lines


@dataclass
class Lines:
    """The lines of a batch's fast rows (``rows``: their indices), the indices left to the per-record
    path, and the rows whose body CRC does not match (with the CRC computed)."""

    rows: np.ndarray
    lines: list[bytes]
    slow: np.ndarray
    crc_bad: list[tuple[int, int]]


def fast_rows(ra: RecordArrays, times: Times) -> tuple[np.ndarray, np.ndarray, list[bytes], list[bytes]]:
    """The rows this path formats, and their store times' seconds as codes into head and tail texts."""
    fast = ra.ok & (ra.magic == MAGIC_V1) & ((ra.sys_flag & (_V6 | COMPRESSED_FLAG)) == 0)
    secs = ra.store_timestamp_ms // 1000
    uniq, inverse = np.unique(secs, return_inverse=True)
    pairs = [times[s] for s in uniq.tolist()]
    fast &= np.array([bool(h) for h, _ in pairs], dtype=bool)[inverse.reshape(-1)]
    return fast, inverse.reshape(-1), [h for h, _ in pairs], [t for _, t in pairs]


@dataclass
class Batch:
    """The records a batch formats: their buffer, fields, and store seconds as codes into head and tail texts."""

    u8: np.ndarray
    buf: Any
    ra: RecordArrays
    sec_code: np.ndarray
    heads: list[bytes]
    tails: list[bytes]


def message_lines(buf: Any, positions: np.ndarray, opts: LineOptions) -> Lines:
    """The JSON lines (or csv records) of the records at ``positions`` (an intact run's) that this path formats."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        ra = record_arrays(u8, positions, len(u8))
        fast, sec_code, heads, tails = fast_rows(ra, opts.times)
        rows = np.flatnonzero(fast)
        if not len(rows):
            return Lines(rows, [], np.flatnonzero(~fast), [])
        ra = ra.take(rows)
        tpl = Template(len(rows))
        batch = Batch(u8, buf, ra, sec_code[rows], heads, tails)
        odd, crc_bad = (_csv_fields if opts.csv else _json_fields)(tpl, batch, opts)
        lines = tpl.lines()
        if odd.any():  # left to the per-record path after all
            fast[rows[odd]] = False
            lines = [line for line, o in zip(lines, odd.tolist(), strict=True) if not o]
            keep = np.cumsum(~odd) - 1
            crc_bad = [(int(keep[i]), c) for i, c in crc_bad if not odd[i]]
            rows = rows[~odd]
        return Lines(rows, lines, np.flatnonzero(~fast), crc_bad)
    finally:
        del u8


def _json_fields(tpl: Template, b: Batch, opts: LineOptions) -> tuple[np.ndarray, list[tuple[int, int]]]:
    u8, buf, ra = b.u8, b.buf, b.ra
    _head_fields(tpl, u8, ra, opts.topics)
    _time_host_fields(tpl, ra, b.sec_code, b.heads, b.tails)
    props = properties_json(u8, buf, ra.props_start, ra.props_len, opts.props_json)
    for spec, col in zip((b',"keys":%s', b',"tags":%s', b',"uniqKey":%s', b',"properties":%s'),
                         (props.keys, props.tags, props.uniq, props.props), strict=True):  # fmt: skip
        tpl.texts(spec, col)
    tpl.ints(b',"bodyLength":%d', ra.body_len)
    crc_bad = _body_fields(tpl, buf, ra, opts)
    tpl.text(b"}")
    return props.odd, crc_bad


def _csv_fields(tpl: Template, b: Batch, opts: LineOptions) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The csv record of each row: the fields of ``ROW_FIELDS`` as ``csv_cell`` and the csv module write them."""
    u8, buf, ra, sec_code = b.u8, b.buf, b.ra, b.sec_code
    tpl.text(b"message")
    for name in ("phy_offset", "total_size"):
        tpl.ints(b",%d", getattr(ra, name))
    labels, inverse = _texts_codes(u8, ra.topic_start, ra.topic_len)
    cells = [csv_cell(t.decode("utf-8", "replace")) for t in labels]
    odd = np.array([any(c in t for c in ',"\n\r') for t in cells], dtype=bool)[inverse]  # quoted: per record
    tpl.codes(b",%s", [t.encode() for t in cells], inverse)
    for name in ("queue_id", "queue_offset", "body_crc", "flag", "sys_flag", "born_timestamp_ms"):
        tpl.ints(b",%d", getattr(ra, name))
    born, stored, prefixes = _hosts(ra)
    tpl.codes(b",%s", *born)
    tpl.ints(b",%d", ra.store_timestamp_ms)
    tpl.codes(b",%s", [h[1:] for h in b.heads], sec_code)
    tpl.ints(b"%03d", ra.store_timestamp_ms % 1000)
    tpl.codes(b"%s", [t[:-1] for t in b.tails], sec_code)
    tpl.codes(b",%s", *stored)
    tpl.ints(b",%d", ra.reconsume_times)
    tpl.ints(b",%d", ra.prepared_transaction_offset)
    tpl.codes(b",%s", prefixes, stored[1])
    tpl.ints(b"%016X", ra.phy_offset)
    props = properties_json(u8, buf, ra.props_start, ra.props_len, None)
    for col in (props.keys, props.tags, props.uniq, props.props):
        tpl.texts(b",%s", col)
    tpl.ints(b",%d", ra.body_len)
    crc_bad = _body_fields(tpl, buf, ra, opts, u8)
    return odd | props.odd, crc_bad


def _head_fields(tpl: Template, u8: np.ndarray, ra: RecordArrays, topics: Topics) -> None:
    tpl.text(b'{"kind":"message"')
    tpl.ints(b',"commitLogOffset":%d', ra.phy_offset)
    tpl.ints(b',"storeSize":%d', ra.total_size)
    labels, inverse = _texts_codes(u8, ra.topic_start, ra.topic_len)
    tpl.codes(b',"topic":%s', [topics[t] for t in labels], inverse)
    tpl.ints(b',"queueId":%d', ra.queue_id)
    tpl.ints(b',"queueOffset":%d', ra.queue_offset)
    tpl.ints(b',"bodyCRC":%d', ra.body_crc)
    tpl.ints(b',"flag":%d', ra.flag)
    tpl.ints(b',"sysFlag":%d', ra.sys_flag)
    tpl.ints(b',"bornTimestamp":%d', ra.born_timestamp_ms)


def _hosts(ra: RecordArrays) -> tuple[tuple[list[bytes], np.ndarray], tuple[list[bytes], np.ndarray], list[bytes]]:
    """(born host texts, codes), (store host texts, codes) and the msgId prefix of each store host."""
    labels, born = host_codes_v4(ra.born_addr, ra.born_port)
    born_texts = [h.encode() for h in labels]
    first, stored = distinct_hosts_v4(ra.store_addr, ra.store_port)
    addrs = [(ra.store_addr[i].tobytes(), int(ra.store_port[i])) for i in first.tolist()]
    store_texts = [host_str(a, p).encode() for a, p in addrs]
    return (born_texts, born), (store_texts, stored), [msg_id_prefix(a, p) for a, p in addrs]


def _time_host_fields(
    tpl: Template, ra: RecordArrays, sec_code: np.ndarray, heads: list[bytes], tails: list[bytes]
) -> None:
    born, stored, prefixes = _hosts(ra)
    tpl.codes(b',"bornHost":"%s"', *born)
    tpl.ints(b',"storeTimestamp":%d', ra.store_timestamp_ms)
    tpl.codes(b',"storeTime":%s', heads, sec_code)
    tpl.ints(b"%03d", ra.store_timestamp_ms % 1000)
    tpl.codes(b"%s", tails, sec_code)
    tpl.codes(b',"storeHost":"%s"', *stored)
    tpl.ints(b',"reconsumeTimes":%d', ra.reconsume_times)
    tpl.ints(b',"preparedTransactionOffset":%d', ra.prepared_transaction_offset)
    tpl.codes(b',"msgId":"%s', prefixes, stored[1])
    tpl.ints(b'%016X"', ra.phy_offset)


def _body_fields(
    tpl: Template, buf: Any, ra: RecordArrays, opts: LineOptions, u8: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """The body (base64 or hex) and, with ``verify_crc``, crcOk; returns (row, computed CRC) of mismatches.
    With ``u8`` (csv): the body, crcOk and why cells."""
    starts, ends = ra.body_start.tolist(), (ra.body_start + np.maximum(ra.body_len, 0)).tolist()
    as_csv = u8 is not None
    if opts.body != "none":
        enc = binascii.hexlify if opts.body == "hex" else (lambda b: binascii.b2a_base64(b, newline=False))
        mv = memoryview(buf)
        try:
            bodies = [enc(mv[a:e]) for a, e in zip(starts, ends, strict=True)]
        finally:
            mv.release()
        if as_csv and opts.body == "base64":  # a body whose base64 starts with '+' reads as a formula
            plus = np.flatnonzero((ra.body_len > 0) & (u8[ra.body_start] >> 2 == 62))
            for i in plus.tolist():
                bodies[i] = b"'" + bodies[i]
        tpl.texts(b",%s" if as_csv else b',"body":"%s"', bodies)
    elif as_csv:
        tpl.text(b",")
    if not opts.verify_crc:
        if as_csv:
            tpl.text(b",,")
        return []
    computed = body_crcs(buf, ra.body_start, np.maximum(ra.body_len, 0))
    bad = computed != ra.body_crc
    texts = [b',"crcOk":true', b',"crcOk":false,"why":"%s"' % CRC_MISMATCH.encode()]
    if as_csv:
        texts = [b",true,", b",false,%s" % CRC_MISMATCH.encode()]
    tpl.codes(b"%s", texts, bad.astype(np.int64))
    rows = np.flatnonzero(bad)
    return list(zip(rows.tolist(), computed[rows].tolist(), strict=True))
