"""Every field of many commit log records as arrays, for readers that return whole records (store-format.md §3).

Derived from :mod:`.commitlog`'s declaration: the head fields are :func:`.columnar.decode_heads`
(the numpy dtype of ``RECORD_HEAD``), the variable part starts at the head's size, and a record's
length is checked against ``cal_msg_length``. Only the common layout (V1/V2 magic, both hosts
IPv4) is decoded here; every other row is marked for ``decode_record``, which decides.
Property strings are split into items (§3.7) and KEYS values into tokens with array operations.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from rmqstore.codec.columnar import HEAD_DTYPES, be, decode_heads, gather, head_column
from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_HEAD,
    STOREHOSTADDRESS_V6_FLAG,
    cal_msg_length,
    head_offsets,
    host_str,
)

_HEAD = HEAD_DTYPES[0]  # fields 1-15 with both hosts IPv4
_BODY_AT = head_offsets()["body"]
# TOPICLENGTH is 1 byte in V1 and 2 in V2 records, PROPERTIESLENGTH 2 bytes (§3.1), as decode_record reads them.
_TOPIC_LEN = {False: ">i1", True: ">i2"}
_PROPS_LEN = ">i2"
# calMsgLength of a record with empty body, topic and properties: the head and both length fields.
_EMPTY_V1, _EMPTY_V2 = cal_msg_length(0, 0, 0, 0), cal_msg_length(0, 0, 0, 0, v2=True)
_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_INT_FIELDS = tuple(f.name for f in RECORD_HEAD if f.code != "addr")
MAX_FAST_PROPERTIES = 512  # longer property strings are left to ``parse_properties``
_IN_PLACE_SPAN = 8  # property strings are split where they lie while the chunk is at most this many times their bytes
_PLAIN_KEYS_WIDTH = 256  # longer KEYS values are split byte by byte, not read as one matrix
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_M32 = np.uint64(0xFFFFFFFF)


@dataclass
class RecordArrays:
    """The fields of the records at ``pos`` read with the IPv4 host layout, named as in ``RECORD_HEAD``.

    ``ok`` marks the rows that decode as ``decode_record`` decodes them (V1/V2, IPv4 hosts, bounds,
    TOTALSIZE equal to the computed length, no negative length); every other row must go through
    ``decode_record``, which decides whether it is a record at all. Addresses are (n, 4) uint8 rows.
    """

    pos: np.ndarray
    total_size: np.ndarray
    magic: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    phy_offset: np.ndarray
    sys_flag: np.ndarray
    born_timestamp_ms: np.ndarray
    born_addr: np.ndarray
    born_port: np.ndarray
    store_timestamp_ms: np.ndarray
    store_addr: np.ndarray
    store_port: np.ndarray
    reconsume_times: np.ndarray
    prepared_transaction_offset: np.ndarray
    body_len: np.ndarray
    body_start: np.ndarray
    topic_start: np.ndarray
    topic_len: np.ndarray
    props_start: np.ndarray
    props_len: np.ndarray
    ok: np.ndarray

    def take(self, idx: np.ndarray) -> RecordArrays:
        return RecordArrays(*(getattr(self, f.name)[idx] for f in fields(self)))


def _address_rows(heads: np.ndarray, name: str) -> np.ndarray:
    """An address field of decoded heads as (n, width) uint8 rows of its stored bytes."""
    width = heads.dtype[name].itemsize
    return np.ascontiguousarray(heads[name]).view(np.uint8).reshape(len(heads), width)


def record_arrays(u8: np.ndarray, pos: np.ndarray, end: int) -> RecordArrays:
    """Every field of the records starting at ``pos`` (sorted) of a buffer whose data ends at ``end``."""
    heads = decode_heads(u8, pos)
    col = {name: head_column(heads, name) for name in _INT_FIELDS}
    total, magic, bl = col["total_size"], col["magic"], col["body_len"]
    v2 = magic == MAGIC_V2
    plain = ((magic == MAGIC_V1) | v2) & ((col["sys_flag"] & _V6) == 0) & (total > 0) & (total <= end - pos)
    body_start = pos + _BODY_AT
    last = max(end - 2, 0)  # reads of the length fields stay inside the data; ``ok`` rejects clamped rows
    at = np.minimum(np.where(plain, body_start + np.maximum(bl, 0), 0), last)  # TOPICLENGTH
    tlen = np.where(v2, be(u8, at, _TOPIC_LEN[True]), be(u8, at, _TOPIC_LEN[False]))
    topic_start = at + np.where(v2, np.dtype(_TOPIC_LEN[True]).itemsize, np.dtype(_TOPIC_LEN[False]).itemsize)
    pat = np.minimum(topic_start + np.maximum(tlen, 0), last)  # PROPERTIESLENGTH
    plen = be(u8, pat, _PROPS_LEN)
    props_start = pat + np.dtype(_PROPS_LEN).itemsize
    computed = np.where(v2, _EMPTY_V2, _EMPTY_V1) + bl + tlen + plen
    ok = plain & (bl >= 0) & (tlen >= 0) & (plen >= 0) & (props_start + plen <= end) & (computed == total)
    return RecordArrays(
        pos=pos,
        **col,
        born_addr=_address_rows(heads, "born_addr"),
        store_addr=_address_rows(heads, "store_addr"),
        body_start=body_start,
        topic_start=topic_start,
        topic_len=tlen,
        props_start=props_start,
        props_len=plen,
        ok=ok,
    )


def msg_id_hex(store_addr: np.ndarray, store_port: np.ndarray, phy_offset: np.ndarray) -> np.ndarray:
    """The offset msgId (§3.10) as a matrix of ASCII hex digits, a row per record: the store address
    ((n, width) uint8 rows), then port and physical offset as the record head stores them."""
    n = len(phy_offset)
    port, phy = _HEAD["store_port"], _HEAD["phy_offset"]
    raw = np.concatenate(
        [
            store_addr,
            store_port.astype(port).view(np.uint8).reshape(n, port.itemsize),
            phy_offset.astype(phy).view(np.uint8).reshape(n, phy.itemsize),
        ],
        axis=1,
    )
    out = np.empty((n, 2 * raw.shape[1]), dtype=np.uint8)
    out[:, 0::2] = _HEX[raw >> 4]
    out[:, 1::2] = _HEX[raw & 0xF]
    return out


def distinct_hosts_v4(addr: np.ndarray, port: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct IPv4 host (address and port), and each row's index into them."""
    key = (addr.astype(np.uint64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], np.uint64)) << np.uint64(32)
    key |= port.astype(np.int64).astype(np.uint64) & _M32
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def host_codes_v4(addr: np.ndarray, port: np.ndarray) -> tuple[list[str], np.ndarray]:
    """``ip:port`` texts (as ``host_str`` writes them) of the distinct IPv4 hosts, and each row's index into them."""
    first, inverse = distinct_hosts_v4(addr, port)
    return [host_str(addr[i].tobytes(), int(port[i])) for i in first.tolist()], inverse


# ---------------------------------------------------------------------------------------------
# Properties (§3.7) and KEYS tokens


@dataclass
class PropertyItems:
    """The ``name 0x01 value`` items of many property strings, in file order.

    ``bad`` marks the strings that are not plain (an item without exactly one 0x01, an empty name
    or value, longer than ``MAX_FAST_PROPERTIES``): those broker versions may parse differently,
    so they go through ``parse_properties``; their items are left out. ``high`` marks strings with
    a byte >= 0x80 (their UTF-8 must be checked). Positions are absolute in the buffer.
    """

    row: np.ndarray
    name_start: np.ndarray
    name_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    bad: np.ndarray
    high: np.ndarray


def _marks_gathered(
    u8: np.ndarray, start: np.ndarray, lens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 0x01 and 0x02 bytes of the strings (row, column, is it 0x02) in row order, and the rows
    holding a byte >= 0x80: the strings gathered into one matrix, a row each."""
    width = max(int(lens.max()), 1)
    mat = gather(u8, start, width)
    inside = np.arange(width, dtype=np.int32) < lens[:, None]
    high = ((mat >= 0x80) & inside).any(axis=1)
    marks = ((mat - np.uint8(1)) <= np.uint8(1)) & inside  # 0x01 or 0x02
    at = np.flatnonzero(marks)
    r, c = np.divmod(at, width)
    return r, c, mat.ravel()[at] == 2, high


def _marks_in_place(
    u8: np.ndarray, start: np.ndarray, lens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``_marks_gathered`` read from the buffer where the strings lie, in file order and close
    together (a chunk of records): no matrix; None when they are not."""
    m = len(start)
    lo = int(start[0])
    hi = int(start[-1]) + max(int(lens[-1]), 1)  # a byte past an empty last string keeps reduceat inside
    ends = start + lens
    if hi > len(u8) or lo < 0 or (m > 1 and bool((start[1:] < ends[:-1]).any())):
        return None
    if hi - lo > _IN_PLACE_SPAN * max(int(lens.sum()), 1):
        return None  # mostly other bytes between them: gathering reads less
    span = u8[lo:hi]
    q = np.flatnonzero((span - np.uint8(1)) <= np.uint8(1))  # 0x01 or 0x02 anywhere in the span
    row = np.searchsorted(start, q + lo, side="right") - 1
    inside = q + lo < ends[row]
    q, row = q[inside], row[inside]
    bounds = np.empty(2 * m, dtype=np.int64)
    bounds[0::2] = start - lo
    bounds[1::2] = ends - lo
    top = np.maximum.reduceat(span, bounds[:-1])[0::2]  # each string's largest byte
    return row, q + lo - start[row], span[q] == 2, (top >= 0x80) & (lens > 0)


def property_items(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> PropertyItems:
    """Split the property strings at ``start`` / ``length`` into items with array operations.

    The strings form one matrix (a row per string); every 0x01 and 0x02 is found with one compare,
    and items and their separators are numbered in row order.
    """
    m = len(start)
    z = np.zeros(0, np.int64)
    bad = length > MAX_FAST_PROPERTIES
    if m == 0 or int(length.max(initial=0)) == 0:
        return PropertyItems(z, z, z, z, z, bad, np.zeros(m, bool))
    lens = np.where(bad, 0, length)
    marks = _marks_in_place(u8, start, lens)
    r, c, is2, high = marks if marks is not None else _marks_gathered(u8, start, lens)
    r2, c2 = r[is2], c[is2]
    # A row's first item starts at 0, one more after each 0x02; an item ends at the next 0x02 or the row's end.
    cnt2 = np.bincount(r2, minlength=m)
    n_items = m + len(r2)
    item_row = np.repeat(np.arange(m), cnt2 + 1)
    item_start = np.zeros(n_items, dtype=np.int64)
    item_start[r2 + np.arange(len(r2)) + 1] = c2 + 1
    item_end = np.empty(n_items, dtype=np.int64)
    item_end[:-1] = item_start[1:] - 1
    row_last = np.ones(n_items, dtype=bool)
    row_last[:-1] = item_row[1:] != item_row[:-1]
    item_end[row_last] = lens[item_row[row_last]]
    # The item of each 0x01: its row's first item plus the 0x02 before it in that row.
    e1 = np.flatnonzero(~is2)
    item1 = r[e1] + np.cumsum(is2)[e1]
    cnt1 = np.bincount(item1, minlength=n_items)
    sep = np.full(n_items, -1, dtype=np.int64)
    sep[item1] = c[e1]  # with one 0x01 per item (checked below) this is it
    nonempty = item_end > item_start
    good = ~nonempty | ((cnt1 == 1) & (sep > item_start) & (sep < item_end - 1))
    bad = bad.copy()
    bad[item_row[~good]] = True
    keep = np.flatnonzero(nonempty & ~bad[item_row])
    row = item_row[keep]
    base = start[row]
    s, e, k = item_start[keep], item_end[keep], sep[keep]
    return PropertyItems(row, base + s, k - s, base + k + 1, e - k - 1, bad, high)


def named(u8: np.ndarray, items: PropertyItems, name: bytes) -> np.ndarray:
    """Indices of the items called ``name``, the last one per row (a map put)."""
    width = len(name)
    cand = np.flatnonzero(items.name_len == width)
    if not len(cand):
        return cand
    if width in (1, 2, 4, 8):  # compare whole words
        dt = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}[width]
        words = gather(u8, items.name_start[cand], width).view(dt).ravel()
        hit = cand[words == np.frombuffer(name, dtype=dt)[0]]
    else:
        mat = gather(u8, items.name_start[cand], width)
        hit = cand[(mat == np.frombuffer(name, np.uint8)).all(axis=1)]
    last = np.ones(len(hit), dtype=bool)
    last[:-1] = items.row[hit][1:] != items.row[hit][:-1]
    return hit[last]


_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _word(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The first up-to-8 bytes of each range as a little-endian uint64, zero past the range."""
    return gather(u8, start, 8).view("<u8").ravel() & _LOW_BYTES[np.minimum(length, 8)]


def duplicate_name_rows(u8: np.ndarray, items: PropertyItems, rows: int) -> np.ndarray:
    """Rows where two items may share a name (a map keeps one of them); other rows surely have none.

    Names are compared by a key of their length and first and last eight bytes: equal names always
    share it, and a rare equal key of two different names only sends a row to the exact path.
    """
    out = np.zeros(rows, dtype=bool)
    if len(items.row) < 2:
        return out
    h = _word(u8, items.name_start, items.name_len)
    long = np.flatnonzero(items.name_len > 8)
    with np.errstate(over="ignore"):
        if len(long):
            tail = items.name_start[long] + items.name_len[long] - 8
            h[long] = h[long] * np.uint64(0x9E3779B97F4A7C15) + gather(u8, tail, 8).view("<u8").ravel()
        h = h * np.uint64(0xC2B2AE3D27D4EB4F) + items.name_len.astype(np.uint64)
    key = (items.row.astype(np.uint64) << np.uint64(40)) ^ (h >> np.uint64(24))
    order = np.argsort(key, kind="stable")
    ks = key[order]
    dup = np.flatnonzero(ks[1:] == ks[:-1])
    out[items.row[order][dup]] = True
    return out


def _next_at_or_after(marks: np.ndarray, q: np.ndarray, default: int) -> np.ndarray:
    """For each ``q``, the first element of sorted ``marks`` that is >= q, else ``default``."""
    if len(marks) == 0:
        return np.full(len(q), default, dtype=np.int64)
    k = np.searchsorted(marks, q)
    return np.where(k < len(marks), marks[np.minimum(k, len(marks) - 1)], default)


def key_tokens(
    u8: np.ndarray, rec: np.ndarray, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of each KEYS value split on single spaces (empty tokens dropped), in order:
    (record, start, length, sequence number within its value).

    A value without a space is one token (the usual case): only values with a space, or longer
    than ``_PLAIN_KEYS_WIDTH``, are split byte by byte."""
    if len(rec) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    split = length > _PLAIN_KEYS_WIDTH
    width = int(np.minimum(length, _PLAIN_KEYS_WIDTH).max())
    if width:
        mat = gather(u8, start, width)
        spaced = (mat == 0x20) & (np.arange(width, dtype=np.int32) < length[:, None])
        split |= spaced.any(axis=1)
    plain = (length > 0) & ~split
    if not split.any():
        return rec[plain], start[plain], length[plain], np.zeros(int(plain.sum()), np.int64)
    sr, ss, sl, sq = _split_tokens(u8, rec[split], start[split], length[split])
    out_rec = np.concatenate([rec[plain], sr])
    seq = np.concatenate([np.zeros(int(plain.sum()), np.int64), sq])
    order = np.lexsort((seq, out_rec))
    return (
        out_rec[order],
        np.concatenate([start[plain], ss])[order],
        np.concatenate([length[plain], sl])[order],
        seq[order],
    )


def _split_tokens(
    u8: np.ndarray, rec: np.ndarray, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``key_tokens`` of values split byte by byte (every byte of every value expanded)."""
    total = int(length.sum())
    first = np.zeros(len(rec) + 1, dtype=np.int64)
    np.cumsum(length, out=first[1:])
    owner = np.repeat(np.arange(len(rec)), length)
    idx = np.arange(total) - np.repeat(first[:-1], length) + np.repeat(start, length)
    sp = u8[idx] == 0x20
    # token starts: value start or after a space; token ends: next space or value end
    tstart = np.zeros(total, dtype=bool)
    tstart[first[:-1][length > 0]] = True
    after = np.flatnonzero(sp[:-1]) + 1
    after = after[owner[after] == owner[after - 1]]
    tstart[after] = True
    tstart &= ~sp
    s = np.flatnonzero(tstart)
    e = _next_at_or_after(np.flatnonzero(sp), s, total)
    vend = first[1:][owner[s]]
    e = np.minimum(e, vend)
    o = owner[s]
    newv = np.ones(len(o), dtype=bool)
    newv[1:] = o[1:] != o[:-1]
    grp_start = np.maximum.accumulate(np.where(newv, np.arange(len(o)), 0))
    seq = np.arange(len(o)) - grp_start
    return rec[o], idx[s], e - s, seq


# ---------------------------------------------------------------------------------------------
# Values of a few named properties, the one array splitter the dispatch columns use

Ranges = tuple[np.ndarray, np.ndarray, np.ndarray]  # (row, value start, value length)
_MAX_LAYOUTS = 256  # more distinct separator layouts among the strings: ``property_items``


def named_values(
    u8: np.ndarray, start: np.ndarray, length: np.ndarray, names: tuple[bytes, ...]
) -> tuple[dict[bytes, Ranges], np.ndarray]:
    """The value of each of ``names`` in every property string (the last item of that name, as a map
    put), and the rows that are not plain (as ``PropertyItems.bad``; their values are left out).

    Producers write the same properties in the same order, so most strings have their 0x01/0x02
    bytes at the same places: the items of such a layout are split once, then the names of all its
    rows are compared at those places. With too many layouts, ``property_items`` splits every row.
    """
    m = len(start)
    bad = np.zeros(m, dtype=bool)
    if m:
        lens = np.minimum(length, MAX_FAST_PROPERTIES)
        width = max(int(lens.max()), 1)
        mat = gather(u8, start, width)
        marks = (mat - np.uint8(1)) <= np.uint8(1)  # 0x01 or 0x02
        if not (lens == width).all():
            marks &= np.arange(width, dtype=np.int32) < lens[:, None]
        bad |= length > MAX_FAST_PROPERTIES
        values = _values_by_layout(mat, marks, lens, start, names, bad)
        if values is not None:
            return values, bad
    items = property_items(u8, start, length)
    bad |= items.bad
    found = {}
    for name in names:
        hit = named(u8, items, name)
        found[name] = (items.row[hit], items.value_start[hit], items.value_len[hit])
    return found, bad


def _layouts(mat: np.ndarray, marks: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """First row of each separator layout and each row's layout, or None past ``_MAX_LAYOUTS``."""
    m = len(mat)
    packed = np.packbits(marks, axis=1)
    key = np.zeros((m, 8 + (-(-packed.shape[1] // 8)) * 8), np.uint8)
    key[:, :4] = lens.astype(">u4").view(np.uint8).reshape(m, 4)
    key[:, 8 : 8 + packed.shape[1]] = packed
    words = key.view(np.uint64)
    h = words[:, 0].copy()
    for j in range(1, words.shape[1]):  # a hash of the layout; rows are compared with their representative below
        h = h * np.uint64(0x9E3779B97F4A7C15) + words[:, j]
    uniq, first, inv = np.unique(h, return_index=True, return_inverse=True)
    if len(uniq) > _MAX_LAYOUTS:
        return None
    inv = inv.ravel()
    if not (key == key[first][inv]).all():
        return None  # two layouts with one hash
    return first, inv


def _values_by_layout(
    mat: np.ndarray, marks: np.ndarray, lens: np.ndarray, start: np.ndarray, names: tuple[bytes, ...], bad: np.ndarray
) -> dict[bytes, Ranges] | None:
    """``named_values`` for strings that share a few layouts; None when there are too many."""
    layouts = _layouts(mat, marks, lens)
    if layouts is None:
        return None
    first, inv = layouts
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(first) + 1))
    found: dict[bytes, list[Ranges]] = {t: [] for t in names}
    for u, r in enumerate(first.tolist()):
        rows = order[bounds[u] : bounds[u + 1]]
        for name, (sel, vlen) in _layout_values(mat, rows, mat[r, : int(lens[r])].tobytes(), names, bad).items():
            has = sel >= 0
            if has.any():
                found[name].append((rows[has], start[rows[has]] + sel[has], vlen[has]))
    values = {}
    for name, parts in found.items():
        if parts:
            if len(parts) == 1:  # one layout: its rows are in order already
                values[name] = parts[0]
                continue
            rr = np.concatenate([q[0] for q in parts])
            o = np.argsort(rr, kind="stable")
            values[name] = tuple(np.concatenate([q[i] for q in parts])[o] for i in range(3))
        else:
            z = np.zeros(0, np.int64)
            values[name] = (z, z, z)
    return values  # type: ignore[return-value]


def _bytes_at(sub: np.ndarray, begin: int, want: bytes) -> np.ndarray:
    """Rows of ``sub`` holding ``want`` at column ``begin``, one column at a time (no row copies)."""
    eq = sub[:, begin] == want[0]
    for j in range(1, len(want)):
        eq &= sub[:, begin + j] == want[j]
    return eq


def _layout_values(
    mat: np.ndarray, rows: np.ndarray, row: bytes, names: tuple[bytes, ...], bad: np.ndarray
) -> dict[bytes, tuple[np.ndarray, np.ndarray]]:
    """For the ``rows`` of one layout (``row`` is one of them): each name's value column and length
    per row (-1 where absent); marks ``bad`` the rows that are not plain."""
    at, items = 0, []
    for item in row.split(b"\x02"):
        items.append((at, at + len(item), item))
        at += len(item) + 1
    # one layout for every row (the usual batch): columns are views of the matrix, not copies
    sub = mat if len(rows) == len(mat) else mat[rows]
    # The layout says where separators are, not which: rows with a 0x01 where this one has a 0x02
    # (or the reverse) are another layout, left to the per-record path.
    twos = [end for _, end, _ in items[:-1]]
    if twos:
        other = ~_bytes_at(sub[:, twos], 0, b"\x02" * len(twos))
        bad[rows[other]] = True
    widths = {len(t) for t in names}
    value_at: dict[bytes, list[tuple[np.ndarray, int, int]]] = {t: [] for t in names}
    for begin, end, item in items:
        if not item:
            continue
        k = item.find(b"\x01")
        if item.count(b"\x01") != 1 or not 0 < k < len(item) - 1:
            bad[rows] = True
            return {}
        if k not in widths:
            continue
        for name in names:
            if len(name) == k:
                hit = _bytes_at(sub, begin, name)
                if hit.any():
                    value_at[name].append((hit, begin + k + 1, end - begin - k - 1))
    out = {}
    for name in names:  # the later item wins, as in a map put
        sel = np.full(len(rows), -1, np.int64)
        vlen = np.zeros(len(rows), np.int64)
        for hit, vstart, n in value_at[name]:
            sel[hit] = vstart
            vlen[hit] = n
        out[name] = (sel, vlen)
    return out
