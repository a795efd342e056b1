"""Helpers the tests share with the fixture builder (which imports this module without pytest)."""

from __future__ import annotations

from typing import Any


def truth_message_head(rec: Any, offset: int, tags_code: int) -> dict[str, Any]:
    """The first fields of a message row of truth.json, in the order the files list them."""
    return {
        "offset": offset,
        "kind": "message",
        "size": rec.total_size,
        "topic": rec.topic,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "sysFlag": rec.sys_flag,
        "storeTimestamp": rec.store_timestamp_ms,
        "tagsCode": tags_code,
    }
