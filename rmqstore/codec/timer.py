"""The 5.x timer store (``timerwheel``, ``timerlog/``): fixed-width slots and units, declared once.

``timerwheel`` is an array of 32-byte slots (time, first and last TimerLog position of that second's
list, message count, magic); ``timerlog/`` files hold 52-byte units chained by their previous position,
a file ending with a blank (size, 8 bytes, the blank magic) when the next unit does not fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rmqstore.codec.fields import struct_of, table
from rmqstore.errors import CorruptData

SLOT_FIELDS = table(
    """
    time_ms    q  timeMs
    first_pos  q  firstPos
    last_pos   q  lastPos
    num        i  num
    magic      i  magic
    """
)
_SLOT = struct_of(SLOT_FIELDS)
SLOT_SIZE = _SLOT.size  # 32

# a unit: its own head (chain and timing), then the commit log message it stands for
UNIT_FIELDS = table(
    """
    size           i  size
    prev_pos       q  prev pos
    magic          i  magic value
    write_time_ms  q  curr write time
    delayed_time   i  delayed time
    """
) + table(
    """
    offset_py      q  offsetPy
    size_py        i  sizePy
    topic_hash     i  hash code of real topic
    reserved       q  reserved value
    """
)
_UNIT = struct_of(UNIT_FIELDS)
UNIT_SIZE = _UNIT.size  # 52
BLANK_MAGIC = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)  # Java: 0xBBCCDDEE ^ 1880681586 + 8, an int
MIN_BLANK_LEN = 16


@dataclass(frozen=True, slots=True)
class Slot:
    index: int
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int


@dataclass(frozen=True, slots=True)
class TimerUnit:
    pos: int
    size: int
    prev_pos: int
    magic: int
    write_time_ms: int
    delayed_time: int
    offset_py: int
    size_py: int
    topic_hash: int
    reserved: int


def used_slots(buf: Any) -> list[Slot]:
    """The slots of a timerwheel file that hold anything (an all-zero slot was never used)."""
    return list(used_slots_in(buf, 0, len(buf) // SLOT_SIZE))


def used_slots_in(buf: Any, first: int, end: int) -> Iterator[Slot]:
    """The used slots of indexes ``[first, end)``, found with numpy: one Python step per used slot."""
    import numpy as np

    if end <= first:
        return
    rows = np.frombuffer(buf, np.uint8, count=(end - first) * SLOT_SIZE, offset=first * SLOT_SIZE)
    used = np.flatnonzero(rows.reshape(-1, SLOT_SIZE).any(axis=1))
    del rows
    for i in used.tolist():
        yield Slot(first + i, *_SLOT.unpack_from(buf, (first + i) * SLOT_SIZE))


def timer_units(buf: Any, *, path: str = "<buffer>") -> list[TimerUnit]:
    """The units of one timerlog file, up to a blank or the end of the written data (size 0)."""
    out, pos, n = [], 0, len(buf)
    while pos + MIN_BLANK_LEN <= n:
        size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        magic = int.from_bytes(buf[pos + 12 : pos + 16], "big", signed=True)
        if size == 0 or magic == BLANK_MAGIC:
            break
        if size != UNIT_SIZE or pos + UNIT_SIZE > n:
            raise CorruptData(f"timer log unit size {size}, expected {UNIT_SIZE}", path=path, pos=pos)
        out.append(TimerUnit(pos, *_UNIT.unpack_from(buf, pos)))
        pos += UNIT_SIZE
    return out
