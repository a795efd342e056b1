"""The 5.x compaction store (``compaction/``): the compaction log and its sparse consume queue.

``compaction/compactionLog/<topic>/<queueId>/`` holds commit log records (§3.1, the commit log codec
reads them) copied by ``CompactionLog``: the PHYSICALOFFSET field is rewritten to the record's
position in the compaction log, and a file ends with an 8-byte blank (size, blank magic) when the
next record or the queue file would not fit. ``compaction/compactionCq/<topic>/<queueId>/`` is a
``SparseConsumeQueue``: 46-byte batch consume queue units (§4.7, batch size 1), one file per
compaction log file and named like it (the compaction log offset it starts at), closed by an end
unit (offset -1, size 0, compacted offset -1) when it rolls.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rmqstore.codec.commitlog import Blank, Record, decode_record
from rmqstore.codec.consumequeue import BCQ_FIELDS, BCQ_UNIT_SIZE, BcqEntry
from rmqstore.codec.fields import struct_of

_UNIT = struct_of(BCQ_FIELDS)
UNIT_SIZE = BCQ_UNIT_SIZE  # 46
END_UNIT = _UNIT.pack(-1, 0, 0, 0, 0, 0, -1, 0)  # SparseConsumeQueue.putEndPositionInfo


@dataclass(frozen=True, slots=True)
class CqUnit:
    pos: int  # byte position in its file
    entry: BcqEntry
    kind: str  # "unit" | "end" (the end unit written when the file rolls)


def unit_is_valid(e: BcqEntry) -> bool:
    """What ``SparseConsumeQueue.recover`` accepts: offset >= 0, size > 0, base >= 0, batch size > 0."""
    return e.phy_offset >= 0 and e.size > 0 and e.base_offset >= 0 and e.batch_size > 0


def cq_units(buf: Any) -> list[CqUnit]:
    """The units of one compactionCq file up to the first invalid one (which is listed when it is the
    end unit, and ends the file's data either way)."""
    out = []
    for pos in range(0, len(buf) - UNIT_SIZE + 1, UNIT_SIZE):
        e = BcqEntry(*_UNIT.unpack_from(buf, pos))
        if unit_is_valid(e):
            out.append(CqUnit(pos, e, "unit"))
            continue
        if bytes(buf[pos : pos + UNIT_SIZE]) == END_UNIT:
            out.append(CqUnit(pos, e, "end"))
        break
    return out


def encode_unit(phy_offset: int, size: int, tags_code: int, store_timestamp_ms: int, queue_offset: int) -> bytes:
    """A unit as ``CompactionAppendMessageCallback`` writes it: batch size 1, compacted offset -1."""
    return _UNIT.pack(phy_offset, size, tags_code, store_timestamp_ms, queue_offset, 1, -1, 0)


def log_records(
    buf: Any, *, path: str = "<buffer>", file_from: int = 0, broker: str = "5.2.0"
) -> Iterator[Record | Blank]:
    """The records of one compaction log file, then its blank if it has one; zeros end the data.
    (A record's PHYSICALOFFSET is its compaction log position; like the broker, nothing checks it.)

    Raises :class:`CorruptData` at the first record that does not decode.
    """
    pos, n = 0, len(buf)
    while pos + 8 <= n:
        if not any(buf[pos : pos + 8]):
            return
        rec = decode_record(buf, pos, path=path, file_from=file_from, broker=broker)
        yield rec
        if isinstance(rec, Blank):
            return
        pos += rec.total_size
