"""A commit log record as a row of named fields: the one field list of a message in every output.

``dump commitlog`` (every format, its fast ndjson lines included), ``query`` and ``spark find`` show a
message with the fields of :data:`ROW_FIELDS`, in that order. Light on purpose (no numpy): a key query
imports it.
"""

from __future__ import annotations

from typing import Any

from rmqstore.codec.commitlog import Record
from rmqstore.timeparse import format_time_ms

# The fields of a message row, in this order, in every format of every command that shows records (dump,
# query, spark find): RocketMQ's names, with the kind of row, a readable store time and what the
# properties say of keys, tags and the unique key; crcOk when bodies are checked, why when one is not right.
ROW_FIELDS = (
    "kind", "commitLogOffset", "storeSize", "topic", "queueId", "queueOffset", "bodyCRC", "flag", "sysFlag",
    "bornTimestamp", "bornHost", "storeTimestamp", "storeTime", "storeHost", "reconsumeTimes",
    "preparedTransactionOffset", "msgId", "keys", "tags", "uniqKey", "properties", "bodyLength", "body", "crcOk", "why",
)  # fmt: skip
CRC_MISMATCH = "CRC MISMATCH"


def message_row(
    rec: Record, *, body: str = "base64", verify_crc: bool = False, path: str = "<buffer>", local_time: bool = False
) -> dict[str, Any]:
    """A record as a row of ``ROW_FIELDS`` (``crcOk`` with ``verify_crc``, ``why`` when there is one)."""
    row = rec.to_row(body=body, verify_crc=verify_crc, path=path)
    error = row.pop("bodyError", None)
    why = CRC_MISMATCH if row.get("crcOk") is False else error
    row.update(
        kind="message",
        storeTime=store_time(rec.store_timestamp_ms, local_time),
        keys=rec.keys,
        tags=rec.tags,
        uniqKey=rec.uniq_key,
    )
    if why:
        row["why"] = why
    return {k: row[k] for k in ROW_FIELDS if k in row}


def store_time(ms: int, local: bool = False) -> str | None:
    """``format_time_ms``, or None for a time no calendar holds (a damaged or hostile field)."""
    try:
        return format_time_ms(ms, local=local)
    except (ValueError, OverflowError, OSError):
        return None
