"""Consume queue entries (store-format.md §4.1-§4.4): 20 bytes, big-endian, signed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from rmqstore.codec.fields import lazy_dtypes, struct_of, table
from rmqstore.errors import CorruptData

# §4.1: one entry, declared once; the struct (one entry) and the dtype (runs of entries) derive from it.
ENTRY_FIELDS = table(
    """
    phy_offset  q  commit log offset
    size        i  size
    tags_code   q  tagsCode
    """
)
_ENTRY = struct_of(ENTRY_FIELDS)
ENTRY_SIZE = _ENTRY.size  # 20
FILLER_SIZE = 0x7FFFFFFF  # fillPreBlank entries: offset 0, size Integer.MAX_VALUE, tagsCode 0
EXT_ADDR_MAX = -2147483649  # tagsCode <= this is a ConsumeQueueExt address (§4.2)


@dataclass(frozen=True, slots=True)
class CqEntry:
    """One consume queue slot."""

    phy_offset: int  # PHYSICALOFFSET of the record
    size: int  # its TOTALSIZE
    tags_code: int  # tag hash, delivery time or ext address (§4.2)

    @property
    def ends_queue(self) -> bool:
        """§4.4: offset < 0 or size <= 0 ends the valid data."""
        return self.phy_offset < 0 or self.size <= 0

    @property
    def is_filler(self) -> bool:
        return self.phy_offset == 0 and self.size == FILLER_SIZE and self.tags_code == 0


def effective_file_size(configured: int) -> int:
    """The getter rounds the configured size up to a multiple of 20 (§2.2)."""
    return math.ceil(configured / 20.0) * 20


def decode_entry(buf: Any, pos: int, *, path: str = "<buffer>") -> CqEntry:
    if len(buf) - pos < ENTRY_SIZE:
        raise CorruptData("truncated consume queue entry", path=path, pos=pos)
    return CqEntry(*_ENTRY.unpack_from(buf, pos))


def encode_entry(phy_offset: int, size: int, tags_code: int) -> bytes:
    for name, v, bits in (("phy_offset", phy_offset, 64), ("size", size, 32), ("tags_code", tags_code, 64)):
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise ValueError(f"{name} {v} does not fit a signed {bits}-bit field")
    return _ENTRY.pack(phy_offset, size, tags_code)


def write_entry(buf: Any, pos: int, phy_offset: int, size: int, tags_code: int) -> None:
    """Write one entry into ``buf`` (a consume queue file's mapping) at ``pos``."""
    _ENTRY.pack_into(buf, pos, phy_offset, size, tags_code)


def filler_entry() -> bytes:
    return _ENTRY.pack(0, FILLER_SIZE, 0)


def entries_array(buf: Any, start: int = 0, end: int | None = None) -> np.ndarray:
    """Zero-copy structured view of the whole entries between ``start`` and ``end``."""
    stop = len(buf) if end is None else end
    count = (stop - start) // ENTRY_SIZE
    import numpy as np

    return np.frombuffer(buf, dtype=__getattr__("ENTRY_DTYPE"), count=count, offset=start)


def valid_prefix(arr: np.ndarray) -> int:
    """Number of leading entries that are valid (offset >= 0 and size > 0), as recovery counts."""
    bad = (arr["phy_offset"] < 0) | (arr["size"] <= 0)
    idx = bad.nonzero()[0]
    return int(idx[0]) if idx.size else len(arr)


# §4.7: a 5.x batch consume queue unit (``batchconsumequeue/<topic>/<queueId>/``), declared once:
# a consume queue entry followed by the batch's fields.
BCQ_FIELDS = ENTRY_FIELDS + table(
    """
    store_timestamp_ms  q  store timestamp
    base_offset         q  msgBaseOffset
    batch_size          h  batchSize
    compacted_offset    i  compactedOffset
    reserved            i  reserved
    """
)
_BCQ = struct_of(BCQ_FIELDS)
BCQ_UNIT_SIZE = _BCQ.size  # 46


@dataclass(frozen=True, slots=True)
class BcqEntry:
    """One batch consume queue unit: a commit log record holding ``batch_size`` queue offsets."""

    phy_offset: int
    size: int
    tags_code: int
    store_timestamp_ms: int
    base_offset: int  # queue offset of the record's first message
    batch_size: int
    compacted_offset: int  # written as -1
    reserved: int

    @property
    def ends_queue(self) -> bool:
        return self.phy_offset < 0 or self.size <= 0


def decode_bcq_entry(buf: Any, pos: int, *, path: str = "<buffer>") -> BcqEntry:
    if len(buf) - pos < BCQ_UNIT_SIZE:
        raise CorruptData("truncated batch consume queue unit", path=path, pos=pos)
    return BcqEntry(*_BCQ.unpack_from(buf, pos))


def encode_bcq_entry(
    phy_offset: int, size: int, tags_code: int, store_timestamp_ms: int, base_offset: int, batch_size: int
) -> bytes:
    """A unit as the 5.x engine writes it: compacted offset -1, reserved 0."""
    return _BCQ.pack(phy_offset, size, tags_code, store_timestamp_ms, base_offset, batch_size, -1, 0)


# §4.6: a ConsumeQueueExt unit (``consumequeue_ext/<topic>/<queueId>/``): this head, then the filter bit map.
EXT_HEAD_FIELDS = table(
    """
    size                h  size (whole unit)
    tags_code           q  tagsCode
    store_timestamp_ms  q  msgStoreTime
    bitmap_size         h  bitMapSize
    """
)
_EXT_HEAD = struct_of(EXT_HEAD_FIELDS)
EXT_MIN_UNIT_SIZE = _EXT_HEAD.size  # 20
EXT_ADDRESS_BASE = -(1 << 63)  # a CQ entry stores realOffset + Long.MIN_VALUE


@dataclass(frozen=True, slots=True)
class ExtUnit:
    pos: int  # byte position in its file
    size: int
    tags_code: int
    store_timestamp_ms: int
    bitmap: bytes


def decode_ext_units(buf: Any, *, path: str = "<buffer>") -> list[ExtUnit]:
    """The units of one ext file, up to the first size <= 0 (end of the written data, or -1: file closed)."""
    out, pos, n = [], 0, len(buf)
    while pos + 2 <= n:
        if pos + EXT_MIN_UNIT_SIZE > n:
            break
        size, tags, ts, bsize = _EXT_HEAD.unpack_from(buf, pos)
        if size <= 0:
            break
        if size < EXT_MIN_UNIT_SIZE or bsize < 0 or EXT_MIN_UNIT_SIZE + bsize != size or pos + size > n:
            raise CorruptData(f"bad consume queue ext unit: size {size}, bitMapSize {bsize}", path=path, pos=pos)
        out.append(ExtUnit(pos, size, tags, ts, bytes(buf[pos + EXT_MIN_UNIT_SIZE : pos + size])))
        pos += size
    return out


def ext_real_offset(tags_code: int) -> int:
    """The global ext offset a consume queue entry's tagsCode holds when it is an ext address (§4.2, §4.6)."""
    return tags_code - EXT_ADDRESS_BASE


# the numpy dtypes (ENTRY_DTYPE, BCQ_DTYPE), built on first use
__getattr__ = lazy_dtypes(ENTRY_DTYPE=ENTRY_FIELDS, BCQ_DTYPE=BCQ_FIELDS)
