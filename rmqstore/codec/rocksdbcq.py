"""Keys and values of the 5.x RocksDB consume queue (``storeType=defaultRocksDB``), all big-endian.

Column family ``default`` holds one row per unit (``RocksDBConsumeQueueTable``)::

    key   = topic length (4) 0x01 topic 0x01 queueId (4) 0x01 queue offset (8)
    value = commit log offset (8) size (4) tagsCode (8) store timestamp (8)

Column family ``offset`` holds each queue's ``max`` and ``min`` rows (``RocksDBConsumeQueueOffsetTable``)::

    key   = topic length (4) 0x01 topic 0x01 "max"|"min" 0x01 queueId (4)
    value = commit log offset (8) queue offset (8) of the last / first unit

and the dispatch checkpoint: topic ``CHECKPOINT_TOPIC``, ``max``, queue 0, whose 8-byte value is the commit
log offset up to which records were dispatched. Keys sort bytewise, so one queue's units are one key range
in queue offset order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmqstore.codec.fields import lazy_dtypes, table
from rmqstore.errors import CorruptData

if TYPE_CHECKING:
    import numpy as np

CTRL_1 = b"\x01"
DEFAULT_CF = "default"
OFFSET_CF = "offset"
COLUMN_FAMILIES = (DEFAULT_CF, OFFSET_CF)
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
MAX, MIN = b"max", b"min"

# one unit's value, declared once; its dtype (runs of units) derives from it
UNIT_FIELDS = table(
    """
    phy_offset          q  commit log offset
    size                i  size
    tags_code           q  tagsCode
    store_timestamp_ms  q  store timestamp
    """
)
_UNIT = struct.Struct(">qiqq")
UNIT_VALUE_SIZE = _UNIT.size  # 28
_OFFSET = struct.Struct(">qq")
OFFSET_VALUE_SIZE = _OFFSET.size  # 16
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
__getattr__ = lazy_dtypes(UNIT_DTYPE=UNIT_FIELDS)  # big-endian, 28 bytes: a unit's value as it is stored


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """The bytes every unit key of ``(topic, queue_id)`` starts with."""
    t = topic.encode("utf-8")
    return _INT.pack(len(t)) + CTRL_1 + t + CTRL_1 + _INT.pack(queue_id) + CTRL_1


def unit_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    return queue_prefix(topic, queue_id) + _LONG.pack(queue_offset)


def encode_unit(phy_offset: int, size: int, tags_code: int, store_ts: int) -> bytes:
    return _UNIT.pack(phy_offset, size, tags_code, store_ts)


def offset_key(topic: str, queue_id: int, kind: bytes) -> bytes:
    t = topic.encode("utf-8")
    return _INT.pack(len(t)) + CTRL_1 + t + CTRL_1 + kind + CTRL_1 + _INT.pack(queue_id)


def encode_offset(phy_offset: int, queue_offset: int) -> bytes:
    return _OFFSET.pack(phy_offset, queue_offset)


CHECKPOINT_KEY = offset_key(CHECKPOINT_TOPIC, 0, MAX)


def encode_checkpoint(phy_offset: int) -> bytes:
    return _LONG.pack(phy_offset)


@dataclass(frozen=True, slots=True)
class UnitKey:
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One ``max`` / ``min`` row: the commit log offset and queue offset of a queue's last / first unit."""

    topic: str
    queue_id: int
    kind: str  # "max" | "min"
    phy_offset: int
    queue_offset: int


def _topic(key: bytes, where: str) -> tuple[str, int]:
    """The topic of a key and the position after its trailing 0x01; CorruptData when the frame is wrong."""
    if len(key) < 6:
        raise CorruptData(
            f"{len(key)}-byte key, expected at least 6 (topic length, 0x01, topic, 0x01)", path=where, pos=0
        )
    n = _INT.unpack_from(key, 0)[0]
    if n < 0 or len(key) < 6 + n or key[4:5] != CTRL_1 or key[5 + n : 6 + n] != CTRL_1:
        raise CorruptData(
            f"key {key.hex()}: topic length {n} does not frame the key with 0x01 bytes", path=where, pos=0
        )
    try:
        return key[5 : 5 + n].decode("utf-8"), 6 + n
    except UnicodeDecodeError:
        raise CorruptData(f"key {key.hex()}: topic is not UTF-8", path=where, pos=5) from None


def decode_unit_key(key: bytes, where: str = "consumequeue") -> UnitKey:
    topic, at = _topic(key, where)
    if len(key) != at + 13 or key[at + 4 : at + 5] != CTRL_1:
        raise CorruptData(f"unit key {key.hex()}: expected queueId (4), 0x01, queue offset (8) after the topic",
                          path=where, pos=at)  # fmt: skip
    return UnitKey(topic, _INT.unpack_from(key, at)[0], _LONG.unpack_from(key, at + 5)[0])


def decode_unit(value: bytes, where: str = "consumequeue") -> tuple[int, int, int, int]:
    """(commit log offset, size, tagsCode, store timestamp) of one unit's value."""
    if len(value) != UNIT_VALUE_SIZE:
        raise CorruptData(f"unit value of {len(value)} bytes, expected {UNIT_VALUE_SIZE}", path=where, pos=0)
    return _UNIT.unpack(value)


def decode_offset_row(key: bytes, value: bytes, where: str = "consumequeue") -> OffsetRow:
    topic, at = _topic(key, where)
    kind = key[at : at + 3]
    if len(key) != at + 8 or kind not in (MAX, MIN) or key[at + 3 : at + 4] != CTRL_1:
        raise CorruptData(f"offset key {key.hex()}: expected max or min, 0x01, queueId (4) after the topic",
                          path=where, pos=at)  # fmt: skip
    qid = _INT.unpack_from(key, at + 4)[0]
    if topic == CHECKPOINT_TOPIC:
        if len(value) < 8:
            raise CorruptData(f"dispatch checkpoint value of {len(value)} bytes, expected 8", path=where, pos=0)
        return OffsetRow(topic, qid, kind.decode(), _LONG.unpack_from(value, 0)[0], -1)
    if len(value) != OFFSET_VALUE_SIZE:
        raise CorruptData(f"offset value of {len(value)} bytes, expected {OFFSET_VALUE_SIZE}", path=where, pos=0)
    phy, qoff = _OFFSET.unpack(value)
    return OffsetRow(topic, qid, kind.decode(), phy, qoff)


def decode_units(prefix: bytes, keys: list[bytes], values: list[bytes], where: str) -> tuple[np.ndarray, np.ndarray]:
    """(queue offsets, units) of one queue's rows (keys starting with ``prefix``), vectorised; a key or value of
    the wrong shape is named with CorruptData."""
    import numpy as np

    n, width = len(keys), len(prefix) + 8
    kb, vb = b"".join(keys), b"".join(values)
    if len(kb) != n * width or len(vb) != n * UNIT_VALUE_SIZE:
        for k, v in zip(keys, values, strict=True):  # find the row to name
            decode_unit_key(k, where)
            decode_unit(v, where)
    rows = np.frombuffer(kb, dtype=[("prefix", f"V{width - 8}"), ("queue_offset", ">i8")])
    if not (rows["prefix"] == np.frombuffer(prefix, dtype=f"V{width - 8}")[0]).all():
        bad = keys[int(np.flatnonzero(rows["prefix"] != np.frombuffer(prefix, dtype=f"V{width - 8}")[0])[0])]
        raise CorruptData(f"unit key {bad.hex()} is not a key of the queue {prefix.hex()}", path=where, pos=0)
    return rows["queue_offset"].astype(np.int64), np.frombuffer(vb, dtype=__getattr__("UNIT_DTYPE"))


def units_array(values: list[bytes]) -> np.ndarray:
    """Unit values (28 bytes each, already checked) as one structured array of :data:`UNIT_DTYPE`."""
    import numpy as np

    return np.frombuffer(b"".join(values), dtype=__getattr__("UNIT_DTYPE"))


def unit_keys(prefix: bytes, queue_offsets: np.ndarray) -> list[bytes]:
    """The unit keys of one queue (its :func:`queue_prefix`) for many queue offsets, vectorised."""
    import numpy as np

    keys = np.empty(len(queue_offsets), dtype=[("prefix", f"V{len(prefix)}"), ("queue_offset", ">i8")])
    keys["prefix"] = np.frombuffer(prefix, dtype=f"V{len(prefix)}")[0]
    keys["queue_offset"] = queue_offsets
    return keys.view(f"V{len(prefix) + 8}").tolist()


def unit_values(phy: np.ndarray, size: np.ndarray, tags: np.ndarray, store_ts: np.ndarray) -> list[bytes]:
    """The values of many units (28 bytes each), vectorised."""
    import numpy as np

    out = np.empty(len(phy), dtype=__getattr__("UNIT_DTYPE"))
    out["phy_offset"], out["size"], out["tags_code"], out["store_timestamp_ms"] = phy, size, tags, store_ts
    return out.view(f"V{UNIT_VALUE_SIZE}").tolist()
