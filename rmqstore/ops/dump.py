"""Lenient, byte-exact views of a store behind ``rmqstore dump`` (store-format.md §2-§6, §11).

Commit log (§3): every byte of every file is accounted for, as a message record, a BLANK
end-of-file record (§3.4), an all-zero end of data (§2.3: preallocated space) or a damaged range,
as the lenient walk (``rmqstore.walk.lenient``) finds them: a damaged range ends where the next
record decodes whose stored PHYSICALOFFSET equals its real offset (or at the BLANK or zero tail
that ends the file), so one bad byte never hides the records after it. The walk hands over runs of
intact records a window at a time, which is what makes a count-only scan run at millions of
records a second.

Consume queues (§4) are listed entry by entry and, on request, joined to the records they point at;
index files (§5) are summarised from their headers and slots, and their hash chains walked.
"""

from __future__ import annotations

import ast
import binascii
import contextlib
import json
import mmap
import re
import struct
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec import indexfile as ix
from rmqstore.codec import timer
from rmqstore.codec.commitlog import (
    COMPRESSED_FLAG,
    HEAD_V4,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Blank,
    Record,
    is_v1_ipv4,
    parse_properties,
)
from rmqstore.codec.consumequeue import (
    ENTRY_SIZE,
    EXT_ADDR_MAX,
    FILLER_SIZE,
    ExtUnit,
    decode_ext_units,
)
from rmqstore.codec.describe import index_header_json
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.codec.javahash import index_key_hash
from rmqstore.codec.msglines import DERIVED, Hosts, LineOptions, Times, Topics, message_lines, pieces
from rmqstore.codec.rows import CRC_MISMATCH, ROW_FIELDS, csv_line, message_row
from rmqstore.codec.topic import queue_path_problem, shown
from rmqstore.errors import CorruptData, InputError, UnsupportedStore
from rmqstore.problems import ERROR, INFO, WARNING, Problem
from rmqstore.safety.openfile import map_readonly
from rmqstore.store import Store
from rmqstore.store import config as cfgmod
from rmqstore.store.dledger import DLedgerIndex, read_member
from rmqstore.store.files import data_extents, map_file, names_in, release_pages
from rmqstore.store.layout import Segment, list_segments
from rmqstore.store.queue.interface import ConsumeQueue
from rmqstore.store.reader import CommitLogReader
from rmqstore.walk.dledger import ENTRY, iter_entries
from rmqstore.walk.lenient import BlankEnd, Damage, Item, Run, intact_record, records_end, walk_files
from rmqstore.walk.requests import request_from_record
from rmqstore.walk.workers import close_pool, worker_pool

Progress = Callable[[int], None]

_PORT = struct.Struct(">i")
BODY_MODES = ("base64", "hex", "text", "none")


# ----------------------------------------------------------------------------------------------
# Walking the commit log


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of a commit log file that holds no message: BLANK padding, zeros, or damage."""

    kind: str  # "blank" (§3.4) | "end" (zeros to the end of the file) | "corrupt"
    path: Path
    phy_offset: int
    pos: int
    size: int  # bytes
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "commitLogOffset": self.phy_offset, "storeSize": self.size}
        if self.why:
            out["why"] = self.why
        out["file"] = self.path.name
        out["pos"] = self.pos
        return out


def _rows(seg: Segment, size: int, items: Iterator[Item]) -> Iterator[Run | Span]:
    """What the lenient walk finds in a file of ``size`` bytes as rows: runs of records, spans of the rest."""
    path, base = seg.path, seg.base_offset
    for item in items:
        if isinstance(item, Run):
            yield item
        elif isinstance(item, Damage):
            yield Span("corrupt", path, base + item.pos, item.pos, item.resume - item.pos, item.why)
        elif isinstance(item, BlankEnd):
            why = "" if item.error is None else item.error.what
            yield Span("blank", path, base + item.pos, item.pos, size - item.pos, why)
        elif item.garbage is None:
            if item.pos < size:
                yield Span("end", path, base + item.pos, item.pos, size - item.pos)
        else:
            yield Span("corrupt", path, base + item.pos, item.pos, item.zeros - item.pos, item.why)
            if item.zeros < size:
                yield Span("end", path, base + item.zeros, item.zeros, size - item.zeros)


class CommitLogScan:
    """Walks commit log files leniently; every problem found is appended to ``problems``.

    ``events()`` yields ``(buffer, Run | Span)``; the buffer (the mapped file) is valid until the
    next item is asked for. ``from_phy``/``to_phy`` keep what lies in ``[from_phy, to_phy)``.
    """

    def __init__(
        self,
        segs: Sequence[Segment],
        *,
        broker: str = "4.4.0",
        from_phy: int | None = None,
        to_phy: int | None = None,
        progress: Progress | None = None,
        problems: list[Problem] | None = None,
    ) -> None:
        self.segs = list(segs)
        self.broker = broker
        self.from_phy = from_phy
        self.to_phy = to_phy
        self.progress = progress
        self.problems: list[Problem] = [] if problems is None else problems

    def selected(self) -> list[Segment]:
        out = []
        for seg in self.segs:
            if self.to_phy is not None and seg.base_offset >= self.to_phy:
                break
            if self.from_phy is not None and seg.base_offset + seg.size <= self.from_phy:
                continue
            out.append(seg)
        return out

    def total_bytes(self) -> int:
        return sum(s.size for s in self.selected())

    def events(self) -> Iterator[tuple[Any, Run | Span]]:
        end_of_data: Span | None = None  # an all-zero end seen before: records after it are a problem
        lo = -(1 << 63) if self.from_phy is None else self.from_phy
        hi = (1 << 63) - 1 if self.to_phy is None else self.to_phy
        for seg, buf, found in walk_files(self.selected(), broker=self.broker, to_phy=self.to_phy):
            done = released = 0
            for ev in _rows(seg, len(buf), found):
                if isinstance(ev, Run):
                    end = ev.end_pos
                    if end_of_data is not None:
                        self.problems.append(
                            Problem(
                                end_of_data.path,
                                end_of_data.pos,
                                f"zeros end the data here, but records follow at phy offset "
                                f"{seg.base_offset + int(ev.positions[0])}: the broker's recovery would "
                                "drop them",
                                ERROR,
                                end_of_data.phy_offset,
                            )
                        )
                        end_of_data = None
                    if seg.base_offset + int(ev.positions[0]) < lo or seg.base_offset + int(ev.positions[-1]) >= hi:
                        ev = ev.within(lo, hi)
                    item: Run | Span | None = ev if len(ev.positions) else None
                else:
                    end = ev.pos + ev.size
                    if ev.kind == "corrupt":
                        self.problems.append(
                            Problem(ev.path, ev.pos, f"{ev.size} bytes skipped: {ev.why}", ERROR, ev.phy_offset)
                        )
                    elif ev.kind == "blank" and ev.why:
                        self.problems.append(Problem(ev.path, ev.pos, ev.why, WARNING, ev.phy_offset))
                    elif ev.kind == "end" and end_of_data is None:
                        end_of_data = ev
                    item = ev if ev.phy_offset + ev.size > lo and ev.phy_offset < hi else None
                if self.progress is not None and end > done:
                    self.progress(end - done)
                    done = end
                if item is not None:
                    yield buf, item
                released = release_pages(buf, released, end)
            if self.progress is not None and seg.size > done:
                self.progress(seg.size - done)


# ----------------------------------------------------------------------------------------------
# Messages: filters, rows, fast ndjson


@dataclass(frozen=True)
class MessageFilter:
    """Which messages to keep; ``None`` keeps all. ``tags`` is any of the given TAGS values."""

    topic: str | None = None
    queue_id: int | None = None
    key: str | None = None
    tags: tuple[str, ...] | None = None
    since_ms: int | None = None  # store timestamp, inclusive
    until_ms: int | None = None  # store timestamp, inclusive

    @property
    def active(self) -> bool:
        return any(
            v is not None for v in (self.topic, self.queue_id, self.key, self.tags, self.since_ms, self.until_ms)
        )

    @property
    def needs_properties(self) -> bool:
        return self.key is not None or self.tags is not None

    def matches_props(self, props: dict[str, str], raw_empty: bool) -> bool:
        if self.tags is not None and props.get("TAGS") not in self.tags:
            return False
        if self.key is not None:
            keys = "" if raw_empty else props.get("KEYS")
            if props.get("UNIQ_KEY") != self.key and self.key not in (keys or "").split(" "):
                return False
        return True

    def matches(self, rec: Record) -> bool:
        if self.topic is not None and rec.topic != self.topic:
            return False
        if self.queue_id is not None and rec.queue_id != self.queue_id:
            return False
        if self.since_ms is not None and rec.store_timestamp_ms < self.since_ms:
            return False
        if self.until_ms is not None and rec.store_timestamp_ms > self.until_ms:
            return False
        if self.needs_properties:
            return self.matches_props(rec.properties, not rec.properties_raw)
        return True


def parse_tag_expression(text: str) -> tuple[str, ...]:
    """``TagA || TagB`` (a subscription expression) as the tags it accepts."""
    tags = tuple(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise InputError(f"tag expression {text!r} names no tag")
    return tags


@dataclass(frozen=True)
class MessageOptions:
    """How message records are rendered and which are kept."""

    body: str = "base64"  # base64 | hex | text | none; compressed bodies are shown decompressed
    verify_crc: bool = False
    broker: str = "4.4.0"
    filter: MessageFilter = field(default_factory=MessageFilter)
    local_time: bool = False  # storeTime in local time with its offset (default: UTC)

    def __post_init__(self) -> None:
        if self.body not in BODY_MODES:
            raise InputError(f"body mode {self.body!r} is not one of {', '.join(BODY_MODES)}")


def _json_line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


# Properties the fast path can turn into JSON by replacing separators: printable ASCII without
# '"' or '\', every item one non-empty name, one 0x01, one non-empty value, 0x02, no name twice.
# Every broker version's parser reads such a string the same way (§3.7). One pattern per item
# count captures the names, so a single match both checks the shape and yields them.
_SAFE = rb"[\x20\x21\x23-\x5b\x5d-\x7e]+"
_SHAPES: dict[int, Callable[[bytes], re.Match[bytes] | None]] = {}


def _no_match(raw: bytes) -> None:
    return None


def _props_shape(items: int) -> Callable[[bytes], re.Match[bytes] | None]:
    got = _SHAPES.get(items)
    if got is None:
        if 0 < items <= 64:
            got = re.compile((b"(" + _SAFE + b")\x01(" + _SAFE + b")\x02") * items).fullmatch
        else:
            got = _no_match
        _SHAPES[items] = got
    return got


_LINE = (
    b'{"kind":"message","commitLogOffset":%d,"storeSize":%d,"topic":%s,"queueId":%d,"queueOffset":%d,"bodyCRC":%d,'
    b'"flag":%d,"sysFlag":%d,"bornTimestamp":%d,"bornHost":"%s","storeTimestamp":%d,"storeTime":%s%03d%s,'
    b'"storeHost":"%s","reconsumeTimes":%d,"preparedTransactionOffset":%d,"msgId":"%s%016X","keys":%s,"tags":%s,'
    b'"uniqKey":%s,"properties":%s,"bodyLength":%d%s}'
)
_LINE_B64 = _LINE[:-3] + b',"body":"%s"}'  # the common case, without one concatenation a line


@dataclass(frozen=True, slots=True)
class CrcMismatch:
    """A record whose body CRC is not the BODYCRC it stores."""

    path: str
    pos: int  # where the record starts in its file
    phy_offset: int
    stored: int
    computed: int

    def problem(self) -> Problem:
        return Problem(
            self.path,
            self.pos,
            f"body CRC mismatch: stored {self.stored}, computed {self.computed}",
            ERROR,
            self.phy_offset,
        )


class _Formatter:
    """What the ndjson and csv formatters share: their lines as the text written."""

    _columns: LineOptions | None

    def format(
        self,
        buf: Any,
        path: str,
        file_from: int,
        positions: Any,
        limit: int | None = None,
        framing: Framing = PLAIN,
    ) -> tuple[list[bytes], list[CrcMismatch]]:
        raise NotImplementedError

    def _columnar(
        self, buf: Any, path: str, file_from: int, pos: np.ndarray, framing: Framing
    ) -> tuple[list[tuple[bytes, bool]], list[CrcMismatch]]:
        raise NotImplementedError

    def format_data(
        self, buf: Any, path: str, file_from: int, pos: np.ndarray, limit: int | None = None, framing: Framing = PLAIN
    ) -> tuple[bytes, int, list[CrcMismatch]]:
        """``format``'s lines as one text, each ended by a newline, and their number."""
        if self._columns is None:
            lines, bad = self.format(buf, path, file_from, pos, limit, framing)
            return _lines_bytes(lines), len(lines), bad
        pos = _first(pos, limit)
        parts, bad = self._columnar(buf, path, file_from, pos, framing)
        return parts[0][0] if len(parts) == 1 else b"".join(t for t, _ in parts), len(pos), bad


class NdjsonFormatter(_Formatter):
    """Message records as ndjson lines, each exactly ``json.dumps(message_row(...))`` compact.

    Records with IPv4 hosts, a V1 magic and an uncompressed body are formatted straight from
    the buffer; every other record goes through ``decode_record`` and :func:`message_row`. Without a
    filter, and with bodies as base64, hex or none, a batch is formatted from columns
    (``codec.msglines``) and only the records those leave out take the per-record path (``columnar``
    False: every record does, the reference the columns are tested against).
    """

    def __init__(self, opts: MessageOptions, *, columnar: bool = True) -> None:
        self.opts = opts
        self._hosts = Hosts()
        self._topics = Topics()
        flt = opts.filter
        self._topic_b = None if flt.topic is None else flt.topic.encode("utf-8")
        self._times = Times(opts.local_time)
        # unfiltered lines with bodies as base64, hex or none are formatted from columns
        self._columns = None
        if columnar and not flt.active and opts.body != "text":
            self._columns = LineOptions(opts.body, opts.verify_crc, self._times, self._topics, self._props_json)

    def _props_json(self, raw: bytes) -> tuple[bytes, bytes, bytes, bytes]:
        """properties, keys, tags and uniqKey as JSON, through the broker version's property parser."""
        props = parse_properties(raw.decode("utf-8", "replace"), broker=self.opts.broker)
        found = (
            json.dumps(v, ensure_ascii=False).encode()
            for v in (props.get("KEYS"), props.get("TAGS"), props.get("UNIQ_KEY"))
        )
        return (json.dumps(props, ensure_ascii=False, separators=(",", ":")).encode(), *found)  # type: ignore[return-value]

    def _body_json(self, body: bytes) -> bytes:
        mode = self.opts.body
        if mode == "base64":
            return b'"' + binascii.b2a_base64(body, newline=False) + b'"'
        if mode == "hex":
            return b'"' + body.hex().encode() + b'"'
        return str(encode_basestring(body.decode("utf-8", "backslashreplace"))).encode()

    def _decoded_line(self, buf: Any, pos: int, path: str, file_from: int, bad: list[CrcMismatch]) -> bytes | None:
        """The line of a record off the straight path (V2, IPv6, compressed), through ``Record.to_row``."""
        opts, verify = self.opts, self.opts.verify_crc
        rec = intact_record(buf, pos, path=path, file_from=file_from, broker=opts.broker)
        if opts.filter.active and not opts.filter.matches(rec):
            return None
        row = message_row(rec, body=opts.body, verify_crc=verify, path=path, local_time=opts.local_time)
        if verify and not row["crcOk"]:
            bad.append(CrcMismatch(path, pos, rec.phy_offset, rec.body_crc, zlib.crc32(rec.body) & 0x7FFFFFFF))
        return _json_line(row).encode()

    def _matches(self, topic: bytes, queue_id: int, store_ts: int, raw: bytes) -> bool:
        """The filter on a record read straight from the buffer (properties parsed only when asked for)."""
        flt = self.opts.filter
        if self._topic_b is not None and topic != self._topic_b:
            return False
        if flt.queue_id is not None and queue_id != flt.queue_id:
            return False
        if (flt.since_ms is not None and store_ts < flt.since_ms) or (
            flt.until_ms is not None and store_ts > flt.until_ms
        ):
            return False
        if flt.needs_properties:
            return flt.matches_props(parse_properties(raw.decode("utf-8", "replace"), broker=self.opts.broker), not raw)
        return True

    def format(
        self,
        buf: Any,
        path: str,
        file_from: int,
        positions: np.ndarray | Sequence[int],
        limit: int | None = None,
        framing: Framing = PLAIN,
    ) -> tuple[list[bytes], list[CrcMismatch]]:
        """Lines (UTF-8, without newline) of the records at ``positions`` that pass the filter, with
        the fields of their frame (a DLedger entry's index, term, offset and size) after the record's."""
        if self._columns is not None:
            parts, bad = self._columnar(buf, path, file_from, _first(positions, limit), framing)
            return [line for text, _ in parts for line in text.split(b"\n")[:-1]], bad  # JSON holds no newline
        lines, bad, at = self._format(buf, path, file_from, positions, limit)
        return self._framed(lines, at, buf, framing), bad

    @staticmethod
    def _framed(lines: list[bytes], at: Sequence[int], buf: Any, framing: Framing) -> list[bytes]:
        """The lines with the fields of their records' frames before their closing brace."""
        if framing.frame_fields:
            names = tuple(b',"%s":' % n.encode() for n in framing.frame_fields)
            for i, pos in enumerate(at):
                extra = b"".join(b"%s%d" % nv for nv in zip(names, framing.frame_values(buf, pos), strict=True))
                lines[i] = lines[i][:-1] + extra + b"}"
        return lines

    def _columnar(
        self, buf: Any, path: str, file_from: int, pos: np.ndarray, framing: Framing
    ) -> tuple[list[tuple[bytes, bool]], list[CrcMismatch]]:
        """``_format`` of every record at ``pos`` (no filter), a batch at a time from columns, as the
        ``pieces`` of its text; the records the columns leave out go through ``_format`` and take
        their places among the lines."""
        assert self._columns is not None
        got = message_lines(buf, pos, self._columns, framing)
        fast_pos = pos[got.rows]
        bad = [CrcMismatch(path, int(fast_pos[i]), *self._crc_fields(buf, int(fast_pos[i])), c) for i, c in got.crc_bad]
        if not len(got.slow):
            return pieces(got, []), bad
        slow_lines, slow_bad, at = self._format(buf, path, file_from, pos[got.slow])
        if slow_bad:
            bad = sorted(bad + slow_bad, key=lambda b: b.pos)
        return pieces(got, self._framed(slow_lines, at, buf, framing)), bad

    @staticmethod
    def _crc_fields(buf: Any, pos: int) -> tuple[int, int]:
        """(PHYSICALOFFSET, BODYCRC) of the record at ``pos``."""
        head = HEAD_V4.unpack_from(buf, pos)
        return head[6], head[2]

    def _format(
        self, buf: Any, path: str, file_from: int, positions: np.ndarray | Sequence[int], limit: int | None = None
    ) -> tuple[list[bytes], list[CrcMismatch], list[int]]:
        opts, flt = self.opts, self.opts.filter
        lines: list[bytes] = []
        at: list[int] = []  # the position of each line's record
        bad: list[CrcMismatch] = []
        unpack, v1_ipv4 = HEAD_V4.unpack_from, is_v1_ipv4
        hosts, topics, times = self._hosts, self._topics, self._times
        filtering = flt.active
        with_body = opts.body != "none"
        b64, b2a = opts.body == "base64", binascii.b2a_base64
        verify = opts.verify_crc
        props_json, body_json = self._props_json, self._body_json
        shapes = _SHAPES
        b64_only = b64 and not verify
        line = _LINE_B64 if b64_only else _LINE
        pos_list = positions.tolist() if isinstance(positions, np.ndarray) else list(positions)
        if limit is not None and not filtering:
            pos_list = pos_list[:limit]
        for pos in pos_list:
            (total, magic, crc, queue_id, flag, queue_offset, phy, sys_flag, born_ts, born_addr, born_port, store_ts,
             store_addr, store_port, reconsume, prepared, body_len) = unpack(buf, pos)  # fmt: skip
            t_head, t_tail = times[store_ts // 1000]
            # V2, IPv6, compressed, or a store time no calendar holds: through message_row
            if not v1_ipv4(magic, sys_flag) or sys_flag & COMPRESSED_FLAG or not t_head:
                slow = self._decoded_line(buf, pos, path, file_from, bad)
                if slow is not None:
                    lines.append(slow)
                    at.append(pos)
                    if limit is not None and len(lines) >= limit:
                        break
                continue
            p = pos + HEAD_V4.size
            body_end = p + body_len if body_len > 0 else p
            t0 = body_end + 1
            pp = t0 + buf[body_end]  # TOPICLENGTH, a signed byte the index proved >= 0
            props_len = (buf[pp] << 8) | buf[pp + 1]
            raw = buf[pp + 2 : pp + 2 + props_len] if 0 < props_len < 0x8000 else b""
            if filtering and not self._matches(buf[t0:pp], queue_id, store_ts, raw):
                continue
            tail = b""
            if b64_only:
                tail = b2a(buf[p:body_end], newline=False)  # the line template holds ,"body":"..."
            elif with_body or verify:
                body = buf[p:body_end]
                if b64:
                    tail = b',"body":"' + b2a(body, newline=False) + b'"'
                elif with_body:
                    tail = b',"body":' + body_json(body)
                if verify:
                    computed = zlib.crc32(body) & 0x7FFFFFFF
                    if computed == crc:
                        tail += b',"crcOk":true'
                    else:
                        tail += b',"crcOk":false,"why":"%s"' % CRC_MISMATCH.encode()
                        bad.append(CrcMismatch(path, pos, phy, crc, computed))
            if not raw:
                pj, keys, tags, uniq = b"{}", b'""', b"null", b"null"  # no properties: KEYS is "" (§3.11)
            elif (m := (shapes.get(n := raw.count(b"\x02")) or _props_shape(n))(raw)) is not None and len(
                set(names := (g := m.groups())[0::2])
            ) == len(names):
                pj = b'{"' + raw[:-1].replace(b"\x01", b'":"').replace(b"\x02", b'","') + b'"}'
                found = dict(zip(names, g[1::2], strict=True))
                keys, tags, uniq = (b"null" if (v := found.get(k)) is None else b'"' + v + b'"' for k in DERIVED)
            else:
                pj, keys, tags, uniq = props_json(raw)
            born_host, store_host, id_prefix = hosts[(born_addr, born_port, store_addr, store_port)]
            lines.append(
                line
                % (
                    phy, total, topics[buf[t0:pp]], queue_id, queue_offset, crc, flag, sys_flag, born_ts, born_host,
                    store_ts, t_head, store_ts % 1000, t_tail, store_host, reconsume,
                    prepared, id_prefix, phy, keys, tags, uniq, pj, body_len, tail,
                )
            )  # fmt: skip
            at.append(pos)
            if limit is not None and len(lines) >= limit:
                break
        return lines, bad, at


def _first(positions: np.ndarray | Sequence[int], limit: int | None) -> np.ndarray:
    """The first ``limit`` positions (all with None) as an int64 array."""
    pos = np.asarray(positions, dtype=np.int64)
    return pos if limit is None else pos[:limit]


def span_visible(span: Span, flt: MessageFilter) -> bool:
    """Blank and end-of-data rows are left out when messages are filtered; damage never is."""
    return span.kind == "corrupt" or not flt.active


def iter_messages(
    scan: CommitLogScan, opts: MessageOptions, *, limit: int | None = None
) -> Iterator[tuple[Record, dict[str, Any]] | Span]:
    """Decoded records (with their row) and spans, in commit log order; CRC problems go to the scan."""
    flt = opts.filter
    n = 0
    if limit is not None and limit <= 0:
        return
    for buf, ev in scan.events():
        if isinstance(ev, Span):
            if span_visible(ev, flt):
                yield ev
            continue
        path, base, framing = str(ev.seg.path), ev.seg.base_offset, ev.seg.framing
        for pos in ev.positions.tolist():
            rec = intact_record(buf, pos, path=path, file_from=base, broker=opts.broker)
            if flt.active and not flt.matches(rec):
                continue
            row = message_row(rec, body=opts.body, verify_crc=opts.verify_crc, path=path, local_time=opts.local_time)
            if framing.frame_fields:
                row.update(zip(framing.frame_fields, framing.frame_values(buf, pos), strict=True))
            if opts.verify_crc and not row["crcOk"]:
                computed = zlib.crc32(rec.body) & 0x7FFFFFFF
                scan.problems.append(CrcMismatch(path, pos, rec.phy_offset, rec.body_crc, computed).problem())
            yield rec, row
            n += 1
            if limit is not None and n >= limit:
                return


# -- ndjson output, serial or in worker processes ---------------------------------------------

_BATCH = 2048  # records per formatting task
_BATCH_BYTES = 1 << 20  # and at most this many record bytes, so one task's output fits a slot
_SLOTS_PER_STEP = 1 << 20  # timer wheel slots looked at per numpy step (32 MiB)
_SLOT_SIZE = 8 << 20  # shared output buffer per task in flight; bigger outputs are sent as bytes
_WORKER: dict[Any, Any] = {}  # per worker process: mapped files, formatters, the shared slots


def _lines_bytes(lines: list[bytes]) -> bytes:
    """The lines, each ended by a newline, in one copy."""
    if not lines:
        return b""
    lines.append(b"")
    data = b"\n".join(lines)
    lines.pop()
    return data


def _batches(run: Run) -> Iterator[np.ndarray]:
    """A run's positions in pieces of at most _BATCH records starting within _BATCH_BYTES."""
    pos = run.positions
    i = 0
    while i < len(pos):
        j = int(np.searchsorted(pos, pos[i] + _BATCH_BYTES))
        j = max(i + 1, min(j, i + _BATCH))
        yield pos[i:j]
        i = j


def _worker_format(
    task: tuple[int, str, int, np.ndarray, MessageOptions, Framing],
) -> tuple[int, int, bytes, int, list[CrcMismatch]]:
    slot, path, file_from, positions, opts, framing = task
    maps: dict[str, mmap.mmap] = _WORKER.setdefault("maps", {})
    buf = maps.get(path)
    if buf is None:
        for old in list(maps):
            maps.pop(old).close()
        buf = maps[path] = map_readonly(path)
    fmt = _WORKER.get(opts)
    if fmt is None:
        fmt = _WORKER[opts] = NdjsonFormatter(opts)
    try:
        data, count, bad = fmt.format_data(buf, path, file_from, positions, framing=framing)
        release_pages(buf, int(positions[0]), int(positions[-1]), 0)  # the batch's records: read, pages dropped
    except CorruptData as e:  # the file changed under us; exceptions with keyword fields do not pickle
        return slot, -2, repr((e.what, str(e.path), e.pos, e.phy_offset)).encode(), 0, []
    shared = _WORKER.get("slots")
    if shared is not None and len(data) <= _SLOT_SIZE:
        # The parent writes straight from the shared slot: no pickling, no pipe, no copy.
        shared[slot * _SLOT_SIZE : slot * _SLOT_SIZE + len(data)] = data
        return slot, len(data), b"", count, bad
    return slot, -1, data, count, bad


@dataclass
class NdjsonStats:
    messages: int = 0
    spans: Counter[str] = field(default_factory=Counter)


Write = Callable[[Any], Any]  # takes bytes or a memoryview, valid only during the call


class JsonArray:
    """A ``Write`` that turns the ndjson chunks it is given into one JSON array, a row a line (as
    ``write_json_array`` writes rows); ``close`` writes its end. A JSON text holds no raw newline, so
    each newline of a chunk is the end of a row."""

    def __init__(self, write: Write) -> None:
        self.write = write
        self.rows = False

    def __call__(self, chunk: Any) -> None:
        data = bytes(chunk)
        if data:
            self.write(b",\n" if self.rows else b"[\n")
            with memoryview(data.replace(b"\n", b",\n")) as rows:
                self.write(rows[:-2])  # the last row's end is the next chunk's or close's
            self.rows = True

    def close(self) -> None:
        self.write(b"\n]\n" if self.rows else b"[]\n")


def write_ndjson(
    scan: CommitLogScan,
    opts: MessageOptions,
    write: Write,
    *,
    workers: int = 1,
    limit: int | None = None,
) -> NdjsonStats:
    """Write the scan as ndjson (UTF-8) through ``write``, many lines per call: messages as
    :meth:`Record.to_row`, spans as ``Span.to_json``. With ``workers > 1`` (and no ``limit``)
    records are formatted in worker processes, output in order. CRC problems are appended to
    ``scan.problems``."""
    stats = NdjsonStats()
    if workers > 1 and limit is None:
        _write_parallel(scan, opts, write, workers, stats)
        return stats
    fmt = NdjsonFormatter(opts)
    _write_serial(
        scan, opts.filter, write, fmt, lambda span: (_json_line(span.to_json()) + "\n").encode(), limit, stats
    )
    return stats


def _write_serial(
    scan: CommitLogScan,
    flt: MessageFilter,
    write: Write,
    fmt: NdjsonFormatter | CsvFormatter,
    span_line: Callable[[Span], bytes],
    limit: int | None,
    stats: NdjsonStats,
) -> None:
    """The scan's records through ``fmt`` a batch at a time, its spans through ``span_line``, in order."""
    for buf, ev in scan.events():
        if isinstance(ev, Span):
            if span_visible(ev, flt):
                stats.spans[ev.kind] += 1
                write(span_line(ev))
            continue
        path = str(ev.seg.path)
        for positions in _batches(ev):
            left = None if limit is None else limit - stats.messages
            data, count, bad = fmt.format_data(buf, path, ev.seg.base_offset, positions, left, ev.seg.framing)
            scan.problems.extend(b.problem() for b in bad)
            stats.messages += count
            if data:
                write(data)
            if limit is not None and stats.messages >= limit:
                return


class CsvFormatter(_Formatter):
    """Message records as csv records of ``columns`` (``ROW_FIELDS``, then the frame's fields), each
    exactly what ``render_rows`` writes for the record's row: from columns (``codec.msglines``) when no
    filter is set and bodies are base64, hex or none, the records those leave out one at a time."""

    def __init__(self, opts: MessageOptions, columns: Sequence[str], *, columnar: bool = True) -> None:
        self.opts = opts
        self.columns = list(columns)
        self._columns = None
        if (
            columnar
            and not opts.filter.active
            and opts.body != "text"
            and tuple(self.columns[: len(ROW_FIELDS)]) == ROW_FIELDS
        ):
            self._columns = LineOptions(opts.body, opts.verify_crc, Times(opts.local_time), Topics(), None, csv=True)

    def format(
        self,
        buf: Any,
        path: str,
        file_from: int,
        positions: np.ndarray,
        limit: int | None = None,
        framing: Framing = PLAIN,
    ) -> tuple[list[bytes], list[CrcMismatch]]:
        """The csv records (without their newline) of the records at ``positions`` that pass the filter."""
        if self._columns is not None:
            parts, bad = self._columnar(buf, path, file_from, _first(positions, limit), framing)
            # the columns' records hold no newline; a record of the per-record path may (a quoted cell)
            return [line for text, fast in parts for line in (text.split(b"\n")[:-1] if fast else [text[:-1]])], bad
        pos = np.asarray(positions, dtype=np.int64)
        if limit is not None and not self.opts.filter.active:
            pos = pos[:limit]
        lines: list[bytes] = []
        bad: list[CrcMismatch] = []
        for p in pos.tolist():
            line = self._record_line(buf, path, file_from, p, framing, bad)
            if line is not None:
                lines.append(line)
                if limit is not None and len(lines) >= limit:  # filtered: the first ``limit`` rows that pass
                    break
        return lines, bad

    def _columnar(
        self, buf: Any, path: str, file_from: int, pos: np.ndarray, framing: Framing
    ) -> tuple[list[tuple[bytes, bool]], list[CrcMismatch]]:
        """The records at ``pos`` (no filter) from columns, those the columns leave out one at a time,
        as the ``pieces`` of their text."""
        assert self._columns is not None
        got = message_lines(buf, pos, self._columns, framing)
        fast = pos[got.rows].tolist()
        bad = [CrcMismatch(path, fast[i], *NdjsonFormatter._crc_fields(buf, fast[i]), c) for i, c in got.crc_bad]
        slow: list[bytes] = []
        for p in pos[got.slow].tolist():
            line = self._record_line(buf, path, file_from, p, framing, bad)
            assert line is not None  # no filter
            slow.append(line)
        bad.sort(key=lambda b: b.pos)
        return pieces(got, slow), bad

    def _record_line(
        self, buf: Any, path: str, file_from: int, pos: int, framing: Framing, bad: list[CrcMismatch]
    ) -> bytes | None:
        """The csv record (without its newline) of one record, through ``message_row``; None if filtered out."""
        opts = self.opts
        rec = intact_record(buf, pos, path=path, file_from=file_from, broker=opts.broker)
        if opts.filter.active and not opts.filter.matches(rec):
            return None
        row = message_row(rec, body=opts.body, verify_crc=opts.verify_crc, path=path, local_time=opts.local_time)
        if framing.frame_fields:
            row.update(zip(framing.frame_fields, framing.frame_values(buf, pos), strict=True))
        if opts.verify_crc and not row["crcOk"]:
            bad.append(CrcMismatch(path, pos, rec.phy_offset, rec.body_crc, zlib.crc32(rec.body) & 0x7FFFFFFF))
        return csv_line(row, self.columns)[:-1]


def write_csv(
    scan: CommitLogScan, opts: MessageOptions, write: Write, columns: Sequence[str], *, limit: int | None = None
) -> NdjsonStats:
    """Write the scan as csv (UTF-8) through ``write``: the header ``columns`` before the first row, then
    every row as ``render_rows`` writes it, many per call. CRC problems are appended to ``scan.problems``."""
    stats = NdjsonStats()
    header = [csv_line(dict(zip(columns, columns, strict=True)), columns)]

    def write_after_header(data: Any) -> None:
        if header:
            write(header.pop())
        write(data)

    fmt = CsvFormatter(opts, columns)
    _write_serial(scan, opts.filter, write_after_header, fmt, lambda span: csv_line(span.to_json(), columns), limit,
                  stats)  # fmt: skip
    return stats


def _write_parallel(scan: CommitLogScan, opts: MessageOptions, write: Write, workers: int, stats: NdjsonStats) -> None:
    n_slots = 3 * workers
    slots = mmap.mmap(-1, n_slots * _SLOT_SIZE)
    _WORKER["slots"] = slots  # before the pool forks its workers: they inherit the shared slots
    free = list(range(n_slots))
    pending: deque[Any] = deque()  # encoded span rows and task results, in output order
    view = memoryview(slots)

    def take_oldest() -> None:
        item = pending.popleft()
        if isinstance(item, bytes):
            write(item)
            return
        slot, size, data, n, bad = item.result()
        if size == -2:
            what, path, pos, phy = ast.literal_eval(data.decode())
            raise CorruptData(what, path=path, pos=pos, phy_offset=phy)
        stats.messages += n
        scan.problems.extend(b.problem() for b in bad)
        if size > 0:
            write(view[slot * _SLOT_SIZE : slot * _SLOT_SIZE + size])
        elif data:
            write(data)
        free.append(slot)

    try:
        # forked workers: they start at once and never re-run the caller's __main__; they only format
        # bytes, so locks a progress-bar thread held at fork time are never needed in them
        pool = worker_pool(workers)  # kept heap: each batch reuses the last one's pages (a third less CPU)
        try:
            for _buf, ev in scan.events():
                if isinstance(ev, Span):
                    if span_visible(ev, opts.filter):
                        stats.spans[ev.kind] += 1
                        pending.append((_json_line(ev.to_json()) + "\n").encode())
                    continue
                path = str(ev.seg.path)
                for positions in _batches(ev):
                    while not free:
                        take_oldest()  # bounded: at most one task per slot in flight
                    task = (free.pop(), path, ev.seg.base_offset, positions, opts, ev.seg.framing)
                    pending.append(pool.submit(_worker_format, task))
            while pending:
                take_oldest()
        finally:
            close_pool(pool)  # the running tasks write into the slots: they end before the slots go
    finally:
        _WORKER.pop("slots", None)
        view.release()
        slots.close()


# -- counting -----------------------------------------------------------------------------------


@dataclass
class KindCount:
    count: int = 0
    bytes: int = 0


@dataclass
class CommitLogCounts:
    """Totals of a scan per kind: message, blank, end, corrupt (and CRC mismatches)."""

    kinds: dict[str, KindCount] = field(
        default_factory=lambda: {k: KindCount() for k in ("message", "blank", "end", "corrupt")}
    )
    crc_mismatches: int = 0

    def to_rows(self) -> list[dict[str, Any]]:
        rows = [{"kind": k, "count": v.count, "bytes": v.bytes} for k, v in self.kinds.items()]
        rows.append({"kind": "crc-mismatch", "count": self.crc_mismatches, "bytes": None})
        return rows


def count_commitlog(scan: CommitLogScan, opts: MessageOptions) -> CommitLogCounts:
    """Count records and spans. Without a message filter or CRC check no record is decoded:
    the structural index already proved each one intact."""
    counts = CommitLogCounts()
    decode = opts.filter.active or opts.verify_crc
    for buf, ev in scan.events():
        if isinstance(ev, Span):
            if span_visible(ev, opts.filter):
                k = counts.kinds[ev.kind]
                k.count += 1
                k.bytes += ev.size
            continue
        msg = counts.kinds["message"]
        if not decode:
            msg.count += len(ev.positions)
            if len(ev.positions):
                msg.bytes += ev.record_bytes
            continue
        path, base = str(ev.seg.path), ev.seg.base_offset
        for pos in ev.positions.tolist():
            rec = intact_record(buf, pos, path=path, file_from=base, broker=opts.broker)
            if opts.filter.active and not opts.filter.matches(rec):
                continue
            msg.count += 1
            msg.bytes += rec.total_size
            if opts.verify_crc and not rec.crc_ok():
                counts.crc_mismatches += 1
                computed = zlib.crc32(rec.body) & 0x7FFFFFFF
                scan.problems.append(CrcMismatch(path, pos, rec.phy_offset, rec.body_crc, computed).problem())
    return counts


# ----------------------------------------------------------------------------------------------
# Consume queues


@dataclass(frozen=True, slots=True)
class CqRow:
    """One consume queue slot (``kind`` entry or filler) or a range of empty slots (hole, end)."""

    kind: str  # "entry" | "filler" (fillPreBlank, §4.4) | "hole" (empty slots before entries) | "end"
    queue_offset: int
    phy_offset: int | None = None
    size: int | None = None
    tags_code: int | None = None
    count: int = 1  # slots covered (hole, end)
    record: Record | None = None
    expected_tags_code: int | None = None
    mismatch: tuple[str, ...] = ()
    resolved: bool = False
    store_timestamp: int | None = None  # the unit's own (a RocksDB unit holds its record's store time)

    def to_json(self) -> dict[str, Any]:
        if self.kind in ("hole", "end"):
            return {
                "kind": self.kind,
                "queueOffset": self.queue_offset,
                "count": self.count,
                "mismatch": list(self.mismatch),
            }
        out: dict[str, Any] = {
            "kind": self.kind,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.phy_offset,
            "size": self.size,
            "tagsCode": self.tags_code,
        }
        if self.store_timestamp is not None:
            out["storeTimestamp"] = self.store_timestamp
        if self.resolved:
            rec = self.record
            out.update(
                {
                    "storeSize": None if rec is None else rec.total_size,
                    "recordTopic": None if rec is None else rec.topic,
                    "recordQueueId": None if rec is None else rec.queue_id,
                    "recordQueueOffset": None if rec is None else rec.queue_offset,
                    "expectedTagsCode": self.expected_tags_code,
                    "storeTimestamp": None if rec is None else rec.store_timestamp_ms,
                    "tags": None if rec is None else rec.tags,
                    "keys": None if rec is None else rec.keys,
                    "msgId": None if rec is None else rec.msg_id,
                }
            )
            out["mismatch"] = list(self.mismatch)
        return out


def _multi_dispatch_offset(rec: Record, topic: str) -> int | None:
    """Queue offset of ``rec`` in an extra queue it was multi-dispatched to (4.9.3+, §4.3)."""
    props = rec.properties
    names = props.get("INNER_MULTI_DISPATCH")
    if not names:
        return None
    offsets = (props.get("INNER_MULTI_QUEUE_OFFSET") or "").split(",")
    for i, name in enumerate(names.split(",")):
        if name == topic and i < len(offsets):
            with contextlib.suppress(ValueError):
                return int(offsets[i])
    return None


def _check_entry(
    st: Store,
    topic: str,
    queue_id: int,
    queue_offset: int,
    phy: int,
    size: int,
    tags_code: int,
    reader: CommitLogReader,
    clog_min: int | None,
    clog_end: int | None,
) -> tuple[Record | None, int | None, list[str], str]:
    """Join one entry to its record: (record, expected tagsCode, mismatches, severity)."""
    if clog_min is not None and phy < clog_min:
        return None, None, [f"before the first commit log file ({clog_min}): expired"], INFO
    if clog_end is None or phy + size > clog_end:
        return None, None, [f"points past the end of the commit log data ({clog_end})"], ERROR
    seg, got = reader.decode_at(phy)
    if seg is None:
        return None, None, ["no commit log file holds this offset"], ERROR
    if isinstance(got, Blank):
        return None, None, ["points at a BLANK end-of-file record"], ERROR
    if not isinstance(got, Record):
        return None, None, [f"no valid record there: {got.what if got is not None else 'nothing'}"], ERROR
    rec, bad = got, []
    if rec.phy_offset != phy:
        bad.append(f"the record's PHYSICALOFFSET is {rec.phy_offset}")
    if rec.total_size != size:
        bad.append(f"size {size}, the record is {rec.total_size} bytes")
    extra = _multi_dispatch_offset(rec, topic) if rec.topic != topic else None
    if extra is None:
        if rec.topic != topic:
            bad.append(f"the record's topic is {rec.topic!r}")
        if rec.queue_id != queue_id:
            bad.append(f"the record's queue is {rec.queue_id}")
        if rec.queue_offset != queue_offset:
            bad.append(f"the record's queue offset is {rec.queue_offset}")
    elif extra != queue_offset:
        bad.append(f"the record's INNER_MULTI_QUEUE_OFFSET for this queue is {extra}")
    tx = rec.sys_flag & TRANSACTION_MASK
    if tx in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
        bad.append("a prepared/rollback transaction record: the broker gives it no consume queue entry")
    expected: int | None = None
    if st.config.enable_consume_queue_ext and tags_code <= EXT_ADDR_MAX:
        pass  # the slot holds a ConsumeQueueExt address (§4.6)
    else:
        try:
            expected = request_from_record(rec, st.config, path=str(seg.path)).tags_code
        except CorruptData as e:
            bad.append(e.what)
        if expected is not None and expected != tags_code:
            bad.append(f"tagsCode {tags_code}, the record gives {expected}")
    return rec, expected, bad, ERROR if bad else INFO


def _segment_entries(
    q: ConsumeQueue, seg: Segment, problems: list[Problem]
) -> tuple[list[int], list[int], list[int], list[int | None]]:
    """(commit log offsets, sizes, tags codes, the units' store times where they hold one) of one consume queue
    file's slots; odd names and tails to ``problems``."""
    if seg.base_offset % ENTRY_SIZE:
        problems.append(Problem(seg.path, None, f"file name {seg.base_offset} is not a multiple of 20"))
    arr = q.read(seg)
    tail = seg.size % ENTRY_SIZE
    if tail:
        problems.append(Problem(seg.path, seg.size - tail, f"{tail} trailing bytes, not a whole entry"))
    stamps = arr["store_timestamp_ms"].tolist() if "store_timestamp_ms" in arr.dtype.names else [None] * len(arr)
    return arr["phy_offset"].tolist(), arr["size"].tolist(), arr["tags_code"].tolist(), stamps


def _commitlog_join(st: Store) -> tuple[CommitLogReader, int | None, int | None]:
    """A reader of the commit log, its first offset and the end of its data, to join entries to records."""
    clog_segs, _ = st.commitlog_segments()
    reader = CommitLogReader(clog_segs, st.config.commitlog_file_size, st.config.broker, keep=2)
    clog_min = clog_segs[0].base_offset if clog_segs else None
    return reader, clog_min, records_end(clog_segs, broker=st.config.broker)


def scan_consume_queue(
    st: Store,
    topic: str,
    queue_id: int,
    *,
    resolve: bool = False,
    problems: list[Problem] | None = None,
    progress: Progress | None = None,
) -> Iterator[CqRow]:
    """Every slot of ``consumequeue/<topic>/<queue_id>`` in queue offset order.

    Empty slots (offset < 0 or size <= 0, §4.4) followed by entries are one ``hole`` row; those at
    the end are one ``end`` row. With ``resolve`` each entry is joined to its record and every
    disagreement is listed in ``mismatch``. Problems are appended to ``problems``.
    """
    problems = [] if problems is None else problems
    q = st.consume_queues.queue(topic, queue_id)
    if not q.exists():
        raise InputError(f"{q.directory}: no consume queue for topic {topic!r} queue {queue_id}")
    segs, seg_problems = q.files()
    problems.extend(seg_problems)
    reader, clog_min, clog_end = _commitlog_join(st) if resolve else (None, None, None)
    empty_from: int | None = None
    empty_path: Path | None = None
    empty_pos = 0
    seen_entry = False
    prev_phy = -1
    try:
        for seg in segs:
            phys, sizes, tags, stamps = _segment_entries(q, seg, problems)
            first_q = seg.base_offset // ENTRY_SIZE
            for i, (phy, size, tags_code, stamp) in enumerate(zip(phys, sizes, tags, stamps, strict=True)):
                qo = first_q + i
                if phy < 0 or size <= 0:
                    if empty_from is None:
                        empty_from, empty_path, empty_pos = qo, seg.path, i * ENTRY_SIZE
                    continue
                if empty_from is not None:
                    why = f"{qo - empty_from} empty slot(s) before entries: a gap in the queue"
                    problems.append(Problem(empty_path or seg.path, empty_pos, f"queue offset {empty_from}: {why}"))
                    yield CqRow("hole", empty_from, count=qo - empty_from, mismatch=(why,))
                    empty_from = None
                if phy == 0 and size == FILLER_SIZE and tags_code == 0:
                    bad = ("a fillPreBlank filler after real entries",) if seen_entry else ()
                    if bad:
                        problems.append(Problem(seg.path, i * ENTRY_SIZE, f"queue offset {qo}: {bad[0]}"))
                    yield CqRow("filler", qo, phy, size, tags_code, mismatch=bad, resolved=resolve)
                    continue
                mism: list[str] = []
                if seen_entry and phy <= prev_phy:
                    mism.append(f"commit log offset not above the previous entry's ({prev_phy})")
                seen_entry = True
                rec = expected = None
                severity = ERROR if mism else INFO
                if reader is not None:
                    rec, expected, more, sev = _check_entry(
                        st, topic, queue_id, qo, phy, size, tags_code, reader, clog_min, clog_end
                    )
                    mism += more
                    if sev == ERROR:
                        severity = ERROR
                    if rec is not None and stamp is not None and stamp != rec.store_timestamp_ms:
                        mism.append(f"store timestamp {stamp}, the record's is {rec.store_timestamp_ms}")
                if mism:
                    problems.append(
                        Problem(seg.path, i * ENTRY_SIZE, f"queue offset {qo}: " + "; ".join(mism), severity, phy)
                    )
                else:
                    prev_phy = phy  # a bad entry is no reference for the order of the next ones
                yield CqRow("entry", qo, phy, size, tags_code, record=rec, expected_tags_code=expected,
                            mismatch=tuple(mism), resolved=resolve, store_timestamp=stamp)  # fmt: skip
            if progress is not None:
                progress(seg.size)
        if empty_from is not None and segs:
            last = segs[-1]
            end_q = (last.base_offset + last.size) // ENTRY_SIZE
            yield CqRow("end", empty_from, count=end_q - empty_from)
    finally:
        if reader is not None:
            reader.close()


# ----------------------------------------------------------------------------------------------
# Index files


@dataclass(frozen=True, slots=True)
class IndexSummary:
    """Header and fill of one index file (§5.1)."""

    path: Path
    size: int
    header: ix.IndexHeader | None
    slots: int
    max_entries: int
    used_slots: int | None  # slots holding a chain head; None when the file's size is wrong

    @property
    def entry_count(self) -> int:
        return 0 if self.header is None else self.header.entry_count

    def to_json(self) -> dict[str, Any]:
        h = self.header
        cap = max(self.max_entries - 1, 1)
        return {
            "name": self.path.name,
            **index_header_json(h),
            "entryCount": self.entry_count,
            "usedSlots": self.used_slots,
            "slotFill": None if self.used_slots is None else round(self.used_slots / max(self.slots, 1), 6),
            "fill": round(self.entry_count / cap, 6),
            "writeFull": None if h is None else h.index_count >= self.max_entries,
            "size": self.size,
        }


def _index_file(st: Store, path: Path, buf: Any, problems: list[Problem]) -> ix.IndexFile | None:
    cfg = st.config
    try:
        return ix.IndexFile(
            buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path), broker=cfg.broker
        )
    except CorruptData as e:
        problems.append(Problem(path, 0, e.what))
        return None


def _index_files_open(st: Store, problems: list[Problem]) -> Iterator[tuple[Path, ix.IndexFile]]:
    """Every index file that decodes, mapped until the next one is asked for; the others are problems."""
    files, more = st.index_files()
    problems.extend(more)
    for path in files:
        with map_file(path) as buf:
            f = _index_file(st, path, buf, problems)
            if f is not None:
                yield path, f
            del f


def index_summaries(st: Store, *, problems: list[Problem] | None = None) -> list[IndexSummary]:
    problems = [] if problems is None else problems
    files, more = st.index_files()
    problems.extend(more)
    out = []
    cfg = st.config
    for path in files:
        with map_file(path) as buf:
            header = None
            if len(buf) >= ix.HEADER_SIZE:
                header = ix.decode_header(buf, path=str(path))
            else:
                problems.append(Problem(path, 0, f"{len(buf)} bytes: shorter than the {ix.HEADER_SIZE}-byte header"))
            f = _index_file(st, path, buf, problems)
            used = None
            if f is not None:
                slots_arr = f.slots_array()
                used = int(np.count_nonzero(slots_arr))
                del slots_arr
                if header is not None and header.index_count > cfg.max_index_num:
                    problems.append(
                        Problem(path, 36, f"indexCount {header.index_count} exceeds maxIndexNum {cfg.max_index_num}")
                    )
            del f
            out.append(IndexSummary(path, len(buf), header, cfg.max_hash_slot_num, cfg.max_index_num, used))
    return out


@dataclass(frozen=True, slots=True)
class IndexEntryRow:
    """One entry of an index file, located by its number (§5.1)."""

    file: str
    number: int  # the entry is at 40 + 4 * maxHashSlotNum + 20 * number
    slot: int
    key_hash: int
    phy_offset: int
    time_diff_s: int
    prev: int
    timestamp_ms: int  # header beginTimestamp + timeDiff seconds, as the query computes it
    hash_match: bool | None = None  # chain walks: does keyHash equal the key's hash
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "slot": self.slot,
            "number": self.number,
            "keyHash": self.key_hash,
            "phyOffset": self.phy_offset,
            "timeDiff": self.time_diff_s,
            "timestamp": self.timestamp_ms,
            "prevIndex": self.prev,
        }
        if self.hash_match is not None:
            out["hashMatch"] = self.hash_match
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True, slots=True)
class ChainHead:
    """Where a key's chain starts in one index file."""

    file: str
    key: str  # as the producer set it; the index hashes topic#key
    key_hash: int
    slot: int
    slot_value: int
    index_count: int


def index_key_chains(
    st: Store, topic: str, key: str, *, problems: list[Problem] | None = None
) -> Iterator[tuple[ChainHead, list[IndexEntryRow]]]:
    """For every index file: the slot of ``topic#key`` and its chain, newest entry first (§5.4).

    The walk follows prevIndex like the broker (stopping at 0, past indexCount, or a self link),
    without a time window, and stops at a loop.
    """
    problems = [] if problems is None else problems
    full = f"{topic}#{key}"
    key_hash = index_key_hash(full)
    for path, f in _index_files_open(st, problems):
        h = f.header()
        slot = key_hash % f.slots
        value = f.slot_value(slot)
        head = ChainHead(path.name, full, key_hash, slot, value, h.index_count)
        rows: list[IndexEntryRow] = []
        n, seen = value, set()
        if value > h.index_count or value < 0:
            problems.append(
                Problem(
                    path,
                    ix.HEADER_SIZE + slot * 4,
                    f"slot {slot} holds {value}, outside 1..{h.index_count - 1}",
                    WARNING,
                )
            )
        while 0 < n <= h.index_count and n < f.max_entries and n not in seen:
            seen.add(n)
            e = f.entry(n)
            rows.append(
                IndexEntryRow(
                    path.name,
                    n,
                    e.key_hash % f.slots,
                    e.key_hash,
                    e.phy_offset,
                    e.time_diff_s,
                    e.prev,
                    h.begin_timestamp_ms + e.time_diff_s * 1000,
                    e.key_hash == key_hash,
                )
            )
            if e.prev == n:
                break
            n = e.prev
        if n in seen and n != rows[-1].number:
            problems.append(Problem(path, None, f"chain of slot {slot} loops back to entry {n}"))
        del f
        yield head, rows


def index_entries(st: Store, *, problems: list[Problem] | None = None) -> Iterator[IndexEntryRow]:
    """Every used entry (1 .. indexCount-1) of every index file."""
    problems = [] if problems is None else problems
    for path, f in _index_files_open(st, problems):
        h = f.header()
        if h.index_count > f.max_entries:
            problems.append(Problem(path, 36, f"indexCount {h.index_count} exceeds maxIndexNum {f.max_entries}"))
            continue
        arr = f.entries_array()
        cols = [arr[c].tolist() for c in ("key_hash", "phy_offset", "time_diff", "prev")]
        del arr, f
        begin = h.begin_timestamp_ms
        slots = st.config.max_hash_slot_num
        for n in range(1, len(cols[0])):
            kh, phy, diff, prev = cols[0][n], cols[1][n], cols[2][n], cols[3][n]
            yield IndexEntryRow(path.name, n, kh % slots, kh, phy, diff, prev, begin + diff * 1000)


# ----------------------------------------------------------------------------------------------
# Config files


@dataclass(frozen=True, slots=True)
class ConfigListing:
    name: str
    size: int


def config_files(st: Store) -> list[ConfigListing]:
    """The files in ``config/`` (``.bak`` copies included), by name."""
    d = st.config.config_dir
    try:
        names = names_in(d)
    except OSError as e:
        raise InputError(f"{d}: cannot list: {e.strerror}") from None
    return [ConfigListing(n, (d / n).stat().st_size) for n in names if (d / n).is_file()]


def read_config_file(st: Store, name: str) -> cfgmod.ConfigFile:
    """``config/<name>`` as the broker loads it (``.bak`` when the main file is unusable, §11.1); ``name``
    may leave out ``.json`` (``consumerOffset`` is ``consumerOffset.json``)."""
    d = st.config.config_dir

    def present(n: str) -> bool:
        return (d / n).exists() or (d / f"{n}.bak").exists()

    if not present(name) and not name.endswith(".json") and present(f"{name}.json"):
        name = f"{name}.json"
    if not present(name) and not (d / f"{name}.bak").exists():
        have = ", ".join(c.name for c in config_files(st)) or "none"
        raise InputError(f"{d / name}: no such config file (present: {have})")
    return cfgmod.read_config(d, name)


def flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested config data as ``(dotted.path, scalar)`` pairs, in document order."""
    if isinstance(data, dict):
        if not data:
            yield prefix, {}
        for k, v in data.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        if not data:
            yield prefix, []
        for i, v in enumerate(data):
            yield from flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, data


@dataclass(frozen=True, slots=True)
class ExtRow:
    """One ConsumeQueueExt unit with its global address (what a consume queue entry points at)."""

    file: str
    address: int  # global ext offset: file start + position
    unit: ExtUnit

    def to_json(self) -> dict[str, Any]:
        u = self.unit
        return {
            "file": self.file,
            "pos": u.pos,
            "address": self.address,
            "size": u.size,
            "tagsCode": u.tags_code,
            "storeTimestamp": u.store_timestamp_ms,
            "bitMapSize": len(u.bitmap),
            "bitMap": u.bitmap.hex(),
        }


def scan_consume_queue_ext(st: Store, topic: str, queue_id: int) -> Iterator[ExtRow]:
    """The units of ``consumequeue_ext/<topic>/<queueId>`` (§4.6), file by file."""

    why = queue_path_problem(topic, queue_id)
    if why is not None:
        raise InputError(
            f"topic '{shown(topic)}' queue {queue_id}: no consume queue directory can have this name ({why})"
        )
    d = st.root / "consumequeue_ext" / topic / str(int(queue_id))
    segs, _ = list_segments(d, None)
    if not segs:
        raise InputError(f"{d}: no consume queue ext files")
    for seg in segs:
        with map_file(seg.path) as buf:
            for u in decode_ext_units(buf, path=str(seg.path)):
                yield ExtRow(seg.path.name, seg.base_offset + u.pos, u)


def timer_wheel_slots(st: Store) -> Iterator[dict[str, Any]]:
    """The used slots of the 5.x ``timerwheel`` file."""
    path = st.root / "timerwheel"
    if not path.is_file():
        raise InputError(f"{path}: no timer wheel (timerWheelEnable was never on)")
    with map_file(path) as buf:
        n = len(buf) // timer.SLOT_SIZE
        for a, b in data_extents(path, 0, n * timer.SLOT_SIZE):  # the holes of a sparse wheel: unused
            for lo in range(a // timer.SLOT_SIZE, -(-b // timer.SLOT_SIZE), _SLOTS_PER_STEP):
                hi = min(lo + _SLOTS_PER_STEP, -(-b // timer.SLOT_SIZE), n)
                for s in timer.used_slots_in(buf, lo, hi):
                    yield {"slot": s.index, "timeMs": s.time_ms, "firstPos": s.first_pos, "lastPos": s.last_pos,
                           "num": s.num, "magic": s.magic}  # fmt: skip
                release_pages(buf, lo * timer.SLOT_SIZE, hi * timer.SLOT_SIZE, 0)


def timer_log_units(st: Store) -> Iterator[dict[str, Any]]:
    """The units of the 5.x ``timerlog/`` files, with their global positions."""
    d = st.root / "timerlog"
    segs, _ = list_segments(d, None)
    if not segs:
        raise InputError(f"{d}: no timer log files")
    for seg in segs:
        with map_file(seg.path) as buf:
            for u in timer.timer_units(buf, path=str(seg.path)):
                yield {"file": seg.path.name, "position": seg.base_offset + u.pos, "prevPos": u.prev_pos,
                       "magic": u.magic, "writeTimeMs": u.write_time_ms, "delayedTime": u.delayed_time,
                       "offsetPy": u.offset_py, "sizePy": u.size_py, "topicHash": u.topic_hash}  # fmt: skip


def compaction_checkpoint(st: Store) -> cfgmod.ConfigFile:
    """``compaction/position-checkpoint`` (5.x compaction service), fastjson like the config files."""
    d = st.root / "compaction"
    if not (d / "position-checkpoint").exists():
        raise InputError(f"{d / 'position-checkpoint'}: no compaction checkpoint")
    cf = cfgmod.read_config(d, "position-checkpoint")
    e = cf.skipped
    if e is not None and cf.source == "missing":  # nothing usable: the broker would start from no positions
        raw = e.path.read_bytes() if e.path.is_file() else b""
        what = f"does not parse: {e.what}; with no .bak the broker starts the compaction from no positions"
        raise CorruptData(what, path=e.path, pos=cfgmod.byte_of(raw, e.line, e.what) or 0)
    return cf


# -- DLedger entries and index units -------------------------------------------------------------


def _refuse_plain(st: Store) -> None:
    if not st.config.dledger:
        raise UnsupportedStore(
            f"{st.root}: not a DLedger store (enableDLegerCommitLog is not set and no dledger-*/data)"
        )


def dledger_entries(st: Store) -> Iterator[dict[str, Any]]:
    """Every frame of the DLedger data files: entry headers (with ``committed`` from the member
    checkpoint), the blanks that close files, and the first bytes of a file that are not an entry."""
    _refuse_plain(st)
    committed = read_member(st.config).committed_index
    segs, _ = st.commitlog_segments()
    for e in iter_entries(segs):
        row: dict[str, Any] = {"kind": e.kind, "offset": e.offset, "file": e.seg.path.name, "filePos": e.pos}
        if e.kind == ENTRY and e.header is not None:
            h = e.header
            row.update(index=h.index, magic=h.magic, size=h.size, term=h.term, pos=h.pos, channel=h.channel,
                       chainCrc=h.chain_crc, bodyCrc=h.body_crc, bodyLength=h.body_length,
                       committed=committed is not None and h.index <= committed)  # fmt: skip
        else:
            row["size"] = e.size
            if e.problem:
                row["why"] = e.problem
        yield row


def dledger_index_units(st: Store) -> Iterator[dict[str, Any]]:
    """Every written unit of the DLedger index files, in entry index order."""
    _refuse_plain(st)
    with DLedgerIndex(st.config) as index:
        for seg, pos, u in index.units():
            yield {"file": seg.path.name, "filePos": pos, "indexOffset": seg.base_offset + pos, "index": u.index,
                   "magic": u.magic, "pos": u.pos, "size": u.size, "term": u.term}  # fmt: skip
