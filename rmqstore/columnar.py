"""Columnar decoding of commit log records for dispatch, with numpy (store-format.md §3, §4.2, §5.3).

The per-record Python path (``dispatch.scan_requests``) costs microseconds a record; here one
Python loop only follows the TOTALSIZE chain, and every field, property lookup and Java hash
is computed for thousands of records at once from the mapped bytes:

* fixed header fields are gathered at ``position + field offset``;
* property strings are flattened and split on 0x02/0x01 with array operations; a record is
  taken on this fast path only when every property item has exactly one 0x01 with a non-empty
  name and value (then every broker version's parser agrees), and TAGS, KEYS, UNIQ_KEY and the
  topic are ASCII (then UTF-16 units are the bytes);
* Java ``String.hashCode`` of ``topic#key`` is computed from byte ranges with a per-row Horner
  prefix: ``h(a + b) = h(a) * 31^len(b) + h(b)`` (mod 2^32).

Every other record (IPv6 hosts, V2, odd properties, non-ASCII keys, ``SCHEDULE_TOPIC_XXXX``)
goes through the exact per-record decoder, so the result equals ``scan_requests`` record for record.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from .commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, SCHEDULE_TOPIC, decode_record
from .dispatch import DispatchRequest, ScanStop, request_from_record
from .errors import CorruptData, RecordSizeMismatch
from .javahash import index_key_hash, java_hash
from .layout import Segment, StoreConfig

_HEAD = struct.Struct(">ii")
_M32 = np.uint64(0xFFFFFFFF)
_TARGETS = (b"TAGS", b"KEYS", b"UNIQ_KEY")
_MAX_PROPS_FAST = 512  # wider property strings take the per-record path
BATCH = 1 << 18


@dataclass
class Columns:
    """Dispatch requests of many records as arrays (record order = commit log order)."""

    phy: np.ndarray  # int64 PHYSICALOFFSET
    size: np.ndarray  # int64 TOTALSIZE
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    store_ts: np.ndarray  # int64
    sys_flag: np.ndarray  # int64
    tags_code: np.ndarray  # int64
    topic_id: np.ndarray  # int64 index into ``topics``
    topics: list[str]
    key_rec: np.ndarray  # int64 record index of each index key, in broker put order
    key_hash: np.ndarray  # int64 index keyHash of ``topic#key``

    def __len__(self) -> int:
        return len(self.phy)


def _gather(u8: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
    """Rows of ``width`` bytes starting at each ``idx`` (bytes past the buffer end read as 0)."""
    if len(u8) >= width and (len(idx) == 0 or int(idx.max()) <= len(u8) - width):
        return np.lib.stride_tricks.sliding_window_view(u8, width)[idx]
    padded = np.concatenate([u8, np.zeros(width, np.uint8)])
    return np.lib.stride_tricks.sliding_window_view(padded, width)[np.minimum(idx, len(u8))]


def _be(u8: np.ndarray, idx: np.ndarray, dtype: str) -> np.ndarray:
    w = np.dtype(dtype).itemsize
    return _gather(u8, idx, w).view(dtype).ravel().astype(np.int64)


def _next_at_or_after(marks: np.ndarray, q: np.ndarray, default: int) -> np.ndarray:
    """For each ``q``, the first element of sorted ``marks`` that is >= q, else ``default``."""
    if len(marks) == 0:
        return np.full(len(q), default, dtype=np.int64)
    k = np.searchsorted(marks, q)
    return np.where(k < len(marks), marks[np.minimum(k, len(marks) - 1)], default)


_INV31 = pow(31, -1, 1 << 32)


def _powers_desc(width: int) -> tuple[np.ndarray, np.ndarray]:
    pw = np.empty(width, dtype=np.uint32)
    inv = np.empty(width + 1, dtype=np.uint32)
    a = b = 1
    for i in range(width):
        pw[width - 1 - i] = a
        a = (a * 31) & 0xFFFFFFFF
    for i in range(width + 1):
        inv[i] = b
        b = (b * _INV31) & 0xFFFFFFFF
    return pw, inv


def _pow31(n: int) -> np.ndarray:
    p = np.empty(n + 1, dtype=np.uint64)
    acc = 1
    for i in range(n + 1):
        p[i] = acc
        acc = (acc * 31) & 0xFFFFFFFF
    return p


def _range_hashes(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (uint32 in uint64) of each byte range, and whether the range is all ASCII."""
    n = len(start)
    if n == 0:
        return np.zeros(0, np.uint64), np.ones(0, bool)
    width = int(length.max()) if n else 0
    if width == 0:
        return np.zeros(n, np.uint64), np.ones(n, bool)
    cols = np.arange(width, dtype=np.int32)
    mat = _gather(u8, start, width) * (cols < length[:, None])
    ascii_ok = ~(mat >= 0x80).any(axis=1)
    # Left-aligned sum of c_j * 31^(width-1-j), then times inv31^(width-len): the hash of the range.
    # uint32 arithmetic wraps mod 2^32, which is Java's int overflow.
    pw, inv = _powers_desc(width)
    h = (mat.astype(np.uint32) * pw).sum(axis=1, dtype=np.uint32)
    return (h * inv[width - length]).astype(np.uint64), ascii_ok


def _to_int32(h: np.ndarray) -> np.ndarray:
    x = h.astype(np.int64)
    return np.where(x >= 0x80000000, x - 0x100000000, x)


def _key_hash(h32: np.ndarray) -> np.ndarray:
    s = _to_int32(h32)
    out = np.abs(s)
    out[s == -0x80000000] = 0
    return out


def walk_positions(buf: Any, start_pos: int, end: int) -> tuple[np.ndarray, int, str]:
    """Start of every V1/V2 record from ``start_pos``; returns (positions, stop pos, reason)."""
    pos = start_pos
    out = array("q")
    append = out.append
    unpack = _HEAD.unpack_from
    reason = "end"
    while pos + 8 <= end:
        total, magic = unpack(buf, pos)
        if (magic == MAGIC_V1 or magic == MAGIC_V2) and 0 < total <= end - pos:
            append(pos)
            pos += total
            continue
        if magic == BLANK_MAGIC:
            reason = "blank"
        elif total == 0 and magic == 0:
            reason = "end"
        else:
            reason = "invalid"
        break
    return np.frombuffer(out, dtype=np.int64) if len(out) else np.zeros(0, np.int64), pos, reason


def scan_columns(
    buf: Any,
    seg: Segment,
    cfg: StoreConfig,
    *,
    start_pos: int = 0,
    end_pos: int | None = None,
    workers: int = 1,
) -> tuple[list[Columns], ScanStop]:
    """Like ``dispatch.scan_requests`` (dispatcher semantics, no CRC), as column batches.

    With ``workers`` > 1 the batches are decoded in that many forked processes (the size-chain
    walk stays in this process; batches are independent once their positions are known)."""
    end = len(buf) if end_pos is None else end_pos
    positions, stop_pos, reason = walk_positions(buf, start_pos, end)
    stop = ScanStop(stop_pos, reason)
    if reason == "invalid":
        try:
            decode_record(buf, stop_pos, path=str(seg.path), file_from=seg.base_offset, end=end)
            stop.error = CorruptData("invalid record", path=seg.path, pos=stop_pos)
        except CorruptData as e:
            stop.error = e
    chunks = [positions[i : i + BATCH] for i in range(0, len(positions), BATCH)]
    if workers > 1 and len(chunks) > 1:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(min(workers, len(chunks))) as pool:
            results = pool.imap(_decode_in_worker, [(str(seg.path), seg, cfg, c, end) for c in chunks])
            return _collect(results, stop)
    u8 = np.frombuffer(buf, dtype=np.uint8, count=end) if end else np.zeros(0, np.uint8)
    return _collect((decode_batch(buf, u8, c, seg, cfg, end) for c in chunks), stop)


def _collect(results: Any, stop: ScanStop) -> tuple[list[Columns], ScanStop]:
    batches = []
    for cols, bad_at in results:
        if cols is not None and len(cols):
            batches.append(cols)
        if bad_at is not None:
            return batches, bad_at
    return batches, stop


def _decode_in_worker(
    args: tuple[str, Segment, StoreConfig, np.ndarray, int],
) -> tuple[Columns | None, ScanStop | None]:
    import mmap

    path, seg, cfg, chunk, end = args
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    u8 = np.frombuffer(m, dtype=np.uint8, count=end)
    try:
        return decode_batch(m, u8, chunk, seg, cfg, end)
    finally:
        del u8
        m.close()


def decode_batch(
    buf: Any, u8: np.ndarray, p: np.ndarray, seg: Segment, cfg: StoreConfig, end: int
) -> tuple[Columns | None, ScanStop | None]:
    """Decode the records starting at positions ``p`` of one segment buffer into columns.

    ``u8`` is a uint8 view of ``buf``, ``end`` the end of valid data in it. Returns the columns of
    the records before the first one the broker's check would stop at, and that stop (or None).
    Used by the local scanner and by the Spark redispatch executors.
    """
    n = len(p)
    head = _gather(u8, p, 88)  # every fixed field of an IPv4/IPv4 record, one gather

    def field(off: int, dtype: str) -> np.ndarray:
        w = np.dtype(dtype).itemsize
        return np.ascontiguousarray(head[:, off : off + w]).view(dtype).ravel().astype(np.int64)

    total = field(0, ">i4")
    magic = field(4, ">i4")
    sys_flag = field(36, ">i4")
    fast = (magic == MAGIC_V1) & ((sys_flag & 0x30) == 0)
    # Reads are bounded by the buffer (the broker's ByteBuffer), not by TOTALSIZE.
    bl = field(84, ">i4")
    bl0 = np.maximum(bl, 0)
    tpos = p + 88 + bl0
    ok_t = (total >= 88) & (tpos + 3 <= end)
    tlen = u8[np.minimum(tpos, end - 1)].astype(np.int8).astype(np.int64)
    ppos = tpos + 1 + np.maximum(tlen, 0)
    ok_p = ok_t & (tlen >= 0) & (ppos + 2 <= end)
    plen = np.where(ok_p, _be(u8, np.minimum(ppos, end - 2), ">i2"), 0)
    pl0 = np.maximum(plen, 0)
    bounds_ok = ok_p & (ppos + 2 + pl0 <= end)
    mismatch = bounds_ok & (91 + bl0 + tlen + pl0 != total)
    # A record the broker cannot parse (exception) stops the dispatcher; a size mismatch is skipped.
    invalid = fast & ~bounds_ok
    stop: ScanStop | None = None
    if invalid.any():
        k = int(np.flatnonzero(invalid)[0])
        pos = int(p[k])
        try:
            decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=end)
            err = CorruptData("invalid record", path=seg.path, pos=pos)
        except CorruptData as e:
            err = e
        stop = ScanStop(pos, "invalid", err)
        n = k
        p, total, sys_flag, fast, tlen, ppos, pl0, mismatch, head = (
            a[:k] for a in (p, total, sys_flag, fast, tlen, ppos, pl0, mismatch, head)
        )
    keep = ~(fast & mismatch)
    tstart = ppos - np.maximum(tlen, 0)

    # Topics: exact grouping by bytes; ASCII topics only on the fast path.
    topic_hash, topic_ascii = _range_hashes(u8, tstart[fast], tlen[fast])
    fast_idx = np.flatnonzero(fast)
    topics: list[str] = []
    topic_index: dict[bytes, int] = {}
    topic_id = np.full(n, -1, dtype=np.int64)
    if len(fast_idx):
        keyed = (topic_hash << np.uint64(8)) | tlen[fast].astype(np.uint64)
        uniq, first, inverse = np.unique(keyed, return_index=True, return_inverse=True)
        rep_ids = np.empty(len(uniq), dtype=np.int64)
        for j, f in enumerate(first):
            r = fast_idx[f]
            raw = bytes(buf[int(tstart[r]) : int(tstart[r] + tlen[r])])
            if raw not in topic_index:
                topic_index[raw] = len(topics)
                topics.append(raw.decode("utf-8", "replace"))
            rep_ids[j] = topic_index[raw]
        topic_id[fast_idx] = rep_ids[inverse]
        # verify: every member's bytes equal its representative's (hash collisions are possible)
        width = int(tlen[fast].max())
        cols = np.arange(width)
        mat = u8[np.minimum(tstart[fast][:, None] + cols, end - 1)]
        mat = np.where(cols < tlen[fast][:, None], mat, 0)
        rep_rows = mat[first][inverse]
        collided = ~(mat == rep_rows).all(axis=1)
        if collided.any():
            fast[fast_idx[collided]] = False
        fast[fast_idx[~topic_ascii]] = False
    sched = topic_index.get(SCHEDULE_TOPIC.encode())
    if sched is not None:
        fast &= topic_id != sched

    # Properties of fast records: they end where the record ends, so separators are found
    # with one byte compare over the raw span and attributed to records by position.
    fast &= pl0 <= _MAX_PROPS_FAST
    ridx = np.flatnonzero(fast)
    pstart = ppos[ridx] + 2
    pend = pstart + pl0[ridx]
    values: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    bad_rec = np.zeros(len(ridx), dtype=bool)
    if len(ridx):
        lens = pl0[ridx]
        width = max(int(lens.max()), 1)
        mat = _gather(u8, pstart, width)
        live = np.arange(width, dtype=np.int32) < lens[:, None]
        r2, c2 = np.nonzero((mat == 2) & live)
        s2 = pstart[r2] + c2  # absolute positions, in file order (rows are in file order)
        r1, c1_ = np.nonzero((mat == 1) & live)
        s1 = pstart[r1] + c1_
        hi = int(pend[-1])
        # items: [record start | after a 0x02, next 0x02 | record end)
        item_start = np.concatenate([pstart, s2 + 1])
        item_rec = np.concatenate([np.arange(len(ridx)), r2])
        order = np.argsort(item_start, kind="stable")
        item_start, item_rec = item_start[order], item_rec[order]
        item_end = np.minimum(_next_at_or_after(s2, item_start, hi), pend[item_rec])
        item_len = item_end - item_start
        nonempty = item_len > 0
        k_lo = np.searchsorted(s1, item_start)
        c1 = np.searchsorted(s1, item_end) - k_lo
        sep = np.where(k_lo < len(s1), s1[np.minimum(k_lo, max(len(s1) - 1, 0))] if len(s1) else 0, hi)
        good_item = ~nonempty | ((c1 == 1) & (sep > item_start) & (sep < item_end - 1))
        bad_rec[item_rec[~good_item]] = True
        key_len = sep - item_start
        for target in _TARGETS:
            L = len(target)
            cand = np.flatnonzero(nonempty & good_item & (key_len == L))
            if len(cand):
                b = _gather(u8, item_start[cand], L)
                cand = cand[(b == np.frombuffer(target, np.uint8)).all(axis=1)]
            if len(cand):  # the later item wins, as in a map put
                recs = item_rec[cand]
                last = np.ones(len(cand), dtype=bool)
                last[:-1] = recs[1:] != recs[:-1]
                cand = cand[last]
            vs = sep[cand] + 1
            values[target] = (item_rec[cand], vs, item_end[cand] - vs)
    else:
        z = np.zeros(0, np.int64)
        values = {t: (z, z, z) for t in _TARGETS}

    tags_code = np.zeros(n, dtype=np.int64)
    # TAGS
    trec, tstart_v, tlen_v = values[b"TAGS"]
    th, tascii = _range_hashes(u8, tstart_v, tlen_v)
    bad_rec[trec[~tascii]] = True
    tags_code[ridx[trec]] = _to_int32(th)
    # UNIQ_KEY and KEYS tokens -> index key hashes
    urec, ustart, ulen = values[b"UNIQ_KEY"]
    uh, uascii = _range_hashes(u8, ustart, ulen)
    bad_rec[urec[~uascii]] = True
    krec, kstart, klen = values[b"KEYS"]
    # tokens: split the KEYS value on single spaces; empty tokens are skipped
    tok_rec, tok_start, tok_len, tok_seq = _split_tokens(u8, krec, kstart, klen)
    kh, kascii = _range_hashes(u8, tok_start, tok_len)
    bad_rec[tok_rec[~kascii]] = True
    bad_fast = np.zeros(n, dtype=bool)
    bad_fast[ridx[bad_rec]] = True
    fast &= ~bad_fast

    # topic#key hashes: h(topic + "#") * 31^len(key) + h(key)
    prefix = np.array([(java_hash(t + "#") & 0xFFFFFFFF) for t in topics] or [0], dtype=np.uint64)
    maxlen = int(max(ulen.max() if len(ulen) else 0, tok_len.max() if len(tok_len) else 0))
    pw = _pow31(maxlen)

    def combine(recs: np.ndarray, h: np.ndarray, lens_: np.ndarray) -> np.ndarray:
        pre = prefix[topic_id[ridx[recs]]]
        return _key_hash((pre * pw[lens_] + h) & _M32)

    key_rec_parts = [ridx[urec], ridx[tok_rec]]
    key_hash_parts = [combine(urec, uh, ulen), combine(tok_rec, kh, tok_len)]
    key_seq_parts = [np.zeros(len(urec), np.int64), tok_seq + 1]
    for j in range(2):  # records that left the fast path get their keys from the exact path only
        still = fast[key_rec_parts[j]]
        key_rec_parts[j], key_hash_parts[j], key_seq_parts[j] = (
            key_rec_parts[j][still],
            key_hash_parts[j][still],
            key_seq_parts[j][still],
        )

    # Per-record path for everything not on the fast path (and not a skipped size mismatch).
    slow = np.flatnonzero(~fast & keep)
    slow_reqs: list[tuple[int, DispatchRequest]] = []
    for k in slow:
        pos = int(p[k])
        try:
            rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=end, broker=cfg.broker)
            req = request_from_record(rec, cfg, path=str(seg.path))  # type: ignore[arg-type]
        except RecordSizeMismatch:
            keep[k] = False
            continue
        except CorruptData as e:
            stop = ScanStop(pos, "invalid", e)
            keep[k:] = False
            break
        slow_reqs.append((int(k), req))
    phy = field(28, ">i8")
    qid = field(12, ">i4")
    qoff = field(20, ">i8")
    ts = field(56, ">i8")
    for k, req in slow_reqs:
        if req.topic not in topics:
            topics.append(req.topic)
        topic_id[k] = topics.index(req.topic)
        tags_code[k] = req.tags_code
        phy[k], qid[k], qoff[k], ts[k], sys_flag[k] = (
            req.phy_offset,
            req.queue_id,
            req.queue_offset,
            req.store_timestamp_ms,
            req.sys_flag,
        )
        total[k] = req.size
        seq = 0
        extra_h, extra_s = [], []
        if req.uniq_key is not None:
            extra_h.append(index_key_hash(f"{req.topic}#{req.uniq_key}"))
            extra_s.append(seq)
        seq = 1
        if req.keys:
            for tok in req.keys.split(" "):
                if tok:
                    extra_h.append(index_key_hash(f"{req.topic}#{tok}"))
                    extra_s.append(seq)
                    seq += 1
        key_rec_parts.append(np.full(len(extra_h), k, np.int64))
        key_hash_parts.append(np.array(extra_h, np.int64))
        key_seq_parts.append(np.array(extra_s, np.int64))
    key_rec = np.concatenate(key_rec_parts)
    key_hash = np.concatenate(key_hash_parts)
    key_seq = np.concatenate(key_seq_parts)
    # keep only keys of kept records that are either fast or handled by the slow path
    handled = keep & (fast | np.isin(np.arange(n), [k for k, _ in slow_reqs]))
    sel = handled[key_rec]
    key_rec, key_hash, key_seq = key_rec[sel], key_hash[sel], key_seq[sel]
    order = np.lexsort((key_seq, key_rec))
    rec_sel = np.flatnonzero(handled)
    remap = np.full(n, -1, dtype=np.int64)
    remap[rec_sel] = np.arange(len(rec_sel))
    cols = Columns(
        phy[rec_sel],
        total[rec_sel],
        qid[rec_sel],
        qoff[rec_sel],
        ts[rec_sel],
        sys_flag[rec_sel],
        tags_code[rec_sel],
        topic_id[rec_sel],
        topics,
        remap[key_rec[order]],
        key_hash[order],
    )
    return cols, stop


def _split_tokens(
    u8: np.ndarray, rec: np.ndarray, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of each KEYS value split on single spaces (empty tokens dropped), in order."""
    if len(rec) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
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
    # sequence number of each token within its value
    newv = np.ones(len(o), dtype=bool)
    newv[1:] = o[1:] != o[:-1]
    grp_start = np.maximum.accumulate(np.where(newv, np.arange(len(o)), 0))
    seq = np.arange(len(o)) - grp_start
    return rec[o], idx[s], e - s, seq


def iter_columns(
    segments: list[Segment],
    cfg: StoreConfig,
    *,
    from_phy: int = 0,
    to_phy: int | None = None,
    progress: Any = None,
    workers: int | None = None,
) -> Any:
    """Column batches per commit log file, walking as the dispatcher walks (§9.2)."""
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    from .store import map_file

    for seg in segments:
        if seg.base_offset + seg.size <= from_phy:
            continue
        if to_phy is not None and seg.base_offset >= to_phy:
            break
        start = max(0, from_phy - seg.base_offset)
        end = None if to_phy is None else min(seg.size, to_phy - seg.base_offset)
        with map_file(seg.path) as buf:
            batches, stop = scan_columns(buf, seg, cfg, start_pos=start, end_pos=end, workers=workers)
        if progress:
            progress(stop.pos - start)
        yield batches, stop, seg
        if stop.reason != "blank":
            return
