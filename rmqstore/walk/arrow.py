"""Arrow record batches of commit log ranges, built column by column from the codec's record arrays.

The Spark data source (``rmqstore.spark.source``) and ``dump --format parquet`` read records through
it; it needs pyarrow only (the extras ``parquet`` and ``spark``), never Spark or Java.

A split's records are found by walking the chain of frames (the framing's ``chain``); each chunk of
positions is decoded at once into arrays (``record_arrays``) and checked as ``decode_record``
checks a record (layout, bounds, computed size, stored PHYSICALOFFSET = position, with
``verifyCrc`` the body CRC). Where a check fails the walk looks for the next valid record (see
:mod:`rmqstore.spark.source`). Columns are then made without a Python object per row:

* header fields are numpy arrays, strings for hosts and topics go through a dictionary of the
  distinct values, msgId is hex digits computed as a byte matrix;
* body, topic and property names and values are binary columns cut from the mapped file by
  (start, length) arrays, with a single copy of the bytes;
* properties are split into items with array operations (``property_items``); KEYS tokens too.

Rows the fast layout does not cover (IPv6 hosts, properties with odd items, duplicate names or
invalid UTF-8, negative lengths) are decoded by ``decode_record`` and put back in file order, so
every row equals the record codec's. Only the columns asked for are built, and the pushed-down
filters (:class:`RowFilter`) drop rows before their bodies are touched.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmqstore.codec.arrays import (
    RecordArrays,
    duplicate_name_rows,
    host_codes_v4,
    key_tokens,
    msg_id_hex,
    named,
    property_items,
    record_arrays,
)
from rmqstore.codec.commitlog import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, Record, body_crc, decode_record, host_str
from rmqstore.codec.consumequeue import FILLER_SIZE, valid_prefix
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.errors import MissingExtra
from rmqstore.store.layout import Segment
from rmqstore.store.queue.interface import ConsumeQueue

try:
    import pyarrow as pa
except ImportError:
    raise MissingExtra(
        "columnar output (Parquet) needs pyarrow; install the parquet extra: pip install 'rmqstore[parquet]'"
    ) from None

CHUNK = 1 << 15  # records decoded at once: the arrays of a chunk stay in the CPU caches' reach
_NEEDS_PROPS = frozenset({"tags", "keys", "uniqKey", "properties"})
# Numeric columns: the RecordArrays field (named as the Record's) and the Arrow type.
_NUMERIC = {
    "filePos": ("pos", pa.int64()),
    "commitLogOffset": ("phy_offset", pa.int64()),
    "storeSize": ("total_size", pa.int32()),
    "magicCode": ("magic", pa.int32()),
    "bodyCRC": ("body_crc", pa.int32()),
    "queueId": ("queue_id", pa.int32()),
    "flag": ("flag", pa.int32()),
    "queueOffset": ("queue_offset", pa.int64()),
    "sysFlag": ("sys_flag", pa.int32()),
    "bornTimestamp": ("born_timestamp_ms", pa.int64()),
    "storeTimestamp": ("store_timestamp_ms", pa.int64()),
    "reconsumeTimes": ("reconsume_times", pa.int32()),
    "preparedTransactionOffset": ("prepared_transaction_offset", pa.int64()),
    "bodyLength": ("body_len", pa.int32()),
}
# The integer fields of a decoded Record that patch rows the fast layout does not cover (same names).
_FROM_RECORD = tuple(attr for attr, _ in _NUMERIC.values() if attr != "body_len")


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Conditions every returned row meets (ANDed); bounds are inclusive; None: no condition."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    store_ts: tuple[int | None, int | None] = (None, None)
    offsets: tuple[int | None, int | None] = (None, None)
    keys: frozenset[str] | None = None  # a KEYS token or the UNIQ_KEY is one of these

    @property
    def empty(self) -> bool:
        return self == RowFilter()

    def header_mask(self, a: RecordArrays) -> np.ndarray:
        mask = np.ones(len(a.pos), dtype=bool)
        for arr, (lo, hi) in ((a.store_timestamp_ms, self.store_ts), (a.phy_offset, self.offsets)):
            if lo is not None:
                mask &= arr >= lo
            if hi is not None:
                mask &= arr <= hi
        if self.queue_ids is not None:
            mask &= np.isin(a.queue_id, np.array(sorted(self.queue_ids), dtype=np.int64))
        return mask

    def accepts(self, rec: Record) -> bool:
        """The same conditions on one decoded record."""
        ts, off = rec.store_timestamp_ms, rec.phy_offset
        if self.topics is not None and rec.topic not in self.topics:
            return False
        if self.queue_ids is not None and rec.queue_id not in self.queue_ids:
            return False
        for v, (lo, hi) in ((ts, self.store_ts), (off, self.offsets)):
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                return False
        if self.keys is not None:
            props = rec.properties
            toks = set((props.get(PROP_KEYS) or "").split(" ")) | {props.get(PROP_UNIQ_KEY)}
            return bool(self.keys & toks)
        return True


@dataclass(slots=True)
class SplitContext:
    """What the batch builder needs of one split's file."""

    store: str
    broker_name: str | None
    path: str
    base: int
    broker: str
    buf: Any  # the mapped file
    u8: np.ndarray
    data: pa.Buffer  # the same bytes for Arrow
    hosts: dict[tuple[bytes, int], str] = field(default_factory=dict)
    framing: Framing = PLAIN


# ---------------------------------------------------------------------------------------------
# Walking a split


def valid_chunks(
    ctx: SplitContext, start: int, end: int, *, check_crc: bool, chunk: int = CHUNK
) -> Iterator[tuple[RecordArrays, dict[int, Record]]]:
    """The valid records starting in ``[start, end)``, a chunk at a time: their arrays, and the
    decoded Record of each row the fast layout does not cover (by row index)."""
    buf, size, base = ctx.buf, len(ctx.buf), ctx.base
    end = min(end, size)

    def record_at(p: int) -> Record | None:
        try:
            rec = decode_record(buf, p, path=ctx.path, file_from=base, check_crc=check_crc, broker=ctx.broker)
        except Exception:  # CorruptData: not a record here
            return None
        return rec if isinstance(rec, Record) and rec.phy_offset == base + p else None

    p = _resync(ctx, start, end, record_at)
    while p is not None:
        positions, stop_pos, reason = ctx.framing.chain(buf, p, size, until=end)
        restart: int | None = None
        for i in range(0, len(positions), chunk):
            arrs, slow, bad = _check_chunk(ctx, positions[i : i + chunk], size, check_crc, record_at)
            if bad is not None:
                if bad:
                    yield arrs.take(np.arange(bad)), {k: r for k, r in slow.items() if k < bad}
                restart = int(ctx.framing.frame_of(positions[i + bad])) + 1
                break
            yield arrs, slow
        else:
            if reason == "until" or stop_pos >= end:
                return
            restart = stop_pos + 1  # a BLANK, zeros or a broken header inside the split: look further
        p = _resync(ctx, restart, end, record_at)


def _check_chunk(
    ctx: SplitContext, pos: np.ndarray, size: int, check_crc: bool, record_at: Callable[[int], Record | None]
) -> tuple[RecordArrays, dict[int, Record], int | None]:
    """The chunk's arrays, its slow rows' Records, and the first row that is not a valid record."""
    a = record_arrays(ctx.u8, pos, size)
    good = a.ok & (a.phy_offset == ctx.base + pos)
    if check_crc:
        buf = memoryview(ctx.buf) if not isinstance(ctx.buf, bytes) else ctx.buf
        for k in np.flatnonzero(good & (a.body_len > 0)).tolist():
            s = int(a.body_start[k])
            if zlib.crc32(buf[s : s + int(a.body_len[k])]) & 0x7FFFFFFF != a.body_crc[k]:
                good[k] = False
        del buf
    slow: dict[int, Record] = {}
    for k in np.flatnonzero(~good).tolist():
        rec = record_at(int(pos[k]))
        if rec is None:
            return a, slow, k
        slow[k] = rec
    return a, slow, None


def _resync(ctx: SplitContext, start: int, end: int, record_at: Callable[[int], Record | None]) -> int | None:
    """The first frame in ``[start, end)`` holding a valid record on the chain."""

    head = ctx.framing.head
    return ctx.framing.resync(ctx.buf, start, end, lambda q: record_at(q + head) is not None)


# ---------------------------------------------------------------------------------------------
# Columns


def ranges(data: pa.Buffer, start: np.ndarray, length: np.ndarray, typ: pa.DataType = pa.binary()) -> pa.Array:
    """The byte ranges (sorted, not overlapping) of ``data`` as one Arrow column: one copy of the bytes.

    The ranges and the gaps between them are the values of a binary array over ``data`` itself
    (its offsets interleave starts and ends); taking every other value packs the ranges.
    """
    n = len(start)
    if n == 0:
        return pa.array([], typ)
    off = np.empty(2 * n, dtype=np.int64)
    off[0::2] = start
    off[1::2] = start + length
    over = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(off), data])
    return over.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64))).cast(typ)


def _scatter(values: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """``values[i]`` at row ``rows[i]``, null elsewhere."""
    idx = np.full(n, -1, dtype=np.int64)
    idx[rows] = np.arange(len(rows))
    return values.take(pa.array(idx, mask=idx < 0))


def _dictionary(codes: np.ndarray, labels: list[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(labels, pa.string())).cast(
        pa.string()
    )


def _utf8_ok(ctx: SplitContext, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    out = np.ones(len(start), dtype=bool)
    for k, (s, n) in enumerate(zip(start.tolist(), length.tolist(), strict=True)):
        try:
            bytes(ctx.buf[s : s + n]).decode("utf-8")
        except UnicodeDecodeError:
            out[k] = False
    return out


@dataclass(slots=True)
class _Props:
    """The parsed properties of the fast rows: items and the TAGS / KEYS / UNIQ_KEY item of each row."""

    items: Any
    tags: np.ndarray
    keys: np.ndarray
    uniq: np.ndarray


def _parse_props(ctx: SplitContext, a: RecordArrays) -> tuple[_Props, np.ndarray]:
    """Items of the rows' properties and the rows that must take the per-record path."""
    items = property_items(ctx.u8, a.props_start, a.props_len)
    slow = items.bad | duplicate_name_rows(ctx.u8, items, len(a.pos))
    high = np.flatnonzero(items.high & ~slow)
    if len(high):
        slow[high[~_utf8_ok(ctx, a.props_start[high], a.props_len[high])]] = True
    found = [named(ctx.u8, items, name.encode()) for name in (PROP_TAGS, PROP_KEYS, PROP_UNIQ_KEY)]
    return _Props(items, *found), slow


def _key_mask(ctx: SplitContext, props: _Props, n: int, wanted: frozenset[str]) -> np.ndarray:
    """Rows with a KEYS token or UNIQ_KEY in ``wanted``."""
    it = props.items
    rec, s, ln, _ = key_tokens(ctx.u8, it.row[props.keys], it.value_start[props.keys], it.value_len[props.keys])
    rows = np.concatenate([rec, it.row[props.uniq]])
    starts = np.concatenate([s, it.value_start[props.uniq]])
    lens = np.concatenate([ln, it.value_len[props.uniq]])
    mask = np.zeros(n, dtype=bool)
    for key in wanted:
        raw = np.frombuffer(key.encode(), dtype=np.uint8)
        cand = np.flatnonzero(lens == len(raw))
        if not len(cand) or not len(raw):
            continue
        mat = np.lib.stride_tricks.sliding_window_view(ctx.u8, len(raw))[starts[cand]]
        mask[rows[cand[(mat == raw).all(axis=1)]]] = True
    return mask


def _key_candidates(ctx: SplitContext, a: RecordArrays, keys: frozenset[str]) -> np.ndarray:
    """Rows whose property bytes contain one of ``keys`` (a byte search of the chunk's range)."""
    if not len(a.pos):
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(a.props_start[0]), int(a.props_start[-1] + a.props_len[-1])
    hits: list[int] = []
    for key in keys:
        raw = key.encode()
        if not raw:
            continue
        at = ctx.buf.find(raw, lo, hi)
        while at >= 0:
            hits.append(at)
            at = ctx.buf.find(raw, at + 1, hi)
    if not hits:
        return np.zeros(0, dtype=np.int64)
    h = np.array(sorted(hits), dtype=np.int64)
    row = np.searchsorted(a.props_start, h, side="right") - 1
    ok = (row >= 0) & (h < a.props_start[np.maximum(row, 0)] + a.props_len[np.maximum(row, 0)])
    return np.unique(row[ok])


def _text_column(ctx: SplitContext, props: _Props, found: np.ndarray, n: int) -> pa.Array:
    it = props.items
    return _scatter(ranges(ctx.data, it.value_start[found], it.value_len[found], pa.string()), it.row[found], n)


def _keys_column(ctx: SplitContext, props: _Props, n: int) -> pa.Array:
    it = props.items
    rec, s, ln, _ = key_tokens(ctx.u8, it.row[props.keys], it.value_start[props.keys], it.value_len[props.keys])
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rec, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), ranges(ctx.data, s, ln, pa.string()))


def _properties_column(ctx: SplitContext, props: _Props, n: int) -> pa.Array:
    it = props.items
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(it.row, minlength=n), out=offsets[1:])
    keys = ranges(ctx.data, it.name_start, it.name_len, pa.string())
    values = ranges(ctx.data, it.value_start, it.value_len, pa.string())
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


def _hosts(addr: np.ndarray, port: np.ndarray) -> pa.Array:
    labels, codes = host_codes_v4(addr, port)
    return _dictionary(codes, labels)


def _msg_ids(a: RecordArrays) -> pa.Array:
    n = len(a.pos)
    hexed = msg_id_hex(a.store_addr, a.store_port, a.phy_offset)
    width = hexed.shape[1]
    offsets = np.arange(0, width * n + 1, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(hexed))


def _crc_ok(ctx: SplitContext, a: RecordArrays) -> pa.Array:
    buf = memoryview(ctx.buf) if not isinstance(ctx.buf, bytes) else ctx.buf
    starts, lens = a.body_start.tolist(), a.body_len.tolist()
    ok = [zlib.crc32(buf[s : s + n]) & 0x7FFFFFFF for s, n in zip(starts, lens, strict=True)]
    del buf
    return pa.array(np.array(ok, dtype=np.int64) == a.body_crc)


def fast_columns(
    ctx: SplitContext, a: RecordArrays, names: Sequence[str], topic: tuple[list[str], np.ndarray] | None, props: Any
) -> list[pa.Array]:
    """The columns ``names`` of rows all on the fast layout (``topic``: labels and codes when known)."""
    n = len(a.pos)
    out: list[pa.Array] = []
    for name in names:
        if name in _NUMERIC:
            attr, typ = _NUMERIC[name]
            out.append(pa.array(getattr(a, attr).astype(typ.to_pandas_dtype())))
        elif name in ("store", "file", "brokerName"):
            value = {"store": ctx.store, "file": ctx.path, "brokerName": ctx.broker_name}[name]
            out.append(pa.repeat(pa.scalar(value, pa.string()), n))
        elif name == "topic":
            assert topic is not None
            out.append(_dictionary(topic[1], topic[0]))
        elif name == "body":
            out.append(ranges(ctx.data, a.body_start, a.body_len))
        elif name == "bornHost":
            out.append(_hosts(a.born_addr, a.born_port))
        elif name == "storeHost":
            out.append(_hosts(a.store_addr, a.store_port))
        elif name == "msgId":
            out.append(_msg_ids(a))
        elif name == "crcOk":
            out.append(_crc_ok(ctx, a))
        elif name == "tags":
            out.append(_text_column(ctx, props, props.tags, n))
        elif name == "uniqKey":
            out.append(_text_column(ctx, props, props.uniq, n))
        elif name == "keys":
            out.append(_keys_column(ctx, props, n))
        elif name == "properties":
            out.append(_properties_column(ctx, props, n))
        else:
            raise KeyError(name)
    return out


def text_codes(ctx: SplitContext, start: np.ndarray, length: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Distinct texts of byte ranges of the file (UTF-8, bad bytes replaced) and each range's index."""
    enc = ranges(ctx.data, start, length).dictionary_encode()
    labels = [b.decode("utf-8", "replace") for b in enc.dictionary.to_pylist()]
    return labels, enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _patch(a: RecordArrays, slow: dict[int, Record]) -> None:
    """Header fields of the slow rows from their Records (their layout differs from the fast one)."""
    for k, rec in slow.items():
        for attr in _FROM_RECORD:
            getattr(a, attr)[k] = getattr(rec, attr)
        a.body_len[k] = len(rec.body)


def chunk_batch(
    ctx: SplitContext,
    a: RecordArrays,
    slow: dict[int, Record],
    schema: pa.Schema,
    flt: RowFilter,
    row_fn: Callable[[Record, Any, Any], tuple[Any, ...]],
) -> pa.RecordBatch | None:
    """The record batch of one checked chunk with the columns of ``schema``, filtered by ``flt``."""
    names = schema.names
    _patch(a, slow)
    keep = flt.header_mask(a)
    is_slow = np.zeros(len(a.pos), dtype=bool)
    is_slow[list(slow)] = True
    fast_rows = np.flatnonzero(keep & ~is_slow)
    fa = a.take(fast_rows)
    topic = None
    if "topic" in names or flt.topics is not None:
        topic = text_codes(ctx, fa.topic_start, fa.topic_len)
        if flt.topics is not None:
            wanted = np.array([t in flt.topics for t in topic[0]] + [False], dtype=bool)
            sel = np.flatnonzero(wanted[topic[1]])
            fast_rows, fa, topic = fast_rows[sel], fa.take(sel), (topic[0], topic[1][sel])
    if flt.keys is not None:  # only rows whose properties hold one of the keys' bytes can match
        sel = _key_candidates(ctx, fa, flt.keys)
        fast_rows, fa = fast_rows[sel], fa.take(sel)
        topic = None if topic is None else (topic[0], topic[1][sel])
    props = None
    if _NEEDS_PROPS.intersection(names) or flt.keys is not None:
        props, to_slow = _parse_props(ctx, fa)
        sel = np.flatnonzero(~to_slow)
        if flt.keys is not None:
            sel = np.flatnonzero(~to_slow & _key_mask(ctx, props, len(fa.pos), flt.keys))
        if len(sel) < len(fa.pos):
            for k in fast_rows[to_slow].tolist():
                slow[k] = decode_record(ctx.buf, int(a.pos[k]), path=ctx.path, file_from=ctx.base, broker=ctx.broker)
            fast_rows, fa = fast_rows[sel], fa.take(sel)
            topic = None if topic is None else (topic[0], topic[1][sel])
            props, _ = _parse_props(ctx, fa)
    cols = fast_columns(ctx, fa, names, topic, props)
    batch = pa.RecordBatch.from_arrays(cols, schema=schema)
    slow_rows = [k for k in sorted(slow) if keep[k] and flt.accepts(slow[k])]
    if not slow_rows:
        return batch if batch.num_rows else None
    rows = [row_fn(slow[k], slow[k].properties, ctx) for k in slow_rows]
    cols_slow = [pa.array(list(c), type=f.type) for c, f in zip(zip(*rows, strict=True), schema, strict=True)]
    table = pa.Table.from_batches([batch, pa.RecordBatch.from_arrays(cols_slow, schema=schema)])
    order = np.argsort(np.concatenate([fast_rows, np.array(slow_rows, dtype=np.int64)]), kind="stable")
    return table.take(pa.array(order)).combine_chunks().to_batches()[0]


# ---------------------------------------------------------------------------------------------
# Rows from decoded records (the rows the fast layout does not cover)


def keys_list(props: dict[str, str]) -> list[str]:
    """The KEYS tokens of decoded properties, as the fast layout cuts them (empty ones dropped)."""
    raw = props.get(PROP_KEYS)
    return [k for k in raw.split(" ") if k] if raw else []


# How each column is taken from a record ``r`` (``p``: its parsed properties, ``s``: the split context).
_COLUMN_EXPR = {
    "store": "s.store",
    "brokerName": "s.broker_name",
    "file": "s.path",
    "filePos": "r.pos",
    "commitLogOffset": "r.phy_offset",
    "storeSize": "r.total_size",
    "magicCode": "r.magic",
    "bodyCRC": "r.body_crc",
    "queueId": "r.queue_id",
    "flag": "r.flag",
    "queueOffset": "r.queue_offset",
    "sysFlag": "r.sys_flag",
    "bornTimestamp": "r.born_timestamp_ms",
    "bornHost": "host(r.born_addr, r.born_port)",
    "storeTimestamp": "r.store_timestamp_ms",
    "storeHost": "host(r.store_addr, r.store_port)",
    "reconsumeTimes": "r.reconsume_times",
    "preparedTransactionOffset": "r.prepared_transaction_offset",
    "bodyLength": "len(r.body)",
    "topic": "r.topic",
    "tags": "p.get(TAGS)",
    "keys": "keys(p)",
    "uniqKey": "p.get(UNIQ_KEY)",
    "properties": "list(p.items())",
    "body": "r.body",
    "msgId": "r.msg_id",
    "crcOk": "crc(r.body) == r.body_crc",
}
COLUMNS = frozenset(_COLUMN_EXPR)


def row_function(names: Sequence[str]) -> Callable[[Record, Any, Any], tuple[Any, ...]]:
    """One compiled function giving the tuple of the columns ``names`` for a decoded record."""
    hosts: dict[tuple[bytes, int], str] = {}

    def host(addr: bytes, port: int) -> str:
        text = hosts.get((addr, port))
        if text is None:
            text = hosts[(addr, port)] = host_str(addr, port)
        return text

    body = ", ".join(_COLUMN_EXPR[n] for n in names)
    env = {"host": host, "keys": keys_list, "crc": body_crc, "TAGS": PROP_TAGS, "UNIQ_KEY": PROP_UNIQ_KEY}
    return eval(f"lambda r, p, s: ({body},)", env)  # type: ignore[no-any-return]  # from the constants above only


# ---------------------------------------------------------------------------------------------
# The columns of a commit log record and of a consume queue entry (the Spark sources' and Parquet's)

# ``name type`` lines; ``?`` after the type: nullable. Spark's schemas are built from the same text.
COMMITLOG_COLUMNS = """
    store                      string
    brokerName                 string?
    file                       string
    filePos                    long
    commitLogOffset            long
    storeSize                  int
    magicCode                  int
    bodyCRC                    int
    queueId                    int
    flag                       int
    queueOffset                long
    sysFlag                    int
    bornTimestamp              long
    bornHost                   string
    storeTimestamp             long
    storeHost                  string
    reconsumeTimes             int
    preparedTransactionOffset  long
    bodyLength                 int
    topic                      string
    tags                       string?
    keys                       strings
    uniqKey                    string?
    properties                 map
    body                       binary
    msgId                      string
    crcOk                      bool
"""
CONSUMEQUEUE_COLUMNS = """
    store            string
    brokerName       string?
    topic            string
    queueId          int
    queueOffset      long
    commitLogOffset  long
    size             int
    tagsCode         long
    file             string
"""


def column_types(columns: str) -> list[tuple[str, str, bool]]:
    """(name, type, nullable) of each ``name type`` line."""
    rows = (line.split() for line in columns.strip().splitlines())
    return [(n, t.rstrip("?"), t.endswith("?")) for n, t in rows]


def _arrow_type(name: str) -> pa.DataType:
    simple = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "bool": pa.bool_(), "binary": pa.binary()}
    if name == "strings":
        return pa.list_(pa.field("element", pa.string(), nullable=False))
    if name == "map":
        return pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
    return simple[name]


def arrow_schema(columns: str, *, without: Sequence[str] = ()) -> pa.Schema:
    """The Arrow schema of ``columns`` (``name type`` lines), as Spark's ``to_arrow_schema`` gives it."""
    return pa.schema(
        [pa.field(n, _arrow_type(t), nullable=null) for n, t, null in column_types(columns) if n not in without]
    )


def file_context(
    store: str, broker_name: str | None, path: str, base: int, broker: str, buf: Any, framing: Framing = PLAIN
) -> SplitContext:
    """The context of one mapped (or in-memory) commit log file: its bytes seen by numpy and by Arrow."""
    return SplitContext(
        store, broker_name, path, base, broker, buf, np.frombuffer(buf, dtype=np.uint8), pa.py_buffer(buf),
        framing=framing,
    )  # fmt: skip


def range_batches(
    ctx: SplitContext, start: int, end: int, schema: pa.Schema, *, check_crc: bool = False, **options: Any
) -> Iterator[pa.RecordBatch]:
    """Record batches of the valid records starting in ``[start, end)`` of ``ctx``'s file; ``options``:
    ``flt`` (a RowFilter), ``chunk`` (records decoded at once), ``row_fn`` (the rows of slow records)."""
    flt = options.get("flt") or RowFilter()
    row_fn = options.get("row_fn") or row_function(schema.names)
    chunk = options.get("chunk", CHUNK)
    for arrs, slow in valid_chunks(ctx, start, end, check_crc=check_crc, chunk=chunk):
        batch = chunk_batch(ctx, arrs, slow, schema, flt, row_fn)
        if batch is not None and batch.num_rows:
            yield batch


def queue_file_batch(
    store: str, broker_name: str | None, queue: ConsumeQueue, seg: Segment, schema: pa.Schema
) -> pa.RecordBatch | None:
    """The valid entries of one consume queue file (up to the first zero or invalid one, fillers left
    out) with the columns of ``schema``; None when it holds none."""
    arr = queue.read(seg)  # a queue file is small (6 MB by default)
    arr = arr[: valid_prefix(arr)]
    keep = ~((arr["phy_offset"] == 0) & (arr["size"] == FILLER_SIZE) & (arr["tags_code"] == 0))
    idx = np.flatnonzero(keep)
    if not idx.size:
        return None
    m = len(idx)
    columns = {
        "store": pa.array([store] * m, pa.string()),
        "brokerName": pa.array([broker_name] * m, pa.string()),
        "topic": pa.array([queue.topic] * m, pa.string()),
        "queueId": pa.array(np.full(m, queue.queue_id, dtype=np.int32)),
        "queueOffset": pa.array(seg.base_offset // queue.unit_size + idx.astype(np.int64)),
        "commitLogOffset": pa.array(arr["phy_offset"][idx].astype(np.int64)),
        "size": pa.array(arr["size"][idx].astype(np.int32)),
        "tagsCode": pa.array(arr["tags_code"][idx].astype(np.int64)),
        "file": pa.array([str(seg.path)] * m, pa.string()),
    }
    return pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)
