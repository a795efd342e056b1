"""Append messages to a store offline, the way the broker's append path does.

Sources: store-format.md §3 (records: §3.2 field values, §3.4 BLANK, §3.5 limits, §3.7 property
edits), §4.3 (queue offsets), §5.3 (index keys), §6 (checkpoint), §9.4 (offline append checklist),
§11.3 / §12 (topics.json, auto-create).

What a write does, in order (``plan_write`` reads, ``apply_write`` writes exactly the plan):

1. **End of the commit log.** The recovery walk (§8.2, CRC checked when ``checkCRCOnRecover``)
   starts at the furthest consume queue entry when that entry points at a valid record, else at the
   third-to-last file as normal recovery does. Where it stops is the write position. Non-zero bytes
   after it in the same file (a torn record, stale bytes left by an earlier truncation) are copied to
   the quarantine folder and zeroed; more than one maximum-size record of them, or any data in a later
   file, is refused (``UnsafePlan``: run ``recover`` first). A later all-zero (preallocated) file is
   reused when the log rolls into it.
2. **Queue offsets** continue from each consume queue's valid end, then past every NOT/COMMIT record
   the walk found beyond the consume queues (not yet dispatched). PREPARED and ROLLBACK records get
   queue offset 0 and do not advance it.
3. **Records** are V1; V2 (2-byte topic length) only when the emulated broker is 5.1.0+ and the topic
   has more than 127 characters, as ``autoMessageVersionOnTopicLen`` does. PHYSICALOFFSET is the
   record's real position, BODYCRC is masked, hosts are 8 or 20 bytes with the sysFlag v6 bits set to
   match (IPv6 needs 4.6.0+). Limits per §3.5: whole record <= ``maxMessageSize`` up to 4.9.3; body
   <= it from 4.9.4, and record <= it + 64 KiB from 4.9.5; properties <= 32767 bytes; V1 topic <= 127
   bytes. A record that does not fit (``len + 8 > remaining``) leaves an 8-byte BLANK header (the rest
   of the file stays zero) and goes to offset 0 of the next file, created at full size with its
   20-digit name.
4. **Store timestamp** is the clock, read per message and never below the previous record's (recovery
   relies on non-decreasing times); a message may give its own (reproducible stores).
5. **Dispatch** in the same run with :class:`~rmqstore.dispatch.Dispatcher`: records not yet
   dispatched are dispatched first (catch-up), then the new ones. ``dispatch=False`` leaves all of
   it to ``redispatch`` and creates ``abort``, so a broker started before that re-dispatches (§9.4.6).
6. **topics.json** gains every new topic (see :func:`topic_for_new`); **checkpoint**: see
   :func:`apply_write`.

Properties are stored in the order the Java broker stores them: the iteration order of a
``java.util.HashMap`` (:func:`java_hashmap_order`). A producer's map gets its keys in this order:
``TAGS``, ``KEYS``, ``WAIT`` (``new Message(...)``), ``UNIQ_KEY``, ``DELAY``, then the user
properties as given. Broker edits (§3.7) re-serialise that map with their additions put last:
``REAL_TOPIC``/``REAL_QID`` for a delay message, ``CLUSTER`` on 4.6.0+; 4.9.1-4.9.8 drop ``WAIT``.
Brokers 4.9.1+ decode into ``HashMap(128)``, earlier ones into ``HashMap()``; the result is checked
against every record of the three 4.4.0 stores. A ``raw`` message is stored as given instead:
topic, queue, properties in the given order, no broker edit, no generated ``UNIQ_KEY`` or ``WAIT``
(a replay of dumped records, or what the broker's own services write, e.g. a delay level coming due).

Speed: runs of plain producer messages (every store-level field left to the broker, IPv4 hosts, no
delay, no user properties) are checked and encoded a run at a time (record heads as one numpy array,
one join per run); every other message, and any plain one the run cannot vouch for, takes the
per-message path, which is the reference: both give the same bytes (``tests/test_write.py``).

Atomic batches: the whole input is validated and encoded before any file changes. Before the first
change a journal ``<root>/.rmqstore/write.journal`` (with copies of every byte range the write may
overwrite that was not zero) is written and fsynced; it is removed once everything is written. A
failure rolls the store back at once; a killed run leaves the journal and the next ``write`` rolls it
back first (:func:`rollback_pending`), so the files are byte for byte as before the batch.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import gc
import json
import mmap
import operator
import os
import re
import shutil
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import groupby, repeat
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as cpmod
from . import config as cfgmod
from .columnar import Columns, range_hashes, topic_key_hashes
from .commitlog import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    INNER_BATCH_FLAG,
    MAGIC_V1,
    NEED_UNWRAP_FLAG,
    PROP_DELAY,
    PROP_KEYS,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    PROP_WAIT,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Record,
    cal_msg_length,
    decode_record,
    encode_record,
    offset_msg_id,
    parse_host,
    version_tuple,
)
from .consumequeue import ENTRY_SIZE, FILLER_SIZE, entries_array, valid_prefix
from .dispatch import Dispatcher, DispatchRequest, DispatchStats, delivery_tags_code, scan_requests
from .errors import ConfigError, CorruptData, InputError, RmqstoreError, UnsafePlan, UnsupportedStore
from .fsutil import SCRATCH_DIR, atomic_write, fsync_dir, scratch_dir
from .indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from .indexfile import decode_header as decode_index_header
from .javahash import java_hash, java_hash_batch
from .layout import Segment, StoreConfig, file_name, list_segments
from .store import Store, map_file

__all__ = [
    "BROKER_MANAGED_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "Message",
    "PlannedRecord",
    "RollbackReport",
    "UniqKeySource",
    "WritePlan",
    "WriteResult",
    "apply_write",
    "check_topic_name",
    "java_hashmap_order",
    "message_from_json",
    "pending_journal",
    "plan_write",
    "read_ndjson",
    "rollback_pending",
    "topic_for_new",
    "write_messages",
]

PROP_CLUSTER = "CLUSTER"
JOURNAL_NAME = "write.journal"
_JOURNAL_FORMAT = 1
_INT_MAX = 0x7FFFFFFF
_LONG_MAX = (1 << 63) - 1
_PROPS_MAX = 32767  # Short.MAX_VALUE: PROPERTIES_SIZE_EXCEEDED above it
_V1_TOPIC_MAX = 127  # TOPICLENGTH is a signed byte in V1
_RECORD_SLACK = 65536  # 4.9.5+: record may exceed maxMessageSize by this much

# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (4.9.x/5.x; 4.4.0 refuses SCHEDULE_TOPIC_XXXX and TBW102)
# plus the auto-create template: a producer cannot send to these.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        cfgmod.AUTO_CREATE_TEMPLATE,
    }
)
# Topics the broker registers itself (§12): never added to topics.json by a write.
BROKER_MANAGED_TOPICS = NOT_ALLOWED_SEND_TOPICS | {"BenchmarkTest", "RMQ_SYS_TRACE_TOPIC"}
_SYSTEM_PREFIX = "rmq_sys_"  # 5.x system topics
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")  # TopicValidator

# Everything up to BODYLENGTH of a V1 record with IPv4 hosts (88 bytes, §3.1).
_FIXED_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
# The same as a numpy record, for encoding many records at once.
_HEADER_V4 = np.dtype(
    [
        ("size", ">i4"),
        ("magic", ">i4"),
        ("crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("phy", ">i8"),
        ("sys_flag", ">i4"),
        ("born_ts", ">i8"),
        ("born_addr", ">u4"),
        ("born_port", ">i4"),
        ("store_ts", ">i8"),
        ("store_addr", ">u4"),
        ("store_port", ">i4"),
        ("reconsume", ">i4"),
        ("prepared", ">i8"),
        ("body_len", ">i4"),
    ]
)
_SHORTS = [i.to_bytes(2, "big") for i in range(_PROPS_MAX + 1)]  # PROPERTIESLENGTH fields
_TRUE = "true"
# Message fields a plain message leaves as the broker chooses them (the fast lane's condition).
_PLAIN_FIELDS = (
    "raw",
    "properties",
    "delay_level",
    "sys_flag",
    "flag",
    "born_host",
    "store_host",
    "born_timestamp_ms",
    "store_timestamp_ms",
    "uniq_key",
    "reconsume_times",
    "prepared_transaction_offset",
    "wait",
)
_PLAIN_DEFAULTS = (False, (), 0, 0, 0, None, None, None, None, None, 0, 0, True)
_FAST_BLOCK = 8192  # messages classified at a time
_FAST_MIN_RUN = 8  # shorter runs of plain messages go one by one
_SHORT = struct.Struct(">h")
_BLANK_HEAD = struct.Struct(">ii")
_SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode()


# ---------------------------------------------------------------------------------------------
# Java HashMap iteration order


def _table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return max(n, 1)


def java_hashmap_order(keys: Iterable[str], *, initial_capacity: int = 16) -> list[str]:
    """Iteration order of a Java 8+ ``HashMap<String, ?>`` after putting ``keys`` in this order.

    ``new HashMap<>()`` is ``initial_capacity=16``; ``new HashMap<>(n)`` rounds ``n`` up to a power
    of two. The table doubles whenever the size exceeds 0.75 x capacity; iteration walks the buckets
    in index order, ``(h ^ (h >>> 16)) & (capacity - 1)`` with ``h = key.hashCode()``, and each bucket
    in insertion order (a resize keeps the relative order). A key put twice keeps its first place.
    Tree bins (8+ keys in one bucket of a 64+ table) are not modelled: property maps never get there.
    """
    order = list(dict.fromkeys(keys))
    cap = _table_size_for(initial_capacity)
    while len(order) > cap * 3 // 4:
        cap <<= 1
    mask = cap - 1

    def bucket(item: tuple[int, str]) -> tuple[int, int]:
        h = java_hash(item[1]) & 0xFFFFFFFF
        return ((h ^ (h >> 16)) & mask, item[0])

    return [k for _, k in sorted(enumerate(order), key=bucket)]


# ---------------------------------------------------------------------------------------------
# Input messages


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
# Fields of a dumped record (Record.to_json) that a write assigns itself: accepted and ignored.
_JSON_IGNORED = frozenset({"queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "msgId", "bodyLength"})
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
        from .timeparse import parse_time_ms

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


def message_from_json(obj: Any, *, origin: str = "message") -> Message:
    """A :class:`Message` from one NDJSON object (RocketMQ field names). Raises InputError."""
    if not isinstance(obj, dict):
        raise InputError(f"{origin}: expected a JSON object, got {type(obj).__name__}")
    if obj.keys() <= _SIMPLE_JSON_FIELDS:  # the common producer message: the checks below, inlined
        topic, text, queue_id = obj.get("topic"), obj.get("body"), obj.get("queueId")
        tags, keys = obj.get("tags"), obj.get("keys")
        if (
            type(topic) is str
            and topic
            and (text is None or type(text) is str)
            and (queue_id is None or (type(queue_id) is int and 0 <= queue_id <= _INT_MAX))
            and (tags is None or type(tags) is str)
            and (keys is None or type(keys) is str)
        ):
            try:
                body = b"" if text is None else text.encode("utf-8")
            except UnicodeEncodeError:
                pass  # the full path below says why
            else:
                return Message(topic=topic, body=body, queue_id=queue_id, tags=tags, keys=keys, origin=origin)
    unknown = [k for k in obj if k not in _JSON_FIELDS and k not in _JSON_IGNORED]
    if unknown:
        import difflib

        hint = difflib.get_close_matches(unknown[0], sorted(_JSON_FIELDS), n=1)
        more = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise InputError(f"{origin}: unknown field {unknown[0]!r}{more}")
    topic = obj.get("topic")
    if not isinstance(topic, str) or not topic:
        raise InputError(f"{origin}: topic is missing or not a string")
    if "body" in obj and "bodyBase64" in obj:
        raise InputError(f"{origin}: give body or bodyBase64, not both")
    body = b""
    if obj.get("bodyBase64") is not None:
        b64 = obj["bodyBase64"]
        if not isinstance(b64, str):
            raise InputError(f"{origin}: bodyBase64 must be a string")
        try:
            body = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{origin}: bodyBase64 is not valid base64") from None
    elif obj.get("body") is not None:
        text = obj["body"]
        if not isinstance(text, str):
            raise InputError(f"{origin}: body must be a string (UTF-8 text); use bodyBase64 for bytes")
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{origin}: body is not valid Unicode text") from None
    keys = obj.get("keys")
    if isinstance(keys, list):
        if not all(isinstance(k, str) for k in keys):
            raise InputError(f"{origin}: keys must be a string or a list of strings")
        keys = " ".join(keys)
    elif keys is not None and not isinstance(keys, str):
        raise InputError(f"{origin}: keys must be a string or a list of strings")
    props_obj = obj.get("properties") or {}
    if not isinstance(props_obj, dict):
        raise InputError(f"{origin}: properties must be an object of string values")
    props = []
    for k, v in props_obj.items():
        if not isinstance(v, str):
            raise InputError(f"{origin}: property {k!r} must have a string value, got {v!r}")
        props.append((k, v))
    sys_flag = _json_int(obj, "sysFlag", origin, -(1 << 31), _INT_MAX, 0) or 0
    tx = obj.get("transactionType")
    if tx is not None:
        name = str(tx).upper().removeprefix("TRANSACTION_").removesuffix("_TYPE")
        if name not in _TRANSACTION_TYPES:
            raise InputError(f"{origin}: transactionType {tx!r} is not one of NOT, PREPARED, COMMIT, ROLLBACK")
        bits = _TRANSACTION_TYPES[name]
        if sys_flag & TRANSACTION_MASK and sys_flag & TRANSACTION_MASK != bits:
            raise InputError(f"{origin}: transactionType {tx!r} contradicts sysFlag {sys_flag}")
        sys_flag = (sys_flag & ~TRANSACTION_MASK) | bits
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
        queue_id=_json_int(obj, "queueId", origin, 0, _INT_MAX, None),
        tags=_json_str(obj, "tags", origin),
        keys=keys,
        properties=tuple(props),
        flag=_json_int(obj, "flag", origin, -(1 << 31), _INT_MAX, 0) or 0,
        sys_flag=sys_flag,
        born_timestamp_ms=_json_time(obj, "bornTimestamp", origin),
        born_host=_json_str(obj, "bornHost", origin),
        store_host=_json_str(obj, "storeHost", origin),
        store_timestamp_ms=_json_time(obj, "storeTimestamp", origin),
        uniq_key=_json_str(obj, "uniqKey", origin),
        delay_level=_json_int(obj, "delayTimeLevel", origin, -(1 << 31), _INT_MAX, 0) or 0,
        reconsume_times=_json_int(obj, "reconsumeTimes", origin, -(1 << 31), _INT_MAX, 0) or 0,
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


def _paused_gc(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` with the cyclic garbage collector paused: building a batch allocates millions of
    acyclic objects, and every collection would rescan all live messages (3x slower at 1M)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return fn(*args, **kwargs)
    finally:
        if was:
            gc.enable()


def read_ndjson(lines: Iterable[str | bytes], *, source: str = "<stdin>") -> list[Message]:
    """Parse NDJSON (one message object per line; blank lines skipped). Raises InputError naming the line."""
    return _paused_gc(_read_ndjson, lines, source)


def _read_ndjson(lines: Iterable[str | bytes], source: str) -> list[Message]:
    out: list[Message] = []
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
        out.append(message_from_json(obj, origin=f"{source}:{n}"))
    return out


_JSON_DECODER = json.JSONDecoder()
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (str.strip() would take more)


# ---------------------------------------------------------------------------------------------
# Topics


def check_topic_name(topic: str, *, allow_system: bool = False, max_length: int = _V1_TOPIC_MAX) -> None:
    """RocketMQ's topic rules: ``^[%|a-zA-Z0-9_-]+$``, at most ``max_length`` characters, and not a
    topic producers may not send to (unless ``allow_system``). The character set also keeps the name
    inside ``consumequeue/`` (no ``/``, no ``..``). Raises InputError."""
    if not topic or not _TOPIC_RE.match(topic):
        raise InputError(f"topic {topic!r} is not allowed: only the characters %|a-zA-Z0-9_- may be used")
    if len(topic) > max_length:
        raise InputError(f"topic {topic!r} is {len(topic)} characters long; at most {max_length} are allowed")
    if not allow_system and (topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(_SYSTEM_PREFIX)):
        raise InputError(f"topic {topic!r} is reserved for the broker; pass --allow-system-topic to write it")


def _is_broker_managed(topic: str, cfg: StoreConfig) -> bool:
    return (
        topic in BROKER_MANAGED_TOPICS
        or topic.startswith(_SYSTEM_PREFIX)
        or topic in (cfg.broker_cluster_name, cfg.broker_name)
    )


def topic_for_new(
    topic: str, cfg: StoreConfig, template: cfgmod.TopicConfig | None, *, queue_nums: int = 4
) -> cfgmod.TopicConfig | None:
    """topics.json entry the broker creates on the first send to ``topic`` (None: broker-managed).

    * ordinary topic: ``createTopicInSendMessageMethod`` from ``TBW102`` (:func:`config.auto_create_topic`):
      min(``queue_nums`` (the producer's ``defaultTopicQueueNums``, 4), the template's write queues
      (``defaultTopicQueueNums`` of the broker, 8)) read and write queues, the template's perm without INHERIT (6),
      SINGLE_TAG, sysflag 0;
    * ``%RETRY%group``: 1 queue, perm 6 (``createTopicInSendMessageBackMethod``, retryQueueNums 1);
    * ``%DLQ%group``: 1 queue, perm 2 (write only) on 4.x, 6 on 5.x;
    * the broker's own topics (``SCHEDULE_TOPIC_XXXX``, transaction and trace topics, ``rmq_sys_*``,
      the cluster and broker names): None, the broker registers them itself at start.
    """
    if _is_broker_managed(topic, cfg):
        return None
    five = version_tuple(cfg.broker) >= (5,)
    attrs: dict[str, str] | None = {} if five else None
    if topic.startswith(RETRY_PREFIX):
        return cfgmod.TopicConfig(topic, 1, 1, cfgmod.PERM_READ | cfgmod.PERM_WRITE, attributes=attrs)
    if topic.startswith(DLQ_PREFIX):
        perm = cfgmod.PERM_READ | cfgmod.PERM_WRITE if five else cfgmod.PERM_WRITE
        return cfgmod.TopicConfig(topic, 1, 1, perm, attributes=attrs)
    # auto_create_topic checks the default 127-character limit; a longer name was checked already
    tc = cfgmod.auto_create_topic(
        topic if len(topic) <= _V1_TOPIC_MAX else "T",
        template=template,
        default_queue_nums=cfg.default_topic_queue_nums,
        client_queue_nums=queue_nums,
        broker_version=cfg.broker,
    )
    return replace(tc, topic_name=topic)


# ---------------------------------------------------------------------------------------------
# UNIQ_KEY


class UniqKeySource:
    """UNIQ_KEYs in the client's layout (§3.10): ip, low 16 bits of the pid, class-loader hash,
    milliseconds since the start of the month (local time) as an unsigned 32-bit value, counter.

    ``seed`` makes the pid and class-loader hash fixed (reproducible stores); the counter starts at 0.
    The ip is the message's born host address.
    """

    def __init__(self, *, seed: int | None = None):
        if seed is None:
            pid, class_loader_hash = os.getpid(), int.from_bytes(os.urandom(4), "big") & _INT_MAX
        else:
            pid, class_loader_hash = seed, zlib.crc32(str(seed).encode()) & _INT_MAX
        self._tail = struct.pack(">Hi", pid & 0xFFFF, class_loader_hash)
        self._counter = 0
        self._month = (0, -1)  # [start, end) of the cached month, ms
        self._prefixes: dict[bytes, str] = {}
        self._last_ms = -1
        self._last_hex = ""

    def _month_start(self, now_ms: int) -> int:
        start, end = self._month
        if start <= now_ms < end:
            return start
        t = dt.datetime.fromtimestamp(now_ms / 1000)
        first = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (first + dt.timedelta(days=32)).replace(day=1)
        self._month = (int(first.timestamp() * 1000), int(nxt.timestamp() * 1000))
        return self._month[0]

    def next(self, now_ms: int, ip: bytes) -> str:
        prefix = self._prefixes.get(ip)
        if prefix is None:
            prefix = self._prefixes[ip] = (ip + self._tail).hex().upper()
        if now_ms != self._last_ms:  # most keys of a batch share their millisecond
            start, end = self._month
            if not start <= now_ms < end:
                start = self._month_start(now_ms)
            self._last_ms = now_ms
            self._last_hex = f"{(now_ms - start) & 0xFFFFFFFF:08X}"
        c = self._counter
        self._counter = (c + 1) & 0xFFFF
        return prefix + self._last_hex + _HEX4[c]

    def many(self, now_ms: np.ndarray, ip: bytes) -> list[str]:
        """``[self.next(t, ip) for t in now_ms]``, one string per key, for non-decreasing times."""
        n = len(now_ms)
        if n == 0:
            return []
        lo, hi = int(now_ms[0]), int(now_ms[-1])
        start = self._month_start(lo)
        if hi >= self._month[1] or bool((now_ms[1:] < now_ms[:-1]).any()):
            return [self.next(t, ip) for t in now_ms.tolist()]
        prefix = self._prefixes.get(ip)
        if prefix is None:
            prefix = self._prefixes[ip] = (ip + self._tail).hex().upper()
        times, counts = np.unique(now_ms, return_counts=True)
        out: list[str] = []
        c = self._counter
        for t, k in zip(times.tolist(), counts.tolist(), strict=True):
            head = f"{prefix}{(t - start) & 0xFFFFFFFF:08X}"
            if c + k <= 0x10000:
                out += [head + h for h in _HEX4[c : c + k]]
            else:
                out += [head + _HEX4[(c + i) & 0xFFFF] for i in range(k)]
            c = (c + k) & 0xFFFF
        self._counter = c
        self._last_ms = -1  # the next() cache is stale now
        return out


_DISPATCH_CHUNK = 1 << 17  # records per dispatch_columns call: bounds the memory of the index keys
_HEX4 = [f"{i:04X}" for i in range(0x10000)]


# ---------------------------------------------------------------------------------------------
# Reading the store: where to append


def _nonzero_end(path: Path, start: int, end: int) -> int:
    """End (exclusive) of the last non-zero byte of ``path`` in [start, end), or ``start`` if none.

    Holes of a sparse file are skipped with SEEK_DATA/SEEK_HOLE, so an empty preallocated 1 GiB
    segment costs nothing to check.
    """
    if end <= start:
        return start
    fd = os.open(path, os.O_RDONLY)
    try:
        regions: list[tuple[int, int]] = []
        pos = start
        while pos < end:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break  # ENXIO: no data after pos
            if d >= end:
                break
            h = min(os.lseek(fd, d, os.SEEK_HOLE), end)
            regions.append((d, h))
            pos = h
        if not regions:
            return start
        size = os.fstat(fd).st_size
        m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        chunk = 1 << 24
        for d, h in reversed(regions):
            hi = h
            while hi > d:
                lo = max(d, hi - chunk)
                arr = np.frombuffer(m, dtype=np.uint8, count=hi - lo, offset=lo)
                nz = np.flatnonzero(arr)
                del arr  # the map cannot be closed while a view of it exists
                if nz.size:
                    return lo + int(nz[-1]) + 1
                hi = lo
        return start
    finally:
        m.close()


def _valid_entry(arr: np.ndarray, i: int) -> bool:
    return bool(arr[i]["phy_offset"] >= 0 and arr[i]["size"] > 0)


def _last_cq_entry(segs: list[Segment]) -> tuple[int, int] | None:
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


def _queue_end(segs: list[Segment]) -> int:
    """Byte end of a queue's valid entries (``last.from + validEnd``), as recovery computes it."""
    if not segs:
        return 0
    last = segs[-1]
    with map_file(last.path) as buf:
        arr = entries_array(buf)
        n = valid_prefix(arr)
        del arr
    return last.base_offset + n * ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class StaleRange:
    """Non-zero bytes after the end of valid data, zeroed (after a quarantine copy) before appending."""

    path: Path
    pos: int  # first byte in the file
    length: int
    phy_offset: int
    padding: bool = False  # the BLANK record ending the last file: padding, reused as the broker reuses it


@dataclass(frozen=True, slots=True)
class _AppendPoint:
    end_phy: int  # where the next record goes (end of valid data)
    segments: tuple[Segment, ...]
    stale: StaleRange | None
    pending: tuple[DispatchRequest, ...]  # records after the consume queues' end (not dispatched)
    dispatched_end: int  # end (offset + size) of the furthest consume queue entry
    last_store_ts: int  # store time of the last record (0 if none)
    last_store_host: tuple[bytes, int] | None


def _check_supported(st: Store) -> None:
    cfg = st.config
    if len(cfg.commitlog_dirs) > 1:
        raise UnsupportedStore(f"{st.root}: a multi-path commit log is not supported for writing")
    if cfg.enable_consume_queue_ext:
        raise UnsupportedStore(f"{st.root}: enableConsumeQueueExt=true is not supported for writing")
    if cfg.duplication_enable:
        raise UnsupportedStore(f"{st.root}: duplicationEnable=true is not supported for writing")
    if (st.root / "batchconsumequeue").is_dir():
        raise UnsupportedStore(f"{st.root}: batch consume queues are not supported for writing")


def _find_append_point(st: Store) -> _AppendPoint:
    cfg = st.config
    fs = cfg.commitlog_file_size
    segs, problems = st.commitlog_segments()
    if problems:
        p = problems[0]
        raise UnsafePlan(f"{p}; the broker would not load this commit log: run `rmqstore check` or `recover` first")
    # furthest consume queue entry over all queues
    last: tuple[int, int] | None = None
    for topic, qid, _ in st.queues():
        qsegs, qproblems = st.cq_segments(topic, qid)
        if qproblems:
            p = qproblems[0]
            raise UnsafePlan(f"{p}; run `rmqstore check` or `recover` first")
        e = _last_cq_entry(qsegs)
        if e is not None and (last is None or e[0] > last[0]):
            last = e
    dispatched_end = last[0] + last[1] if last else 0
    if not segs:
        if dispatched_end:
            raise UnsafePlan(
                f"{cfg.commitlog_dir}: no commit log files, but consume queues refer to offset {last[0] if last else 0}; "
                "run `rmqstore recover` first"
            )
        return _AppendPoint(0, (), None, (), 0, 0, None)
    first_base = segs[0].base_offset
    # start the recovery walk at the last dispatched record if it is valid, else at the third-to-last file
    start_idx, start_pos = max(0, len(segs) - 3), 0
    if last is not None:
        idx = (last[0] - first_base) // fs
        if 0 <= idx < len(segs) and segs[idx].base_offset <= last[0] < segs[idx].base_offset + fs:
            pos = last[0] - segs[idx].base_offset
            with map_file(segs[idx].path) as buf:
                try:
                    rec = decode_record(
                        buf, pos, path=str(segs[idx].path), file_from=segs[idx].base_offset, check_crc=True
                    )
                except CorruptData:
                    rec = None
            if isinstance(rec, Record) and rec.total_size == last[1] and rec.phy_offset == last[0]:
                start_idx, start_pos = idx, pos
    walk_start = segs[start_idx].base_offset + start_pos
    if dispatched_end < walk_start and dispatched_end < segs[start_idx].base_offset:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues end at commit log offset {dispatched_end} but the commit log "
            f"continues far beyond it (from {walk_start}); run `rmqstore redispatch` first"
        )
    reqs: list[DispatchRequest] = []
    idx, pos = start_idx, start_pos
    while True:
        seg = segs[idx]
        with map_file(seg.path) as buf:
            chunk, stop = scan_requests(
                buf, seg, cfg, start_pos=pos, check_crc=cfg.check_crc_on_recover, skip_size_mismatch=False
            )
        reqs += chunk
        if stop.reason == "blank" and idx + 1 < len(segs):
            idx, pos = idx + 1, 0
            continue
        end_phy = seg.base_offset + stop.pos
        break
    end_seg = segs[idx]
    if dispatched_end > end_phy:
        raise UnsafePlan(
            f"{cfg.consumequeue_dir}: consume queues refer to commit log offsets up to {dispatched_end}, beyond the "
            f"end of valid records at {end_phy}; run `rmqstore recover` first"
        )
    # stale bytes after the end, in the same file and in later files
    stale = None
    tail_end = _nonzero_end(end_seg.path, stop.pos, end_seg.size)
    if stop.reason == "blank":  # no next file: the broker appends at the BLANK's position (§8.2)
        if tail_end > stop.pos:
            stale = StaleRange(end_seg.path, stop.pos, tail_end - stop.pos, end_phy, padding=True)
    elif tail_end > stop.pos:
        length = tail_end - stop.pos
        limit = cfg.max_message_size + _RECORD_SLACK
        if length > limit:
            raise UnsafePlan(
                f"{end_seg.path}: {length} bytes of data after the end of valid records at byte {stop.pos} "
                f"(phy offset {end_phy}); more than one record can be: run `rmqstore check` or `recover` first"
            )
        stale = StaleRange(end_seg.path, stop.pos, length, end_phy)
    for later in segs[idx + 1 :]:
        if _nonzero_end(later.path, 0, later.size) > 0:
            raise UnsafePlan(
                f"{later.path}: holds data after the end of valid records at phy offset {end_phy}; "
                "run `rmqstore check` or `recover` first"
            )
    pending = tuple(r for r in reqs if r.phy_offset >= dispatched_end)
    last_ts, last_host = 0, None
    if reqs:
        tail = reqs[-1]
        last_ts = tail.store_timestamp_ms
        seg = segs[(tail.phy_offset - first_base) // fs]
        with map_file(seg.path) as buf:
            rec = decode_record(buf, tail.phy_offset - seg.base_offset, path=str(seg.path), file_from=seg.base_offset)
        if isinstance(rec, Record):
            last_host = (rec.store_addr, rec.store_port)
    return _AppendPoint(end_phy, tuple(segs), stale, pending, dispatched_end, last_ts, last_host)


def _index_end_phy(st: Store) -> int:
    files, _ = st.index_files()
    if not files:
        return 0
    try:
        with open(files[-1], "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
    except OSError as e:
        raise CorruptData(f"cannot read: {e.strerror}", path=files[-1], pos=0) from None
    return decode_index_header(head, path=str(files[-1])).end_phy_offset if len(head) == INDEX_HEADER_SIZE else 0


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True, slots=True)
class PlannedRecord:
    """One record of the plan, with the values the broker reports for a put."""

    origin: str
    topic: str  # as stored (SCHEDULE_TOPIC_XXXX for a delayed message)
    queue_id: int
    queue_offset: int
    phy_offset: int
    size: int
    store_timestamp_ms: int
    sys_flag: int
    uniq_key: str | None
    store_addr: bytes
    store_port: int

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_addr, self.store_port, self.phy_offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.phy_offset,
            "storeSize": self.size,
            "storeTimestamp": self.store_timestamp_ms,
            "sysFlag": self.sys_flag,
            "msgId": self.msg_id,
            "uniqKey": self.uniq_key,
        }


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The planned records, one list per field (a million records stay a few lists, not objects)."""

    origin: list[str]
    topic: list[str]
    queue_id: list[int]
    queue_offset: list[int]
    phy_offset: list[int]
    size: list[int]
    store_timestamp_ms: list[int]
    sys_flag: list[int]
    uniq_key: list[str | None]
    store_host: list[tuple[bytes, int]]
    tags_code: list[int]  # as the dispatcher derives them (§4.2, §3.11)
    keys: list[str | None]

    def __len__(self) -> int:
        return len(self.phy_offset)

    def columns(self, start: int, stop: int) -> Columns:
        """Records ``start:stop`` as :class:`rmqstore.columnar.Columns` for ``Dispatcher.dispatch_columns``,
        with their index keys in the broker's put order: ``topic#UNIQ_KEY``, then each KEYS token (§5.3)."""
        tp = self.topic[start:stop]
        n = len(tp)
        topic_ids = {t: i for i, t in enumerate(dict.fromkeys(tp))}
        tid = np.fromiter(map(topic_ids.__getitem__, tp), np.int64, n)
        uniq = self.uniq_key[start:stop]
        if None in uniq:
            urec = [i for i, u in enumerate(uniq) if u is not None]
            ustr = [uniq[i] for i in urec]
        else:
            urec, ustr = list(range(n)), uniq
        keys = self.keys[start:stop]
        krec = [i for i, k in enumerate(keys) if k]
        kstr = [keys[i] for i in krec]  # type: ignore[misc]
        if " " in "".join(kstr):  # several keys in one KEYS value: one index key per token
            pairs = [(i, t) for i in krec for t in keys[i].split(" ") if t]  # type: ignore[union-attr]
            krec, kstr = [i for i, _ in pairs], [t for _, t in pairs]
        key_rec = np.array(urec + krec, dtype=np.int64)
        key_hash = _topic_key_hashes(list(topic_ids), tid[key_rec], ustr + kstr)
        order = np.argsort(key_rec, kind="stable")  # the broker's put order: UNIQ_KEY, then KEYS
        i64 = np.int64
        return Columns(
            np.array(self.phy_offset[start:stop], dtype=i64),
            np.array(self.size[start:stop], dtype=i64),
            np.array(self.queue_id[start:stop], dtype=i64),
            np.array(self.queue_offset[start:stop], dtype=i64),
            np.array(self.store_timestamp_ms[start:stop], dtype=i64),
            np.array(self.sys_flag[start:stop], dtype=i64),
            np.array(self.tags_code[start:stop], dtype=i64),
            tid,
            list(topic_ids),
            key_rec[order],
            key_hash[order],
        )

    def record(self, i: int) -> PlannedRecord:
        addr, port = self.store_host[i]
        return PlannedRecord(
            self.origin[i],
            self.topic[i],
            self.queue_id[i],
            self.queue_offset[i],
            self.phy_offset[i],
            self.size[i],
            self.store_timestamp_ms[i],
            self.sys_flag[i],
            self.uniq_key[i],
            addr,
            port,
        )

    def __iter__(self) -> Iterator[PlannedRecord]:
        return (self.record(i) for i in range(len(self)))


def _join_records(head: np.ndarray, bodies: list[bytes], topics: list[bytes], props: list[bytes]) -> bytes:
    """V1 records from their 88-byte heads, bodies, length-prefixed topics and property strings."""
    n = len(bodies)
    raw = head.tobytes()
    pieces: list[bytes] = [b""] * (5 * n)
    pieces[0::5] = [raw[o : o + 88] for o in range(0, 88 * n, 88)]
    pieces[1::5] = bodies
    pieces[2::5] = topics
    pieces[3::5] = [_SHORTS[len(p)] for p in props]
    pieces[4::5] = props
    return b"".join(pieces)


def _topic_key_hashes(topics: list[str], tid: np.ndarray, keys: list[str]) -> np.ndarray:
    """Index keyHash (§5.2) of ``topics[tid[i]] + "#" + keys[i]``, without building those strings."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    joined = "".join(keys)
    if joined.isascii():
        length = np.fromiter(map(len, keys), np.int64, len(keys))
        begin = np.cumsum(length) - length
        h, _ = range_hashes(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), begin, length)
    else:
        h = java_hash_batch(keys).view(np.uint32).astype(np.uint64)
        length = np.array([len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys], dtype=np.int64)
    prefix = np.array([java_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.uint64)
    return topic_key_hashes(prefix[tid], h, length)


@dataclass(frozen=True, slots=True)
class FileWrite:
    """Bytes to put into one commit log file at ``pos`` (records and the BLANK header that ends it)."""

    path: Path
    base_offset: int
    pos: int
    data: bytes | bytearray
    create: bool  # the file does not exist yet: create it at full size first


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Everything a write will change; built by :func:`plan_write`, carried out by :func:`apply_write`."""

    root: Path
    start_phy: int
    end_phy: int  # commit log max offset after the write
    records: RecordColumns
    writes: tuple[FileWrite, ...]
    blanks: tuple[tuple[int, int], ...]  # (phy offset, size) of BLANK records written
    stale: StaleRange | None
    dispatch: bool
    catch_up: tuple[DispatchRequest, ...]  # records already in the log but not yet dispatched
    new_topics: tuple[cfgmod.TopicConfig, ...]
    index_end_phy: int
    last_store_timestamp_ms: int

    @property
    def files_created(self) -> tuple[Path, ...]:
        return tuple(w.path for w in self.writes if w.create)

    @property
    def bytes_written(self) -> int:
        return self.end_phy - self.start_phy

    def summary(self) -> dict[str, Any]:
        return {
            "messages": len(self.records),
            "startPhyOffset": self.start_phy,
            "endPhyOffset": self.end_phy,
            "bytes": self.bytes_written,
            "blanks": len(self.blanks),
            "filesCreated": [p.name for p in self.files_created],
            "topicsCreated": [t.topic_name for t in self.new_topics],
            "dispatch": self.dispatch,
            "catchUpRecords": len(self.catch_up) if self.dispatch else 0,
            "staleBytesZeroed": self.stale.length if self.stale and not self.stale.padding else 0,
        }


def _load_topics(cfg: StoreConfig) -> tuple[dict[str, cfgmod.TopicConfig], cfgmod.ConfigFile]:
    cf = cfgmod.read_config(cfg.config_dir, "topics.json")
    if cf.skipped is not None:
        raise ConfigError(f"unusable, not overwriting it: {cf.skipped.what}", path=cf.path, line=cf.skipped.line)
    return cfgmod.load_topics(cf.data, path=cf.path), cf


class _HostCache(dict[str, tuple[bytes, int]]):
    def get_host(self, text: str, origin: str, what: str) -> tuple[bytes, int]:
        v = self.get(text)
        if v is None:
            try:
                v = parse_host(text)
            except ValueError as e:
                raise InputError(f"{origin}: {what} {text!r} is not ip:port ({e})") from None
            self[text] = v
        return v


def _check_properties(items: Iterable[tuple[str, str]], origin: str) -> None:
    """The reason a property string is unusable (raised), for the names and values given."""
    for k, v in items:
        if not k:
            raise InputError(f"{origin}: a property name is empty")
        if not v:
            raise InputError(f"{origin}: property {k!r} has an empty value (the broker drops it when reading)")
        for ch, name in (("\x01", "0x01"), ("\x02", "0x02")):
            if ch in k or ch in v:
                raise InputError(f"{origin}: property {k!r} contains the separator byte {name}")


class _PropsFormat:
    """Serialises property maps with one key set: the HashMap order, as one %-format (cached per key set)."""

    __slots__ = ("names", "getter", "fmt", "single")

    def __init__(self, names: list[str]):
        self.names = names
        self.getter = operator.itemgetter(*names) if names else None
        self.single = len(names) == 1
        self.fmt = "".join(k.replace("%", "%%") + "\x01%s\x02" for k in names)

    def render(self, props: dict[str, str]) -> str:
        if self.getter is None:
            return ""
        vals = self.getter(props)
        return self.fmt % ((vals,) if self.single else vals)


def plan_write(
    st: Store,
    messages: Sequence[Message],
    *,
    clock: Callable[[], int] | None = None,
    dispatch: bool = True,
    store_host: str | None = None,
    born_host: str | None = None,
    allow_system_topic: bool = False,
    max_topic_length: int = _V1_TOPIC_MAX,
    uniq_keys: UniqKeySource | None = None,
    topic_queue_nums: int = 4,
) -> WritePlan:
    """Validate and encode ``messages`` and lay them out after the end of the commit log (reads only).

    ``clock`` gives the store time in ms (default: the system clock). Hosts are ``ip:port``; the store
    host defaults to the last record's, else ``brokerIP1:listenPort``, else ``127.0.0.1:listenPort``;
    the born host to ``127.0.0.1:0``. ``topic_queue_nums`` is the producer's ``defaultTopicQueueNums``
    used when a topic is auto-created.

    Raises:
        InputError: a message the broker would refuse (names its origin), or a bad option.
        UnsafePlan: the store has data the write would have to destroy, or an interrupted write.
        UnsupportedStore, CorruptData, ConfigError: the store or its topics.json cannot be used.
    """
    return _paused_gc(
        _plan_write,
        st,
        messages,
        clock=clock,
        dispatch=dispatch,
        store_host=store_host,
        born_host=born_host,
        allow_system_topic=allow_system_topic,
        max_topic_length=max_topic_length,
        uniq_keys=uniq_keys,
        topic_queue_nums=topic_queue_nums,
    )


def _plan_write(
    st: Store,
    messages: Sequence[Message],
    *,
    clock: Callable[[], int] | None = None,
    dispatch: bool = True,
    store_host: str | None = None,
    born_host: str | None = None,
    allow_system_topic: bool = False,
    max_topic_length: int = _V1_TOPIC_MAX,
    uniq_keys: UniqKeySource | None = None,
    topic_queue_nums: int = 4,
) -> WritePlan:
    """The work of :func:`plan_write`."""
    cfg = st.config
    _check_supported(st)
    if pending_journal(st.root) is not None:
        raise UnsafePlan(f"{st.root}: an interrupted write must be rolled back first (run `rmqstore write` again)")
    now = clock or (lambda: time.time_ns() // 1_000_000)
    broker = version_tuple(cfg.broker)
    v6_ok = broker >= (4, 6, 0)
    v2_ok = broker >= (5, 1, 0)
    add_cluster = broker >= (4, 6, 0)
    drop_wait = (4, 9, 1) <= broker < (5,)
    broker_cap = 128 if broker >= (4, 9, 1) else 16
    body_limit_only = broker >= (4, 9, 4)
    record_slack = broker >= (4, 9, 5)
    levels = cfg.delay_levels_ms()
    max_level = len(levels)
    fs = cfg.commitlog_file_size
    max_record = cfg.max_message_size
    keys_gen = uniq_keys or UniqKeySource()

    ap = _find_append_point(st)
    index_end = _index_end_phy(st)
    if cfg.message_index_enable and index_end > 0 and index_end >= ap.end_phy:
        raise UnsafePlan(
            f"{cfg.index_dir}: the index refers to commit log offset {index_end}, beyond the end of valid records "
            f"at {ap.end_phy}; run `rmqstore recover` first"
        )

    hosts = _HostCache()
    if store_host:
        default_store = hosts.get_host(store_host, "--store-host", "store host")
    elif ap.last_store_host is not None:
        default_store = ap.last_store_host
    else:
        default_store = hosts.get_host(f"{cfg.broker_ip or '127.0.0.1'}:{cfg.listen_port}", "broker.conf", "brokerIP1")
    default_born = hosts.get_host(born_host or "127.0.0.1:0", "--born-host", "born host")

    topics, _ = _load_topics(cfg)
    template = topics.get(cfgmod.AUTO_CREATE_TEMPLATE)
    new_topics: dict[str, cfgmod.TopicConfig] = {}
    topic_info: dict[str, tuple[cfgmod.TopicConfig | None, bytes]] = {}

    # next queue offsets: from the consume queues, then past records not yet dispatched (§9.4.3)
    next_qoff: dict[tuple[str, int], int] = {}

    def queue_offset(topic: str, qid: int) -> int:
        key = (topic, qid)
        v = next_qoff.get(key)
        if v is None:
            v = next_qoff[key] = _queue_end(st.cq_segments(topic, qid)[0]) // ENTRY_SIZE
        return v

    for r in ap.pending:
        if r.sys_flag & TRANSACTION_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            next_qoff[(r.topic, r.queue_id)] = max(queue_offset(r.topic, r.queue_id), r.queue_offset + 1)

    rr: dict[str, int] = {}  # round-robin position per topic

    def topic_entry(topic: str, origin: str) -> tuple[cfgmod.TopicConfig | None, bytes]:
        check_topic_name(topic, allow_system=allow_system_topic, max_length=max_topic_length)
        if len(topic) > _V1_TOPIC_MAX and not v2_ok:
            raise InputError(f"{origin}: topic {topic!r} is longer than 127 characters: only 5.1.0+ brokers store it")
        tc = topics.get(topic)
        if tc is None:
            tc = topic_for_new(topic, cfg, template, queue_nums=topic_queue_nums)
            if tc is not None:
                new_topics[topic] = tc
        out = topic_info[topic] = (tc, topic.encode("utf-8"))
        return out

    def pick_queue(topic: str, tc: cfgmod.TopicConfig | None, origin: str) -> int:
        if tc is None or tc.write_queue_nums <= 0:
            raise InputError(f"{origin}: topic {topic!r} has no write queues to choose from; give queueId")
        n = tc.write_queue_nums
        pos = rr.get(topic)
        if pos is None:
            pos = sum(queue_offset(topic, q) for q in range(n)) % n
        rr[topic] = pos + 1
        return pos % n

    formats_by_cap: dict[int, dict[tuple[str, ...], _PropsFormat]] = {0: {}, 16: {}, broker_cap: {}}

    def props_format(names: Iterable[str], cap: int) -> _PropsFormat:
        """Cached serialiser for a key sequence; ``cap`` 0 keeps the given order (raw messages)."""
        cache = formats_by_cap[cap]
        key = tuple(names)
        f = cache.get(key)
        if f is None:
            if len(cache) > 10_000:  # every message has its own property names: do not hoard
                cache.clear()
            f = cache[key] = _PropsFormat(list(key) if cap == 0 else java_hashmap_order(key, initial_capacity=cap))
        return f

    cols = RecordColumns([], [], [], [], [], [], [], [], [], [], [], [])
    add_origin, add_topic, add_qid = cols.origin.append, cols.topic.append, cols.queue_id.append
    add_qoff, add_phy, add_size = cols.queue_offset.append, cols.phy_offset.append, cols.size.append
    add_ts, add_sys = cols.store_timestamp_ms.append, cols.sys_flag.append
    add_uniq, add_host = cols.uniq_key.append, cols.store_host.append
    add_tcode, add_keys = cols.tags_code.append, cols.keys.append
    tags_codes: dict[str, int] = {}
    writes: list[FileWrite] = []
    blanks: list[tuple[int, int]] = []
    seg_by_base = {s.base_offset: s for s in ap.segments}

    base = ap.end_phy - ap.end_phy % fs
    pos = ap.end_phy - base
    chunk = bytearray()
    chunk_pos = pos
    last_ts = ap.last_store_ts

    def flush_chunk(next_base: int) -> None:
        nonlocal chunk, chunk_pos, base
        if chunk:
            created = base not in seg_by_base
            writes.append(FileWrite(cfg.commitlog_dir / file_name(base), base, chunk_pos, chunk, created))
        base = next_base
        chunk = bytearray()
        chunk_pos = 0

    def next_file() -> None:
        """End the current file with a BLANK record (§3.4); go on at offset 0 of the next file."""
        nonlocal chunk, pos
        remaining = fs - pos
        if remaining >= 8:
            chunk += _BLANK_HEAD.pack(remaining, BLANK_MAGIC)
            blanks.append((base + pos, remaining))
        flush_chunk(base + fs)
        pos = 0

    pack = _FIXED_V4.pack
    pack_short = _SHORT.pack
    crc32 = zlib.crc32
    next_uniq = keys_gen.next

    def put_one(m: Message) -> None:
        """The broker's append path for one message (any kind of message)."""
        nonlocal chunk, pos, last_ts
        origin = m.origin
        topic = m.topic
        info = topic_info.get(topic)
        tc, tb = info if info is not None else topic_entry(topic, origin)
        sys_flag = m.sys_flag
        if sys_flag & (INNER_BATCH_FLAG | NEED_UNWRAP_FLAG):
            raise InputError(f"{origin}: sysFlag {sys_flag:#x}: inner-batch records are not supported")
        tt = sys_flag & TRANSACTION_MASK
        qid = m.queue_id
        if qid is None:
            qid = pick_queue(topic, tc, origin)
        elif tc is not None and not m.raw and qid >= tc.write_queue_nums and qid >= tc.read_queue_nums:
            raise InputError(
                f"{origin}: queueId {qid} is not a queue of topic {topic!r} "
                f"({max(tc.read_queue_nums, tc.write_queue_nums)} queues)"
            )
        # hosts and times
        born_addr, born_port = hosts.get_host(m.born_host, origin, "bornHost") if m.born_host else default_born
        store_hp = hosts.get_host(m.store_host, origin, "storeHost") if m.store_host else default_store
        store_addr, store_port = store_hp
        v6 = (BORNHOST_V6_FLAG if len(born_addr) == 16 else 0) | (
            STOREHOSTADDRESS_V6_FLAG if len(store_addr) == 16 else 0
        )
        sys_flag = (sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) | v6
        if v6 and not v6_ok:
            raise InputError(f"{origin}: IPv6 hosts need a 4.6.0+ broker (this store is {cfg.broker})")
        store_ts = m.store_timestamp_ms
        if store_ts is None:
            store_ts = now()
            if store_ts < last_ts:
                store_ts = last_ts
        last_ts = store_ts
        born_ts = store_ts if m.born_timestamp_ms is None else m.born_timestamp_ms

        # properties and the broker's edits (§3.7)
        if m.raw:
            items = m.properties
            props = dict(items)
            if len(props) != len(items):
                raise InputError(f"{origin}: a property is given twice")
            fmt = props_format(props, 0)
        else:
            props = {}
            if m.tags is not None:
                props[PROP_TAGS] = m.tags
            if m.keys is not None and m.keys.strip():
                props[PROP_KEYS] = m.keys
            props[PROP_WAIT] = "true" if m.wait else "false"
            uniq = m.uniq_key
            if uniq is None and m.properties:
                uniq = dict(m.properties).get(PROP_UNIQ_KEY)
            props[PROP_UNIQ_KEY] = uniq if uniq is not None else next_uniq(born_ts, born_addr)
            delay = m.delay_level
            if delay:
                if delay < 0:
                    raise InputError(f"{origin}: delayTimeLevel {delay} is negative")
                props[PROP_DELAY] = str(delay)
            if m.properties:
                props.update(m.properties)
            fmt = props_format(props, 16)  # the producer's map
            rescheduled = False
            if PROP_DELAY in props and (tt == TRANSACTION_NOT_TYPE or tt == TRANSACTION_COMMIT_TYPE):
                try:
                    level = int(props[PROP_DELAY])
                except ValueError:
                    raise InputError(f"{origin}: DELAY {props[PROP_DELAY]!r} is not a number") from None
                if level > 0:
                    if level > max_level:
                        level = max_level
                        props[PROP_DELAY] = str(level)
                    props[PROP_REAL_TOPIC] = topic
                    props[PROP_REAL_QID] = str(qid)
                    topic, qid = SCHEDULE_TOPIC, level - 1  # the broker's own topic: no name check
                    tb = _SCHEDULE_TOPIC_BYTES
                    rescheduled = True
            if add_cluster or rescheduled:
                # the broker decodes the producer's string into a map, edits it and serialises it again
                names = list(fmt.names)
                if add_cluster:
                    props[PROP_CLUSTER] = cfg.broker_cluster_name
                    if PROP_CLUSTER not in names:
                        names.append(PROP_CLUSTER)
                if drop_wait and PROP_WAIT in names:
                    names.remove(PROP_WAIT)  # removed for the stored string, put back afterwards
                    if rescheduled:
                        names.append(PROP_WAIT)
                if rescheduled:
                    names += [k for k in (PROP_REAL_TOPIC, PROP_REAL_QID) if k not in names]
                fmt = props_format(names, broker_cap)
        text = fmt.render(props)
        n_props = len(fmt.names)
        if (
            text.count("\x01") != n_props
            or text.count("\x02") != n_props
            or "\x01\x02" in text
            or "\x02\x01" in text
            or text[:1] == "\x01"
        ):
            _check_properties(((k, props[k]) for k in fmt.names), origin)
            raise InputError(f"{origin}: the properties cannot be stored")
        props_b = text.encode("utf-8")
        if len(props_b) > _PROPS_MAX:
            raise InputError(f"{origin}: properties are {len(props_b)} bytes; the broker allows at most {_PROPS_MAX}")

        # queue offset (NOT/COMMIT only, §4.3) and the record
        if tt == TRANSACTION_NOT_TYPE or tt == TRANSACTION_COMMIT_TYPE:
            key = (topic, qid)
            qoff = next_qoff.get(key)
            if qoff is None:
                qoff = queue_offset(topic, qid)
            next_qoff[key] = qoff + 1
        else:
            qoff = 0
        body = m.body
        v2 = len(tb) > _V1_TOPIC_MAX
        if v6 or v2:
            size = cal_msg_length(sys_flag, len(body), len(tb), len(props_b), v2=v2)
        else:
            size = 91 + len(body) + len(tb) + len(props_b)
        if body_limit_only:
            if len(body) > max_record:
                raise InputError(f"{origin}: the body is {len(body)} bytes; maxMessageSize is {max_record}")
            if record_slack and size > max_record + _RECORD_SLACK:
                raise InputError(f"{origin}: the record is {size} bytes; at most maxMessageSize + 64 KiB")
        elif size > max_record:
            raise InputError(f"{origin}: the record is {size} bytes; maxMessageSize is {max_record}")
        # layout: BLANK and the next file when the record does not fit (§3.4)
        if size + 8 > fs - pos:
            if size + 8 > fs:
                raise InputError(f"{origin}: the record is {size} bytes; it cannot fit in a {fs}-byte commit log file")
            next_file()
        phy = base + pos
        crc = crc32(body) & _INT_MAX
        if not v6 and not v2:
            chunk += pack(
                size,
                MAGIC_V1,
                crc,
                qid,
                m.flag,
                qoff,
                phy,
                sys_flag,
                born_ts,
                born_addr,
                born_port,
                store_ts,
                store_addr,
                store_port,
                m.reconsume_times,
                m.prepared_transaction_offset,
                len(body),
            )
            chunk += body
            chunk.append(len(tb))
            chunk += tb
            chunk += pack_short(len(props_b))
            chunk += props_b
        else:
            chunk += encode_record(
                topic=topic,
                queue_id=qid,
                flag=m.flag,
                queue_offset=qoff,
                phy_offset=phy,
                sys_flag=sys_flag,
                born_timestamp_ms=born_ts,
                born_addr=born_addr,
                born_port=born_port,
                store_timestamp_ms=store_ts,
                store_addr=store_addr,
                store_port=store_port,
                reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset,
                body=body,
                properties=props_b,
                v2=v2,
                crc=crc,
            )
        pos += size
        # what the dispatcher reads back from this record (§3.11, §4.2)
        tags = props.get(PROP_TAGS)
        if tags:
            tcode = tags_codes.get(tags)
            if tcode is None:
                tcode = tags_codes[tags] = java_hash(tags)
        else:
            tcode = 0
        if topic == SCHEDULE_TOPIC and PROP_DELAY in props:
            try:  # the delivery time; a DELAY that is not a number stops the broker's dispatcher
                tcode = delivery_tags_code(props[PROP_DELAY], store_ts, levels, tcode)
            except ValueError:
                raise InputError(f"{origin}: DELAY {props[PROP_DELAY]!r} is not a number") from None
        add_tcode(tcode)
        add_keys(props.get(PROP_KEYS) if props_b else "")
        add_origin(origin)
        add_topic(topic)
        add_qid(qid)
        add_qoff(qoff)
        add_phy(phy)
        add_size(size)
        add_ts(store_ts)
        add_sys(sys_flag)
        add_uniq(props.get(PROP_UNIQ_KEY))
        add_host(store_hp)

    # ---- the fast lane: runs of plain messages, encoded a run at a time -------------------------
    # A plain message is a producer's message with every store-level field left to the broker (see
    # _PLAIN_FIELDS), IPv4 default hosts, no delay, no user properties: its properties are TAGS,
    # KEYS, WAIT, UNIQ_KEY (and CLUSTER). The lane gives exactly the bytes ``put_one`` gives; a message
    # it cannot vouch for (a topic that fails its checks, a V2 topic, a limit exceeded, a separator in
    # a value) goes through ``put_one``, which raises the error the broker would.
    born_addr0, born_port0 = default_born
    store_addr0, store_port0 = default_store
    fast_hosts = len(born_addr0) == 4 and len(store_addr0) == 4
    born_ip0 = int.from_bytes(born_addr0, "big") if fast_hosts else 0
    store_ip0 = int.from_bytes(store_addr0, "big") if fast_hosts else 0
    cluster = cfg.broker_cluster_name
    cluster_bad = not cluster or "\x01" in cluster or "\x02" in cluster
    run_formats: dict[int, _PropsFormat] = {}
    topic_prefix: dict[str, bytes] = {}
    ns_clock = time.time_ns if clock is None else None

    def run_format(code: int) -> _PropsFormat:
        f = run_formats.get(code)
        if f is None:
            names = ([PROP_TAGS] if code & 1 else []) + ([PROP_KEYS] if code & 2 else []) + [PROP_WAIT, PROP_UNIQ_KEY]
            f = props_format(names, 16)
            if add_cluster:
                names = [*f.names, PROP_CLUSTER]
                if drop_wait:
                    names.remove(PROP_WAIT)
                f = props_format(names, broker_cap)
            run_formats[code] = f
        return f

    def value_column(values: list[str], may_be_empty: bool, bad: np.ndarray) -> np.ndarray:
        """UTF-8 lengths of one property's values; marks in ``bad`` the messages whose value is empty
        (when that is refused) or holds a separator."""
        joined = "".join(values)
        if "\x01" in joined or "\x02" in joined or not (may_be_empty or all(values)):
            bad |= np.array([(not v and not may_be_empty) or "\x01" in v or "\x02" in v for v in values], dtype=bool)
        if joined.isascii():
            return np.fromiter(map(len, values), np.int64, len(values))
        return np.array([len(v.encode("utf-8")) for v in values], dtype=np.int64)

    def put_run(run: Sequence[Message], code: int) -> None:
        k = len(run)
        fmt = run_format(code)
        names = fmt.names
        topics = [m.topic for m in run]
        # -- checks, with no side effect but the topics' own (as put_one's): which messages go fast
        tmap = {t: n for n, t in enumerate(dict.fromkeys(topics))}
        tids = np.fromiter(map(tmap.__getitem__, topics), np.int64, k)
        limit = np.empty(len(tmap), dtype=np.int64)
        can_pick = np.empty(len(tmap), dtype=bool)
        tlen = np.empty(len(tmap), dtype=np.int64)
        tinfo: list[tuple[cfgmod.TopicConfig | None, bytes] | None] = []
        for t, n in tmap.items():
            info = topic_info.get(t)
            if info is None:
                # first sight of the topic: validate (and auto-create) it as put_one would; a topic
                # that fails stays unknown, and its messages go through put_one, which raises
                try:
                    info = topic_entry(t, run[topics.index(t)].origin)
                except InputError:
                    info = None
            if info is not None and len(info[1]) > _V1_TOPIC_MAX:
                info = None  # V2 record: put_one
            tinfo.append(info)
            if info is None:
                limit[n], can_pick[n], tlen[n] = -1, False, 0
                continue
            tc, tb = info
            limit[n] = _INT_MAX if tc is None else max(tc.write_queue_nums, tc.read_queue_nums)
            can_pick[n] = tc is not None and tc.write_queue_nums > 0
            tlen[n] = len(tb)
            if t not in topic_prefix:
                topic_prefix[t] = bytes([len(tb)]) + tb
        lim = limit[tids]
        bad = lim < 0
        none_q = -(1 << 40)
        q = np.fromiter((none_q if m.queue_id is None else m.queue_id for m in run), np.int64, k)
        picked = q == none_q
        bad |= (q >= lim) | ((q < 0) & ~picked) | (picked & ~can_pick[tids])
        # a topic's first round-robin pick starts from its queues' offsets at that message: put_one
        for t, n in tmap.items():
            if t not in rr:
                first = np.flatnonzero(picked & (tids == n))
                if len(first):
                    bad[first[0]] = True
        # property values and the properties' length: names, values, separators
        plen = np.full(k, sum(len(n) + 2 for n in names) + 32, dtype=np.int64)  # 32: a generated UNIQ_KEY
        if PROP_WAIT in names:
            plen += 4  # "true"
        tags = keys = None
        if code & 1:
            tags = [m.tags for m in run]
            plen += value_column(tags, False, bad)  # type: ignore[arg-type]
        if code & 2:
            keys = [m.keys for m in run]
            plen += value_column(keys, True, bad)  # type: ignore[arg-type]
        if PROP_CLUSTER in names:
            plen += len(cluster.encode("utf-8"))
            if cluster_bad:
                bad[:] = True
        bodies = [m.body for m in run]
        blen = np.fromiter(map(len, bodies), np.int64, k)
        size = 91 + blen + tlen[tids] + plen
        bad |= plen > _PROPS_MAX
        if body_limit_only:
            bad |= blen > max_record
            if record_slack:
                bad |= size > max_record + _RECORD_SLACK
        else:
            bad |= size > max_record
        bad |= size + 8 > fs
        tnames = list(tmap)

        def fast(a: int, b: int) -> None:
            put_checked(
                run[a:b],
                fmt,
                tnames,
                topics[a:b],
                tids[a:b],
                tinfo,
                q[a:b],
                bodies[a:b],
                None if tags is None else tags[a:b],
                None if keys is None else keys[a:b],
                size[a:b],
                blen[a:b],
            )

        a = 0
        for i in np.flatnonzero(bad).tolist():
            if i > a:
                fast(a, i)
            put_one(run[i])
            a = i + 1
        if a < k:
            fast(a, k)

    def put_checked(
        msgs: Sequence[Message],
        fmt: _PropsFormat,
        tnames: list[str],
        topics: list[str],
        tids: np.ndarray,
        tinfo: list[tuple[cfgmod.TopicConfig | None, bytes] | None],
        q: np.ndarray,
        bodies: list[bytes],
        tags: list[str] | None,
        keys: list[str] | None,
        size: np.ndarray,
        blen: np.ndarray,
    ) -> None:
        """Plain messages that passed every check: the side effects, in message order."""
        nonlocal chunk, pos, last_ts
        n = len(msgs)
        # queue ids: the round robin, in message order
        qv = q.copy()
        for i in np.flatnonzero(q < 0).tolist():
            info = tinfo[int(tids[i])]
            qv[i] = pick_queue(topics[i], info[0] if info else None, msgs[i].origin)
        # store time: the clock per message, never below the previous record's; born time = store time
        if ns_clock is not None:
            ts = np.array([ns_clock() for _ in range(n)], dtype=np.int64) // 1_000_000
        else:
            ts = np.array([now() for _ in range(n)], dtype=np.int64)
        ts[0] = max(int(ts[0]), last_ts)
        ts = np.maximum.accumulate(ts)
        last_ts = int(ts[-1])
        uniqs = keys_gen.many(ts, born_addr0)
        # the property strings
        columns: list[Any] = []
        for name in fmt.names:
            if name == PROP_TAGS:
                columns.append(tags)
            elif name == PROP_KEYS:
                columns.append(keys)
            elif name == PROP_UNIQ_KEY:
                columns.append(uniqs)
            elif name == PROP_WAIT:
                columns.append(repeat(_TRUE, n))
            else:
                columns.append(repeat(cluster, n))
        pattern = fmt.fmt
        props_b = [(pattern % vals).encode("utf-8") for vals in zip(*columns, strict=False)]
        # queue offsets: per (topic, queue), continuing each queue in message order
        ukeys, inv, counts = np.unique(tids * (1 << 32) + qv, return_inverse=True, return_counts=True)
        order = np.argsort(inv, kind="stable")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        bases = np.empty(len(ukeys), dtype=np.int64)
        for g, kv in enumerate(ukeys.tolist()):
            qkey = (tnames[kv >> 32], kv & 0xFFFFFFFF)
            first = next_qoff.get(qkey)
            if first is None:
                first = queue_offset(*qkey)
            bases[g] = first
            next_qoff[qkey] = first + int(counts[g])
        qoff = bases[inv] + rank
        crc = np.fromiter(map(zlib.crc32, bodies), np.int64, n) & _INT_MAX
        # lay the records out, rolling to the next file where one does not fit (BLANK first)
        phy = np.empty(n, dtype=np.int64)
        i0 = 0
        while i0 < n:
            ends = pos + np.cumsum(size[i0:])
            over = np.flatnonzero(ends + 8 > fs)
            j = i0 + (int(over[0]) if len(over) else n - i0)
            if j > i0:
                phy[i0:j] = base + ends[: j - i0] - size[i0:j]
                h = np.zeros(j - i0, dtype=_HEADER_V4)
                h["size"] = size[i0:j]
                h["magic"] = MAGIC_V1
                h["crc"] = crc[i0:j]
                h["queue_id"] = qv[i0:j]
                h["queue_offset"] = qoff[i0:j]
                h["phy"] = phy[i0:j]
                h["born_ts"] = ts[i0:j]
                h["born_addr"] = born_ip0
                h["born_port"] = born_port0
                h["store_ts"] = ts[i0:j]
                h["store_addr"] = store_ip0
                h["store_port"] = store_port0
                h["body_len"] = blen[i0:j]
                chunk += _join_records(h, bodies[i0:j], [topic_prefix[t] for t in topics[i0:j]], props_b[i0:j])
                pos = int(ends[j - i0 - 1])
            if j < n:
                next_file()
            i0 = j
        # what the dispatcher reads back (§3.11, §4.2)
        if tags is not None:
            for t in set(tags):
                if t not in tags_codes:
                    tags_codes[t] = java_hash(t)
            add_tcodes(map(tags_codes.__getitem__, tags))
        else:
            add_tcodes(repeat(0, n))
        add_keyss(keys if keys is not None else repeat(None, n))
        add_origins([m.origin for m in msgs])
        add_topics(topics)
        add_qids(qv.tolist())
        add_qoffs(qoff.tolist())
        add_phys(phy.tolist())
        add_sizes(size.tolist())
        add_tss(ts.tolist())
        add_syss(repeat(0, n))
        add_uniqs(uniqs)
        add_hosts(repeat(default_store, n))

    add_tcodes, add_keyss, add_origins = cols.tags_code.extend, cols.keys.extend, cols.origin.extend
    add_topics, add_qids, add_qoffs = cols.topic.extend, cols.queue_id.extend, cols.queue_offset.extend
    add_phys, add_sizes, add_tss = cols.phy_offset.extend, cols.size.extend, cols.store_timestamp_ms.extend
    add_syss, add_uniqs, add_hosts = cols.sys_flag.extend, cols.uniq_key.extend, cols.store_host.extend
    plain_fields = operator.attrgetter(*_PLAIN_FIELDS)

    for s0 in range(0, len(messages), _FAST_BLOCK):
        block = messages[s0 : s0 + _FAST_BLOCK]
        if not fast_hosts:
            for m in block:
                put_one(m)
            continue
        # -1: put_one; else bit 0 TAGS, bit 1 KEYS (a non-blank value)
        codes = [
            (m.tags is not None) | (bool(m.keys) and not m.keys.isspace()) << 1 if f == _PLAIN_DEFAULTS else -1
            for m, f in zip(block, map(plain_fields, block), strict=True)
        ]
        i = 0
        for code, group in groupby(codes):
            k = len(list(group))
            if code < 0 or k < _FAST_MIN_RUN:
                for m in block[i : i + k]:
                    put_one(m)
            else:
                put_run(block[i : i + k], code)
            i += k
    flush_chunk(base)
    end_phy = cols.phy_offset[-1] + cols.size[-1] if len(cols) else ap.end_phy
    return WritePlan(
        root=st.root,
        start_phy=ap.end_phy,
        end_phy=end_phy,
        records=cols,
        writes=tuple(writes),
        blanks=tuple(blanks),
        stale=ap.stale if len(cols) else None,
        dispatch=dispatch,
        catch_up=ap.pending,
        new_topics=tuple(new_topics.values()),
        index_end_phy=index_end,
        last_store_timestamp_ms=last_ts,
    )


# ---------------------------------------------------------------------------------------------
# Journal and rollback


def _journal_path(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME)


def _journal_dir(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME + ".d")


def pending_journal(root: Path | str) -> dict[str, Any] | None:
    """The journal of an interrupted write in ``root``, or None."""
    p = _journal_path(Path(root))
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptData(f"cannot read the write journal: {e.strerror}", path=p, pos=0) from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != _JOURNAL_FORMAT:
            raise ValueError("unknown format")
    except ValueError:
        raise CorruptData("the write journal is not readable; restore the store from a backup", path=p, pos=0) from None
    return data


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """What rolling back an interrupted write restored."""

    journal: Path
    pid: int | None
    started_ms: int | None
    files_removed: tuple[Path, ...]
    ranges_zeroed: int


def _save_range(root: Path, path: Path, pos: int, length: int, tag: str) -> str:
    d = _journal_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    name = f"{tag}-{len(os.listdir(d))}"
    with open(path, "rb") as f:
        f.seek(pos)
        data = f.read(length)
    atomic_write(d / name, data, tmp_dir=d)
    return name


def _zero_range(path: Path, pos: int, length: int) -> None:
    if length <= 0:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        end = min(pos + length, size)
        if end <= pos:
            return
        m = mmap.mmap(fd, size)
        try:
            step = 1 << 24
            p = pos
            zeros = bytes(min(step, end - pos))
            while p < end:
                n = min(step, end - p)
                m[p : p + n] = zeros[:n]
                p += n
            m.flush()
        finally:
            m.close()
    finally:
        os.close(fd)


def _write_at(path: Path, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def _rel(root: Path, p: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _build_journal(st: Store, plan: WritePlan) -> dict[str, Any]:
    """Record the state a rollback restores; copies the non-zero bytes the write may overwrite."""
    cfg = st.config
    root = st.root
    fs = cfg.commitlog_file_size
    cl_names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit()) if cfg.commitlog_dir.is_dir() else []
    zero_to = plan.end_phy
    backups: list[dict[str, Any]] = []
    if plan.stale is not None:
        s = plan.stale
        zero_to = max(zero_to, s.phy_offset + s.length)
        backups.append(
            {"path": str(s.path), "pos": s.pos, "file": _save_range(root, s.path, s.pos, s.length, "commitlog")}
        )
    queues: list[dict[str, Any]] = []
    if plan.dispatch:
        keys = set(zip(plan.records.topic, plan.records.queue_id, strict=True))
        keys |= {(r.topic, r.queue_id) for r in plan.catch_up}
        for topic, qid in sorted(keys):
            d = st.queue_dir(topic, qid)
            segs, _ = list_segments(d, cfg.cq_file_size)
            entry: dict[str, Any] = {"dir": _rel(root, d), "existing": [s.path.name for s in segs], "last": None}
            if segs:
                last = segs[-1]
                end = _queue_end(segs) - last.base_offset
                entry["last"] = last.path.name
                entry["end"] = end
                nz = _nonzero_end(last.path, end, last.size)
                if nz > end:
                    entry["tail"] = _save_range(root, last.path, end, nz - end, "cq")
            queues.append(entry)
    index: dict[str, Any] = {"tracked": plan.dispatch and cfg.message_index_enable, "existing": [], "last": None}
    if index["tracked"]:
        files, _ = st.index_files()
        index["existing"] = [p.name for p in files]
        if files:
            last = files[-1]
            slots_end = INDEX_HEADER_SIZE + cfg.max_hash_slot_num * 4
            index["last"] = last.name
            index["head"] = _save_range(root, last, 0, slots_end, "index")  # header and hash slots
            with open(last, "rb") as f:
                head = f.read(INDEX_HEADER_SIZE)
            count = max(decode_index_header(head, path=str(last)).index_count, 1)
            entries_from = slots_end + count * 20
            index["entriesFrom"] = entries_from
            nz = _nonzero_end(last, entries_from, last.stat().st_size)
            if nz > entries_from:
                index["entriesTail"] = _save_range(root, last, entries_from, nz - entries_from, "index-tail")
    saved_files: list[dict[str, Any]] = []
    for p in (cfg.config_dir / "topics.json", cfg.config_dir / "topics.json.bak", cfg.checkpoint_path):
        item: dict[str, Any] = {"path": _rel(root, p), "existed": p.exists()}
        if item["existed"]:
            item["file"] = _save_range(root, p, 0, p.stat().st_size, "file")
        saved_files.append(item)
    dirs = {_rel(root, d): d.is_dir() for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir, cfg.config_dir)}
    return {
        "format": _JOURNAL_FORMAT,
        "pid": os.getpid(),
        "startedMs": time.time_ns() // 1_000_000,
        "commitlog": {
            "dir": str(cfg.commitlog_dir),
            "fileSize": fs,
            "existing": cl_names,
            "zeroFrom": plan.start_phy,
            "zeroTo": zero_to,
            "backups": backups,
        },
        "queues": queues,
        "index": index,
        "files": saved_files,
        "dirsExisted": dirs,
        "abortExisted": cfg.abort_path.exists(),
    }


def _zero_nonzero(path: Path, pos: int) -> bool:
    """Zero ``path`` from ``pos`` up to its last non-zero byte (holes stay holes)."""
    end = _nonzero_end(path, pos, path.stat().st_size)
    if end > pos:
        _zero_range(path, pos, end - pos)
        return True
    return False


def _rollback(root: Path, j: dict[str, Any]) -> RollbackReport:
    """Undo a journaled write; every step is idempotent, so a killed rollback can run again."""
    jd = _journal_dir(root)
    removed: list[Path] = []
    zeroed = 0
    cl = j["commitlog"]
    cl_dir = Path(cl["dir"])
    fs = int(cl["fileSize"])
    zero_from, zero_to = int(cl["zeroFrom"]), int(cl["zeroTo"])
    existing = set(cl["existing"])
    if cl_dir.is_dir():
        for name in sorted(os.listdir(cl_dir)):
            if not name.isdigit():
                continue
            base = int(name)
            if base + fs <= zero_from or base >= zero_to:
                continue  # outside what the write touched
            p = cl_dir / name
            if name not in existing:
                p.unlink()
                removed.append(p)
                continue
            lo = max(zero_from, base) - base
            hi = min(zero_to, base + fs) - base
            _zero_range(p, lo, hi - lo)
            zeroed += 1
        for b in cl["backups"]:
            _write_at(Path(b["path"]), int(b["pos"]), (jd / b["file"]).read_bytes())
        fsync_dir(cl_dir)
    cq_root = root / "consumequeue"
    for q in j["queues"]:
        d = root / q["dir"]
        if not d.is_dir():
            continue
        keep = set(q["existing"])
        for name in sorted(os.listdir(d)):
            if name not in keep:
                (d / name).unlink()
                removed.append(d / name)
        if q["last"]:
            p = d / q["last"]
            if _zero_nonzero(p, int(q["end"])):
                zeroed += 1
            if q.get("tail"):
                _write_at(p, int(q["end"]), (jd / q["tail"]).read_bytes())
            fsync_dir(d)
        else:
            _remove_empty_dirs(d, cq_root)
    ix = j["index"]
    idir = root / "index"
    if ix["tracked"] and idir.is_dir():
        keep = set(ix["existing"])
        for name in sorted(os.listdir(idir)):
            if name.isdigit() and name not in keep:
                (idir / name).unlink()
                removed.append(idir / name)
        if ix["last"]:
            p = idir / ix["last"]
            ef = int(ix["entriesFrom"])
            if _zero_nonzero(p, ef):
                zeroed += 1
            _write_at(p, 0, (jd / ix["head"]).read_bytes())
            if ix.get("entriesTail"):
                _write_at(p, ef, (jd / ix["entriesTail"]).read_bytes())
        fsync_dir(idir)
    for item in j["files"]:
        p = root / item["path"]
        if item["existed"]:
            atomic_write(p, (jd / item["file"]).read_bytes(), tmp_dir=jd)
        elif p.exists():
            p.unlink()
            removed.append(p)
    for item in j["files"]:
        tmp = (root / item["path"]).with_name(Path(item["path"]).name + ".tmp")  # fastjson-era persist temp
        if tmp.name == "topics.json.tmp" and tmp.exists():
            tmp.unlink()
    abort = root / "abort"
    if not j["abortExisted"] and abort.exists():
        abort.unlink()
        removed.append(abort)
    for rel, existed in j["dirsExisted"].items():
        d = Path(rel) if Path(rel).is_absolute() else root / rel
        if not existed and d.is_dir() and not os.listdir(d):
            d.rmdir()
    return RollbackReport(_journal_path(root), j.get("pid"), j.get("startedMs"), tuple(removed), zeroed)


def _remove_empty_dirs(d: Path, stop: Path) -> None:
    while d != stop and d.is_dir() and not os.listdir(d):
        d.rmdir()
        d = d.parent


def _finish_journal(root: Path) -> None:
    _journal_path(root).unlink(missing_ok=True)
    shutil.rmtree(_journal_dir(root), ignore_errors=True)
    scratch = Path(root, SCRATCH_DIR)
    fsync_dir(scratch)
    try:
        scratch.rmdir()  # only when empty: other operations may keep files there
    except OSError:
        pass


def rollback_pending(st: Store) -> RollbackReport | None:
    """Roll back the write a killed run left half done (its journal), if any. Needs a writable store."""
    j = pending_journal(st.root)
    if j is None:
        return None
    if not st.writable:
        raise UnsafePlan(f"{st.root}: an interrupted write must be rolled back; open the store writable")
    report = _rollback(st.root, j)
    _finish_journal(st.root)
    return report


# ---------------------------------------------------------------------------------------------
# Apply


@dataclass(frozen=True, slots=True)
class WriteResult:
    plan: WritePlan
    dispatch: DispatchStats | None
    checkpoint: cpmod.Checkpoint | None  # written, or None when left alone
    abort_created: bool
    quarantine: Path | None
    rolled_back: RollbackReport | None = None
    flush: str = "sync"
    dry_run: bool = False

    def summary(self) -> dict[str, Any]:
        out = self.plan.summary()
        if self.dispatch is not None:
            out["cqEntries"] = self.dispatch.cq_entries
            out["indexEntries"] = self.dispatch.index_entries
            out["queues"] = len(self.dispatch.queues_touched)
            out["indexFilesCreated"] = [p.name for p in self.dispatch.index_files_created]
        out["checkpoint"] = self.checkpoint.to_json() if self.checkpoint else None
        out["abortCreated"] = self.abort_created
        out["quarantine"] = str(self.quarantine) if self.quarantine else None
        out["flush"] = self.flush
        if self.dry_run:
            out["dryRun"] = True
        if self.rolled_back is not None:
            out["rolledBackInterruptedWrite"] = str(self.rolled_back.journal)
        return out


def default_quarantine_dir(root: Path, now_ms: int) -> Path:
    stamp = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return root.parent / f"{root.name}.quarantine" / stamp


def _quarantine(plan: WritePlan, qdir: Path, now_ms: int) -> None:
    s = plan.stale
    assert s is not None
    qdir.mkdir(parents=True, exist_ok=True)
    name = f"{s.path.name}@{s.pos}"
    with open(s.path, "rb") as f:
        f.seek(s.pos)
        data = f.read(s.length)
    atomic_write(qdir / name, data, tmp_dir=qdir)
    manifest = {
        "operation": "write",
        "createdMs": now_ms,
        "items": [
            {
                "file": name,
                "original": str(s.path),
                "pos": s.pos,
                "length": s.length,
                "phyOffset": s.phy_offset,
                "why": "bytes after the end of valid commit log records, zeroed before appending",
                "restore": f"write these bytes back at byte {s.pos} of {s.path} (e.g. dd conv=notrunc seek={s.pos} "
                "oflag=seek_bytes) with the broker stopped; the messages appended there are then lost",
            }
        ],
    }
    atomic_write(qdir / "manifest.json", json.dumps(manifest, indent=2).encode(), tmp_dir=qdir)


def _apply_commitlog(plan: WritePlan, cfg: StoreConfig, sync: bool) -> None:
    fs = cfg.commitlog_file_size
    if plan.stale is not None:
        _zero_range(plan.stale.path, plan.stale.pos, plan.stale.length)
    created = False
    for w in plan.writes:
        if w.create:
            cfg.commitlog_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(w.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, fs)
            finally:
                os.close(fd)
            created = True
        fd = os.open(w.path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != fs:
                raise CorruptData(f"file is {os.fstat(fd).st_size} bytes, expected {fs}", path=w.path, pos=0)
            _pwrite_all(fd, w.data, w.pos, w.path)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    if created and sync:
        fsync_dir(cfg.commitlog_dir)


def _pwrite_all(fd: int, data: bytes | bytearray, pos: int, path: Path) -> None:
    """Write all of ``data`` at ``pos`` (pwrite copies straight into the page cache: no page faults
    on a fresh file, as writing through a mapping has)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        n = os.pwrite(fd, view[done : done + (64 << 20)], pos + done)
        if n <= 0:
            raise OSError(f"{path}: no progress writing at byte {pos + done}")
        done += n


def _dispatch_written(st: Store, plan: WritePlan, clock: Callable[[], int], sync: bool) -> DispatchStats:
    """Dispatch the records not yet dispatched, then the new ones (§9): consume queue entries and
    index keys, continuing the existing files exactly where the broker would."""
    disp = Dispatcher(st.config, clock=clock)
    try:
        if plan.catch_up:
            disp.dispatch(list(plan.catch_up))
        n = len(plan.records)
        for a in range(0, n, _DISPATCH_CHUNK):
            disp.dispatch_columns(plan.records.columns(a, min(n, a + _DISPATCH_CHUNK)))
    finally:
        stats = disp.close(sync=sync)
    return stats


def _fsync_created_dirs(cfg: StoreConfig, stats: DispatchStats | None) -> None:
    """Make new consume queue and index file names durable (the data was msynced by the dispatcher)."""
    if stats is None:
        return
    dirs = set()
    for topic, qid in stats.queues_touched:
        q = cfg.consumequeue_dir / topic / str(qid)
        dirs |= {q, q.parent, cfg.consumequeue_dir}
    if stats.index_files_created:
        dirs.add(cfg.index_dir)
    for d in sorted(dirs):
        if d.is_dir():
            fsync_dir(d)


def apply_write(
    st: Store,
    plan: WritePlan,
    *,
    flush: str = "sync",
    quarantine: Path | None = None,
    use_quarantine: bool = True,
    index_clock: Callable[[], int] | None = None,
    now_ms: int | None = None,
) -> WriteResult:
    """Carry out ``plan`` on the store it was made for (open writable), atomically.

    ``flush="sync"`` msyncs every changed file and directory before returning, ``"async"`` leaves
    write-back to the OS (a crash of the machine may then lose the tail, as with an async broker).

    Checkpoint (§6, §9.4.7): only with ``sync`` and when the store had no ``abort`` file (a crashed
    store keeps its old, earlier checkpoint so the broker's abnormal recovery still starts early enough):
    physicMsgTimestamp = max(old, store time of the last record written); logicsMsgTimestamp =
    max(old, store time behind the last consume queue entry written) and indexMsgTimestamp = max(old,
    end time of an index file that became full), both only after the dispatch flushed them; other
    fields kept. Every value then describes data already on disk. With ``async`` the checkpoint is left
    alone. ``dispatch=False`` creates ``abort`` (§9.4.6).

    Raises:
        RmqstoreError: any failure; the store is then rolled back to its state before the call.
    """
    if flush not in ("sync", "async"):
        raise InputError(f"--flush must be sync or async, not {flush!r}")
    if not st.writable:
        raise UnsafePlan(f"{st.root}: open the store writable to apply a write")
    if not plan.records:
        return WriteResult(plan, None, None, False, None, None, flush)
    cfg = st.config
    root = st.root
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    sync = flush == "sync"
    qdir = None
    if plan.stale is not None and not plan.stale.padding and use_quarantine:
        qdir = quarantine or default_quarantine_dir(root, now)
        _quarantine(plan, qdir, now)
    scratch_dir(root)
    journal = _build_journal(st, plan)
    atomic_write(_journal_path(root), json.dumps(journal).encode(), tmp_dir=Path(root, SCRATCH_DIR))
    abort_existed = cfg.abort_path.exists()
    try:
        _apply_commitlog(plan, cfg, sync)
        stats = None
        if plan.dispatch:
            stats = _dispatch_written(st, plan, index_clock or (lambda: now), sync)
        if plan.new_topics:
            _, cf = _load_topics(cfg)
            data = cf.data if isinstance(cf.data, dict) else {}
            for tc in plan.new_topics:
                cfgmod.set_topic(data, tc, now_ms=now, broker_version=cfg.broker)
            cfgmod.write_config(cfg.config_dir, "topics.json", data, broker_version=cfg.broker)
        cp = None
        if sync and not abort_existed:
            old = st.read_checkpoint() or cpmod.Checkpoint(0, 0, 0)
            logics = old.logics_msg_timestamp_ms
            index_ts = old.index_msg_timestamp_ms
            if stats is not None:
                logics = max(logics, stats.logics_msg_timestamp_ms)
                index_ts = max(index_ts, stats.index_msg_timestamp_ms)
            cp = replace(
                old,
                physic_msg_timestamp_ms=max(old.physic_msg_timestamp_ms, plan.last_store_timestamp_ms),
                logics_msg_timestamp_ms=logics,
                index_msg_timestamp_ms=index_ts,
            )
            atomic_write(cfg.checkpoint_path, cpmod.encode(cp), tmp_dir=scratch_dir(root))
        abort_created = False
        if not plan.dispatch and not abort_existed:
            fd = os.open(cfg.abort_path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            abort_created = True
        if sync:
            _fsync_created_dirs(cfg, stats)
            fsync_dir(root)
    except BaseException as e:
        j = pending_journal(root)
        if j is not None:
            _rollback(root, j)
            _finish_journal(root)
        if qdir is not None and quarantine is None:
            shutil.rmtree(qdir, ignore_errors=True)  # the bytes are back in place
        if isinstance(e, RmqstoreError):
            raise
        if isinstance(e, OSError):
            raise RmqstoreError(f"write failed ({e.strerror or e}); the store was rolled back") from e
        raise
    _finish_journal(root)
    return WriteResult(plan, stats, cp, abort_created, qdir, None, flush)


def write_messages(
    root: Path | str,
    messages: Sequence[Message],
    *,
    broker_config: Path | str | None = None,
    broker: str | None = None,
    create: bool = False,
    flush: str = "sync",
    dispatch: bool = True,
    clock: Callable[[], int] | None = None,
    store_host: str | None = None,
    born_host: str | None = None,
    allow_system_topic: bool = False,
    max_topic_length: int = _V1_TOPIC_MAX,
    uniq_keys: UniqKeySource | None = None,
    topic_queue_nums: int = 4,
    quarantine: Path | None = None,
    use_quarantine: bool = True,
    dry_run: bool = False,
) -> WriteResult:
    """Open ``root`` writable (the broker's lock), roll back an interrupted write, plan and apply.

    ``dry_run`` opens the store read-only (still refusing one a broker holds) and only plans.
    See :func:`plan_write` and :func:`apply_write` for the other parameters.
    """
    from .errors import StoreLocked
    from .store import open_store

    if flush not in ("sync", "async"):
        raise InputError(f"flush must be sync or async, not {flush!r}")
    plan_kw: dict[str, Any] = {
        "clock": clock,
        "dispatch": dispatch,
        "store_host": store_host,
        "born_host": born_host,
        "allow_system_topic": allow_system_topic,
        "max_topic_length": max_topic_length,
        "uniq_keys": uniq_keys,
        "topic_queue_nums": topic_queue_nums,
    }
    if dry_run:
        with open_store(root, broker_config=broker_config, broker=broker, create=False) as st:
            pid = st.lock_holder()
            if pid is not None:
                raise StoreLocked(f"{st.config.lock_path}: held by a running broker (pid {pid}); stop it first")
            plan = plan_write(st, messages, **plan_kw)
        return WriteResult(plan, None, None, False, None, None, flush, dry_run=True)
    new_root = Path(root)
    created = create and not new_root.exists()
    try:
        with open_store(
            root, broker_config=broker_config, writable=True, broker=broker, create=create, operation="write"
        ) as st:
            rolled = rollback_pending(st)
            plan = plan_write(st, messages, **plan_kw)
            res = apply_write(
                st,
                plan,
                flush=flush,
                quarantine=quarantine,
                use_quarantine=use_quarantine,
                index_clock=clock,
                now_ms=clock() if clock else None,
            )
    except BaseException:
        if created:
            _remove_new_root(new_root)
        raise
    return replace(res, rolled_back=rolled) if rolled else res


def _remove_new_root(root: Path) -> None:
    """Undo ``--create`` after a failed first write: only the lock file and empty directories exist."""
    files = [p for p in root.rglob("*") if not p.is_dir()]
    if all(p == root / "lock" and p.stat().st_size == 0 for p in files):
        shutil.rmtree(root, ignore_errors=True)
