"""Generated UNIQ_KEYs (§3.10) and the Java hashes of index keys, a run of keys at a time (§5.2)."""

from __future__ import annotations

import datetime as dt
import os
import struct
import zlib
from itertools import chain

import numpy as np

from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.javahash import java_hash, java_hash_batch
from rmqstore.walk.columns import range_hashes, topic_key_hashes


class UniqKeySource:
    """UNIQ_KEYs in the client's layout (§3.10): ip, low 16 bits of the pid, class-loader hash,
    milliseconds since the start of the month (local time) as an unsigned 32-bit value, counter.

    ``seed`` makes the pid and class-loader hash fixed (reproducible stores); the counter starts at 0.
    The ip is the message's born host address.
    """

    def __init__(self, *, seed: int | None = None):
        if seed is None:
            pid, class_loader_hash = os.getpid(), int.from_bytes(os.urandom(4), "big") & INT_MAX
        else:
            pid, class_loader_hash = seed, zlib.crc32(str(seed).encode()) & INT_MAX
        self._tail = struct.pack(">Hi", pid & 0xFFFF, class_loader_hash)
        self._counter = 0
        self._month = (0, -1)  # [start, end) of the cached month, ms
        self._prefixes: dict[bytes, str] = {}
        self._last_ms = -1
        self._last_hex = ""

    def _month_start(self, now_ms: int) -> int:
        start, end = self._month
        if start <= now_ms < end:
            return start
        t = dt.datetime.fromtimestamp(now_ms / 1000)
        first = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (first + dt.timedelta(days=32)).replace(day=1)
        self._month = (int(first.timestamp() * 1000), int(nxt.timestamp() * 1000))
        return self._month[0]

    def next(self, now_ms: int, ip: bytes) -> str:
        prefix = self._prefixes.get(ip)
        if prefix is None:
            prefix = self._prefixes[ip] = (ip + self._tail).hex().upper()
        if now_ms != self._last_ms:  # most keys of a batch share their millisecond
            start, end = self._month
            if not start <= now_ms < end:
                start = self._month_start(now_ms)
            self._last_ms = now_ms
            self._last_hex = f"{(now_ms - start) & 0xFFFFFFFF:08X}"
        c = self._counter
        self._counter = (c + 1) & 0xFFFF
        return prefix + self._last_hex + _HEX4[c]

    def many_parts(self, now_ms: np.ndarray, ip: bytes) -> tuple[str, np.ndarray, np.ndarray]:
        """The keys ``[self.next(t, ip) for t in now_ms]`` as their shared 20-character head (ip,
        pid, class-loader hash) and, per key, the time field and the counter (int64 arrays):
        key i is ``f"{head}{time_field[i]:08X}{counter[i]:04X}"``."""
        prefix = self._prefixes.get(ip)
        if prefix is None:
            prefix = self._prefixes[ip] = (ip + self._tail).hex().upper()
        n = len(now_ms)
        if n == 0:
            return prefix, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        start = self._month_start(int(now_ms[0]))
        if int(now_ms[-1]) >= self._month[1] or bool((now_ms[1:] < now_ms[:-1]).any()):
            keys = [self.next(t, ip) for t in now_ms.tolist()]  # a month boundary: key by key
            tf = np.array([int(k[20:28], 16) for k in keys], dtype=np.int64)
            return prefix, tf, np.array([int(k[28:], 16) for k in keys], dtype=np.int64)
        c = self._counter
        counter = (c + np.arange(n, dtype=np.int64)) & 0xFFFF
        self._counter = (c + n) & 0xFFFF
        self._last_ms = -1  # the next() cache is stale now
        return prefix, (now_ms - start) & 0xFFFFFFFF, counter


_DISPATCH_CHUNK = 1 << 17  # records per dispatch_columns call: bounds the memory of the index keys
_HEX4 = [f"{i:04X}" for i in range(0x10000)]


def _string_hashes(keys: list[str], joined: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (uint32 in uint64) and UTF-16 length of each string (``joined``: their concatenation)."""
    if joined is None:
        joined = "".join(keys)
    if joined.isascii():
        length = np.fromiter(map(len, keys), np.int64, len(keys))
        begin = np.cumsum(length) - length
        h, _ = range_hashes(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), begin, length)
        return h, length
    h = java_hash_batch(keys).view(np.uint32).astype(np.uint64)
    length = np.array([len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys], dtype=np.int64)
    return h, length


def _topic_prefix_hashes(topics: list[str]) -> np.ndarray:
    """Java hash (uint32 in uint64) of each ``topic + "#"``."""
    return np.array([java_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.uint64)


def _topic_key_hashes(topics: list[str], tid: np.ndarray, keys: list[str]) -> np.ndarray:
    """Index keyHash (§5.2) of ``topics[tid[i]] + "#" + keys[i]``, without building those strings."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    h, length = _string_hashes(keys)
    return topic_key_hashes(_topic_prefix_hashes(topics)[tid], h, length)


_FIXED_SPLIT: dict[int, struct.Struct] = {}


def _split_fixed(raw: bytes, width: int, n: int) -> list[bytes]:
    """``raw`` cut into ``n`` pieces of ``width`` bytes (a struct unpack makes 256 at a time in C)."""
    st = _FIXED_SPLIT.get(width)
    if st is None:
        st = _FIXED_SPLIT[width] = struct.Struct(f"{width}s" * 256)
    whole = n - n % 256
    out = list(chain.from_iterable(st.iter_unpack(memoryview(raw)[: width * whole])))
    out += [raw[o : o + width] for o in range(width * whole, width * n, width)]
    return out


def _hex_hashes(v: np.ndarray, digits: int) -> np.ndarray:
    """Java hash (uint32 in uint64) of each ``f"{v:0{digits}X}"``."""
    v = v.astype(np.uint64)
    h = np.zeros(len(v), dtype=np.uint64)
    for j in range(digits - 1, -1, -1):
        d = (v >> np.uint64(4 * j)) & np.uint64(15)
        h = (h * np.uint64(31) + np.where(d < 10, d + np.uint64(48), d + np.uint64(55))) & np.uint64(0xFFFFFFFF)
    return h


def _uniq_key_hashes(head: str, time_field: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Java hash (uint32 in uint64) of each generated UNIQ_KEY ``head + %08X time + %04X counter``."""
    m32 = 0xFFFFFFFF
    head_part = np.uint64(((java_hash(head) & m32) * pow(31, 12, 1 << 32)) & m32)
    t = _hex_hashes(time_field, 8) * np.uint64(31**4)
    return (head_part + t + _hex_hashes(counter, 4)) & np.uint64(m32)


_HEX4_BYTES: list[bytes] = []


def _hex4_bytes(counter: np.ndarray) -> list[bytes]:
    """``b"%04X" % c`` for each 16-bit counter value (a list slice when they run consecutively)."""
    if not _HEX4_BYTES:
        _HEX4_BYTES.extend(h.encode("ascii") for h in _HEX4)
    n = len(counter)
    if n:
        c0 = int(counter[0])
        if c0 + n <= 0x10000 and int(counter[-1]) == c0 + n - 1:
            return _HEX4_BYTES[c0 : c0 + n]
    return list(map(_HEX4_BYTES.__getitem__, counter.tolist()))
