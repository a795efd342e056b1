"""The ``checkpoint`` file (store-format.md §6): 4096 bytes of big-endian longs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmqstore.codec.fields import struct_of, table
from rmqstore.errors import CorruptData

FILE_SIZE = 4096
# §6: the first 40 bytes, declared once (the names are the Checkpoint attributes).
FIELDS = table(
    """
    physic_msg_timestamp_ms  q  physicMsgTimestamp
    logics_msg_timestamp_ms  q  logicsMsgTimestamp
    index_msg_timestamp_ms   q  indexMsgTimestamp
    master_flushed_offset    q  masterFlushedOffset
    confirm_phy_offset       q  confirmPhyOffset
    """
)
_FIELDS = struct_of(FIELDS)
MARGIN_MS = 3000  # abnormal recovery starts 3 s before the older of physic and logics


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp_ms: int
    logics_msg_timestamp_ms: int
    index_msg_timestamp_ms: int
    master_flushed_offset: int = 0  # 5.0.0+
    confirm_phy_offset: int = 0  # 5.1.1+

    @property
    def min_timestamp_ms(self) -> int:
        return max(0, min(self.physic_msg_timestamp_ms, self.logics_msg_timestamp_ms) - MARGIN_MS)

    @property
    def min_timestamp_index_ms(self) -> int:
        return min(self.min_timestamp_ms, self.index_msg_timestamp_ms)

    def to_json(self) -> dict[str, int]:
        return {
            **{f.java: getattr(self, f.name) for f in FIELDS},
            "minTimestamp": self.min_timestamp_ms,
            "minTimestampIndex": self.min_timestamp_index_ms,
        }


def decode(buf: Any, *, path: str = "<buffer>") -> Checkpoint:
    if len(buf) < _FIELDS.size:
        raise CorruptData(f"checkpoint is {len(buf)} bytes, expected {FILE_SIZE}", path=path, pos=len(buf))
    return Checkpoint(*_FIELDS.unpack_from(buf, 0))


def encode(cp: Checkpoint) -> bytes:
    head = _FIELDS.pack(*(getattr(cp, f.name) for f in FIELDS))
    return head + bytes(FILE_SIZE - len(head))


_TIMESTAMPS = struct_of(FIELDS[:3])


def encode_timestamps(before: bytes | None, physic_ms: int, logics_ms: int, index_ms: int) -> bytes:
    """What the broker's flush leaves: the three timestamps over the old page, the rest kept (§6)."""
    page = bytearray(before if before is not None else bytes(FILE_SIZE))
    _TIMESTAMPS.pack_into(page, 0, physic_ms, logics_ms, index_ms)
    return bytes(page)


_CONFIRM_AT = sum(_f.size for _f in (struct_of((f,)) for f in FIELDS[:4]))  # byte 32


def with_confirm_offset(page: bytes, confirm_phy_offset: int) -> bytes:
    """``page`` with confirmPhyOffset (5.1.1+) set, everything else kept."""
    out = bytearray(page)
    struct_of(FIELDS[4:5]).pack_into(out, _CONFIRM_AT, confirm_phy_offset)
    return bytes(out)


_MASTER_FLUSHED_AT = sum(_f.size for _f in (struct_of((f,)) for f in FIELDS[:3]))  # byte 24


def with_master_flushed_offset(page: bytes, master_flushed_offset: int) -> bytes:
    """``page`` with masterFlushedOffset (5.0.0+) set, everything else kept."""
    out = bytearray(page)
    struct_of(FIELDS[3:4]).pack_into(out, _MASTER_FLUSHED_AT, master_flushed_offset)
    return bytes(out)
