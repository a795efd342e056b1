"""The 5.x timer store's checkpoint, ``config/timercheck`` (``TimerCheckpoint``), declared once.

A page-sized file (4096 bytes, mapped by the broker) whose first 56 bytes are seven big-endian longs:
the last time read, the timer log's flushed position, the last and the master's timer queue
offset, then the data version (state version, timestamp, counter, added in 5.1). Bytes after them
are never written. A checkpoint written before the data version existed holds zeros there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmqstore.codec.fields import struct_of, table
from rmqstore.errors import CorruptData

# the four offsets (all a reader needs), then the data version 5.1 added
TIMER_CHECKPOINT_FIELDS = table(
    """
    last_read_time_ms          q  lastReadTimeMs
    last_timer_log_flush_pos   q  lastTimerLogFlushPos
    last_timer_queue_offset    q  lastTimerQueueOffset
    master_timer_queue_offset  q  masterTimerQueueOffset
    """
) + table(
    """
    state_version              q  stateVersion
    data_timestamp_ms          q  dataVersionTimestamp
    data_counter               q  dataVersionCounter
    """
)
_CHECKPOINT = struct_of(TIMER_CHECKPOINT_FIELDS)
TIMER_CHECKPOINT_SIZE = _CHECKPOINT.size  # 56
BASE_SIZE = 32  # the four offsets, all a reader needs
FILE_SIZE = 4096  # OS_PAGE_SIZE: what the broker maps and creates


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    last_read_time_ms: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int = 0
    data_timestamp_ms: int = 0
    data_counter: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's names, the data version's fields flattened."""
        return {f.java: getattr(self, f.name) for f in TIMER_CHECKPOINT_FIELDS}


def decode(buf: Any, *, path: str = "<buffer>") -> TimerCheckpoint:
    """The checkpoint at the start of ``buf``; a buffer of 32 to 55 bytes has no data version
    (``TimerCheckpoint.decode`` reads it only when bytes remain)."""
    n = len(buf)
    if n >= TIMER_CHECKPOINT_SIZE:
        return TimerCheckpoint(*_CHECKPOINT.unpack_from(buf, 0))
    if n >= BASE_SIZE:
        return TimerCheckpoint(*_CHECKPOINT.unpack_from(bytes(buf[:BASE_SIZE]) + bytes(24), 0)[:4])
    raise CorruptData(f"timer checkpoint of {n} bytes, expected at least {BASE_SIZE}", path=path, pos=n)


def encode(cp: TimerCheckpoint) -> bytes:
    """The 56 bytes ``TimerCheckpoint.encode`` / ``flush`` write."""
    return _CHECKPOINT.pack(
        cp.last_read_time_ms,
        cp.last_timer_log_flush_pos,
        cp.last_timer_queue_offset,
        cp.master_timer_queue_offset,
        cp.state_version,
        cp.data_timestamp_ms,
        cp.data_counter,
    )
