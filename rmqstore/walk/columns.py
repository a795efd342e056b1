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

``iter_columns`` spreads a large file over worker processes by byte range: each worker picks up
the record chain at the first record of its range whose stored physical offset equals its
position, and the caller accepts a range only where the previous range's walk really ended.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.arrays import MAX_FAST_PROPERTIES, key_tokens, named_values
from rmqstore.codec.columnar import be, body_crcs, decode_heads, gather, head_column
from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    HEAD_V4_SIZE,
    MAGIC_V1,
    MIN_RECORD_SIZE_V1,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    decode_record,
    explain_invalid,
)
from rmqstore.codec.javahash import index_key_hash, java_hash
from rmqstore.errors import CorruptData, RecordSizeMismatch
from rmqstore.safety.openfile import map_readonly
from rmqstore.store.files import map_file, release_range
from rmqstore.store.layout import Segment, StoreConfig, segment_ranges
from rmqstore.walk.chain import frame_start
from rmqstore.walk.requests import DispatchRequest, ScanStop, request_from_record
from rmqstore.walk.workers import close_pool, worker_pool

_M32 = np.uint64(0xFFFFFFFF)
_TARGETS = (b"TAGS", b"KEYS", b"UNIQ_KEY")
BATCH = 1 << 18
PART_SIZE = 16 << 20  # bytes of a file one worker walks and decodes at a time (what a worker holds at once)
_SYNC_WINDOW = 8 << 20  # how far a worker looks for the first record of its range


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


def _range_matrix(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The byte ranges as rows of one matrix, zero after each range's length."""
    width = int(length.max())
    mat = gather(u8, start, width)
    if not (length == width).all():
        mat = mat * (np.arange(width, dtype=np.int32) < length[:, None]).astype(np.uint8)
    return mat


def _horner(mat: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (uint32 in uint64) of each zero-padded row of ``mat``, and whether it is all ASCII."""
    n, width = mat.shape
    h = np.zeros(n, dtype=np.uint32)
    seen = np.zeros(n, dtype=np.uint8)
    # One column at a time over all rows: uint32 arithmetic wraps mod 2^32, Java's int overflow.
    for j in range(width):
        col = mat[:, j]
        h *= np.uint32(31)
        h += col
        seen |= col
    # Right zero padding multiplied the hash by 31^(width-len): undo it with the inverse of 31.
    _, inv = _powers_desc(width)
    return (h * inv[width - length]).astype(np.uint64), seen < 0x80


def range_hashes(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (uint32 in uint64) of each byte range, and whether the range is all ASCII."""
    n = len(start)
    if n == 0:
        return np.zeros(0, np.uint64), np.ones(0, bool)
    if int(length.max()) == 0:
        return np.zeros(n, np.uint64), np.ones(n, bool)
    return _horner(_range_matrix(u8, start, length), length)


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise equality of two uint8 matrices of the same shape, eight bytes at a time."""
    n, width = a.shape
    pad = (-width) % 8
    if pad:
        a = np.concatenate([a, np.zeros((n, pad), np.uint8)], axis=1)
        b = np.concatenate([b, np.zeros((n, pad), np.uint8)], axis=1)
    wa = np.ascontiguousarray(a).view(np.uint64)
    wb = np.ascontiguousarray(b).view(np.uint64)
    eq = wa[:, 0] == wb[:, 0]
    for j in range(1, wa.shape[1]):
        eq &= wa[:, j] == wb[:, j]
    return eq


def _to_int32(h: np.ndarray) -> np.ndarray:
    x = h.astype(np.int64)
    return np.where(x >= 0x80000000, x - 0x100000000, x)


def _key_hash(h32: np.ndarray) -> np.ndarray:
    s = _to_int32(h32)
    out = np.abs(s)
    out[s == -0x80000000] = 0
    return out


def topic_key_hashes(prefix: np.ndarray, h: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Index keyHash (§5.2) of ``topic#key`` from each row's ``hash(topic#)`` and ``hash(key)`` (uint32
    in uint64) and the key's length in UTF-16 units, without the joined string: Java's hash of a
    concatenation is ``hash(a) * 31**len(b) + hash(b)`` mod 2**32."""
    if len(h) == 0:
        return np.zeros(0, dtype=np.int64)
    return _key_hash((prefix * _pow31(int(length.max()))[length] + h) & _M32)


def scan_columns(
    buf: Any,
    seg: Segment,
    cfg: StoreConfig,
    *,
    workers: int = 1,
    start_pos: int = 0,
    end_pos: int | None = None,
) -> tuple[list[Columns], ScanStop]:
    """Like ``dispatch.scan_requests`` (dispatcher semantics, no CRC), as column batches.

    With ``workers`` > 1 the batches are decoded in that many forked processes (the size-chain
    walk stays in this process; batches are independent once their positions are known)."""
    end = len(buf) if end_pos is None else end_pos
    positions, stop_pos, reason = seg.framing.chain(buf, start_pos, end)
    stop = ScanStop(stop_pos, reason)
    if reason == "invalid":
        stop.error = seg.framing.explain(buf, stop_pos, path=str(seg.path), file_from=seg.base_offset, end=end)
    chunks = [positions[i : i + BATCH] for i in range(0, len(positions), BATCH)]
    if workers > 1 and len(chunks) > 1:
        with worker_pool(min(workers, len(chunks))) as pool:
            results = pool.map(_decode_in_worker, [(str(seg.path), seg, cfg, c, end) for c in chunks])
            return _collect(results, stop)
    u8 = np.frombuffer(buf, dtype=np.uint8, count=end) if end else np.zeros(0, np.uint8)
    return _collect((decode_columns(buf, u8, c, seg, cfg, end) for c in chunks), stop)


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

    path, seg, cfg, chunk, end = args
    m = map_readonly(path)
    u8 = np.frombuffer(m, dtype=np.uint8, count=end)
    try:
        return decode_columns(m, u8, chunk, seg, cfg, end)
    finally:
        del u8
        m.close()


def _fast_topics(
    buf: Any, u8: np.ndarray, fast: np.ndarray, tlen: np.ndarray, tstart: np.ndarray
) -> tuple[list[str], dict[bytes, int], np.ndarray]:
    """Topic ids of the fast records, grouped exactly by their bytes; clears ``fast`` for non-ASCII topics."""
    fast_idx = np.flatnonzero(fast)
    topics: list[str] = []
    topic_index: dict[bytes, int] = {}
    topic_id = np.full(len(fast), -1, dtype=np.int64)
    if len(fast_idx):
        flen = tlen[fast_idx]
        fstart = tstart[fast_idx]
        if int(flen.max()) == 0:
            tmat = np.zeros((len(fast_idx), 1), np.uint8)
            topic_hash, topic_ascii = np.zeros(len(fast_idx), np.uint64), np.ones(len(fast_idx), bool)
        else:
            tmat = _range_matrix(u8, fstart, flen)
            topic_hash, topic_ascii = _horner(tmat, flen)
        keyed = (topic_hash << np.uint64(8)) | flen.astype(np.uint64)
        uniq, first, inverse = np.unique(keyed, return_index=True, return_inverse=True)
        rep_ids = np.empty(len(uniq), dtype=np.int64)
        for j, f in enumerate(first.tolist()):
            r = int(fast_idx[f])
            raw = bytes(buf[int(tstart[r]) : int(tstart[r] + tlen[r])])
            if raw not in topic_index:
                topic_index[raw] = len(topics)
                topics.append(raw.decode("utf-8", "replace"))
            rep_ids[j] = topic_index[raw]
        topic_id[fast_idx] = rep_ids[inverse]
        # every member's bytes must equal its representative's (hash collisions are possible)
        collided = ~_rows_equal(tmat, tmat[first][inverse])
        if collided.any():
            fast[fast_idx[collided]] = False
        fast[fast_idx[~topic_ascii]] = False
    return topics, topic_index, topic_id


def _fast_property_values(
    u8: np.ndarray, fast: np.ndarray, ppos: np.ndarray, pl0: np.ndarray
) -> tuple[np.ndarray, dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]:
    """TAGS, KEYS and UNIQ_KEY value ranges of the fast records (``ridx``), and which of them turn out bad."""
    fast &= pl0 <= MAX_FAST_PROPERTIES
    ridx = np.flatnonzero(fast)
    values, bad_rec = named_values(u8, ppos[ridx] + 2, pl0[ridx], _TARGETS)
    return ridx, values, bad_rec


def _slow_requests(
    buf: Any, p: np.ndarray, slow: np.ndarray, keep: np.ndarray, seg: Segment, cfg: StoreConfig, end: int
) -> tuple[list[tuple[int, DispatchRequest]], ScanStop | None]:
    """Records off the fast path through the per-record decoder; ``keep`` loses skipped size mismatches
    and everything from the first invalid record (the returned stop) on."""
    out: list[tuple[int, DispatchRequest]] = []
    for k in slow.tolist():
        pos = int(p[k])
        try:
            rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=end, broker=cfg.broker)
            req = request_from_record(rec, cfg, path=str(seg.path))  # type: ignore[arg-type]
        except RecordSizeMismatch:
            keep[k] = False
            continue
        except CorruptData as e:
            keep[k:] = False
            return out, ScanStop(int(seg.framing.frame_of(pos)), "invalid", e)
        out.append((k, req))
    return out, None


def _request_keys(req: DispatchRequest) -> tuple[list[int], list[int]]:
    """Index key hashes of one request in put order (UNIQ_KEY first, then each KEYS token) and their sequence."""
    hashes, seqs = [], []
    if req.uniq_key is not None:
        hashes.append(index_key_hash(f"{req.topic}#{req.uniq_key}"))
        seqs.append(0)
    seq = 1
    for tok in req.keys.split(" ") if req.keys else ():
        if tok:
            hashes.append(index_key_hash(f"{req.topic}#{tok}"))
            seqs.append(seq)
            seq += 1
    return hashes, seqs


@dataclass
class _Heads:
    """Head fields and variable-part bounds of a batch, up to the first record the broker stops at."""

    p: np.ndarray
    head: np.ndarray
    total: np.ndarray
    sys_flag: np.ndarray
    fast: np.ndarray  # V1, IPv4 hosts, bounds inside the data: candidates for the array path
    keep: np.ndarray  # not a skipped size mismatch
    tstart: np.ndarray
    tlen: np.ndarray
    ppos: np.ndarray
    pl0: np.ndarray

    def field(self, name: str) -> np.ndarray:
        return head_column(self.head, name)


def _read_heads(buf: Any, u8: np.ndarray, p: np.ndarray, seg: Segment, end: int) -> tuple[_Heads, ScanStop | None]:
    head = decode_heads(u8, p)  # every head field of an IPv4/IPv4 record, one gather
    total = head_column(head, "total_size")
    sys_flag = head_column(head, "sys_flag")
    fast = (head_column(head, "magic") == MAGIC_V1) & ((sys_flag & 0x30) == 0)
    # Reads are bounded by the buffer (the broker's ByteBuffer), not by TOTALSIZE.
    bl0 = np.maximum(head_column(head, "body_len"), 0)
    tpos = p + HEAD_V4_SIZE + bl0
    ok_t = tpos + 3 <= end  # a TOTALSIZE below the head is a size mismatch the broker skips, as any other
    tlen = u8[np.minimum(tpos, end - 1)].astype(np.int8).astype(np.int64)
    ppos = tpos + 1 + np.maximum(tlen, 0)
    ok_p = ok_t & (tlen >= 0) & (ppos + 2 <= end)
    plen = np.where(ok_p, be(u8, np.minimum(ppos, end - 2), ">i2"), 0)
    pl0 = np.maximum(plen, 0)
    bounds_ok = ok_p & (ppos + 2 + pl0 <= end)
    mismatch = bounds_ok & (MIN_RECORD_SIZE_V1 + bl0 + tlen + pl0 != total)
    # A record the broker cannot parse (exception) stops the dispatcher; a size mismatch is skipped.
    invalid = fast & ~bounds_ok
    stop: ScanStop | None = None
    if invalid.any():
        k = int(np.flatnonzero(invalid)[0])
        pos = int(p[k])
        why = explain_invalid(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=end)
        stop = ScanStop(int(seg.framing.frame_of(pos)), "invalid", why)
        p, total, sys_flag, fast, tlen, ppos, pl0, mismatch, head = (
            a[:k] for a in (p, total, sys_flag, fast, tlen, ppos, pl0, mismatch, head)
        )
    tstart = ppos - np.maximum(tlen, 0)
    return _Heads(p, head, total, sys_flag, fast, ~(fast & mismatch), tstart, tlen, ppos, pl0), stop


@dataclass
class _Keys:
    """Index keys found so far: record index, keyHash and put order within the record, in parts."""

    rec: list[np.ndarray]
    hash: list[np.ndarray]
    seq: list[np.ndarray]

    def add(self, rec: np.ndarray, h: np.ndarray, seq: np.ndarray) -> None:
        self.rec.append(rec)
        self.hash.append(h)
        self.seq.append(seq)


def _fast_keys(u8: np.ndarray, h: _Heads, topics: list[str], topic_id: np.ndarray) -> tuple[np.ndarray, _Keys]:
    """Tags codes and index keys of the records on the array path; clears ``h.fast`` for the records
    whose properties or keys turn out to need the exact decoder."""
    n = len(h.p)
    fast = h.fast
    ridx, values, bad_rec = _fast_property_values(u8, fast, h.ppos, h.pl0)
    tags_code = np.zeros(n, dtype=np.int64)
    trec, tstart_v, tlen_v = values[b"TAGS"]
    th, tascii = range_hashes(u8, tstart_v, tlen_v)
    bad_rec[trec[~tascii]] = True
    tags_code[ridx[trec]] = _to_int32(th)
    urec, ustart, ulen = values[b"UNIQ_KEY"]
    uh, uascii = range_hashes(u8, ustart, ulen)
    bad_rec[urec[~uascii]] = True
    tok_rec, tok_start, tok_len, tok_seq = key_tokens(u8, *values[b"KEYS"])
    kh, kascii = range_hashes(u8, tok_start, tok_len)
    bad_rec[tok_rec[~kascii]] = True
    fast[ridx[bad_rec]] = False

    prefix = np.array([(java_hash(t + "#") & 0xFFFFFFFF) for t in topics] or [0], dtype=np.uint64)
    keys = _Keys([], [], [])
    for recs, hashes, lens, seq in (
        (urec, uh, ulen, np.zeros(len(urec), np.int64)),
        (tok_rec, kh, tok_len, tok_seq + 1),
    ):
        still = fast[ridx[recs]]  # records that left the fast path get their keys from the exact path only
        combined = topic_key_hashes(prefix[topic_id[ridx[recs]]], hashes, lens)
        keys.add(ridx[recs][still], combined[still], seq[still])
    return tags_code, keys


def _merge_slow(
    slow_reqs: list[tuple[int, DispatchRequest]], cols: dict[str, np.ndarray], topics: list[str], keys: _Keys
) -> None:
    """Put the exact decoder's requests into the batch's columns and keys."""
    for k, req in slow_reqs:
        if req.topic not in topics:
            topics.append(req.topic)
        cols["topic_id"][k] = topics.index(req.topic)
        cols["tags_code"][k] = req.tags_code
        cols["phy"][k], cols["queue_id"][k], cols["queue_offset"][k] = req.phy_offset, req.queue_id, req.queue_offset
        cols["store_ts"][k], cols["sys_flag"][k], cols["size"][k] = req.store_timestamp_ms, req.sys_flag, req.size
        extra_h, extra_s = _request_keys(req)
        keys.add(np.full(len(extra_h), k, np.int64), np.array(extra_h, np.int64), np.array(extra_s, np.int64))


def decode_columns(
    buf: Any, u8: np.ndarray, p: np.ndarray, seg: Segment, cfg: StoreConfig, end: int
) -> tuple[Columns | None, ScanStop | None]:
    """Decode the records starting at positions ``p`` of one segment buffer into columns.

    ``u8`` is a uint8 view of ``buf``, ``end`` the end of valid data in it. Returns the columns of
    the records before the first one the broker's check would stop at, and that stop (or None).
    Used by the local scanner and by the Spark redispatch executors.
    """
    cols, stop, _heads = decode_columns_and_heads(buf, u8, p, seg, cfg, end)
    return cols, stop


def decode_columns_and_heads(
    buf: Any, u8: np.ndarray, p: np.ndarray, seg: Segment, cfg: StoreConfig, end: int
) -> tuple[Columns | None, ScanStop | None, np.ndarray]:
    """``decode_columns``, and the fixed heads (``decode_heads``) of the records up to its stop, which a
    checked walk reads too."""
    h, stop = _read_heads(buf, u8, p, seg, end)
    n = len(h.p)
    topics, topic_index, topic_id = _fast_topics(buf, u8, h.fast, h.tlen, h.tstart)
    sched = topic_index.get(SCHEDULE_TOPIC.encode())
    if sched is not None:
        h.fast &= topic_id != sched
    tags_code, keys = _fast_keys(u8, h, topics, topic_id)

    # Per-record path for everything not on the fast path (and not a skipped size mismatch).
    slow_reqs, slow_stop = _slow_requests(buf, h.p, np.flatnonzero(~h.fast & h.keep), h.keep, seg, cfg, end)
    stop = slow_stop or stop
    cols = {
        "phy": h.field("phy_offset"),
        "size": h.total,
        "queue_id": h.field("queue_id"),
        "queue_offset": h.field("queue_offset"),
        "store_ts": h.field("store_timestamp_ms"),
        "sys_flag": h.sys_flag,
        "tags_code": tags_code,
        "topic_id": topic_id,
    }
    _merge_slow(slow_reqs, cols, topics, keys)
    key_rec, key_hash, key_seq = (np.concatenate(part) for part in (keys.rec, keys.hash, keys.seq))
    # keep only keys of kept records that are either fast or handled by the slow path
    handled = h.keep & (h.fast | np.isin(np.arange(n), [k for k, _ in slow_reqs]))
    sel = handled[key_rec]
    key_rec, key_hash, key_seq = key_rec[sel], key_hash[sel], key_seq[sel]
    order = np.lexsort((key_seq, key_rec))
    rec_sel = np.flatnonzero(handled)
    remap = np.full(n, -1, dtype=np.int64)
    remap[rec_sel] = np.arange(len(rec_sel))
    picked = {name: col[rec_sel] for name, col in cols.items()}
    c = Columns(**picked, topics=topics, key_rec=remap[key_rec[order]], key_hash=key_hash[order])
    return c, stop, h.head


@dataclass
class _Part:
    """What a worker found in one byte range of a file: where the chain was picked up, the
    decoded batches, and where and why its walk ended."""

    sync: int | None
    batches: list[Columns]
    stop: ScanStop | None


def _scan_part(
    buf: Any, u8: np.ndarray, seg: Segment, cfg: StoreConfig, lo: int, hi: int, end: int, known: bool
) -> _Part:
    """Walk and decode the records that start in ``[lo, hi)``; ``known``: a record starts at ``lo``."""
    sync = lo if known else seg.framing.find_chained(u8, seg.base_offset, lo, min(hi, lo + _SYNC_WINDOW, end))
    if sync is None:
        return _Part(None, [], None)
    positions, stop_pos, reason = seg.framing.chain(buf, sync, end, until=hi)
    stop = ScanStop(stop_pos, reason)
    if reason == "invalid":
        stop.error = explain_invalid(buf, stop_pos, path=str(seg.path), file_from=seg.base_offset, end=end)
    batches: list[Columns] = []
    for i in range(0, len(positions), BATCH):
        cols, bad = decode_columns(buf, u8, positions[i : i + BATCH], seg, cfg, end)
        if cols is not None and len(cols):
            batches.append(cols)
        if bad is not None:
            return _Part(sync, batches, bad)
    return _Part(sync, batches, stop)


_WORKER_MAP: dict[str, Any] = {}


def _scan_part_in_worker(args: tuple[Segment, StoreConfig, int, int, int, bool]) -> _Part:

    seg, cfg, lo, hi, end, known = args
    key = str(seg.path)
    m = _WORKER_MAP.get(key)
    if m is None:  # one mapping per file and worker process
        for old in _WORKER_MAP.values():
            old.close()
        _WORKER_MAP.clear()
        m = _WORKER_MAP[key] = map_readonly(seg.path)
    part = _scan_part(m, np.frombuffer(m, dtype=np.uint8, count=end), seg, cfg, lo, hi, end, known)
    # the range's pages leave this worker (the page cache keeps them): a worker holds one range at a time
    release_range(m, lo, min(hi, end))
    return part


def _scan_file_parallel(
    pool: Any, seg: Segment, cfg: StoreConfig, start: int, end: int, part_size: int, window: int
) -> Any:
    """Yield the column batches of one file, then its ScanStop, with the walk itself in parallel.

    The file is cut into byte ranges; each worker picks up the record chain at the first record
    of its range whose stored physical offset equals its position, walks to the end of the range
    and decodes. Here every range's pick-up point is checked against where the previous range's
    walk ended, so a range is used only when the chain really passes there; otherwise the rest of
    the file is scanned serially from that point. The result equals ``scan_columns``.
    """
    parts = [(lo, min(lo + part_size, end)) for lo in range(start, end, part_size)] or [(start, end)]
    pending: deque[Any] = deque()
    submitted = 0

    def submit() -> None:
        nonlocal submitted
        while submitted < len(parts) and len(pending) < window:
            lo, hi = parts[submitted]
            pending.append(pool.submit(_scan_part_in_worker, (seg, cfg, lo, hi, end, submitted == 0)))
            submitted += 1

    expected = start
    for _lo, hi in parts:
        submit()
        res: _Part = pending.popleft().result()
        submit()
        if expected >= hi:
            continue  # a record that started in an earlier range covers this one
        if res.sync != expected or res.stop is None:
            # The chain does not pass where this worker picked it up: go on serially from where it is.

            with map_file(seg.path) as buf:
                batches, stop = scan_columns(buf, seg, cfg, start_pos=expected, end_pos=end)
            yield from batches
            yield stop
            return
        yield from res.batches
        expected = res.stop.pos
        if res.stop.reason != "until":
            yield res.stop
            return
    yield ScanStop(expected, "end")


def iter_columns(
    segments: list[Segment],
    cfg: StoreConfig,
    *,
    from_phy: int = 0,
    to_phy: int | None = None,
    progress: Any = None,
    workers: int | None = None,
    part_size: int | None = None,
) -> Iterator[tuple[Segment, Columns | ScanStop]]:
    """Walk the commit log as the dispatcher walks it (§9.2): ``(segment, column batch)`` for
    each batch in commit log order, then ``(segment, ScanStop)`` when a file's walk ends; the
    next file follows only after a BLANK record.

    With ``workers`` > 1 (default: up to 2, one per core) files are walked and decoded by that
    many forked processes, range by range, while the caller consumes earlier batches.
    """
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    part_size = part_size or PART_SIZE

    pool = None
    try:
        for seg, start, end in segment_ranges(segments, from_phy, to_phy):
            start = frame_start(seg, start)
            done = start
            if workers > 1 and end - start > part_size:
                if pool is None:
                    pool = worker_pool(workers)
                items: Any = _scan_file_parallel(pool, seg, cfg, start, end, part_size, workers + 1)
            else:
                with map_file(seg.path) as buf:
                    batches, last = scan_columns(buf, seg, cfg, start_pos=start, end_pos=end)
                items = [*batches, last]
            stop: ScanStop | None = None
            for item in items:
                if isinstance(item, ScanStop):
                    stop = item
                    break
                if progress and len(item):
                    at = int(item.phy[-1] + item.size[-1]) - seg.base_offset
                    progress(at - done)
                    done = at
                yield seg, item
            assert stop is not None
            if progress and stop.pos > done:
                progress(stop.pos - done)
            yield seg, stop
            if stop.reason != "blank":
                return
    finally:
        if pool is not None:
            close_pool(pool)


def plain_records(buf: Any, u8: np.ndarray, p: np.ndarray, base: int) -> np.ndarray:
    """Which records at positions ``p`` say nothing a check reports: V1 magic with IPv4 hosts, a body
    whose CRC matches, a stored PHYSICALOFFSET equal to its position (``base`` + position) and a
    transaction offset the broker writes."""
    head = decode_heads(u8, p)
    magic, sys_flag = head_column(head, "magic"), head_column(head, "sys_flag")
    body_len = head_column(head, "body_len")
    plain = (magic == MAGIC_V1) & ((sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) == 0) & (body_len >= 0)
    plain &= head_column(head, "phy_offset") == base + p
    tx = sys_flag & TRANSACTION_MASK
    plain &= (tx == 0) | (tx == TRANSACTION_COMMIT_TYPE) | (head_column(head, "queue_offset") == 0)
    last = len(u8) - 1
    tpos = np.minimum(p + HEAD_V4_SIZE + np.maximum(body_len, 0), last)
    ppos = np.minimum(tpos + 1 + u8[tpos].astype(np.int64), last - 1)
    plain &= be(u8, ppos, ">i2") >= 0  # a negative PROPERTIESLENGTH takes the decoder
    crc_idx = np.flatnonzero(plain & (body_len > 0))
    if crc_idx.size:
        got = body_crcs(buf, p[crc_idx] + HEAD_V4_SIZE, body_len[crc_idx])
        plain[crc_idx[got != head_column(head, "body_crc")[crc_idx]]] = False
    return plain
