"""Input messages of a write: ``Message``, the column batch ``MessageBatch``, and the NDJSON reader.

An NDJSON line uses RocketMQ's own field names (as ``dump --format ndjson`` writes them); see
``message_from_json`` for the fields and how each is checked.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
import json
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(slots=True)
class MessageBatch:
    """Producer messages column by column: topic, body, queue id, TAGS and KEYS, every other field
    left to the broker (a :class:`Message` with its defaults). Bulk input with no object per
    message; ``origin`` names each message in errors (default ``message``)."""

    topic: list[str]
    body: list[bytes]
    queue_id: list[int | None]
    tags: list[str | None]
    keys: list[str | None]
    origin: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.topic)
        lengths = [len(self.body), len(self.queue_id), len(self.tags), len(self.keys)]
        if self.origin is not None:
            lengths.append(len(self.origin))
        if any(k != n for k in lengths):
            raise InputError(f"a message batch needs columns of one length: {[n, *lengths]}")
        for name, allowed in _BATCH_TYPES:
            column = getattr(self, name)
            if column is not None and not set(map(type, column)) <= allowed:
                i = next(i for i, v in enumerate(column) if type(v) not in allowed)
                raise InputError(f"message {i} of the batch: {name} is a {type(column[i]).__name__}")
        bad_q = [i for i, q in enumerate(self.queue_id) if q is not None and not 0 <= q <= INT_MAX]
        if bad_q:
            raise InputError(f"message {bad_q[0]} of the batch: queueId {self.queue_id[bad_q[0]]} is out of range")

    def __len__(self) -> int:
        return len(self.topic)

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> MessageBatch:
        """The producer fields (topic, body, queue id, tags, keys, origin) of ``messages``."""
        return cls(*producer_columns(messages))

    def message(self, i: int) -> Message:
        return Message(
            topic=self.topic[i],
            body=self.body[i],
            queue_id=self.queue_id[i],
            tags=self.tags[i],
            keys=self.keys[i],
            origin="message" if self.origin is None else self.origin[i],
        )

    def messages(self) -> list[Message]:
        return [self.message(i) for i in range(len(self))]


_BATCH_TYPES = (
    ("topic", {str}),
    ("body", {bytes}),
    ("queue_id", {int, type(None)}),
    ("tags", {str, type(None)}),
    ("keys", {str, type(None)}),
    ("origin", {str}),
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


def _simple_message(obj: Any) -> tuple[str, bytes, int | None, str | None, str | None] | None:
    """(topic, body, queueId, tags, keys) of the common producer message, with the checks of
    :func:`message_from_json` inlined; ``None`` for anything else (that function then says why)."""
    if type(obj) is not dict or not obj.keys() <= _SIMPLE_JSON_FIELDS:
        return None
    topic, text, queue_id = obj.get("topic"), obj.get("body"), obj.get("queueId")
    tags, keys = obj.get("tags"), obj.get("keys")
    if (
        type(topic) is str
        and topic
        and (text is None or type(text) is str)
        and (queue_id is None or (type(queue_id) is int and 0 <= queue_id <= INT_MAX))
        and (tags is None or type(tags) is str)
        and (keys is None or type(keys) is str)
    ):
        try:
            return topic, b"" if text is None else text.encode("utf-8"), queue_id, tags, keys
        except UnicodeEncodeError:
            return None
    return None


def message_from_json(obj: Any, *, origin: str = "message") -> Message:
    """A :class:`Message` from one NDJSON object (RocketMQ field names). Raises InputError."""
    if not isinstance(obj, dict):
        raise InputError(f"{origin}: expected a JSON object, got {type(obj).__name__}")
    simple = _simple_message(obj)
    if simple is not None:
        topic, body, queue_id, tags, keys = simple
        return Message(topic=topic, body=body, queue_id=queue_id, tags=tags, keys=keys, origin=origin)
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

    When every line is a plain producer message (topic, queueId, tags, keys, body) the result is a
    :class:`MessageBatch`, else a list of :class:`Message`."""
    return paused_gc(_read_ndjson, lines, source)


def _read_ndjson(lines: Iterable[str | bytes], source: str) -> list[Message] | MessageBatch:
    batch = MessageBatch([], [], [], [], [], [])
    add_topic, add_body, add_qid = batch.topic.append, batch.body.append, batch.queue_id.append
    add_tags, add_keys, add_origin = batch.tags.append, batch.keys.append, batch.origin.append  # type: ignore[union-attr]
    out: list[Message] | None = None  # once a line is more than a plain message
    decode = _JSON_DECODER.raw_decode
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{source}:{n}: not UTF-8 (byte {e.start})") from None
        if not line.strip():
            continue
        try:  # json.loads without its wrappers: the same parser, the same errors
            obj, end = decode(line, len(line) - len(line.lstrip(_JSON_SPACE)))
            if end != len(line) and line[end:].strip(_JSON_SPACE):
                raise json.JSONDecodeError("Extra data", line, len(line) - len(line[end:].lstrip(_JSON_SPACE)))
        except json.JSONDecodeError as e:
            raise InputError(f"{source}:{n}: not valid JSON: {e.msg} (column {e.colno})") from None
        if type(obj) is dict and obj.get("kind", MESSAGE_KIND) != MESSAGE_KIND:
            continue  # a dumped blank, end of data or damaged range
        if out is None:
            simple = _simple_message(obj)
            if simple is not None:
                topic, body, qid, tags, keys = simple
                add_topic(topic)
                add_body(body)
                add_qid(qid)
                add_tags(tags)
                add_keys(keys)
                add_origin(f"{source}:{n}")
                continue
            out = batch.messages()
        out.append(message_from_json(obj, origin=f"{source}:{n}"))
    return batch if out is None else out


_JSON_DECODER = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (str.strip() would take more)
