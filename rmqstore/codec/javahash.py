"""Java ``String.hashCode`` (store-format.md §4.2, §5.2), scalar and batched.

The hash runs over UTF-16 code units with int32 wrap-around; a supplementary character
counts as its two surrogates. tagsCode is the signed hash sign-extended to 64 bits; the
index key hash is ``abs(hash)`` with ``Integer.MIN_VALUE`` mapped to 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_MASK = 0xFFFFFFFF


def java_hash(s: str) -> int:
    """Return Java ``s.hashCode()`` as a signed 32-bit int."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """CQ tagsCode of a TAGS value (§4.2): 0 when absent or empty."""
    return java_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """Index keyHash (§5.2): ``abs(hashCode)``, and 0 for ``Integer.MIN_VALUE``."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


# 31 is odd, hence invertible mod 2**32: a left-aligned, zero-padded hash times
# inv31**(pad) gives the true hash, so a whole batch is one matrix product.
_INV31 = pow(31, -1, 1 << 32)
_POW_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _powers(width: int) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    cached = _POW_CACHE.get(width)
    if cached is None:
        p = np.empty(width, dtype=np.uint32)
        q = np.empty(width + 1, dtype=np.uint32)
        a = b = 1
        for i in range(width):
            p[width - 1 - i] = a
            a = (a * 31) & _MASK
        for i in range(width + 1):
            q[i] = b
            b = (b * _INV31) & _MASK
        cached = (p, q)
        _POW_CACHE[width] = cached
    return cached


def java_hash_batch(strings: Sequence[str]) -> np.ndarray:
    """Vectorised ``java_hash`` over many strings; returns int32 array."""
    import numpy as np

    n = len(strings)
    out = np.empty(n, dtype=np.int32)
    if n == 0:
        return out
    arr = np.array(strings, dtype=np.str_)
    if any(s.endswith("\x00") for s in strings):
        # numpy strings drop trailing NULs, which Java hashes: take the slow path.
        return np.array([java_hash(s) for s in strings], dtype=np.int32)
    width = arr.dtype.itemsize // 4
    if width == 0:
        out[:] = 0
        return out
    codes = arr.view(np.uint32).reshape(n, width)
    if int(codes.max()) > 0xFFFF:
        # Supplementary characters are two UTF-16 units in Java: take the slow path.
        return np.array([java_hash(s) for s in strings], dtype=np.int32)
    lengths = np.char.str_len(arr)
    p, q = _powers(width)
    h = (codes * p).sum(axis=1, dtype=np.uint32)
    h = h * q[width - lengths]
    return h.view(np.int32)


def index_key_hash_batch(strings: Sequence[str]) -> np.ndarray:
    """Vectorised ``index_key_hash``; returns int32 array of non-negative values."""
    import numpy as np

    h = java_hash_batch(strings).astype(np.int64)
    h = np.abs(h)
    h[h == 0x80000000] = 0
    return h.astype(np.int32)
