"""Commit log records many at a time, with numpy (store-format.md §3.1), from ``commitlog``'s declaration.

The record head (fields 1-15) is the numpy dtype derived from :data:`commitlog.RECORD_HEAD`: a
gather of the head bytes at every record position viewed through that dtype decodes every fixed
field at once, and a structured array of heads written out is the encoder. The variable part
(body, topic, properties) is located with array arithmetic on the length fields.
The per-record codec (:mod:`.commitlog`) is the reference; the tests round-trip between the two.
"""

from __future__ import annotations

import mmap
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    HEAD_OFFSETS,
    HEAD_STRUCTS,
    HEAD_V4_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE_V1,
    RECORD_HEAD,
    STOREHOSTADDRESS_V6_FLAG,
    head_codes,
)
from rmqstore.codec.fields import dtype_of
from rmqstore.errors import CorruptData, RecordSizeMismatch

# One dtype per host-width combination, indexed like ``commitlog.HEAD_STRUCTS``.
HEAD_DTYPES: tuple[np.dtype, ...] = tuple(dtype_of(RECORD_HEAD, head_codes(v << 4)) for v in range(4))
HEAD_V4_DTYPE = HEAD_DTYPES[0]
_AT = HEAD_OFFSETS[0]
_V6_EXTRA = HEAD_OFFSETS[1]["store_timestamp_ms"] - _AT["store_timestamp_ms"]  # 12: a 16-byte address
_CAND_BLOCK = 1 << 15  # candidate record starts checked per numpy step
_INT_FIELDS = tuple(f.name for f in RECORD_HEAD if f.code != "addr")


def _windows(u8: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``u8`` as one opaque item: fancy indexing copies whole rows at once
    (about twice as fast as a ``sliding_window_view`` row of bytes)."""
    if not u8.flags.c_contiguous:
        u8 = np.ascontiguousarray(u8)
    return np.ndarray((len(u8) - width + 1,), dtype=np.dtype((np.void, width)), buffer=u8, strides=(1,))


def gather(u8: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each position ``idx`` as an (n, width) uint8 array; bytes past the end read as 0."""
    n = len(u8)
    idx = np.asarray(idx, dtype=np.int64)
    outside = (idx < 0) | (idx > n - width)
    if n >= width and not outside.any():
        return _windows(u8, width)[idx].view(np.uint8).reshape(len(idx), width)
    rows = np.zeros((len(idx), width), dtype=np.uint8)
    inside = np.flatnonzero(~outside)
    if inside.size:
        rows[inside] = _windows(u8, width)[idx[inside]].view(np.uint8).reshape(len(inside), width)
    for i in np.flatnonzero(outside).tolist():
        a = int(idx[i])
        if 0 <= a < n:
            rows[i, : min(width, n - a)] = u8[a : a + width]
    return rows


def be(u8: np.ndarray, idx: np.ndarray, dtype: str) -> np.ndarray:
    """The big-endian integer of type ``dtype`` at each position, as int64."""
    w = np.dtype(dtype).itemsize
    return np.ascontiguousarray(gather(u8, idx, w)).view(dtype).ravel().astype(np.int64)


def decode_heads(u8: np.ndarray, positions: np.ndarray, sys_flag: int = 0) -> np.ndarray:
    """The heads (fields 1-15) of the records at ``positions``, all with the host widths of ``sys_flag``."""
    dt = HEAD_DTYPES[(sys_flag >> 4) & 3]
    return np.ascontiguousarray(gather(u8, positions, dt.itemsize)).view(dt).ravel()


def head_column(heads: np.ndarray, name: str) -> np.ndarray:
    """One integer field of decoded heads as int64."""
    return heads[name].astype(np.int64)


def body_crcs(buf: Any, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """BODYCRC (§3.6) of each body ``buf[start:start + length]``: CRC32 masked with 0x7FFFFFFF."""
    zc, ends = zlib.crc32, (starts + lengths).tolist()
    if isinstance(buf, mmap.mmap):  # a slice of a map is a short copy, cheaper than a memoryview object
        got = np.fromiter((zc(buf[a:e]) for a, e in zip(starts.tolist(), ends, strict=True)), np.int64, len(ends))
        return got & 0x7FFFFFFF
    with memoryview(buf) as mv:
        got = np.fromiter((zc(mv[a:e]) for a, e in zip(starts.tolist(), ends, strict=True)), np.int64, len(ends))
    return got & 0x7FFFFFFF


@dataclass
class RecordColumns:
    """Every field of many records: head integers as arrays, addresses and variable parts as bytes."""

    ints: dict[str, np.ndarray]  # each integer field of RECORD_HEAD (int64)
    born_addr: list[bytes]
    store_addr: list[bytes]
    body: list[bytes]
    topic: list[bytes]
    properties: list[bytes]
    v2: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __len__(self) -> int:
        return len(self.body)


def _lengths(parts: list[bytes]) -> np.ndarray:
    return np.fromiter(map(len, parts), np.int64, len(parts))


def _scatter(out: np.ndarray, dest: np.ndarray, parts: list[bytes]) -> None:
    """Copy each ``parts[i]`` to ``out[dest[i]:]`` in one fancy-indexed assignment."""
    lens = _lengths(parts)
    total = int(lens.sum())
    if total == 0:
        return
    src = np.frombuffer(b"".join(parts), np.uint8)
    starts = np.cumsum(lens) - lens
    out[np.repeat(dest - starts, lens) + np.arange(total)] = src


def _check_ranges(ints: dict[str, np.ndarray]) -> None:
    for f in RECORD_HEAD:
        if f.code == "addr" or f.name not in ints:
            continue
        bits = 32 if f.code == "i" else 64
        v = ints[f.name]
        if bits == 32 and len(v) and (int(v.min()) < -(1 << 31) or int(v.max()) >= 1 << 31):
            raise ValueError(f"{f.name} does not fit a signed 32-bit field")


def encode_records(cols: RecordColumns) -> bytes:
    """The records laid end to end, as ``commitlog.encode_record`` writes each one.

    TOTALSIZE, MAGICCODE and BODYLENGTH come from the parts; BODYCRC is computed unless
    ``cols.ints`` has ``body_crc``. Raises ``ValueError`` naming the field that does not fit.
    """
    n = len(cols)
    ints = cols.ints
    _check_ranges(ints)
    v2 = cols.v2 if len(cols.v2) == n else np.zeros(n, bool)
    sys_flag = ints["sys_flag"]
    blen, tlen, plen = _lengths(cols.body), _lengths(cols.topic), _lengths(cols.properties)
    if n and (int(plen.max()) > 32767 or int(tlen[~v2].max(initial=0)) > 127 or int(tlen.max()) > 32767):
        raise ValueError("topic or properties too long for their length field")
    variant = (sys_flag >> 4) & 3
    hsize = np.array([s.size for s in HEAD_STRUCTS], np.int64)[variant]
    tl_w = np.where(v2, 2, 1)
    total = hsize + blen + tl_w + tlen + 2 + plen
    start = np.cumsum(total) - total
    out = np.zeros(int(total.sum()), np.uint8)
    crc = ints.get("body_crc")
    if crc is None:
        crc = np.fromiter((zlib.crc32(b) & 0x7FFFFFFF for b in cols.body), np.int64, n)
    derived = {"total_size": total, "magic": np.where(v2, MAGIC_V2, MAGIC_V1), "body_crc": crc, "body_len": blen}
    for v in np.unique(variant).tolist():
        sel = np.flatnonzero(variant == v)
        dt = HEAD_DTYPES[v]
        h = np.zeros(len(sel), dtype=dt)
        for name in _INT_FIELDS:
            h[name] = (derived[name] if name in derived else ints[name])[sel]
        for name, addrs in (("born_addr", cols.born_addr), ("store_addr", cols.store_addr)):
            width = dt[name].itemsize
            raw = b"".join(addrs[i] for i in sel.tolist())
            if len(raw) != width * len(sel):
                raise ValueError(f"{name}: every address must be {width} bytes for these sysFlag host bits")
            h[name] = np.frombuffer(raw, dtype=dt[name]).reshape(len(sel))
        rows = h.view(np.uint8).reshape(len(sel), dt.itemsize)
        out[start[sel, None] + np.arange(dt.itemsize)] = rows
    p = start + hsize
    _scatter(out, p, cols.body)
    p = p + blen
    out[p[~v2]] = tlen[~v2].astype(np.uint8)
    out[p[v2]] = (tlen[v2] >> 8).astype(np.uint8)
    out[p[v2] + 1] = (tlen[v2] & 0xFF).astype(np.uint8)
    p = p + tl_w
    _scatter(out, p, cols.topic)
    p = p + tlen
    out[p] = (plen >> 8).astype(np.uint8)
    out[p + 1] = (plen & 0xFF).astype(np.uint8)
    _scatter(out, p + 2, cols.properties)
    return out.tobytes()


def _slices(buf: Any, start: np.ndarray, length: np.ndarray) -> list[bytes]:
    mv = memoryview(buf)
    try:
        return [bytes(mv[a : a + n]) for a, n in zip(start.tolist(), length.tolist(), strict=True)]
    finally:
        mv.release()


def decode_records(buf: Any, positions: np.ndarray, *, path: str = "<buffer>") -> RecordColumns:
    """Every field of the V1/V2 records at ``positions`` (as ``commitlog.decode_record`` reads them).

    Raises CorruptData at the first record whose lengths do not fit the buffer or its TOTALSIZE.
    """
    u8 = np.frombuffer(buf, np.uint8)
    end = len(u8)
    p = np.asarray(positions, dtype=np.int64)
    n = len(p)
    magic = be(u8, p + 4, ">i4")
    sys_flag = be(u8, p + 36, ">i4")
    bad_magic = np.flatnonzero((magic != MAGIC_V1) & (magic != MAGIC_V2))
    if bad_magic.size:
        raise CorruptData("not a V1/V2 record", path=path, pos=int(p[bad_magic[0]]))
    variant = (sys_flag >> 4) & 3
    ints = {name: np.zeros(n, np.int64) for name in _INT_FIELDS}
    born: list[bytes] = [b""] * n
    store: list[bytes] = [b""] * n
    hsize = np.zeros(n, np.int64)
    for v in np.unique(variant).tolist():
        sel = np.flatnonzero(variant == v)
        heads = decode_heads(u8, p[sel], v << 4)
        for name in _INT_FIELDS:
            ints[name][sel] = heads[name]
        for name, out in (("born_addr", born), ("store_addr", store)):
            raw = heads[name].tobytes()
            w = heads.dtype[name].itemsize
            for k, i in enumerate(sel.tolist()):
                out[i] = raw[k * w : (k + 1) * w]
        hsize[sel] = HEAD_DTYPES[v].itemsize
    v2 = magic == MAGIC_V2
    blen = np.maximum(ints["body_len"], 0)
    tpos = p + hsize + blen
    tlen = np.where(v2, be(u8, tpos, ">i2"), be(u8, tpos, ">i1"))
    ppos = tpos + np.where(v2, 2, 1) + np.maximum(tlen, 0)
    plen = be(u8, ppos, ">i2")
    fits = (tlen >= 0) & (ppos + 2 + np.maximum(plen, 0) <= end)
    if not fits.all():
        raise CorruptData("record lengths run past the buffer", path=path, pos=int(p[np.flatnonzero(~fits)[0]]))
    computed = hsize + blen + np.where(v2, 2, 1) + tlen + 2 + np.maximum(plen, 0)
    bad = np.flatnonzero(computed != ints["total_size"])
    if bad.size:
        i = int(bad[0])
        raise RecordSizeMismatch(
            path=path, pos=int(p[i]), phy_offset=None, total_size=int(ints["total_size"][i]), computed=int(computed[i])
        )
    return RecordColumns(
        ints,
        born,
        store,
        _slices(buf, p + hsize, blen),
        _slices(buf, tpos + np.where(v2, 2, 1), tlen),
        _slices(buf, ppos + 2, np.maximum(plen, 0)),
        v2,
    )


def _strided(head: np.ndarray, pos: int, dtype: str) -> np.ndarray:
    """One fixed field of gathered 88-byte record heads, as a strided view (no copy)."""
    return np.ndarray((len(head),), dtype=dtype, buffer=head, offset=pos, strides=(HEAD_V4_SIZE,))


def well_formed_records(buf: Any, size: int, file_from: int, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``s`` (sorted record starts) that ``decode_record`` accepts and whose stored
    PHYSICALOFFSET is ``file_from + s``; returns (starts, ends). For resynchronising on damaged files."""
    s = s[s <= size - MIN_RECORD_SIZE_V1]
    if not s.size:
        return s, s
    # Each candidate's first 88 bytes (every fixed field up to BODYLENGTH with IPv4 hosts) are
    # gathered at once; the fields are strided views of that block.
    heads = np.ndarray((size - HEAD_V4_SIZE + 1,), dtype=f"V{HEAD_V4_SIZE}", buffer=buf, strides=(1,))
    be32 = np.ndarray((size - 3,), dtype=">i4", buffer=buf, strides=(1,))
    be16 = np.ndarray((size - 1,), dtype=">i2", buffer=buf, strides=(1,))
    i8 = np.ndarray((size,), dtype="i1", buffer=buf, strides=(1,))
    starts, ends = [], []
    try:
        # Blocks keep the temporaries in cache: a few dozen passes over each block.
        for b0 in range(0, len(s), _CAND_BLOCK):
            c = s[b0 : b0 + _CAND_BLOCK]
            head = heads[c]
            total = _strided(head, _AT["total_size"], ">i4").astype(np.int64)
            ok = (
                (total >= MIN_RECORD_SIZE_V1)
                & (total <= size - c)
                & (_strided(head, _AT["phy_offset"], ">i8") == c + file_from)
            )
            if not ok.all():
                c, total, head = c[ok], total[ok], head[ok]
                if not c.size:
                    continue  # a block of strangers (a file whose records hold other offsets)
            end = c + total
            v2 = _strided(head, _AT["magic"], ">i4") == MAGIC_V2
            v6 = _strided(head, _AT["sys_flag"], ">i4") & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
            body_len = _strided(head, _AT["body_len"], ">i4")
            bl_pos = c + _AT["body_len"]
            if v6.any():
                # BODYLENGTH sits 12 bytes later for each IPv6 host (§3.1). Reads past a record
                # only happen for records that fail the final length check, so they are clamped.
                bl_pos = (
                    bl_pos
                    + np.where(v6 & BORNHOST_V6_FLAG, _V6_EXTRA, 0)
                    + np.where(v6 & STOREHOSTADDRESS_V6_FLAG, _V6_EXTRA, 0)
                )
                body_len = np.where(v6 != 0, be32[np.minimum(bl_pos, size - 4)], body_len)
            t_pos = bl_pos + 4 + np.maximum(body_len, 0)
            if v2.any():
                topic_len = np.where(v2, be16[np.minimum(t_pos, size - 2)], i8[np.minimum(t_pos, size - 1)])
                p_pos = t_pos + np.where(v2, 2, 1) + np.maximum(topic_len, 0)
            else:
                topic_len = i8[np.minimum(t_pos, size - 1)]
                p_pos = t_pos + 1 + np.maximum(topic_len, 0)
            props_len = be16[np.minimum(p_pos, size - 2)]
            # calMsgLength (§3.1) is exactly the bytes the fields take, so it equals TOTALSIZE iff
            # the fields end where the record ends.
            ok = (topic_len >= 0) & (p_pos + 2 + np.maximum(props_len, 0) == end)
            starts.append(c[ok])
            ends.append(end[ok])
        if not starts:
            return s[:0], s[:0]
        return np.concatenate(starts), np.concatenate(ends)
    finally:
        del heads, be32, be16, i8
