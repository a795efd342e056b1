"""The records of a run of intact frames as check's columns, many at a time (store-format.md §3, §4.2, §5.3).

A record is *plain* when it says nothing check reports (``walk.columns.plain_records``) and its
topic is not ``SCHEDULE_TOPIC_XXXX``. Plain records are decoded as numpy columns by the
dispatch decoder (``walk.columns.decode_columns``: tagsCode and index keys as the dispatcher
computes them); the others are left to check's per-record path, in commit log order, so that the
problems found are the same, in the same order, as when every record takes that path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rmqstore.codec.commitlog import (
    SCHEDULE_TOPIC,
    TRANSACTION_MASK,
)
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.walk.chain import indexed
from rmqstore.walk.columns import decode_columns, plain_records

# check's columns of one record and their types (small ones where the file's field is small)
ROW_DTYPES: dict[str, Any] = {
    "phy": np.int64,
    "size": np.int32,
    "topic": np.int32,
    "qid": np.int32,
    "qoff": np.int64,
    "tags": np.int64,
    "ts": np.int64,
    "tx": np.int8,
}


@dataclass
class RecordRows:
    """check's columns of a batch of records (in commit log order) and the index key pairs
    ``record number << 32 | keyHash`` of its plain records; ``slow`` are the batch indices left
    to the per-record path (their rows are still to be filled)."""

    cols: dict[str, np.ndarray]
    key_pairs: np.ndarray
    slow: np.ndarray


def empty_rows(n: int) -> dict[str, np.ndarray]:
    return {name: np.zeros(n, dtype=dt) for name, dt in ROW_DTYPES.items()}


def record_rows(
    buf: Any,
    u8: np.ndarray,
    p: np.ndarray,
    seg: Segment,
    cfg: StoreConfig,
    first_number: int,
    topic_id: Callable[[str], int],
    *,
    light: bool,
) -> RecordRows:
    """check's rows of the records at positions ``p`` of one file (a run of intact frames);
    ``first_number`` is the record number of ``p[0]`` in the whole walk, ``topic_id`` the walk's id
    of a topic name; ``light``: no tagsCode and no index keys (what recovery reads)."""
    n = len(p)
    cols = empty_rows(n)
    plain = plain_records(buf, u8, p, seg.base_offset)
    idx = np.flatnonzero(plain)
    pairs = np.empty(0, np.int64)
    if idx.size:
        got, stop = decode_columns(buf, u8, p[idx], seg, cfg, len(u8))
        if got is None or stop is not None or len(got) != idx.size:
            return RecordRows(cols, pairs, np.arange(n))  # the decoder disagrees: every record the slow way
        topic_ids = np.asarray([topic_id(t) for t in got.topics] or [0], dtype=np.int32)
        sched = [i for i, t in enumerate(got.topics) if t == SCHEDULE_TOPIC]
        keep = ~np.isin(got.topic_id, sched) if sched else np.ones(idx.size, bool)
        plain[idx[~keep]] = False
        rows = idx[keep]
        cols["phy"][rows] = got.phy[keep]
        cols["size"][rows] = got.size[keep]
        cols["topic"][rows] = topic_ids[got.topic_id[keep]]
        cols["qid"][rows] = got.queue_id[keep]
        cols["qoff"][rows] = got.queue_offset[keep]
        cols["ts"][rows] = got.store_ts[keep]
        cols["tx"][rows] = got.sys_flag[keep] & TRANSACTION_MASK
        if not light:
            cols["tags"][rows] = got.tags_code[keep]
            owner = got.key_rec
            ok = keep[owner] & indexed(got.sys_flag[owner])
            pairs = ((first_number + idx[owner[ok]]) << 32) | got.key_hash[ok]
    return RecordRows(cols, pairs, np.flatnonzero(~plain))
