"""``spark stats`` summed in the tasks: each task walks its splits' records a chunk at a time and
folds their topic, queue, size, store time and KEYS tokens, as numpy columns cut from the mapped
file (``chunk_columns``: no Arrow batch, no row object), into one small summary per store, topic,
queue and UTC hour; the driver merges the summaries. No row goes through Spark's aggregation or
shuffle. Records the fast layout does not cover are decoded by the record codec, as the Spark
source decodes them, so the sums are those of the source's rows.

Distinct KEYS tokens are counted with a mergeable sketch: the 64-bit hashes of a group's tokens
while there are at most ``SET_LIMIT`` of them (exact, but for a hash collision, about 1 in 2^40 at
that size), then a HyperLogLog of ``REGISTERS`` registers (standard error ``HLL_ERROR``). A group's
count says whether it is exact.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from rmqstore.codec.arrays import RecordArrays, key_tokens, named_values
from rmqstore.codec.columnar import gather
from rmqstore.codec.commitlog import PROP_KEYS, Record, decode_record
from rmqstore.walk.arrow import SplitContext, keys_list, text_codes

MS_PER_HOUR = 3_600_000
REGISTERS = 4096  # 2^12 HyperLogLog registers: 4 KiB per group once it leaves the exact set
HLL_ERROR = 1.04 / math.sqrt(REGISTERS)  # relative standard error of the estimate (1.6%)
SET_LIMIT = 2048  # distinct hashes kept exactly per group before the registers take over
PENDING_LIMIT = 1 << 16  # hashes a group gathers before they are sorted into its set
STATS_READ_COLUMNS = ("store", "topic", "queueId", "storeSize", "storeTimestamp", "keys")
_KEYS = PROP_KEYS.encode()
_P = 12
_WIDE = 64  # tokens longer than this are hashed one by one
_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)  # MurmurHash3's fmix64
_MUL = np.uint64(0x9E3779B97F4A7C15)
_TABLE_RANGE = 1 << 16  # integer columns spanning fewer values are factorized by a table, not a sort


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _M1
    h = h ^ (h >> np.uint64(33))
    h = h * _M2
    return h ^ (h >> np.uint64(33))


def token_hashes(tokens: pa.Array) -> np.ndarray:
    """A 64-bit hash of each string's UTF-8 bytes, the same in every process (8 bytes a step)."""
    tokens = tokens.cast(pa.string()) if tokens.type != pa.string() else tokens
    n = len(tokens)
    if n == 0:
        return np.zeros(0, np.uint64)
    offsets = np.frombuffer(tokens.buffers()[1], np.int32)[tokens.offset : tokens.offset + n + 1].astype(np.int64)
    data = tokens.buffers()[2]
    u8 = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return sketch_hashes(u8, offsets[:-1], np.diff(offsets))[0]


def sketch_hashes(u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``token_hashes`` of byte ranges of ``u8``, and which ranges hold a byte >= 0x80."""
    n = len(start)
    out = np.empty(n, np.uint64)
    high = np.zeros(n, bool)
    short = length <= _WIDE
    rows = np.flatnonzero(short)
    if len(rows):
        width = max(8, -(-int(length[rows].max()) // 8) * 8)
        mat = gather(u8, start[rows], width) if len(u8) else np.zeros((len(rows), width), np.uint8)
        mat = mat * (np.arange(width) < length[rows, None])  # zero after each token
        high[rows] = mat.max(axis=1) >= 0x80
        words = np.ascontiguousarray(mat, dtype=np.uint8).view("<u8")
        h = length[rows].astype(np.uint64) * _MUL
        own = np.maximum(-(-length[rows] // 8), 1)  # a token's own words: its hash never depends on its batch
        for j in range(words.shape[1]):
            h = np.where(j < own, _fmix64(h ^ words[:, j]), h)
        out[rows] = h
    for i in np.flatnonzero(~short).tolist():
        raw = u8[start[i] : start[i] + length[i]]
        high[i] = bool(len(raw)) and int(raw.max()) >= 0x80
        out[i] = int.from_bytes(hashlib.blake2b(raw.tobytes(), digest_size=8).digest(), "little")
    return out, high


@dataclass(slots=True)
class Distinct:
    """Distinct token hashes of one group: the sorted hashes (exact) or HyperLogLog registers, and
    hashes added since, folded in once ``PENDING_LIMIT`` of them wait (one sort, not one per chunk)."""

    hashes: np.ndarray | None
    registers: np.ndarray | None = None
    pending: list[np.ndarray] = field(default_factory=list)
    waiting: int = 0

    @classmethod
    def of(cls, hashes: np.ndarray) -> Distinct:
        d = cls(np.zeros(0, np.uint64))
        d.add(hashes)
        d.fold()
        return d

    def add(self, hashes: np.ndarray) -> None:
        self.pending.append(hashes)
        self.waiting += len(hashes)
        if self.waiting >= PENDING_LIMIT:
            self.fold()

    def fold(self) -> None:
        """The pending hashes into the set or the registers."""
        if not self.pending:
            return
        new = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        self.pending, self.waiting = [], 0
        if self.registers is not None:
            self.registers = np.maximum(self.registers, _registers(new))
            return
        assert self.hashes is not None
        self.hashes = _distinct(np.concatenate([self.hashes, new]))
        if len(self.hashes) > SET_LIMIT:
            self.registers = _registers(self.hashes)
            self.hashes = None

    def merge(self, other: Distinct) -> None:
        other.fold()
        if other.hashes is not None:
            self.add(other.hashes)
            return
        self.fold()
        mine = self.registers if self.registers is not None else _registers(self.hashes)  # type: ignore[arg-type]
        self.registers, self.hashes = np.maximum(mine, other.registers), None  # type: ignore[arg-type]

    def count(self) -> tuple[int, bool]:
        """The number of distinct tokens, and whether it is exact (else a HyperLogLog estimate)."""
        self.fold()
        if self.hashes is not None:
            return len(self.hashes), True
        reg = self.registers
        assert reg is not None
        m = REGISTERS
        estimate = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(np.ldexp(1.0, -reg.astype(np.int64))))
        zeros = int(np.count_nonzero(reg == 0))
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)  # linear counting for small counts
        return round(estimate), False


def _distinct(hashes: np.ndarray) -> np.ndarray:
    """The sorted distinct values (a plain sort: many times faster than ``np.unique``'s hash table)."""
    s = np.sort(hashes)
    keep = np.ones(len(s), bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _registers(hashes: np.ndarray) -> np.ndarray:
    """HyperLogLog registers of 64-bit hashes: bucket from the top 12 bits, rank from the rest."""
    reg = np.zeros(REGISTERS, np.uint8)
    if len(hashes):
        bucket = (hashes >> np.uint64(64 - _P)).astype(np.int64)
        rest = hashes & np.uint64((1 << (64 - _P)) - 1)
        _, bits = np.frexp(rest.astype(np.float64))  # exact: rest < 2^52
        np.maximum.at(reg, bucket, (64 - _P + 1 - bits).astype(np.uint8))
    return reg


GroupKey = tuple[str, str, int, int]  # store, topic, queue id, hour start (ms)


@dataclass(slots=True)
class GroupStats:
    messages: int
    bytes: int
    first: int
    last: int
    distinct: Distinct

    def merge(self, other: GroupStats) -> None:
        self.messages += other.messages
        self.bytes += other.bytes
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.distinct.merge(other.distinct)


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's index among the distinct values, and those values (sorted); a small range of
    integers (queue ids, hours, dictionary codes) is counted in a table instead of sorted."""
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < _TABLE_RANGE:
        present = np.zeros(hi - lo + 1, bool)
        present[values - lo] = True
        index = np.cumsum(present) - 1
        return index[values - lo], np.flatnonzero(present) + lo
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.reshape(-1), uniq


def _factorized(columns: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One group id per row for the combination of ``columns`` (each factorized on its own, then
    combined in mixed radix: no sort of rows), and each column's value per group id."""
    key = np.zeros(len(columns[0]), np.int64)
    values = []
    for col in columns:
        inv, uniq = _codes(col)
        key = key * len(uniq) + inv
        values.append(uniq)
    gid, groups = _codes(key)
    out = []
    for uniq in reversed(values):  # undo the mixed radix, last column first
        out.append(uniq[groups % len(uniq)])
        groups = groups // len(uniq)
    return gid, out[::-1]


def _group_order(gid: np.ndarray, g_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows in group order (stable) and where each group's rows start and end in it."""
    narrow = gid.astype(np.uint16) if g_count < 1 << 16 else gid  # a radix sort for 16 bits
    order = np.argsort(narrow, kind="stable")
    return order, np.searchsorted(gid[order], np.arange(g_count + 1))


@dataclass(slots=True)
class ChunkColumns:
    """What stats reads of a chunk of records, as columns: a row per record, a key row per KEYS token."""

    topics: list[str]
    topic: np.ndarray  # each record's index into ``topics``
    queue_id: np.ndarray
    size: np.ndarray
    timestamp: np.ndarray
    key_row: np.ndarray  # the record of each token
    key_hash: np.ndarray


def chunk_columns(ctx: SplitContext, a: RecordArrays, slow: dict[int, Record]) -> ChunkColumns:
    """The columns of a checked chunk (``valid_chunks``' arrays and decoded slow rows): KEYS values are
    found by the dispatch's property splitter; rows whose properties are not plain, or whose KEYS are
    not ASCII, are decoded by the record codec, as the source decodes them."""
    fast = np.ones(len(a.pos), bool)
    fast[list(slow)] = False
    rows = np.flatnonzero(fast)
    values, bad = named_values(ctx.u8, a.props_start[rows], a.props_len[rows], (_KEYS,))
    rec, start, length, _ = key_tokens(ctx.u8, *values[_KEYS])
    hashes, high = sketch_hashes(ctx.u8, start, length)
    bad[rec[high]] = True
    slow = dict(slow)
    for k in rows[bad].tolist():
        slow[k] = decode_record(ctx.buf, int(a.pos[k]), path=ctx.path, file_from=ctx.base, broker=ctx.broker)
    keep = ~bad[rec]
    rows = rows[~bad]
    labels, codes = text_codes(ctx, a.topic_start[rows], a.topic_len[rows])
    at = np.cumsum(~bad) - 1  # a fast row's place among the rows kept
    records = list(slow.values())
    index = {t: i for i, t in enumerate(labels)}
    slow_codes = [index.setdefault(r.topic, len(index)) for r in records]
    tokens = [keys_list(r.properties) for r in records]
    slow_rows = np.repeat(np.arange(len(rows), len(rows) + len(records)), [len(t) for t in tokens])

    def column(fast_values: np.ndarray, slow_values: list[int]) -> np.ndarray:
        return np.concatenate([fast_values.astype(np.int64), np.array(slow_values, np.int64)])

    return ChunkColumns(
        list(index),
        column(codes, slow_codes),
        column(a.queue_id[rows], [r.queue_id for r in records]),
        column(a.total_size[rows], [r.total_size for r in records]),
        column(a.store_timestamp_ms[rows], [r.store_timestamp_ms for r in records]),
        np.concatenate([at[rec[keep]], slow_rows]).astype(np.int64),
        np.concatenate([hashes[keep], token_hashes(pa.array([k for t in tokens for k in t], pa.string()))]),
    )


def fold_columns(acc: dict[GroupKey, GroupStats], store: str, c: ChunkColumns) -> None:
    """Add one chunk's columns to the summaries ``acc`` of ``store``."""
    if not len(c.topic):
        return
    gid, (t_code, qid, hour) = _factorized([c.topic, c.queue_id, c.timestamp // MS_PER_HOUR])
    g_count = len(qid)
    messages = np.bincount(gid, minlength=g_count)
    total = np.bincount(gid, c.size, minlength=g_count).astype(np.int64)  # exact: far below 2^53
    order, bounds = _group_order(gid, g_count)
    ts_grouped = c.timestamp[order]
    first = np.minimum.reduceat(ts_grouped, bounds[:-1])
    last = np.maximum.reduceat(ts_grouped, bounds[:-1])
    korder, kbounds = _group_order(gid[c.key_row], g_count)
    hashes = c.key_hash[korder]
    columns = (t_code, qid, hour, messages, total, first, last)
    for g, (t, q, h, n, size, lo, hi) in enumerate(zip(*(col.tolist() for col in columns), strict=True)):
        key = (store, c.topics[t], q, h * MS_PER_HOUR)
        have = acc.get(key)
        if have is None:
            have = acc[key] = GroupStats(0, 0, lo, hi, Distinct(np.zeros(0, np.uint64)))
        have.messages += n
        have.bytes += size
        have.first = min(have.first, lo)
        have.last = max(have.last, hi)
        have.distinct.add(hashes[kbounds[g] : kbounds[g + 1]].copy())  # a copy: the chunk's array is not kept


def merge_summaries(parts: Iterable[dict[GroupKey, GroupStats]]) -> dict[GroupKey, GroupStats]:
    """The tasks' summaries as one (on the driver)."""
    out: dict[GroupKey, GroupStats] = {}
    for part in parts:
        for key, g in part.items():
            have = out.get(key)
            if have is None:
                out[key] = g
            else:
                have.merge(g)
    return out
