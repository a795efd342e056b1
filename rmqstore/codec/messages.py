"""Input messages of a write: ``Message``, the column batch ``MessageBatch``, and the NDJSON reader.

An NDJSON line uses RocketMQ's own field names (as ``dump --format ndjson`` writes them); see
``message_from_json`` for the fields and how each is checked.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
import hashlib
import json
import marshal
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, BinaryIO

from rmqstore.codec.commitlog import (
    COMPRESSED_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rmqstore.codec.fields import INT_MAX
from rmqstore.errors import InputError
from rmqstore.timeparse import parse_time_ms

_LONG_MAX = (1 << 63) - 1


@dataclass(slots=True)  # not frozen: a frozen dataclass sets each of its fields through object.__setattr__,
class Message:  # which made building a million messages six times slower
    """One message to append: what a producer sends, plus the store-level fields a writer may set.

    ``None`` means "as the broker would choose": queue round-robin, store time from the clock, born
    time = store time, hosts from the run's defaults, a generated ``UNIQ_KEY``. ``keys`` is the KEYS
    property (keys separated by one space). ``origin`` names the input (``file:line``) in errors.
    """

    topic: str
    body: bytes = b""
    queue_id: int | None = None
    tags: str | None = None
    keys: str | None = None
    properties: tuple[tuple[str, str], ...] = ()
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int | None = None
    born_host: str | None = None
    store_host: str | None = None
    store_timestamp_ms: int | None = None
    uniq_key: str | None = None
    delay_level: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    wait: bool = True
    raw: bool = False
    origin: str = "message"


# The Message fields a MessageBatch holds, in its column order (topic to origin always; the rest optional).
BATCH_FIELDS = (
    "topic",
    "body",
    "queue_id",
    "tags",
    "keys",
    "origin",
    "uniq_key",
    "wait",
    "properties",
    "flag",
    "born_timestamp_ms",
    "born_host",
    "store_host",
    "store_timestamp_ms",
)
BATCH_DEFAULTS = (None, True, (), 0, None, None, None, None)  # of the optional columns, uniq_key on


def producer_columns(
    messages: Sequence[Message],
) -> tuple[list[str], list[bytes], list[int | None], list[str | None], list[str | None], list[str]]:
    """The producer fields of ``messages`` column by column: topic, body, queue id, tags, keys, origin."""
    return (
        [m.topic for m in messages],
        [m.body for m in messages],
        [m.queue_id for m in messages],
        [m.tags for m in messages],
        [m.keys for m in messages],
        [m.origin for m in messages],
    )


def optional_columns(messages: Sequence[Message]) -> list[list[Any] | None]:
    """The optional batch columns of ``messages`` (``BATCH_FIELDS`` from uniq_key on); a column whose
    every value is the default is None."""
    out: list[list[Any] | None] = []
    for name, default in zip(BATCH_FIELDS[6:], BATCH_DEFAULTS, strict=True):
        column = [getattr(m, name) for m in messages]
        out.append(None if column.count(default) == len(column) else column)
    return out


@dataclass(slots=True)
class MessageBatch:
    """Messages column by column: topic, body, queue id, TAGS and KEYS, and optionally the given
    UNIQ_KEY, WAIT, user properties, flag, born time and host, store host and store time (a column
    left None is the :class:`Message` default for every message). Bulk input with no object per
    message; ``origin`` names each message in errors (default ``message``)."""

    topic: list[str]
    body: list[bytes]
    queue_id: list[int | None]
    tags: list[str | None]
    keys: list[str | None]
    origin: list[str] | None = None
    uniq_key: list[str | None] | None = None
    wait: list[bool] | None = None
    properties: list[tuple[tuple[str, str], ...] | dict[str, str]] | None = None  # pairs, or as read from NDJSON
    flag: list[int] | None = None
    born_timestamp_ms: list[int | None] | None = None
    born_host: list[str | None] | None = None
    store_host: list[str | None] | None = None
    store_timestamp_ms: list[int | None] | None = None

    def __post_init__(self) -> None:
        n = len(self.topic)
        columns = [getattr(self, name) for name in BATCH_FIELDS[1:]]
        lengths = [len(c) for c in columns if c is not None]
        if any(k != n for k in lengths):
            raise InputError(f"a message batch needs columns of one length: {[n, *lengths]}")
        for name, allowed in _BATCH_TYPES:
            column = getattr(self, name)
            if column is not None and not set(map(type, column)) <= allowed:
                i = next(i for i, v in enumerate(column) if type(v) not in allowed)
                raise InputError(f"message {i} of the batch: {name} is a {type(column[i]).__name__}")
        for name, what, lo, hi in _BATCH_RANGES:
            column = getattr(self, name)
            if column is not None and not _in_range(column, lo, hi):
                i = next(i for i, v in enumerate(column) if v is not None and not lo <= v <= hi)
                raise InputError(f"message {i} of the batch: {what} {column[i]} is out of range")
        pairs = [] if self.properties is None else list(chain.from_iterable(map(_pairs, self.properties)))
        if not (_types_in(pairs, {tuple}) and set(map(len, pairs)) <= {2} and _types_in(list(chain(*pairs)), {str})):
            i = next(i for i, items in enumerate(self.properties or ()) if not _string_pairs(_pairs(items)))
            raise InputError(f"message {i} of the batch: properties must be (name, value) string pairs")

    def __len__(self) -> int:
        return len(self.topic)

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> MessageBatch:
        """The batch fields (``BATCH_FIELDS``) of ``messages``; their other fields are left out."""
        return cls(*producer_columns(messages), *optional_columns(messages))

    def message(self, i: int) -> Message:
        m = Message(
            topic=self.topic[i],
            body=self.body[i],
            queue_id=self.queue_id[i],
            tags=self.tags[i],
            keys=self.keys[i],
            origin="message" if self.origin is None else self.origin[i],
        )
        for name in BATCH_FIELDS[6:]:
            column = getattr(self, name)
            if column is not None:
                setattr(m, name, column[i])
        m.properties = _pairs(m.properties)
        return m

    def messages(self) -> list[Message]:
        return [self.message(i) for i in range(len(self))]


def _pairs(items: Any) -> Any:
    """Properties as (name, value) pairs (a batch may hold them as the dict NDJSON gave)."""
    return tuple(items.items()) if type(items) is dict else items


def _string_pairs(items: tuple[Any, ...]) -> bool:
    return all(type(kv) is tuple and len(kv) == 2 and type(kv[0]) is type(kv[1]) is str for kv in items)


_BATCH_TYPES = (
    ("topic", {str}),
    ("body", {bytes}),
    ("queue_id", {int, type(None)}),
    ("tags", {str, type(None)}),
    ("keys", {str, type(None)}),
    ("origin", {str}),
    ("uniq_key", {str, type(None)}),
    ("wait", {bool}),
    ("properties", {tuple, dict}),
    ("flag", {int}),
    ("born_timestamp_ms", {int, type(None)}),
    ("born_host", {str, type(None)}),
    ("store_host", {str, type(None)}),
    ("store_timestamp_ms", {int, type(None)}),
)
_BATCH_RANGES = (
    ("queue_id", "queueId", 0, INT_MAX),
    ("flag", "flag", -(1 << 31), INT_MAX),
    ("born_timestamp_ms", "bornTimestamp", 0, _LONG_MAX),
    ("store_timestamp_ms", "storeTimestamp", 0, _LONG_MAX),
)

# NDJSON field -> meaning; RocketMQ's field names.
_JSON_FIELDS = frozenset(
    {
        "topic",
        "queueId",
        "tags",
        "keys",
        "body",
        "bodyBase64",
        "properties",
        "bornTimestamp",
        "bornHost",
        "storeHost",
        "storeTimestamp",
        "flag",
        "sysFlag",
        "transactionType",
        "delayTimeLevel",
        "reconsumeTimes",
        "preparedTransactionOffset",
        "uniqKey",
        "wait",
        "raw",
    }
)
_SIMPLE_JSON_FIELDS = frozenset({"topic", "queueId", "tags", "keys", "body"})
# Fields of a dumped record (``dump commitlog`` rows) that a write assigns itself or derives: accepted and ignored.
_JSON_IGNORED = frozenset(
    {
        "queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "msgId", "bodyLength", "kind", "storeTime", "crcOk",
        "why", "entryIndex", "entryTerm", "entryOffset", "entrySize",
    }
)  # fmt: skip
# The kind of a dumped row that is a message; its other kinds (blank, end, corrupt) are no messages and are skipped.
MESSAGE_KIND = "message"
_TRANSACTION_TYPES = {
    "NOT": TRANSACTION_NOT_TYPE,
    "PREPARED": TRANSACTION_PREPARED_TYPE,
    "COMMIT": TRANSACTION_COMMIT_TYPE,
    "ROLLBACK": TRANSACTION_ROLLBACK_TYPE,
}


def _json_int(obj: dict[str, Any], name: str, origin: str, lo: int, hi: int, default: int | None) -> int | None:
    v = obj.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
            v = int(v)
        else:
            raise InputError(f"{origin}: {name} must be an integer, got {v!r}")
    if not lo <= v <= hi:
        raise InputError(f"{origin}: {name} {v} is out of range [{lo}, {hi}]")
    return v


def _json_time(obj: dict[str, Any], name: str, origin: str) -> int | None:
    v = obj.get(name)
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        if v is not None and not 0 <= v <= _LONG_MAX:
            raise InputError(f"{origin}: {name} {v} is out of range")
        return v
    if isinstance(v, str):
        try:
            return parse_time_ms(v)
        except InputError as e:
            raise InputError(f"{origin}: {name}: {e}") from None
    raise InputError(f"{origin}: {name} must be epoch milliseconds or a time string, got {v!r}")


def _json_str(obj: dict[str, Any], name: str, origin: str) -> str | None:
    v = obj.get(name)
    if v is None or isinstance(v, str):
        return v
    raise InputError(f"{origin}: {name} must be a string, got {type(v).__name__}")


# The NDJSON fields a MessageBatch holds (the dumped fields a write assigns itself are ignored; a
# dumped body, told by its bodyCRC, is read by message_from_json in the mode its CRC proves).
_NOT_IN_BATCH = {"delayTimeLevel", "sysFlag", "transactionType", "reconsumeTimes", "preparedTransactionOffset", "raw"}
_BATCH_JSON_FIELDS = (_JSON_FIELDS - _NOT_IN_BATCH) | (_JSON_IGNORED - {"bodyCRC"})


def _batch_row(obj: Any) -> tuple[Any, ...] | None:
    """The batch fields (``BATCH_FIELDS`` without origin) of one NDJSON object, read as
    :func:`message_from_json` reads them; ``None`` for anything else (that function then reads it
    or says why not)."""
    if type(obj) is not dict or not obj.keys() <= _BATCH_JSON_FIELDS:
        return None
    g = obj.get
    topic, queue_id, tags, keys, uniq = g("topic"), g("queueId"), g("tags"), g("keys"), g("uniqKey")
    if not (
        type(topic) is str
        and topic
        and (queue_id is None or (type(queue_id) is int and 0 <= queue_id <= INT_MAX))
        and (tags is None or type(tags) is str)
        and (uniq is None or type(uniq) is str)
    ):
        return None
    if keys is not None and type(keys) is not str:
        if type(keys) is not list or not all(type(k) is str for k in keys):
            return None
        keys = " ".join(keys)
    body = _row_body(obj)
    props = g("properties")
    if props is None:
        props = {}
    elif type(props) is not dict or not all(type(v) is str for v in props.values()):
        return None
    wait, flag = g("wait", True), g("flag", 0)
    born_ts, born_host, store_host, store_ts = g("bornTimestamp"), g("bornHost"), g("storeHost"), g("storeTimestamp")
    if (
        body is None
        or type(wait) is not bool
        or type(flag) is not int
        or not -(1 << 31) <= flag <= INT_MAX
        or not (born_ts is None or (type(born_ts) is int and 0 <= born_ts <= _LONG_MAX))
        or not (store_ts is None or (type(store_ts) is int and 0 <= store_ts <= _LONG_MAX))
        or not (born_host is None or type(born_host) is str)
        or not (store_host is None or type(store_host) is str)
    ):
        return None
    return topic, body, queue_id, tags, keys, uniq, wait, props, flag, born_ts, born_host, store_host, store_ts


def _row_body(obj: dict[str, Any]) -> bytes | None:
    """``body`` or ``bodyBase64`` as :func:`_json_body` reads them; None where it would refuse."""
    if "bodyBase64" in obj:
        b64 = obj["bodyBase64"]
        if "body" in obj or (b64 is not None and type(b64) is not str):
            return None
        try:
            return b"" if b64 is None else base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return None
    text = obj.get("body")
    if text is None:
        return b""
    if type(text) is not str:
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def message_from_json(obj: Any, *, origin: str = "message") -> Message:
    """A :class:`Message` from one NDJSON object (RocketMQ field names). Raises InputError."""
    if not isinstance(obj, dict):
        raise InputError(f"{origin}: expected a JSON object, got {type(obj).__name__}")
    row = _batch_row(obj)
    if row is not None:
        m = Message(*row[:5], **dict(zip(BATCH_FIELDS[6:], row[5:], strict=True)), origin=origin)
        m.properties = _pairs(m.properties)
        return m
    _check_json_fields(obj, origin)
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise InputError(f"{origin}: topic is missing or not a string")
    body = _json_body(obj, origin)
    keys = _json_keys(obj, origin)
    props = _json_properties(obj, origin)
    sys_flag = _json_sys_flag(obj, origin)
    wait = obj.get("wait", True)
    if isinstance(wait, str) and wait.lower() in ("true", "false"):
        wait = wait.lower() == "true"
    if not isinstance(wait, bool):
        raise InputError(f"{origin}: wait must be true or false")
    raw = obj.get("raw", False)
    if not isinstance(raw, bool):
        raise InputError(f"{origin}: raw must be true or false")
    msg = Message(
        topic=topic,
        body=body,
        queue_id=_json_int(obj, "queueId", origin, 0, INT_MAX, None),
        tags=_json_str(obj, "tags", origin),
        keys=keys,
        properties=props,
        flag=_json_int(obj, "flag", origin, -(1 << 31), INT_MAX, 0) or 0,
        sys_flag=sys_flag,
        born_timestamp_ms=_json_time(obj, "bornTimestamp", origin),
        born_host=_json_str(obj, "bornHost", origin),
        store_host=_json_str(obj, "storeHost", origin),
        store_timestamp_ms=_json_time(obj, "storeTimestamp", origin),
        uniq_key=_json_str(obj, "uniqKey", origin),
        delay_level=_json_int(obj, "delayTimeLevel", origin, -(1 << 31), INT_MAX, 0) or 0,
        reconsume_times=_json_int(obj, "reconsumeTimes", origin, -(1 << 31), INT_MAX, 0) or 0,
        prepared_transaction_offset=_json_int(obj, "preparedTransactionOffset", origin, -(1 << 63), _LONG_MAX, 0) or 0,
        wait=wait,
        raw=raw,
        origin=origin,
    )
    if raw:
        given = [n for n in ("tags", "keys", "uniqKey", "delayTimeLevel", "wait") if n in obj]
        if given:
            raise InputError(f"{origin}: a raw message takes {given[0]} inside properties, as stored")
        if msg.queue_id is None:
            raise InputError(f"{origin}: a raw message needs queueId")
    return msg


def _check_json_fields(obj: dict[str, Any], origin: str) -> None:
    unknown = [k for k in obj if k not in _JSON_FIELDS and k not in _JSON_IGNORED]
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], sorted(_JSON_FIELDS), n=1)
        more = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise InputError(f"{origin}: unknown field {unknown[0]!r}{more}")


def _dumped_body(obj: dict[str, Any], origin: str) -> bytes:
    """The body of a dumped record (it carries ``bodyCRC``): in whichever of dump's body modes (base64,
    hex, text) it was written, told apart by the stored CRC, so no mode is taken for another."""
    text, crc = obj.get("body"), obj["bodyCRC"]
    if text is None and not obj.get("bodyLength"):
        return b""
    if text is None:
        raise InputError(f"{origin}: a dumped record without its body (dump --body none): nothing to write")
    if not isinstance(text, str) or not isinstance(crc, int):
        raise InputError(f"{origin}: body must be a string and bodyCRC an integer")
    if _json_sys_flag(obj, origin) & COMPRESSED_FLAG:
        raise InputError(f"{origin}: a compressed record (sysFlag {obj.get('sysFlag')}); dump shows its body "
                         "decompressed: clear the flag and give the body as bodyBase64")  # fmt: skip
    candidates: list[bytes] = []
    with contextlib.suppress(binascii.Error, ValueError):
        candidates.append(base64.b64decode(text, validate=True))
    with contextlib.suppress(ValueError):
        candidates.append(bytes.fromhex(text))
    with contextlib.suppress(UnicodeEncodeError):
        candidates.append(text.encode("utf-8"))
    for body in candidates:
        if zlib.crc32(body) & 0x7FFFFFFF == crc & 0x7FFFFFFF:
            return body
    raise InputError(f"{origin}: body matches its bodyCRC {crc} as neither base64, hex nor text (dump --body none?)")


def _json_body(obj: dict[str, Any], origin: str) -> bytes:
    """``body`` (UTF-8 text) or ``bodyBase64``; empty when neither is given. A dumped record's body
    (with ``bodyCRC``) is read in the mode its CRC proves."""
    if "bodyCRC" in obj and "bodyBase64" not in obj:
        return _dumped_body(obj, origin)
    if "body" in obj and "bodyBase64" in obj:
        raise InputError(f"{origin}: give body or bodyBase64, not both")
    if obj.get("bodyBase64") is not None:
        b64 = obj["bodyBase64"]
        if not isinstance(b64, str):
            raise InputError(f"{origin}: bodyBase64 must be a string")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{origin}: bodyBase64 is not valid base64") from None
    if obj.get("body") is not None:
        text = obj["body"]
        if not isinstance(text, str):
            raise InputError(f"{origin}: body must be a string (UTF-8 text); use bodyBase64 for bytes")
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{origin}: body is not valid Unicode text") from None
    return b""


def _json_keys(obj: dict[str, Any], origin: str) -> str | None:
    """``keys``: a string, or a list of strings joined with spaces."""
    keys = obj.get("keys")
    if isinstance(keys, list):
        if not all(isinstance(k, str) for k in keys):
            raise InputError(f"{origin}: keys must be a string or a list of strings")
        return " ".join(keys)
    if keys is not None and not isinstance(keys, str):
        raise InputError(f"{origin}: keys must be a string or a list of strings")
    return keys


def _json_properties(obj: dict[str, Any], origin: str) -> tuple[tuple[str, str], ...]:
    props_obj = obj.get("properties") or {}
    if not isinstance(props_obj, dict):
        raise InputError(f"{origin}: properties must be an object of string values")
    for k, v in props_obj.items():
        if not isinstance(v, str):
            raise InputError(f"{origin}: property {k!r} must have a string value, got {v!r}")
    return tuple(props_obj.items())


def _json_sys_flag(obj: dict[str, Any], origin: str) -> int:
    """``sysFlag`` with the bits of ``transactionType`` (which must not contradict it)."""
    sys_flag = _json_int(obj, "sysFlag", origin, -(1 << 31), INT_MAX, 0) or 0
    tx = obj.get("transactionType")
    if tx is not None:
        name = str(tx).upper().removeprefix("TRANSACTION_").removesuffix("_TYPE")
        if name not in _TRANSACTION_TYPES:
            raise InputError(f"{origin}: transactionType {tx!r} is not one of NOT, PREPARED, COMMIT, ROLLBACK")
        bits = _TRANSACTION_TYPES[name]
        if sys_flag & TRANSACTION_MASK and sys_flag & TRANSACTION_MASK != bits:
            raise InputError(f"{origin}: transactionType {tx!r} contradicts sysFlag {sys_flag}")
        sys_flag = (sys_flag & ~TRANSACTION_MASK) | bits
    return sys_flag


def paused_gc(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` with the cyclic garbage collector paused: building a batch allocates millions of
    acyclic objects, and every collection would rescan all live messages (3x slower at 1M)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return fn(*args, **kwargs)
    finally:
        if was:
            gc.enable()


def read_ndjson(lines: Iterable[str | bytes], *, source: str = "<stdin>") -> list[Message] | MessageBatch:
    """Parse NDJSON (one message object per line; blank lines skipped). Raises InputError naming the line.

    When every line holds only fields a :class:`MessageBatch` has (``_BATCH_JSON_FIELDS``) the result
    is a batch, else a list of :class:`Message`."""
    return paused_gc(_read_ndjson, lines, source)


def read_ndjson_stream(stream: BinaryIO, *, source: str = "<stdin>") -> tuple[list[Message] | MessageBatch, str]:
    """:func:`read_ndjson` of a binary stream, read in large chunks, and the sha256 of its bytes as
    read (the input's digest: the same file gives the same digest)."""
    digest = hashlib.sha256()
    messages = paused_gc(_read_chunks, _hashed_chunks(stream, digest, source), source)
    return messages, digest.hexdigest()


def read_ndjson_blocks(
    stream: BinaryIO, digest: Any, *, source: str = "<stdin>"
) -> Iterator[list[Message] | MessageBatch]:
    """The messages of a binary NDJSON stream a chunk of lines at a time, as :func:`read_ndjson`
    reads them (each chunk a batch, or a list of :class:`Message` when a line is more than a batch
    holds), hashing every chunk read into ``digest``: the input is never held whole."""
    for line_no, data in ndjson_chunks(stream, digest):
        messages = ndjson_chunk_messages(data, line_no, source)
        if len(messages):
            yield messages


_READ_CHUNK = 1 << 22


def ndjson_chunks(stream: BinaryIO, digest: Any) -> Iterator[tuple[int, bytes]]:
    """The bytes of ``stream`` a chunk of whole lines at a time (each cut after a ``\n``, the last
    one as the input ends), with the number of lines before the chunk; every byte read is hashed
    into ``digest`` in order."""
    rest = b""
    line_no = 0
    while chunk := stream.read(_READ_CHUNK):
        digest.update(chunk)
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            whole = data[:cut] if rest else data
            yield line_no, whole
            line_no += whole.count(b"\n")
    if rest:
        yield line_no, rest


def ndjson_chunk_messages(data: bytes, line_no: int, source: str) -> list[Message] | MessageBatch:
    """The messages of one chunk of :func:`ndjson_chunks` (its first line numbered ``line_no + 1``)."""
    return paused_gc(_read_chunks, [(line_no, _chunk_lines(data, line_no, source))], source)  # type: ignore[no-any-return]


def _hashed_chunks(stream: BinaryIO, digest: Any, source: str) -> Iterator[tuple[int, list[str]]]:
    """The lines of ``stream`` as text (split at ``\n`` only, as a file's lines), a chunk at a time
    with the number of the line before the chunk's first; every chunk read is hashed."""
    for line_no, data in ndjson_chunks(stream, digest):
        yield line_no, _chunk_lines(data, line_no, source)


def _chunk_lines(data: bytes, line_no: int, source: str) -> list[str]:
    lines = _decoded_lines(data, line_no, source)
    if data.endswith(b"\n"):
        lines.pop()  # the empty piece after the last \n
    return lines


def _decoded_lines(data: bytes, line_no: int, source: str) -> list[str]:
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        n = line_no + data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{source}:{n}: not UTF-8 (byte {e.start - line_start})") from None


def _read_ndjson(lines: Iterable[str | bytes], source: str) -> list[Message] | MessageBatch:
    reader = _BatchReader(source)
    reader.add(*_line_objects(lines, 0, source))
    return reader.result()


def _read_chunks(chunks: Iterable[tuple[int, list[str]]], source: str) -> list[Message] | MessageBatch:
    """The messages of the chunks' lines: each chunk parsed with one JSON scan per line in one
    comprehension; a chunk with a line that does not scan as one value from its first character to
    its last (blank, spaced, bad JSON) is read line by line instead, which skips or names it."""
    reader = _BatchReader(source)
    for first, lines in chunks:
        try:
            pairs = list(map(_SCAN_ONCE, lines, repeat(0)))
        except (StopIteration, ValueError):
            pairs = None
        if pairs:
            objs, ends = zip(*pairs, strict=True)
            if ends == tuple(map(len, lines)):
                reader.add_scanned(list(objs), first)
                continue
        reader.add(*_line_objects(lines, first, source))
    return reader.result()


def _line_objects(lines: Iterable[str | bytes], first: int, source: str) -> tuple[list[Any], list[int]]:
    """The objects of NDJSON lines parsed one by one (blank lines and dumped rows that are no message
    skipped) with their line numbers (the first line is ``first + 1``)."""
    objs: list[Any] = []
    numbers: list[int] = []
    decode = _JSON_DECODER.raw_decode
    for n, line in enumerate(lines, first + 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{source}:{n}: not UTF-8 (byte {e.start})") from None
        try:  # json.loads without its wrappers: the same parser, the same errors
            obj, end = decode(line)
            if end != len(line) and line[end:].strip(_JSON_SPACE):
                raise ValueError
        except ValueError:
            if not line.strip():
                continue
            obj = _json_line(line, source, n)
        if type(obj) is dict and obj.get("kind", MESSAGE_KIND) != MESSAGE_KIND:
            continue  # a dumped blank, end of data or damaged range
        objs.append(obj)
        numbers.append(n)
    return objs, numbers


_BLOCK_LINES = 8192  # NDJSON objects checked as columns at a time


def _shape(objs: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The keys of the first object when every object has as many (each then has exactly these
    when an itemgetter of them finds them all), else None."""
    shape = tuple(objs[0]) if objs else ()
    return shape if shape and set(map(len, objs)) == {len(shape)} else None


class _BatchReader:
    """Parsed NDJSON objects into the batch's columns, a block at a time; once one is more than a
    batch holds, the batch so far and the rest as :class:`Message` values."""

    def __init__(self, source: str):
        self.source = source
        self.columns: list[list[Any]] = [[] for _ in BATCH_FIELDS]  # origin among them
        self.out: list[Message] | None = None

    def add_scanned(self, objs: list[Any], first: int) -> None:
        """Objects of consecutive lines from ``first + 1`` on, none skipped yet."""
        numbers = range(first + 1, first + 1 + len(objs))
        if set(map(type, objs)) != {dict} or any(map(dict.__contains__, objs, repeat("kind"))):
            kept = [
                (o, n)
                for n, o in zip(numbers, objs, strict=True)
                if type(o) is not dict or o.get("kind", MESSAGE_KIND) == MESSAGE_KIND
            ]
            self.add([o for o, _ in kept], [n for _, n in kept])
            return
        for a in range(0, len(objs), _BLOCK_LINES):
            self._take(objs[a : a + _BLOCK_LINES], numbers[a : a + _BLOCK_LINES], _shape(objs[a : a + _BLOCK_LINES]))

    def add(self, objs: list[Any], numbers: Sequence[int]) -> None:
        for a in range(0, len(objs), _BLOCK_LINES):
            self._take(objs[a : a + _BLOCK_LINES], numbers[a : a + _BLOCK_LINES], None)

    def _take(self, objs: list[Any], numbers: Sequence[int], shape: tuple[str, ...] | None) -> None:
        source = self.source
        if self.out is not None:
            self.out += [message_from_json(o, origin=f"{source}:{n}") for o, n in zip(objs, numbers, strict=True)]
            return
        origins = [f"{source}:{n}" for n in numbers]
        columns = self.columns
        block = _block_columns(objs, shape)
        if block is not None:
            for column, values in zip(columns, (*block[:5], origins, *block[5:]), strict=True):
                column.extend(values)
            return
        for i, obj in enumerate(objs):
            row = _batch_row(obj)
            if row is None:
                out = _batch_of(columns).messages()
                out += [message_from_json(o, origin=origin) for o, origin in zip(objs[i:], origins[i:], strict=True)]
                self.out = out
                return
            for column, value in zip(columns, (*row[:5], origins[i], *row[5:]), strict=True):
                column.append(value)

    def result(self) -> list[Message] | MessageBatch:
        return _batch_of(self.columns) if self.out is None else self.out


def _block_columns(objs: list[Any], shape: tuple[str, ...] | None = None) -> list[list[Any]] | None:
    """The batch columns (``BATCH_FIELDS`` without origin) of NDJSON objects that hold only batch
    fields, checked a column at a time as :func:`_batch_row` checks each; None when one does not
    pass (:func:`_batch_row` then finds which). ``shape``: the keys every object has, in order (its
    columns are then taken with one itemgetter call per object)."""
    n = len(objs)
    if shape is not None:
        if not _BATCH_JSON_FIELDS.issuperset(shape):
            return None
        try:
            rows = list(map(itemgetter(*shape), objs)) if len(shape) > 1 else [(o[shape[0]],) for o in objs]
        except KeyError:  # keys of the same count, not the same keys
            return _block_columns(objs)
        given = dict(zip(shape, map(list, zip(*rows, strict=True)), strict=True)) if n else {}

        def column(name: str, default: Any) -> list[Any]:
            return given.get(name) or [default] * n

    elif set(map(type, objs)) != {dict} or not all(map(_BATCH_JSON_FIELDS.issuperset, objs)):
        return None
    else:

        def column(name: str, default: Any) -> list[Any]:
            return list(map(dict.get, objs, repeat(name, n), repeat(default, n)))

    if (shape is None and any("bodyBase64" in o for o in objs)) or (shape is not None and "bodyBase64" in shape):
        bodies = list(map(_row_body, objs))
        if None in bodies:
            return None
    else:
        texts = column("body", None)
        if not _types_in(texts, _STR_OR_NONE):
            return None
        try:
            bodies = (
                [b"" if t is None else t.encode("utf-8") for t in texts]
                if None in texts
                else list(map(str.encode, texts))
            )
        except UnicodeEncodeError:
            return None
    topic, queue_id, tags, keys, uniq, wait, props, flag, born_ts, born_host, store_host, store_ts = (
        column(name, default) for name, default in _JSON_COLUMNS
    )
    if not (
        _types_in(topic, {str})
        and "" not in topic
        and _types_in(queue_id, {int, type(None)})
        and _in_range(queue_id, 0, INT_MAX)
        and all(_types_in(c, _STR_OR_NONE) for c in (tags, uniq, born_host, store_host))
        and _types_in(wait, {bool})
        and _types_in(flag, {int})
        and _in_range(flag, -(1 << 31), INT_MAX)
        and all(_types_in(c, {int, type(None)}) and _in_range(c, 0, _LONG_MAX) for c in (born_ts, store_ts))
    ):
        return None
    keys = _keys_column(keys)
    props = _properties_column(props)
    if keys is None or props is None:
        return None
    return [topic, bodies, queue_id, tags, keys, uniq, wait, props, flag, born_ts, born_host, store_host, store_ts]


_JSON_COLUMNS = (
    ("topic", None),
    ("queueId", None),
    ("tags", None),
    ("keys", None),
    ("uniqKey", None),
    ("wait", True),
    ("properties", None),
    ("flag", 0),
    ("bornTimestamp", None),
    ("bornHost", None),
    ("storeHost", None),
    ("storeTimestamp", None),
)
_STR_OR_NONE = {str, type(None)}


def _types_in(column: list[Any], types: set[type]) -> bool:
    return set(map(type, column)) <= types


def _in_range(column: list[Any], lo: int, hi: int) -> bool:
    """Every number of ``column`` (None aside) in [lo, hi]."""
    values = [v for v in column if v is not None] if None in column else column
    return not values or (lo <= min(values) and max(values) <= hi)


def _keys_column(keys: list[Any]) -> list[str | None] | None:
    """KEYS as :func:`_json_keys` reads them (a list of strings joined with spaces); None: refused."""
    types = set(map(type, keys))
    if types <= _STR_OR_NONE:
        return keys
    if not types <= {str, type(None), list}:
        return None
    if not all(type(k) is str for v in keys if type(v) is list for k in v):
        return None
    return [" ".join(v) if type(v) is list else v for v in keys]


def _properties_column(props: list[Any]) -> list[dict[str, str]] | list[tuple[()]] | None:
    """Properties as :func:`_json_properties` reads them, each message's as its dict (the default
    for every message when none has any); None: refused."""
    if not _types_in(props, {dict, type(None)}):
        return None
    if not _types_in(list(chain.from_iterable(map(dict.values, filter(None, props)))), {str}):
        return None
    if not any(props):
        return [()] * len(props)
    return [p or {} for p in props] if None in props else props


def _json_line(line: str, source: str, n: int) -> Any:
    """A line with leading JSON whitespace, or the error that names it."""
    try:
        obj, end = _JSON_DECODER.raw_decode(line, len(line) - len(line.lstrip(_JSON_SPACE)))
        if end != len(line) and line[end:].strip(_JSON_SPACE):
            raise json.JSONDecodeError("Extra data", line, len(line) - len(line[end:].lstrip(_JSON_SPACE)))
    except json.JSONDecodeError as e:
        raise InputError(f"{source}:{n}: not valid JSON: {e.msg} (column {e.colno})") from None
    return obj


def _batch_of(columns: list[list[Any]]) -> MessageBatch:
    """The columns read as a batch; an optional column with only defaults is None. The reader
    checked every value as the batch would: the batch is made without checking them again."""
    topic, body, queue_id, tags, keys, origin, *optional = columns
    n = len(topic)
    opt: list[list[Any] | None] = list(optional)
    for i, default in enumerate(BATCH_DEFAULTS):
        if optional[i].count(default) == n or (default == () and not any(optional[i])):  # () or {}: no properties
            opt[i] = None
    return _batch_from([topic, body, queue_id, tags, keys, origin, *opt])


def _batch_from(columns: list[Any]) -> MessageBatch:
    batch = object.__new__(MessageBatch)
    for name, column in zip(BATCH_FIELDS, columns, strict=True):
        object.__setattr__(batch, name, column)
    return batch


def packed_messages(messages: list[Message] | MessageBatch) -> bytes | list[Message]:
    """A batch as one ``marshal`` blob of its columns (builtin values only: about three times
    quicker to pass to another process than a pickle of the batch); a list of messages as it is."""
    if isinstance(messages, MessageBatch):
        return marshal.dumps([getattr(messages, name) for name in BATCH_FIELDS])
    return messages


def unpacked_messages(packed: bytes | list[Message]) -> list[Message] | MessageBatch:
    """The messages :func:`packed_messages` packed (the batch's values were checked before)."""
    return _batch_from(marshal.loads(packed)) if isinstance(packed, bytes) else packed


_JSON_DECODER = json.JSONDecoder()
_SCAN_ONCE = _JSON_DECODER.scan_once  # one JSON value from a position: raw_decode without its wrapper
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (str.strip() would take more)
