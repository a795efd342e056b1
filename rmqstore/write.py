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
4. **Store timestamp** is the clock, read per message (once per 8 messages of a plain run: they are
   microseconds apart) and never below the previous record's (recovery relies on non-decreasing
   times); a message may give its own (reproducible stores).
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
delay, no user properties) are checked and encoded a run at a time: record heads as one numpy array,
each record one bytes %-format with the constant parts of its properties built in, UNIQ_KEYs and the
index key hashes computed as arrays, the plan's columns kept as arrays for the dispatch. Every other
message, and any plain one the run cannot vouch for, takes the per-message path, which is the
reference: both give the same bytes and columns (``tests/test_write.py``). A :class:`MessageBatch`
(what the NDJSON reader gives for plain lines) spares the objects per message. While the dispatch
runs, a second thread writes (and with sync flush fsyncs) the commit log.

Atomic batches: the whole input is validated and encoded before any file changes. Before the first
change a journal ``<root>/.rmqstore/write.journal`` (with copies of every byte range the write may
overwrite that was not zero) is written and fsynced; it is removed once everything is written. A
failure rolls the store back at once; a killed run leaves the journal and the next ``write`` rolls it
back first (:func:`rollback_pending`), so the files are byte for byte as before the batch.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import json
import mmap
import operator
import os
import pickle
import re
import shlex
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import chain, groupby, repeat
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as cpmod
from . import config as cfgmod
from .append_point import RECORD_SLACK as _RECORD_SLACK
from .append_point import StaleRange
from .append_point import check_supported as _check_supported
from .append_point import find_append_point as _find_append_point
from .append_point import index_end_phy as _index_end_phy
from .append_point import queue_end as _queue_end
from .codec.columnar import HEAD_V4_DTYPE
from .codec.commitlog import CRC32_RESERVED_LEN, HEAD_V4, encode_blank, encode_prop_crc
from .columnar import Columns, range_hashes, topic_key_hashes
from .commitlog import (
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
    cal_msg_length,
    encode_record,
    offset_msg_id,
    parse_host,
)
from .consumequeue import ENTRY_SIZE
from .dispatch import Dispatcher, DispatchRequest, DispatchStats, delivery_tags_code
from .errors import ConfigError, CorruptData, InputError, RmqstoreError, UnsafePlan, from_os_error
from .fsutil import SCRATCH_DIR, atomic_write, fsync_dir, scratch_dir
from .indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from .indexfile import decode_header as decode_index_header
from .javahash import java_hash, java_hash_batch
from .layout import StoreConfig, file_name, list_segments
from .messages import Message, MessageBatch, message_from_json, read_ndjson
from .messages import paused_gc as _paused_gc
from .multiqueue import (
    LMQ_PREFIX,
    PROP_MULTI_DISPATCH,
    PROP_MULTI_QUEUE_OFFSET,
    ExtraDispatcher,
    batch_cq_topics,
    iter_records,
)
from .rules import rules_for
from .safety import BadTopic, Journal, PlannedAction, Quarantine, StepHook, default_quarantine_base, record_place
from .safety import check_topic_name as topic_problem
from .store import Store, map_file
from .walk import data_end as _nonzero_end

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

# Everything up to BODYLENGTH of a V1 record with IPv4 hosts (88 bytes, §3.1): the codec's struct,
# and its numpy record for encoding many records at once.
_FIXED_V4 = HEAD_V4
_HEADER_V4 = HEAD_V4_DTYPE
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
_FAST_BLOCK = 32768  # messages classified at a time
_FAST_MIN_RUN = 8  # shorter runs of plain messages go one by one
_CLOCK_EVERY = 8  # plain messages per clock reading (a few microseconds apart)
_SHORT = struct.Struct(">h")
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
    five = rules_for(cfg.broker).five
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

    def many_parts(self, now_ms: np.ndarray, ip: bytes) -> tuple[str, np.ndarray, np.ndarray]:
        """The keys ``[self.next(t, ip) for t in now_ms]`` as their shared 20-character head (ip,
        pid, class-loader hash) and, per key, the time field and the counter (int64 arrays):
        key i is ``f"{head}{time_field[i]:08X}{counter[i]:04X}"``."""
        prefix = self._prefixes.get(ip)
        if prefix is None:
            prefix = self._prefixes[ip] = (ip + self._tail).hex().upper()
        n = len(now_ms)
        if n == 0:
            return prefix, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        start = self._month_start(int(now_ms[0]))
        if int(now_ms[-1]) >= self._month[1] or bool((now_ms[1:] < now_ms[:-1]).any()):
            keys = [self.next(t, ip) for t in now_ms.tolist()]  # a month boundary: key by key
            tf = np.array([int(k[20:28], 16) for k in keys], dtype=np.int64)
            return prefix, tf, np.array([int(k[28:], 16) for k in keys], dtype=np.int64)
        c = self._counter
        counter = (c + np.arange(n, dtype=np.int64)) & 0xFFFF
        self._counter = (c + n) & 0xFFFF
        self._last_ms = -1  # the next() cache is stale now
        return prefix, (now_ms - start) & 0xFFFFFFFF, counter


_DISPATCH_CHUNK = 1 << 17  # records per dispatch_columns call: bounds the memory of the index keys
_HEX4 = [f"{i:04X}" for i in range(0x10000)]


# ---------------------------------------------------------------------------------------------
# Reading the store: where to append


# ---------------------------------------------------------------------------------------------
# The plan


class _Block:
    """Columns of consecutive input messages (a slice of a list of messages or of a batch)."""

    __slots__ = ("topic", "body", "queue_id", "tags", "keys", "origin", "source", "start")

    def __init__(
        self,
        topic: list[str],
        body: list[bytes],
        queue_id: list[int | None],
        tags: list[str | None],
        keys: list[str | None],
        origin: list[str] | None,
        source: Sequence[Message] | MessageBatch,
        start: int = 0,
    ):
        self.topic, self.body, self.queue_id, self.tags, self.keys = topic, body, queue_id, tags, keys
        self.origin, self.source, self.start = origin, source, start

    def message(self, i: int) -> Message:
        src = self.source
        return src.message(self.start + i) if isinstance(src, MessageBatch) else src[self.start + i]


def _codes(tags: list[str | None], keys: list[str | None]) -> list[int]:
    """The fast lane's run code of plain messages: bit 0 TAGS, bit 1 KEYS (a non-blank value)."""
    if None not in tags and None not in keys and "" not in keys and not any(map(str.isspace, keys)):
        return [3] * len(tags)  # the usual batch: every message has both
    return [(t is not None) | (bool(ks) and not ks.isspace()) << 1 for t, ks in zip(tags, keys, strict=True)]


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


class UniqKeyColumn(Sequence[str | None]):
    """The UNIQ_KEY of each planned record; keys generated a run at a time are kept as their
    constant head plus per-record fields and made into strings only when read."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._parts: list[Any] = []  # list[str | None], or (head, time field, counter) arrays
        self._len = 0

    def extend_strings(self, keys: list[str | None]) -> None:
        if keys:
            self._starts.append(self._len)
            self._parts.append(keys)
            self._len += len(keys)

    def extend_generated(self, head: str, time_field: np.ndarray, counter: np.ndarray) -> None:
        if len(time_field):
            self._starts.append(self._len)
            self._parts.append((head, time_field, counter))
            self._len += len(time_field)

    def __len__(self) -> int:
        return self._len

    def _part(self, i: int) -> tuple[Any, int]:
        k = bisect.bisect_right(self._starts, i) - 1
        return self._parts[k], i - self._starts[k]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        part, j = self._part(i)
        if isinstance(part, list):
            return part[j]
        head, tf, ctr = part
        return f"{head}{int(tf[j]):08X}{int(ctr[j]):04X}"

    def __iter__(self) -> Iterator[str | None]:
        for part in self._parts:
            if isinstance(part, list):
                yield from part
            else:
                head, tf, ctr = part
                for t, c in zip(tf.tolist(), ctr.tolist(), strict=True):
                    yield f"{head}{t:08X}{c:04X}"


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The planned records column by column: numbers in int64 arrays, names in lists (a million
    records stay a few arrays, not a million objects)."""

    origin: list[str]
    topic: list[str]
    topic_id: np.ndarray  # index into ``topics`` of each record's topic (as stored)
    topics: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phy_offset: np.ndarray
    size: np.ndarray
    store_timestamp_ms: np.ndarray
    sys_flag: np.ndarray
    uniq_key: UniqKeyColumn
    store_host: list[tuple[bytes, int]]
    tags_code: np.ndarray  # as the dispatcher derives them (§4.2, §3.11)
    keys: list[str | None]
    key_rec: np.ndarray  # the index keys (§5.3) in the broker's put order: record of each
    key_hash: np.ndarray  # and its keyHash (``topic#UNIQ_KEY``, then each KEYS token)

    def __len__(self) -> int:
        return len(self.phy_offset)

    def queues(self) -> set[tuple[str, int]]:
        """Every (topic, queue id) a record goes to."""
        if not len(self):
            return set()
        pairs = np.unique(self.topic_id * (1 << 32) + self.queue_id)
        return {(self.topics[int(v) >> 32], int(v) & 0xFFFFFFFF) for v in pairs.tolist()}

    def columns(self, start: int, stop: int) -> Columns:
        """Records ``start:stop`` as :class:`rmqstore.columnar.Columns` for ``Dispatcher.dispatch_columns``."""
        ka, kb = np.searchsorted(self.key_rec, [start, stop]).tolist()
        return Columns(
            self.phy_offset[start:stop],
            self.size[start:stop],
            self.queue_id[start:stop],
            self.queue_offset[start:stop],
            self.store_timestamp_ms[start:stop],
            self.sys_flag[start:stop],
            self.tags_code[start:stop],
            self.topic_id[start:stop],
            self.topics,
            self.key_rec[ka:kb] - start,
            self.key_hash[ka:kb],
        )

    def record(self, i: int) -> PlannedRecord:
        addr, port = self.store_host[i]
        return PlannedRecord(
            self.origin[i],
            self.topic[i],
            int(self.queue_id[i]),
            int(self.queue_offset[i]),
            int(self.phy_offset[i]),
            int(self.size[i]),
            int(self.store_timestamp_ms[i]),
            int(self.sys_flag[i]),
            self.uniq_key[i],
            addr,
            port,
        )

    def __iter__(self) -> Iterator[PlannedRecord]:
        return (self.record(i) for i in range(len(self)))


def _keys_index(topics: list[str], tid: np.ndarray, keys: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Index keys of the KEYS values: each non-empty token (keys are separated by one space), with
    the record it belongs to, records in order."""
    krec = [i for i, k in enumerate(keys) if k]
    kstr = [keys[i] for i in krec]
    if " " in "".join(kstr):  # type: ignore[arg-type]
        pairs = [(i, t) for i in krec for t in keys[i].split(" ") if t]  # type: ignore[union-attr]
        krec, kstr = [i for i, _ in pairs], [t for _, t in pairs]
    rec = np.array(krec, dtype=np.int64)
    return rec, _topic_key_hashes(topics, tid[rec], kstr)  # type: ignore[arg-type]


def _merge_index_keys(
    urec: np.ndarray, uhash: np.ndarray, krec: np.ndarray, khash: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The broker's put order (§5.3): per record its UNIQ_KEY, then its KEYS tokens."""
    n = len(urec)
    if n == len(krec) and n and (urec == krec).all():  # one of each per record: interleave
        return np.repeat(urec, 2), np.stack((uhash, khash), axis=1).ravel()
    rec = np.concatenate((urec, krec))
    order = np.argsort(rec, kind="stable")
    return rec[order], np.concatenate((uhash, khash))[order]


class _ColumnsBuilder:
    """Collects the plan's columns: records put one by one go into lists, runs put at once
    arrive as arrays; :meth:`finish` joins them."""

    def __init__(self) -> None:
        self.topic_ids: dict[str, int] = {}
        self.origin: list[str] = []
        self.topic: list[str] = []
        self.uniq = UniqKeyColumn()
        self.store_host: list[tuple[bytes, int]] = []
        self.keys: list[str | None] = []
        self.parts: list[tuple[np.ndarray, ...]] = []  # tid, qid, qoff, phy, size, ts, sys, tcode, key_rec, key_hash
        self.count = 0
        # records put one by one, not yet in parts
        self.one: tuple[list[int], ...] = ([], [], [], [], [], [], [], [])
        self.one_uniq: list[str | None] = []
        self.one_from = 0

    def topic_id(self, topic: str) -> int:
        t = self.topic_ids.get(topic)
        if t is None:
            t = self.topic_ids[topic] = len(self.topic_ids)
        return t

    def flush_one(self) -> None:
        if not self.one_uniq:
            return
        tid, qid, qoff, phy, size, ts, sys_flag, tcode = (np.array(c, dtype=np.int64) for c in self.one)
        for c in self.one:
            c.clear()
        n = len(tid)
        keys = self.keys[self.one_from :]
        uniq = self.one_uniq
        urec = [i for i, u in enumerate(uniq) if u is not None]
        names = list(self.topic_ids)
        urec_a = np.array(urec, dtype=np.int64)
        uhash = _topic_key_hashes(names, tid[urec_a], [uniq[i] for i in urec])  # type: ignore[misc]
        krec, khash = _keys_index(names, tid, keys)
        key_rec, key_hash = _merge_index_keys(urec_a, uhash, krec, khash)
        self.parts.append((tid, qid, qoff, phy, size, ts, sys_flag, tcode, key_rec + self.count, key_hash))
        self.uniq.extend_strings(uniq.copy())
        uniq.clear()  # in place: put_one holds its append
        self.count += n
        self.one_from = self.count

    def add_run(self, arrays: tuple[np.ndarray, ...], key_rec: np.ndarray, key_hash: np.ndarray) -> None:
        """A run's numeric columns (tid, qid, qoff, phy, size, ts, sys, tcode) and index keys; the
        caller extends the list columns."""
        self.flush_one()
        n = len(arrays[0])
        self.parts.append((*arrays, key_rec + self.count, key_hash))
        self.count += n
        self.one_from = self.count

    def finish(self) -> RecordColumns:
        self.flush_one()
        if self.parts:
            cols = [np.concatenate(c) for c in zip(*self.parts, strict=True)]
        else:
            cols = [np.zeros(0, dtype=np.int64)] * 10
        tid, qid, qoff, phy, size, ts, sys_flag, tcode, key_rec, key_hash = cols
        return RecordColumns(
            self.origin,
            self.topic,
            tid,
            list(self.topic_ids),
            qid,
            qoff,
            phy,
            size,
            ts,
            sys_flag,
            self.uniq,
            self.store_host,
            tcode,
            self.keys,
            key_rec,
            key_hash,
        )


def _string_hashes(keys: list[str], joined: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Java hash (uint32 in uint64) and UTF-16 length of each string (``joined``: their concatenation)."""
    if joined is None:
        joined = "".join(keys)
    if joined.isascii():
        length = np.fromiter(map(len, keys), np.int64, len(keys))
        begin = np.cumsum(length) - length
        h, _ = range_hashes(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), begin, length)
        return h, length
    h = java_hash_batch(keys).view(np.uint32).astype(np.uint64)
    length = np.array([len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys], dtype=np.int64)
    return h, length


def _topic_prefix_hashes(topics: list[str]) -> np.ndarray:
    """Java hash (uint32 in uint64) of each ``topic + "#"``."""
    return np.array([java_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.uint64)


def _topic_key_hashes(topics: list[str], tid: np.ndarray, keys: list[str]) -> np.ndarray:
    """Index keyHash (§5.2) of ``topics[tid[i]] + "#" + keys[i]``, without building those strings."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    h, length = _string_hashes(keys)
    return topic_key_hashes(_topic_prefix_hashes(topics)[tid], h, length)


_FIXED_SPLIT: dict[int, struct.Struct] = {}


def _split_fixed(raw: bytes, width: int, n: int) -> list[bytes]:
    """``raw`` cut into ``n`` pieces of ``width`` bytes (a struct unpack makes 256 at a time in C)."""
    st = _FIXED_SPLIT.get(width)
    if st is None:
        st = _FIXED_SPLIT[width] = struct.Struct(f"{width}s" * 256)
    whole = n - n % 256
    out = list(chain.from_iterable(st.iter_unpack(memoryview(raw)[: width * whole])))
    out += [raw[o : o + width] for o in range(width * whole, width * n, width)]
    return out


def _hex_hashes(v: np.ndarray, digits: int) -> np.ndarray:
    """Java hash (uint32 in uint64) of each ``f"{v:0{digits}X}"``."""
    v = v.astype(np.uint64)
    h = np.zeros(len(v), dtype=np.uint64)
    for j in range(digits - 1, -1, -1):
        d = (v >> np.uint64(4 * j)) & np.uint64(15)
        h = (h * np.uint64(31) + np.where(d < 10, d + np.uint64(48), d + np.uint64(55))) & np.uint64(0xFFFFFFFF)
    return h


def _uniq_key_hashes(head: str, time_field: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Java hash (uint32 in uint64) of each generated UNIQ_KEY ``head + %08X time + %04X counter``."""
    m32 = 0xFFFFFFFF
    head_part = np.uint64(((java_hash(head) & m32) * pow(31, 12, 1 << 32)) & m32)
    t = _hex_hashes(time_field, 8) * np.uint64(31**4)
    return (head_part + t + _hex_hashes(counter, 4)) & np.uint64(m32)


_HEX4_BYTES: list[bytes] = []


def _hex4_bytes(counter: np.ndarray) -> list[bytes]:
    """``b"%04X" % c`` for each 16-bit counter value (a list slice when they run consecutively)."""
    if not _HEX4_BYTES:
        _HEX4_BYTES.extend(h.encode("ascii") for h in _HEX4)
    n = len(counter)
    if n:
        c0 = int(counter[0])
        if c0 + n <= 0x10000 and int(counter[-1]) == c0 + n - 1:
            return _HEX4_BYTES[c0 : c0 + n]
    return list(map(_HEX4_BYTES.__getitem__, counter.tolist()))


@dataclass(frozen=True, slots=True)
class FileWrite:
    """Bytes to put into one commit log file at ``pos`` (records and the BLANK header that ends it),
    as consecutive pieces."""

    path: Path
    base_offset: int
    pos: int
    pieces: tuple[bytes | bytearray, ...]
    create: bool  # the file does not exist yet: create it at full size first

    @property
    def data(self) -> bytes:
        return b"".join(self.pieces)


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
    lmq_queues: tuple[tuple[str, int], ...] = ()  # multi-dispatch queues the records also go to

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


def _lmq_offsets_entry(
    names: str,
    qid: int,
    cfg: StoreConfig,
    queue_offset: Callable[[str, int], int],
    next_qoff: dict,
    used: set[tuple[str, int]],
) -> str:
    """``INNER_MULTI_QUEUE_OFFSET`` for the queues a record names, taking their next offsets (§9.1)."""
    offsets = []
    for name in names.split(","):
        check_topic_name(name)
        lqid = 0 if cfg.enable_lmq and name.startswith(LMQ_PREFIX) else qid
        off = next_qoff.get((name, lqid))
        if off is None:
            off = queue_offset(name, lqid)
        next_qoff[(name, lqid)] = off + 1
        used.add((name, lqid))
        offsets.append(str(off))
    return f"{PROP_MULTI_QUEUE_OFFSET}\x01{','.join(offsets)}\x02"


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
    messages: Sequence[Message] | MessageBatch,
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
    messages: Sequence[Message] | MessageBatch,
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
    rules = rules_for(cfg.broker)
    v6_ok = rules.ipv6_hosts
    v2_ok = rules.v2_magic
    add_cluster = rules.cluster_property
    drop_wait = rules.drops_wait_property
    broker_cap = rules.properties_capacity
    body_limit_only = rules.body_limit_only
    record_slack = rules.record_slack
    trailing_sep = rules.props_trailing_separator
    prop_crc = cfg.enabled_append_prop_crc and rules.prop_crc
    lmq = cfg.enable_multi_dispatch and rules.multi_dispatch
    lmq_reserve = lmq and rules.lmq_reserves_crc_bytes
    lmq_keys: set[tuple[str, int]] = set()
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

    batch_topics = batch_cq_topics(cfg)

    def topic_entry(topic: str, origin: str) -> tuple[cfgmod.TopicConfig | None, bytes]:
        check_topic_name(topic, allow_system=allow_system_topic, max_length=max_topic_length)
        if topic in batch_topics:  # never appended as a plain queue (the 5.x broker then refuses the store)
            raise InputError(f"{origin}: topic {topic!r} has queue.type=BatchCQ: write does not append to batch queues")
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

    cols = _ColumnsBuilder()
    one_tid, one_qid, one_qoff, one_phy, one_size, one_ts, one_sys, one_tcode = (c.append for c in cols.one)
    add_origin, add_topic, add_uniq = cols.origin.append, cols.topic.append, cols.one_uniq.append
    add_host, add_keys, topic_id = cols.store_host.append, cols.keys.append, cols.topic_id
    tags_codes: dict[str, int] = {}
    writes: list[FileWrite] = []
    blanks: list[tuple[int, int]] = []
    seg_by_base = {s.base_offset: s for s in ap.segments}

    base = ap.end_phy - ap.end_phy % fs
    pos = ap.end_phy - base
    chunk = bytearray()  # records put one by one, after ``pieces``
    pieces: list[bytes | bytearray] = []  # what goes into the current file, in order
    chunk_pos = pos
    last_ts = ap.last_store_ts

    def flush_chunk(next_base: int) -> None:
        nonlocal chunk, chunk_pos, base, pieces
        if chunk:
            pieces.append(chunk)
        if pieces:
            created = base not in seg_by_base
            writes.append(FileWrite(cfg.commitlog_dir / file_name(base), base, chunk_pos, tuple(pieces), created))
        base = next_base
        chunk = bytearray()
        pieces = []
        chunk_pos = 0

    def next_file() -> None:
        """End the current file with a BLANK record (§3.4); go on at offset 0 of the next file."""
        nonlocal chunk, pos
        remaining = fs - pos
        if remaining >= 8:
            chunk += encode_blank(remaining)
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
        if lmq and PROP_MULTI_DISPATCH in props and not topic.startswith(RETRY_PREFIX):
            text += _lmq_offsets_entry(props[PROP_MULTI_DISPATCH], qid, cfg, queue_offset, next_qoff, lmq_keys)
        if not trailing_sep and text.endswith("\x02"):
            text = text[:-1]  # 4.9.1-4.9.x: no separator after the last property
        props_b = text.encode("utf-8")
        if prop_crc or (lmq_reserve and PROP_MULTI_DISPATCH in props):
            props_b += bytes(CRC32_RESERVED_LEN)  # the CRC entry goes here once the record is complete
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
        if prop_crc:  # 5.2.0+ enabledAppendPropCRC: CRC32 of the record before its last 20 bytes
            end = len(chunk)
            chunk[end - CRC32_RESERVED_LEN : end] = encode_prop_crc(crc32(memoryview(chunk)[end - size : end - 20]))
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
        one_tcode(tcode)
        add_keys(props.get(PROP_KEYS) if props_b else "")
        add_origin(origin)
        add_topic(topic)
        one_tid(topic_id(topic))
        one_qid(qid)
        one_qoff(qoff)
        one_phy(phy)
        one_size(size)
        one_ts(store_ts)
        one_sys(sys_flag)
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
    # the lane renders producer properties as they are: not for stores whose broker edits them further
    fast_hosts = len(born_addr0) == 4 and len(store_addr0) == 4 and trailing_sep and not prop_crc and not lmq
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

    def value_column(values: list[str], may_be_empty: bool, bad: np.ndarray) -> tuple[np.ndarray, str]:
        """UTF-8 lengths of one property's values, and the values joined; marks in ``bad`` the
        messages whose value is empty (when that is refused) or holds a separator."""
        joined = "".join(values)
        if "\x01" in joined or "\x02" in joined or not (may_be_empty or all(values)):
            bad |= np.array([(not v and not may_be_empty) or "\x01" in v or "\x02" in v for v in values], dtype=bool)
        if joined.isascii():
            return np.fromiter(map(len, values), np.int64, len(values)), joined
        return np.array([len(v.encode("utf-8")) for v in values], dtype=np.int64), joined

    def put_run(blk: _Block, lo: int, hi: int, code: int) -> None:
        k = hi - lo
        fmt = run_format(code)
        names = fmt.names
        topics = blk.topic[lo:hi]
        origins = None if blk.origin is None else blk.origin[lo:hi]
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
                    info = topic_entry(t, "message" if origins is None else origins[topics.index(t)])
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
        qids = blk.queue_id[lo:hi]
        if None in qids:
            q = np.fromiter((none_q if v is None else v for v in qids), np.int64, k)
        else:
            q = np.array(qids, dtype=np.int64)
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
        key_hash = key_len = None
        if code & 1:
            tags = blk.tags[lo:hi]
            plen += value_column(tags, False, bad)[0]  # type: ignore[arg-type]
        if code & 2:
            keys = blk.keys[lo:hi]
            utf8_len, joined = value_column(keys, True, bad)  # type: ignore[arg-type]
            plen += utf8_len
            if " " not in joined:  # one index key per message: hash them all now
                key_hash, key_len = _string_hashes(keys, joined)  # type: ignore[arg-type]
        if PROP_CLUSTER in names:
            plen += len(cluster.encode("utf-8"))
            if cluster_bad:
                bad[:] = True
        bodies = blk.body[lo:hi]
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
                None if origins is None else origins[a:b],
                fmt,
                tnames,
                topics[a:b],
                tids[a:b],
                tinfo,
                q[a:b],
                bodies[a:b],
                None if tags is None else tags[a:b],
                None if keys is None else keys[a:b],
                None if key_hash is None else (key_hash[a:b], key_len[a:b]),  # type: ignore[index]
                size[a:b],
                plen[a:b],
                blen[a:b],
            )

        a = 0
        for i in np.flatnonzero(bad).tolist():
            if i > a:
                fast(a, i)
            put_one(blk.message(lo + i))
            a = i + 1
        if a < k:
            fast(a, k)

    record_formats: dict[tuple[tuple[str, ...], str], bytes] = {}

    def record_format(fmt: _PropsFormat, uniq_head: str) -> bytes:
        """A plain record after its 88-byte head as one bytes %-format: body, topic (with its length
        byte), properties length, then the properties with the constant values filled in."""
        key = (tuple(fmt.names), uniq_head)
        rf = record_formats.get(key)
        if rf is None:
            parts = [b"%s%s%s%s"]
            for name in fmt.names:
                if name == PROP_TAGS or name == PROP_KEYS:
                    value = b"%s"
                elif name == PROP_UNIQ_KEY:
                    value = uniq_head.encode("ascii") + b"%s%s"  # time field, counter
                elif name == PROP_WAIT:
                    value = _TRUE.encode()
                else:  # CLUSTER
                    value = cluster.encode("utf-8").replace(b"%", b"%%")
                parts.append(name.encode("utf-8").replace(b"%", b"%%") + b"\x01" + value + b"\x02")
            rf = record_formats[key] = b"".join(parts)
        return rf

    def put_checked(
        origins: list[str] | None,
        fmt: _PropsFormat,
        tnames: list[str],
        topics: list[str],
        tids: np.ndarray,
        tinfo: list[tuple[cfgmod.TopicConfig | None, bytes] | None],
        q: np.ndarray,
        bodies: list[bytes],
        tags: list[str] | None,
        keys: list[str] | None,
        keys_hashed: tuple[np.ndarray, np.ndarray] | None,
        size: np.ndarray,
        plen: np.ndarray,
        blen: np.ndarray,
    ) -> None:
        """Plain messages that passed every check: the side effects, in message order."""
        nonlocal chunk, pos, last_ts
        n = len(topics)
        # queue ids: the round robin, in message order
        qv = q.copy()
        for i in np.flatnonzero(q < 0).tolist():
            info = tinfo[int(tids[i])]
            qv[i] = pick_queue(topics[i], info[0] if info else None, "message" if origins is None else origins[i])
        # store time: the clock, never below the previous record's; born time = store time
        if ns_clock is not None:  # read once per few messages: they are microseconds apart
            reads = np.array([ns_clock() for _ in range(-(-n // _CLOCK_EVERY))], dtype=np.int64) // 1_000_000
            ts = np.repeat(reads, _CLOCK_EVERY)[:n]
        else:
            ts = np.array([now() for _ in range(n)], dtype=np.int64)
        ts[0] = max(int(ts[0]), last_ts)
        ts = np.maximum.accumulate(ts)
        last_ts = int(ts[-1])
        uniq_head, utime, uctr = keys_gen.many_parts(ts, born_addr0)
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
        # the per-record arguments of the record format, in its order
        tprefix = [topic_prefix.get(t, b"") for t in tnames]
        args: list[Any] = [
            None,  # the heads, per file below
            bodies,
            list(map(tprefix.__getitem__, tids.tolist())),
            list(map(_SHORTS.__getitem__, plen.tolist())),
        ]
        for name in fmt.names:
            if name == PROP_TAGS:
                enc = {t: t.encode("utf-8") for t in set(tags)}  # type: ignore[arg-type]
                args.append(list(map(enc.__getitem__, tags)))  # type: ignore[arg-type]
            elif name == PROP_KEYS:
                args.append([k.encode("utf-8") for k in keys])  # type: ignore[union-attr]
            elif name == PROP_UNIQ_KEY:
                tl = utime.tolist()
                hex8 = {v: b"%08X" % v for v in set(tl)}
                args.append(list(map(hex8.__getitem__, tl)))
                args.append(_hex4_bytes(uctr))
        rf = record_format(fmt, uniq_head)
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
                h["total_size"] = size[i0:j]
                h["magic"] = MAGIC_V1
                h["body_crc"] = crc[i0:j]
                h["queue_id"] = qv[i0:j]
                h["queue_offset"] = qoff[i0:j]
                h["phy_offset"] = phy[i0:j]
                h["born_timestamp_ms"] = ts[i0:j]
                h["born_addr"] = born_ip0
                h["born_port"] = born_port0
                h["store_timestamp_ms"] = ts[i0:j]
                h["store_addr"] = store_ip0
                h["store_port"] = store_port0
                h["body_len"] = blen[i0:j]
                cols_ij = [_split_fixed(h.tobytes(), 88, j - i0)] + [c[i0:j] for c in args[1:]]
                if chunk:
                    pieces.append(chunk)
                    chunk = bytearray()
                pieces.append(b"".join([rf % v for v in zip(*cols_ij, strict=True)]))
                pos = int(ends[j - i0 - 1])
            if j < n:
                next_file()
            i0 = j
        # what the dispatcher reads back (§3.11, §4.2): tags codes and index keys
        if tags is not None:
            for t in set(tags):
                if t not in tags_codes:
                    tags_codes[t] = java_hash(t)
            tcode = np.fromiter(map(tags_codes.__getitem__, tags), np.int64, n)
        else:
            tcode = np.zeros(n, dtype=np.int64)
        gid = np.full(len(tnames), -1, dtype=np.int64)
        _, first_at = np.unique(tids, return_index=True)
        for i in np.sort(first_at).tolist():  # new topics get their ids in order of appearance
            gid[tids[i]] = topic_id(tnames[int(tids[i])])
        tid = gid[tids]
        names = list(cols.topic_ids)
        topic_hash = _topic_prefix_hashes(names)[tid]
        uhash = topic_key_hashes(topic_hash, _uniq_key_hashes(uniq_head, utime, uctr), np.full(n, 32, dtype=np.int64))
        if keys_hashed is not None:  # every KEYS value is one key
            krec, khash = np.arange(n, dtype=np.int64), topic_key_hashes(topic_hash, *keys_hashed)
        elif keys is not None:
            krec, khash = _keys_index(names, tid, keys)  # type: ignore[arg-type]
        else:
            krec, khash = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        key_rec, key_hash = _merge_index_keys(np.arange(n, dtype=np.int64), uhash, krec, khash)
        cols.add_run((tid, qv, qoff, phy, size, ts, np.zeros(n, dtype=np.int64), tcode), key_rec, key_hash)
        cols.keys.extend(keys if keys is not None else repeat(None, n))
        cols.origin.extend(repeat("message", n) if origins is None else origins)
        cols.topic.extend(topics)
        cols.uniq.extend_generated(uniq_head, utime, uctr)
        cols.store_host.extend(repeat(default_store, n))

    plain_getters = [(operator.attrgetter(f), d) for f, d in zip(_PLAIN_FIELDS, _PLAIN_DEFAULTS, strict=True)]
    plain_fields = operator.attrgetter(*_PLAIN_FIELDS)

    def message_block(block: Sequence[Message]) -> tuple[list[int], _Block]:
        """Per message: -1 for put_one, else bit 0 TAGS, bit 1 KEYS (a non-blank value); and the
        block's columns."""
        k = len(block)
        blk = _Block(
            [m.topic for m in block],
            [m.body for m in block],
            [m.queue_id for m in block],
            [m.tags for m in block],
            [m.keys for m in block],
            [m.origin for m in block],
            block,
        )
        for get, default in plain_getters:  # a field at a time: cheaper than a tuple per message
            values = list(map(get, block))
            if values.count(default) != k:
                codes = [
                    (m.tags is not None) | (bool(m.keys) and not m.keys.isspace()) << 1 if f == _PLAIN_DEFAULTS else -1
                    for m, f in zip(block, map(plain_fields, block), strict=True)
                ]
                return codes, blk
        return _codes(blk.tags, blk.keys), blk

    batch = messages if isinstance(messages, MessageBatch) else None
    for s0 in range(0, len(messages), _FAST_BLOCK):
        s1 = min(len(messages), s0 + _FAST_BLOCK)
        if batch is not None:
            blk = _Block(
                batch.topic[s0:s1],
                batch.body[s0:s1],
                batch.queue_id[s0:s1],
                batch.tags[s0:s1],
                batch.keys[s0:s1],
                None if batch.origin is None else batch.origin[s0:s1],
                batch,
                s0,
            )
            codes = _codes(blk.tags, blk.keys) if fast_hosts else [-1] * (s1 - s0)
        else:
            block = messages[s0:s1]
            if not fast_hosts:
                for m in block:
                    put_one(m)
                continue
            codes, blk = message_block(block)
        i = 0
        for code, group in groupby(codes):
            k = len(list(group))
            if code < 0 or k < _FAST_MIN_RUN:
                for j in range(i, i + k):
                    put_one(blk.message(j))
            else:
                put_run(blk, i, i + k, code)
            i += k
    flush_chunk(base)
    records = cols.finish()
    end_phy = int(records.phy_offset[-1] + records.size[-1]) if len(records) else ap.end_phy
    return WritePlan(
        root=st.root,
        start_phy=ap.end_phy,
        end_phy=end_phy,
        records=records,
        writes=tuple(writes),
        blanks=tuple(blanks),
        stale=ap.stale if len(records) else None,
        dispatch=dispatch,
        catch_up=ap.pending,
        new_topics=tuple(new_topics.values()),
        index_end_phy=index_end,
        last_store_timestamp_ms=last_ts,
        lmq_queues=tuple(sorted(lmq_keys)),
    )


# ---------------------------------------------------------------------------------------------
# Journal and rollback


def _journal_path(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME)


def _journal_dir(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME + ".d")


def planned_actions(plan: WritePlan) -> tuple[PlannedAction, ...]:
    """The plan in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
    out = []
    if plan.stale is not None and not plan.stale.padding:
        s = plan.stale
        out.append(
            PlannedAction(
                "write", "zero", s.path, "stale bytes after the last valid record", s.pos, s.pos + s.length, kept=True
            )
        )
    for w in plan.writes:
        size = sum(len(p) for p in w.pieces)
        why = "new file" if w.create else "records appended"
        out.append(PlannedAction("write", "append", w.path, why, w.pos, w.pos + size))
    return tuple(out)


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
    committed: bool = False  # the write had committed: it was finished, not undone


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
        keys = plan.records.queues()
        keys |= {(r.topic, r.queue_id) for r in plan.catch_up}
        keys |= set(plan.lmq_queues)  # the %LMQ% entries are rolled back with the rest
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
    if j.get("committed"):  # killed after its commit point: every byte is in place, only clean up
        _record_committed(st.root, j["committed"], st.config.commitlog_dir)
        _finish_journal(st.root)
        return RollbackReport(_journal_path(st.root), j.get("pid"), j.get("startedMs"), (), 0, committed=True)
    report = _rollback(st.root, j)
    _finish_journal(st.root)
    return report


LAST_WRITE = "write.last.json"


def _record_committed(root: Path, committed: dict[str, Any], commitlog_dir: Path) -> None:
    """Keep the input digest and offsets of the last write, so a re-run of the same input can tell, and
    the commit log files as this write left them (its records were checked before it appended)."""
    data = {**committed, "commitlogAsLeft": _commitlog_fingerprint(commitlog_dir)}
    atomic_write(Path(root, SCRATCH_DIR, LAST_WRITE), json.dumps(data).encode(), tmp_dir=scratch_dir(root))


def _commitlog_fingerprint(commitlog_dir: Path) -> list[list[Any]]:
    """Name, size and mtime (ns) of every commit log file: any other writer (a broker, a tool) changes it."""
    try:
        names = sorted(n for n in os.listdir(commitlog_dir) if n.isdigit())
    except OSError:
        return []
    out: list[list[Any]] = []
    for n in names:
        st = os.stat(Path(commitlog_dir, n))
        out.append([n, st.st_size, st.st_mtime_ns])
    return out


def last_write(root: Path | str) -> dict[str, Any] | None:
    """What the last finished write recorded (input digest, phy offsets, messages), or None."""
    try:
        data = json.loads(Path(root, SCRATCH_DIR, LAST_WRITE).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def input_digest(messages: Sequence[Message] | MessageBatch) -> str:
    """sha256 of the input messages (not of the encoded records: times and UNIQ_KEYs differ per run)."""
    if isinstance(messages, MessageBatch):
        cols = (messages.topic, messages.body, messages.queue_id, messages.tags, messages.keys)
        return hashlib.sha256(pickle.dumps(cols, protocol=5)).hexdigest()
    fields = [f for f in Message.__slots__ if f != "origin"]  # type: ignore[attr-defined]
    cols = [[getattr(m, f) for m in messages] for f in fields]  # column-wise: a fifth of pickling objects
    return hashlib.sha256(pickle.dumps(cols, protocol=5)).hexdigest()


def _refuse_unsafe(st: Store, plan: WritePlan, digest: str | None) -> None:
    if not plan.records:
        return
    if digest is not None:
        _refuse_repeat(st.root, digest, plan)
    for r in plan.catch_up if plan.dispatch else ():
        why = topic_problem(r.topic)
        if why is not None:
            where = record_place(st.config.commitlog_dir, st.config.commitlog_file_size, r.phy_offset)
            raise BadTopic(r.topic, why, path=where[0], pos=where[1], phy_offset=r.phy_offset)
    _refuse_damage(st, plan)
    _refuse_damaged_index(st, plan)


def _refuse_repeat(root: Path, digest: str, plan: WritePlan) -> None:
    last = last_write(root)
    if last is None or last.get("inputDigest") != digest or last.get("endPhyOffset") != plan.start_phy:
        return
    raise UnsafePlan(
        f"{root}: this input was already written by the last write ({last.get('messages')} messages at phy offsets "
        f"[{last.get('startPhyOffset')}, {last.get('endPhyOffset')})); nothing was written: --again writes it a "
        "second time"
    )


def _refuse_damage(st: Store, plan: WritePlan) -> None:
    """The broker's recovery must keep every record before the append point, else it drops the new ones."""
    from .recover import plan_recover

    if plan.start_phy == 0:
        return
    last = last_write(st.root)
    if (
        last is not None
        and last.get("endPhyOffset") == plan.start_phy
        and last.get("commitlogAsLeft") == _commitlog_fingerprint(st.config.commitlog_dir)
    ):
        return  # the files are as the last write left them, after it checked them: no need to walk again
    rp = plan_recover(st, now_ms=0, use_quarantine=False)
    if rp.process_offset >= plan.start_phy:
        return
    fs = st.config.commitlog_file_size
    base = rp.process_offset - rp.process_offset % fs
    raise CorruptData(
        f"damaged commit log: the broker's recovery stops here ({rp.stop}) and would drop everything after it, "
        f"the new messages included (they would go at {plan.start_phy}); run `rmqstore recover "
        f"{shlex.quote(str(st.root))}` first",
        path=st.config.commitlog_dir / f"{base:020d}",
        pos=rp.process_offset - base,
        phy_offset=rp.process_offset,
    )


def _refuse_damaged_index(st: Store, plan: WritePlan) -> None:
    """The dispatch appends to the last index file: its header must be one the broker could have written."""
    from .recover import _index_header_problem

    if not (plan.dispatch and st.config.message_index_enable):
        return
    files, _ = st.index_files()
    if not files:
        return
    last = files[-1]
    with open(last, "rb") as f:
        head = f.read(INDEX_HEADER_SIZE)
    why = "shorter than its header" if len(head) < INDEX_HEADER_SIZE else None
    if why is None:
        why = _index_header_problem(decode_index_header(head, path=str(last)), st.config)
    if why is not None:
        raise CorruptData(
            f"damaged index file ({why}): the write refuses to append to it; rebuild the index first "
            f"(`rmqstore redispatch --only index {shlex.quote(str(st.root))}`)",
            path=last,
            pos=0,
        )


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


def default_quarantine_dir(root: Path, now_ms: int | None = None) -> Path:
    """The base folder; each write that zeroes bytes gets a fresh ``write-<UTC time>`` folder inside."""
    return default_quarantine_base(root)


def _quarantine(plan: WritePlan, base: Path, root: Path, now_ms: int) -> Path:
    s = plan.stale
    assert s is not None
    q = Quarantine.fresh(base, "write", root, now_ms)
    q.save_range(
        s.path,
        s.pos,
        s.pos + s.length,
        f"bytes after the end of valid commit log records (phy offset {s.phy_offset}), zeroed before appending; "
        "restoring them overwrites the messages this write appended there",
    )
    q.write_manifest()
    return q.folder


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
            at = w.pos
            for piece in w.pieces:
                _pwrite_all(fd, piece, at, w.path)
                at += len(piece)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    if created and sync:
        fsync_dir(cfg.commitlog_dir)


class _Background(threading.Thread):
    """``fn(*args)`` in a thread; :meth:`result` re-raises what it raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        super().__init__(name="rmqstore-commitlog-writer", daemon=True)
        self._call = (fn, args)
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        fn, args = self._call
        try:
            fn(*args)
        except BaseException as e:  # handed to the caller's thread
            self._error = e

    def result(self) -> None:
        if self._error is not None:
            raise self._error


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


def _dispatch_lmq(st: Store, start: int, end: int) -> None:
    """The %LMQ% (multi-dispatch) consume queue entries of the records written (§9.1)."""
    extra = ExtraDispatcher(st.config, st.root, frozenset())
    try:
        for seg in st.commitlog_segments()[0]:
            lo, hi = max(start, seg.base_offset), min(end, seg.base_offset + seg.size)
            if lo < hi:
                with map_file(seg.path) as buf:
                    for rec in iter_records(seg, buf, lo - seg.base_offset, hi - seg.base_offset, st.config):
                        extra.put(rec)
    finally:
        extra.close()


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
    on_step: StepHook | None = None,
    digest: str | None = None,
) -> WriteResult:
    """Carry out ``plan`` on the store it was made for (open writable), atomically.

    Journaled: the journal is written first and a kill before the commit point is rolled back by the
    next write; at the commit point the journal records the input ``digest`` and the offsets written,
    so a kill after it is finished (never undone, never written twice). ``on_step`` is called with
    ``write:journal``, ``write:data``, ``write:checkpoint``, ``write:commit`` and ``write:finished``.

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
        qdir = _quarantine(plan, quarantine or default_quarantine_dir(root), root, now)
    scratch_dir(root)
    journal = Journal(_journal_path(root), {"operation": "write", **_build_journal(st, plan)}, on_step)
    journal.save()
    abort_existed = cfg.abort_path.exists()
    try:
        journal.mark("journal")
        # the dispatch reads the plan, not the commit log: the commit log is written (and fsynced)
        # by a second thread meanwhile; pwrite and fsync release the GIL
        writer = _Background(_apply_commitlog, plan, cfg, sync)
        stats = None
        try:
            if plan.dispatch:
                stats = _dispatch_written(st, plan, index_clock or (lambda: now), sync)
        finally:
            writer.join()  # never roll back under a running writer
        writer.result()
        if plan.dispatch and plan.lmq_queues:  # reads the records back: only once they are written
            _dispatch_lmq(st, plan.start_phy, plan.end_phy)
        journal.mark("data")
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
        journal.mark("checkpoint")
        journal.data["committed"] = {
            "inputDigest": digest,
            "startPhyOffset": plan.start_phy,
            "endPhyOffset": plan.end_phy,
            "messages": len(plan.records),
            "finishedMs": now,
        }
        # the commit point: from here a re-run finishes this write instead of undoing it
        journal.save()
    except BaseException as e:
        j = pending_journal(root)
        if j is not None:
            _rollback(root, j)
            _finish_journal(root)
        if qdir is not None:
            shutil.rmtree(qdir, ignore_errors=True)  # the bytes are back in place
        if isinstance(e, RmqstoreError):
            raise
        if isinstance(e, OSError):
            fe = from_os_error(e)
            raise RmqstoreError(f"write failed ({fe}); the store was rolled back") from e
        raise
    journal.hook("write:commit")
    _record_committed(root, journal.data["committed"], cfg.commitlog_dir)
    _finish_journal(root)
    journal.hook("write:finished")
    return WriteResult(plan, stats, cp, abort_created, qdir, None, flush)


def write_messages(
    root: Path | str,
    messages: Sequence[Message] | MessageBatch,
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
    again: bool = False,
    on_step: StepHook | None = None,
) -> WriteResult:
    """Open ``root`` writable (the broker's lock), finish or roll back an interrupted write, plan and apply.

    ``dry_run`` opens the store read-only (still refusing one a broker holds) and only plans.
    Refused before anything is written: damage the broker's recovery would cut before the append
    point (CorruptData, run recover first), a damaged last index file, a record waiting for dispatch
    whose topic the broker never accepts, and the same input as the last write when nothing was
    written since (UnsafePlan unless ``again``). See :func:`plan_write` and :func:`apply_write`.
    """
    from .store import locked_error, open_store

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
        with open_store(root, broker_config=broker_config, broker=broker, create=False, operation="write") as st:
            pid = st.lock_holder()
            if pid is not None:
                raise locked_error(st.config.lock_path, pid)
            plan = plan_write(st, messages, **plan_kw)
            _refuse_unsafe(st, plan, None if again else input_digest(messages))
        return WriteResult(plan, None, None, False, None, None, flush, dry_run=True)
    new_root = Path(root)
    created = create and not new_root.exists()
    try:
        with open_store(
            root, broker_config=broker_config, writable=True, broker=broker, create=create, operation="write"
        ) as st:
            rolled = rollback_pending(st)
            plan = plan_write(st, messages, **plan_kw)
            digest = input_digest(messages)
            _refuse_unsafe(st, plan, None if again else digest)
            res = apply_write(
                st,
                plan,
                flush=flush,
                quarantine=quarantine,
                use_quarantine=use_quarantine,
                index_clock=clock,
                now_ms=clock() if clock else None,
                on_step=on_step,
                digest=digest,
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
