"""Where a consume queue's valid entries end, read from its last files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rmqstore.codec.consumequeue import ENTRY_SIZE, entries_array, valid_prefix
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment

if TYPE_CHECKING:
    from collections.abc import Sequence
from rmqstore.codec.consumequeue import FILLER_SIZE


@dataclass(frozen=True, slots=True)
class QueueTail:
    """Where a consume queue's valid entries end, as the queue's recovery reads its last files (§8.4)."""

    end: int  # byte offset in the queue stream: the last file's start plus its valid prefix
    last_entry: tuple[int, int] | None  # (phy offset, size) of the last valid entry (the file before when none)


def _last_valid(path: Path, file_size: int | None) -> tuple[int, tuple[int, int] | None]:
    """The number of valid entries a consume queue file starts with, and the last of them."""
    with map_file(path) as buf:
        arr = entries_array(buf, 0, min(len(buf), file_size) if file_size else None)
        n = valid_prefix(arr)
        entry = (int(arr["phy_offset"][n - 1]), int(arr["size"][n - 1])) if n else None
        del arr
    return n, entry


def queue_tail(segs: Sequence[Segment], file_size: int | None = None) -> QueueTail:
    """The end of a consume queue (its files ``segs``) and its last valid entry; earlier files count as full."""
    if not segs:
        return QueueTail(0, None)
    n, entry = _last_valid(segs[-1].path, file_size)
    if entry is None and len(segs) > 1:
        entry = _last_valid(segs[-2].path, file_size)[1]
    return QueueTail(segs[-1].base_offset + n * ENTRY_SIZE, entry)


def _valid_entry(arr: np.ndarray, i: int) -> bool:
    return bool(arr[i]["phy_offset"] >= 0 and arr[i]["size"] > 0)


def last_cq_entry(segs: list[Segment]) -> tuple[int, int] | None:
    """(phy offset, size) of a queue's last valid entry, by binary search over the entries."""
    for seg in reversed(segs):
        if seg.size < ENTRY_SIZE:
            continue
        with map_file(seg.path) as buf:
            arr = entries_array(buf)
            if not _valid_entry(arr, 0):
                del arr
                continue
            lo, hi = 0, len(arr) - 1  # entry lo is valid
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _valid_entry(arr, mid):
                    lo = mid
                else:
                    hi = mid - 1
            out = (int(arr[lo]["phy_offset"]), int(arr[lo]["size"]))
            del arr
        if out == (0, FILLER_SIZE):
            return None
        return out
    return None


def queue_end(segs: list[Segment]) -> int:
    """Byte end of a queue's valid entries (``last.from + validEnd``), as recovery computes it."""
    return queue_tail(segs).end
