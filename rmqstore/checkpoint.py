"""The ``checkpoint`` file (store-format.md §6): 4096 bytes of big-endian longs."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .errors import CorruptData

FILE_SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")
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
            "physicMsgTimestamp": self.physic_msg_timestamp_ms,
            "logicsMsgTimestamp": self.logics_msg_timestamp_ms,
            "indexMsgTimestamp": self.index_msg_timestamp_ms,
            "masterFlushedOffset": self.master_flushed_offset,
            "confirmPhyOffset": self.confirm_phy_offset,
            "minTimestamp": self.min_timestamp_ms,
            "minTimestampIndex": self.min_timestamp_index_ms,
        }


def decode(buf: Any, *, path: str = "<buffer>") -> Checkpoint:
    if len(buf) < _FIELDS.size:
        raise CorruptData(f"checkpoint is {len(buf)} bytes, expected {FILE_SIZE}", path=path, pos=len(buf))
    return Checkpoint(*_FIELDS.unpack_from(buf, 0))


def encode(cp: Checkpoint) -> bytes:
    head = _FIELDS.pack(
        cp.physic_msg_timestamp_ms,
        cp.logics_msg_timestamp_ms,
        cp.index_msg_timestamp_ms,
        cp.master_flushed_offset,
        cp.confirm_phy_offset,
    )
    return head + bytes(FILE_SIZE - len(head))
