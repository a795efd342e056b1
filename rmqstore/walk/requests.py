"""What the dispatcher reads of each record (``DispatchRequest``), and the per-record scan of a file."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rmqstore.codec.commitlog import (
    PROP_DELAY,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    SCHEDULE_TOPIC,
    Record,
    decode_record,
    parse_properties,
)
from rmqstore.codec.framing import BLANK, END, RECORD
from rmqstore.codec.javahash import java_hash
from rmqstore.errors import CorruptData, RecordSizeMismatch
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig
from rmqstore.walk.chain import Stop, StopKind, frame_start

_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """What the dispatcher needs of one record (the broker's ``DispatchRequest``, §9.1)."""

    topic: str
    queue_id: int
    phy_offset: int
    size: int
    tags_code: int
    store_timestamp_ms: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


def delivery_tags_code(delay: str, store_timestamp_ms: int, levels_ms: list[int], tags_code: int) -> int:
    """tagsCode of a ``SCHEDULE_TOPIC_XXXX`` record (§4.2); ValueError on a non-numeric DELAY."""
    if not _JAVA_INT.match(delay):  # Integer.parseInt: optional sign, ASCII digits, no spaces
        raise ValueError(f"not an int: {delay!r}")
    level = int(delay)
    if level > len(levels_ms):
        level = len(levels_ms)
    if level <= 0:
        return tags_code
    if 1 <= level <= len(levels_ms):
        return store_timestamp_ms + levels_ms[level - 1]
    return store_timestamp_ms + 1000


def request_from_fields(
    topic: str,
    queue_id: int,
    phy_offset: int,
    size: int,
    store_timestamp_ms: int,
    queue_offset: int,
    sys_flag: int,
    properties_raw: str,
    *,
    levels_ms: list[int],
    broker: str,
    path: str = "<buffer>",
    pos: int = 0,
) -> DispatchRequest:
    props = parse_properties(properties_raw, broker=broker)
    tags = props.get(PROP_TAGS)
    tags_code = java_hash(tags) if tags else 0
    if topic == SCHEDULE_TOPIC:
        delay = props.get(PROP_DELAY)
        if delay is not None:
            try:
                tags_code = delivery_tags_code(delay, store_timestamp_ms, levels_ms, tags_code)
            except ValueError:
                raise CorruptData(
                    f"DELAY property {delay!r} is not a number", path=path, pos=pos, phy_offset=phy_offset
                ) from None
    keys = props.get(PROP_KEYS) if properties_raw else ""
    return DispatchRequest(
        topic,
        queue_id,
        phy_offset,
        size,
        tags_code,
        store_timestamp_ms,
        queue_offset,
        keys,
        props.get(PROP_UNIQ_KEY),
        sys_flag,
    )


def request_from_record(rec: Record, cfg: StoreConfig, *, path: str = "<buffer>") -> DispatchRequest:
    return request_from_fields(
        rec.topic,
        rec.queue_id,
        rec.phy_offset,
        rec.total_size,
        rec.store_timestamp_ms,
        rec.queue_offset,
        rec.sys_flag,
        rec.properties_raw,
        levels_ms=cfg.delay_levels_ms(),
        broker=cfg.broker,
        path=path,
        pos=rec.pos,
    )


ScanStop = Stop  # the walk's typed stop (kind, position, explanation)


def scan_requests(
    buf: Any,
    seg: Segment,
    cfg: StoreConfig,
    *,
    start_pos: int = 0,
    end_pos: int | None = None,
    check_crc: bool = False,
    skip_size_mismatch: bool = True,
    out: list[DispatchRequest] | None = None,
) -> tuple[list[DispatchRequest], Stop]:
    """Dispatch requests of the records of one commit log file, from ``start_pos``.

    Follows the dispatcher (§9.2): a BLANK ends the file, an invalid record stops the scan,
    and a record whose TOTALSIZE disagrees with its fields is skipped by TOTALSIZE (unless
    ``skip_size_mismatch`` is False, as in recovery, where it stops).
    """
    reqs: list[DispatchRequest] = [] if out is None else out
    append = reqs.append
    size = len(buf) if end_pos is None else end_pos
    path = str(seg.path)
    pos = start_pos
    step = seg.framing.step
    while True:
        kind, at, frame_end = step(buf, pos, size)
        if kind == BLANK:
            return reqs, Stop(pos, StopKind.BLANK, None, seg.path, seg.base_offset)
        if kind == END:
            return reqs, Stop(pos, StopKind.END, None, seg.path, seg.base_offset)
        try:
            rec = decode_record(
                buf, at, path=path, file_from=seg.base_offset, end=size, check_crc=check_crc, broker=cfg.broker
            )
            if kind != RECORD or not isinstance(rec, Record):
                raise seg.framing.explain(buf, pos, path=path, file_from=seg.base_offset, end=size, broker=cfg.broker)
            append(request_from_record(rec, cfg, path=path))
        except RecordSizeMismatch as e:
            if not skip_size_mismatch or kind != RECORD:
                return reqs, Stop(pos, StopKind.INVALID, e, seg.path, seg.base_offset)
        except CorruptData as e:
            return reqs, Stop(pos, StopKind.INVALID, e, seg.path, seg.base_offset)
        pos = frame_end


def iter_requests(
    segments: list[Segment],
    cfg: StoreConfig,
    *,
    from_phy: int = 0,
    to_phy: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[list[DispatchRequest], ScanStop, Segment]]:
    """Batches of requests, one per commit log file, walking as the dispatcher walks (§9.2)."""

    for seg in segments:
        if seg.base_offset + seg.size <= from_phy:
            continue
        if to_phy is not None and seg.base_offset >= to_phy:
            break
        start = frame_start(seg, max(0, from_phy - seg.base_offset))
        end = None if to_phy is None else min(seg.size, to_phy - seg.base_offset)
        with map_file(seg.path) as buf:
            reqs, stop = scan_requests(buf, seg, cfg, start_pos=start, end_pos=end)
        if progress:
            progress(stop.pos - start)
        yield reqs, stop, seg
        if stop.reason != "blank":
            return
