"""The run lane: runs of plain producer messages, checked and encoded a run at a time.

A plain message is a producer's message as a :class:`MessageBatch` holds it: TAGS, KEYS, WAIT, a
given or generated UNIQ_KEY, user properties (none named as the broker's own), flag, born and store
time, IPv4 born and store hosts; no delay, no transaction type, not raw (``PLAIN_FIELDS`` left as
the broker chooses). Its properties are TAGS, KEYS, WAIT, UNIQ_KEY, the user's (and CLUSTER). A run
is consecutive plain messages with one run code: which of TAGS and KEYS they have, their WAIT, whether
the UNIQ_KEY and the store time are given, and their user property names in order. The lane gives
exactly the bytes the reference lane
(:func:`~rmqstore.write.encode_one.put_one`) gives; a message it cannot vouch for (a topic that fails
its checks, a V2 topic, a limit exceeded, a separator in a value) goes through the reference lane,
which raises the error the broker would. Record heads are one numpy array, each record one bytes
%-format with the constant parts of its properties built in; UNIQ_KEYs and the index key hashes are
computed as arrays. A generated UNIQ_KEY is made from the born time and host: a message that gives
either of them gives its UNIQ_KEY too, or goes one by one.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from rmqstore.codec import commitlog as cl
from rmqstore.codec.columnar import HEAD_V4_DTYPE
from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.messages import BATCH_FIELDS, Message, MessageBatch
from rmqstore.dispatch.multiqueue import PROP_MULTI_DISPATCH, PROP_MULTI_QUEUE_OFFSET
from rmqstore.errors import InputError
from rmqstore.ops.write.append import Planner
from rmqstore.ops.write.append_point import RECORD_SLACK as _RECORD_SLACK
from rmqstore.ops.write.columns import _keys_index, _merge_index_keys
from rmqstore.ops.write.encode_one import put_one
from rmqstore.ops.write.uniq import _hex4_bytes, _split_fixed, _string_hashes, _topic_prefix_hashes, _uniq_key_hashes
from rmqstore.ops.write.validate import _PROPS_MAX, _V1_TOPIC_MAX, PROP_CLUSTER, _PropsFormat
from rmqstore.store import config as cfgmod
from rmqstore.walk.columns import topic_key_hashes

# Message fields a plain message leaves as the broker chooses them (the lane's condition).
PLAIN_FIELDS = ("raw", "delay_level", "sys_flag", "reconsume_times", "prepared_transaction_offset")
PLAIN_DEFAULTS = (False, 0, 0, 0, 0)
# Run code bits above TAGS (1) and KEYS (2); the user property names' id is shifted by _NAMES_SHIFT.
WAIT_FALSE, UNIQ_GIVEN, STORE_TIME_GIVEN = 4, 8, 16
_NAMES_SHIFT = 5
# Property names the broker reads or adds itself: a message giving one goes through the reference lane.
_BROKER_NAMES = frozenset(
    {
        cl.PROP_TAGS,
        cl.PROP_KEYS,
        cl.PROP_WAIT,
        cl.PROP_UNIQ_KEY,
        cl.PROP_DELAY,
        cl.PROP_REAL_TOPIC,
        cl.PROP_REAL_QID,
        PROP_CLUSTER,
        PROP_MULTI_DISPATCH,
        PROP_MULTI_QUEUE_OFFSET,
        cl.CRC32_PROPERTY,
    }
)
_SHORTS = [i.to_bytes(2, "big") for i in range(_PROPS_MAX + 1)]  # PROPERTIESLENGTH fields
_CLOCK_EVERY = 8  # plain messages per clock reading (a few microseconds apart)
_MAX_NAME_SETS = 4096  # user property name lists with a run code; messages with others go one by one
_NO_QUEUE = -(1 << 40)  # queue id "none given" in an int64 column
_TopicInfo = tuple[cfgmod.TopicConfig | None, bytes]
_SECOND = itemgetter(1)


def _same_names(props: list[dict[str, str]]) -> tuple[str, ...] | None:
    """The property names of the first message when every message has these, in this order (else
    None): checked a key position at a time over all messages."""
    names = tuple(props[0]) if props else ()
    if set(map(len, props)) != {len(names)}:
        return None
    keys = list(map(iter, props))
    for name in names:
        if list(map(next, keys)).count(name) != len(props):
            return None
    return names


def _property_values(props: list[Any]) -> list[str]:
    """The values of the messages' properties (dicts, or pairs), one message after the other."""
    if set(map(type, props)) == {dict}:
        return list(chain.from_iterable(map(dict.values, props)))
    return list(chain.from_iterable(p.values() if type(p) is dict else map(_SECOND, p) for p in props))


def _not_none(column: list[Any] | None, n: int) -> np.ndarray:
    """Which values of an optional column are given (a column left None gives none)."""
    if column is None:
        return np.zeros(n, dtype=bool)
    if None not in column:
        return np.ones(n, dtype=bool)
    return np.array([v is not None for v in column], dtype=bool)


class Block:
    """Columns of consecutive input messages (a slice of a list of messages or of a batch): the
    producer columns, and the optional ones (``BATCH_FIELDS`` from uniq_key on, None: all defaults)."""

    __slots__ = ("topic", "body", "queue_id", "tags", "keys", "origin", "source", "start", *BATCH_FIELDS[6:])

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
        optional: Sequence[list[Any] | None] = (None,) * len(BATCH_FIELDS[6:]),
    ):
        self.topic, self.body, self.queue_id, self.tags, self.keys = topic, body, queue_id, tags, keys
        self.origin, self.source, self.start = origin, source, start
        self.uniq_key, self.wait, self.properties, self.flag = optional[:4]
        self.born_timestamp_ms, self.born_host, self.store_host, self.store_timestamp_ms = optional[4:]

    @property
    def producer_only(self) -> bool:
        """No optional column: the messages carry topic, queue, body, TAGS and KEYS only."""
        return all(getattr(self, name) is None for name in BATCH_FIELDS[6:])

    def message(self, i: int) -> Message:
        src = self.source
        return src.message(self.start + i) if isinstance(src, MessageBatch) else src[self.start + i]


def run_codes(tags: list[str | None], keys: list[str | None]) -> list[int]:
    """The lane's run code of plain messages: bit 0 TAGS, bit 1 KEYS (a non-blank value)."""
    if None not in tags and None not in keys and "" not in keys and not any(map(str.isspace, keys)):
        return [3] * len(tags)  # the usual batch: every message has both
    return [(t is not None) | (bool(ks) and not ks.isspace()) << 1 for t, ks in zip(tags, keys, strict=True)]


@dataclass(slots=True)
class _Given:
    """What the messages of a run give beyond topic, queue, body, TAGS and KEYS (None: not given)."""

    uniq: list[str] | None = None  # UNIQ_KEYs
    values: tuple[list[str], ...] = ()  # the user properties' values, one list per name
    flag: np.ndarray | None = None
    born_ts: np.ndarray | None = None  # with born_set: the messages that give their born time
    born_set: np.ndarray | None = None
    store_ts: np.ndarray | None = None
    hosts: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # born ip, port, store ip, port
    store_hosts: list[tuple[bytes, int]] | None = None


@dataclass(slots=True)
class _Run:
    """A run's columns after its checks: per message, and the run's topics (``tids`` index ``tnames``)."""

    origins: list[str] | None
    topics: list[str]
    tids: np.ndarray
    q: np.ndarray  # queue id, or _NO_QUEUE for the round robin
    bodies: list[bytes]
    tags: list[str] | None
    keys: list[str] | None
    keys_hashed: tuple[np.ndarray, np.ndarray] | None  # Java hash and length of each KEYS (one key each)
    size: np.ndarray
    plen: np.ndarray
    blen: np.ndarray
    given: _Given

    def part(self, a: int, b: int) -> _Run:
        def cut(v: Any) -> Any:
            if v is None:
                return None
            return tuple(map(cut, v)) if isinstance(v, tuple) else v[a:b]

        g = self.given
        return _Run(
            *(cut(getattr(self, name)) for name in _RUN_COLUMNS),
            _Given(*(cut(getattr(g, name)) for name in _GIVEN_COLUMNS)),
        )

    def origin(self, i: int) -> str:
        return "message" if self.origins is None else self.origins[i]


_RUN_COLUMNS = [f for f in _Run.__dataclass_fields__ if f != "given"]
_GIVEN_COLUMNS = list(_Given.__dataclass_fields__)


class RunLane:
    """Puts runs of plain messages for a :class:`Planner` (see the module's description)."""

    def __init__(self, p: Planner):
        self.p = p
        cfg, rules = p.cfg, p.rules
        self.born_addr, self.born_port = p.default_born
        self.store_addr, self.store_port = p.default_store
        # the lane renders producer properties as they are: not for stores whose broker edits them further
        self.usable = len(self.born_addr) == 4 and len(self.store_addr) == 4 and not p.prop_crc and not p.lmq
        self.trailing_separator = rules.props_trailing_separator
        self.born_ip = int.from_bytes(self.born_addr, "big") if self.usable else 0
        self.store_ip = int.from_bytes(self.store_addr, "big") if self.usable else 0
        self.cluster = cfg.broker_cluster_name
        self.cluster_bad = not self.cluster or "\x01" in self.cluster or "\x02" in self.cluster
        self.run_formats: dict[int, _PropsFormat] = {}
        self.record_formats: dict[tuple[tuple[str, ...], str | None, bool], bytes] = {}
        self.user_names: list[tuple[str, ...]] = [()]  # the user property names of run codes, by id
        self.names_ids: dict[tuple[str, ...], int] = {(): 0}
        self.topic_prefix: dict[str, bytes] = {}
        self.ns_clock = time.time_ns if p.opts.clock is None else None
        self.tnames: list[str] = []
        self.tinfo: list[_TopicInfo | None] = []

    def codes(self, blk: Block) -> list[int]:
        """The run code of each message of a block (see the module's description); -1: one by one."""
        codes = run_codes(blk.tags, blk.keys)
        if blk.producer_only:
            return codes
        n = len(codes)
        c = np.array(codes, dtype=np.int64)
        one = np.zeros(n, dtype=bool)
        given = _not_none(blk.uniq_key, n)
        c[given] |= UNIQ_GIVEN
        # a UNIQ_KEY generated from a given born host or time: one by one
        one |= ~given & (_not_none(blk.born_host, n) | _not_none(blk.born_timestamp_ms, n))
        if blk.wait is not None:
            c[~np.array(blk.wait, dtype=bool)] |= WAIT_FALSE
        c[_not_none(blk.store_timestamp_ms, n)] |= STORE_TIME_GIVEN
        if blk.properties is not None:
            nids = np.array(self.names_ids_of(blk.properties), dtype=np.int64)
            one |= nids < 0
            c |= nids << _NAMES_SHIFT
        c[one] = -1
        return c.tolist()

    def names_ids_of(self, props: list[tuple[tuple[str, str], ...]]) -> list[int]:
        """:meth:`names_id` of each message's user properties (names taken out of all at once when
        every message has as many)."""
        if set(map(type, props)) == {dict}:  # as read from NDJSON
            same = _same_names(props)
            if same is not None:
                return [self.names_id(same)] * len(props)
            names = list(map(tuple, props))
        else:
            names = [tuple(items) if type(items) is dict else tuple([k for k, _ in items]) for items in props]
        ids = list(map(self.names_ids.get, names))
        if None in ids:
            ids = [self.names_id(nm) if i is None else i for nm, i in zip(names, ids, strict=True)]
        return ids

    def names_id(self, names: tuple[str, ...]) -> int:
        """The id of user property names in their order; -1 when the reference lane must take them
        (a name given twice, empty, with a separator, or one the broker reads or adds)."""
        nid = self.names_ids.get(names)
        if nid is None:
            good = len(set(names)) == len(names) and not any(
                not k or "\x01" in k or "\x02" in k or k in _BROKER_NAMES or not _valid_unicode(k) for k in names
            )
            if good and len(self.user_names) < _MAX_NAME_SETS:
                nid = len(self.user_names)
                self.user_names.append(names)
            else:
                nid = -1
            self.names_ids[names] = nid
        return nid

    def run_format(self, code: int) -> _PropsFormat:
        f = self.run_formats.get(code)
        if f is None:
            p = self.p
            names = (
                ([cl.PROP_TAGS] if code & 1 else [])
                + ([cl.PROP_KEYS] if code & 2 else [])
                + [cl.PROP_WAIT, cl.PROP_UNIQ_KEY]
            )
            names += self.user_names[code >> _NAMES_SHIFT]
            f = p.props_format(names, 16)
            if p.rules.cluster_property:
                names = [*f.names, PROP_CLUSTER]
                if p.rules.drops_wait_property:
                    names.remove(cl.PROP_WAIT)
                f = p.props_format(names, p.rules.properties_capacity)
            self.run_formats[code] = f
        return f

    def put_run(self, blk: Block, lo: int, hi: int, code: int) -> None:
        """Messages ``lo:hi`` of a block, all plain with the same run code: the ones that pass every
        check a run at a time, the others one by one, in message order."""
        fmt = self.run_format(code)
        run, bad = self._checked(blk, lo, hi, code, fmt)
        a = 0
        for i in np.flatnonzero(bad).tolist():
            if i > a:
                self._put_checked(run.part(a, i), fmt, code)
            put_one(self.p, blk.message(lo + i))
            a = i + 1
        if a < hi - lo:
            self._put_checked(run.part(a, hi - lo) if a else run, fmt, code)

    def _checked(self, blk: Block, lo: int, hi: int, code: int, fmt: _PropsFormat) -> tuple[_Run, np.ndarray]:
        """The run's columns, and which messages fail a check (with no side effect but the topics'
        own, as the reference lane's)."""
        k = hi - lo
        topics = blk.topic[lo:hi]
        origins = None if blk.origin is None else blk.origin[lo:hi]
        tids, limit, can_pick, tlen = self._topics(topics, origins)
        bad = limit[tids] < 0
        qids = blk.queue_id[lo:hi]
        if None in qids:
            q = np.fromiter((_NO_QUEUE if v is None else v for v in qids), np.int64, k)
        else:
            q = np.array(qids, dtype=np.int64)
        picked = q == _NO_QUEUE
        bad |= (q >= limit[tids]) | ((q < 0) & ~picked) | (picked & ~can_pick[tids])
        # a topic's first round-robin pick starts from its queues' offsets at that message: one by one
        for n, t in enumerate(self.tnames):
            if t not in self.p.rr:
                first = np.flatnonzero(picked & (tids == n))
                if len(first):
                    bad[first[0]] = True
        tags = blk.tags[lo:hi] if code & 1 else None
        keys = blk.keys[lo:hi] if code & 2 else None
        given = self._given(blk, lo, hi, code, bad)
        plen, keys_hashed = self._properties_length(fmt, tags, keys, given, code, bad)
        bodies = blk.body[lo:hi]
        blen = np.fromiter(map(len, bodies), np.int64, k)
        size = 91 + blen + tlen[tids] + plen
        bad |= plen > _PROPS_MAX
        max_record, rules = self.p.cfg.max_message_size, self.p.rules
        if rules.body_limit_only:
            bad |= blen > max_record
            if rules.record_slack:
                bad |= size > max_record + _RECORD_SLACK
        else:
            bad |= size > max_record
        bad |= size + 8 > self.p.out.fs
        return _Run(origins, topics, tids, q, bodies, tags, keys, keys_hashed, size, plen, blen, given), bad

    def _given(self, blk: Block, lo: int, hi: int, code: int, bad: np.ndarray) -> _Given:
        """The run's optional columns; marks in ``bad`` a host the lane does not lay out (IPv6, or
        one put_one refuses) and a number out of its field's range."""
        g = _Given()
        if code & UNIQ_GIVEN:
            g.uniq = blk.uniq_key[lo:hi]  # type: ignore[index]
        if code >> _NAMES_SHIFT:
            width = len(self.user_names[code >> _NAMES_SHIFT])  # every message of the run has these names
            flat = _property_values(blk.properties[lo:hi])  # type: ignore[index]
            g.values = tuple(flat[j::width] for j in range(width))
        try:
            if blk.flag is not None:
                g.flag = np.array(blk.flag[lo:hi], dtype=np.int32).astype(np.int64)
            if blk.born_timestamp_ms is not None:
                born = blk.born_timestamp_ms[lo:hi]
                g.born_set = np.array([t is not None for t in born], dtype=bool)
                g.born_ts = np.array([0 if t is None else t for t in born], dtype=np.int64)
            if code & STORE_TIME_GIVEN:
                g.store_ts = np.array(blk.store_timestamp_ms[lo:hi], dtype=np.int64)  # type: ignore[index]
        except OverflowError:  # put_one says which message and field
            bad[:] = True
            return _Given()
        if blk.born_host is not None or blk.store_host is not None:
            self._hosts(g, blk, lo, hi, bad)
        return g

    def _hosts(self, g: _Given, blk: Block, lo: int, hi: int, bad: np.ndarray) -> None:
        """Born and store hosts as ip and port arrays (the run's defaults where none is given)."""
        k = hi - lo
        parsed: dict[str | None, tuple[bytes, int] | None] = {}
        for text in {
            *(blk.born_host[lo:hi] if blk.born_host else ()),
            *(blk.store_host[lo:hi] if blk.store_host else ()),
        }:
            try:
                host = self.p.hosts.get_host(text, "message", "host") if text is not None else None
            except InputError:
                host = None
            parsed[text] = host if host is not None and len(host[0]) == 4 else None
        columns = []
        for given, default in ((blk.born_host, self.p.default_born), (blk.store_host, self.p.default_store)):
            texts = given[lo:hi] if given is not None else [None] * k
            parsed[None] = default
            hosts = [parsed[t] for t in texts]
            bad |= np.array([h is None for h in hosts], dtype=bool)
            hosts = [default if h is None else h for h in hosts]
            columns.append(hosts)
        (born, store) = columns
        as_ip = {h: int.from_bytes(h[0], "big") for h in {*born, *store}}
        g.hosts = tuple(
            np.array(v, dtype=np.int64)
            for v in ([as_ip[h] for h in born], [h[1] for h in born], [as_ip[h] for h in store], [h[1] for h in store])
        )  # type: ignore[assignment]
        g.store_hosts = store

    def _topics(
        self, topics: list[str], origins: list[str] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The run's topics (``self.tnames``, ``self.tinfo``); per message its topic's index, and per
        topic its queue limit (-1: one by one), whether it has write queues and its name's length."""
        p = self.p
        tmap = {t: n for n, t in enumerate(dict.fromkeys(topics))}
        tids = np.fromiter(map(tmap.__getitem__, topics), np.int64, len(topics))
        limit = np.empty(len(tmap), dtype=np.int64)
        can_pick = np.empty(len(tmap), dtype=bool)
        tlen = np.empty(len(tmap), dtype=np.int64)
        self.tnames, self.tinfo = list(tmap), []
        for t, n in tmap.items():
            info = p.topic_info.get(t)
            if info is None:
                # first sight of the topic: validate (and auto-create) it as put_one would; a topic
                # that fails stays unknown, and its messages go through put_one, which raises
                try:
                    info = p.topic_entry(t, "message" if origins is None else origins[topics.index(t)])
                except InputError:
                    info = None
            if info is not None and len(info[1]) > _V1_TOPIC_MAX:
                info = None  # V2 record: put_one
            self.tinfo.append(info)
            if info is None:
                limit[n], can_pick[n], tlen[n] = -1, False, 0
                continue
            tc, tb = info
            limit[n] = INT_MAX if tc is None else max(tc.write_queue_nums, tc.read_queue_nums)
            can_pick[n] = tc is not None and tc.write_queue_nums > 0
            tlen[n] = len(tb)
            if t not in self.topic_prefix:
                self.topic_prefix[t] = bytes([len(tb)]) + tb
        return tids, limit, can_pick, tlen

    def _properties_length(
        self,
        fmt: _PropsFormat,
        tags: list[str] | None,
        keys: list[str] | None,
        given: _Given,
        code: int,
        bad: np.ndarray,
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """Each message's properties length (names, values, separators), and the hashes of its KEYS
        when every message has one index key."""
        names = fmt.names
        k = len(bad)
        fixed = sum(len(n.encode("utf-8")) + 2 for n in names) - (not self.trailing_separator)
        plen = np.full(k, fixed, dtype=np.int64)
        if given.uniq is None:
            plen += 32  # a generated UNIQ_KEY
        else:
            plen += _value_column(given.uniq, False, bad)[0]
        for values in given.values:
            plen += _value_column(values, False, bad)[0]
        if cl.PROP_WAIT in names:
            plen += 5 if code & WAIT_FALSE else 4  # "false", "true"
        keys_hashed = None
        if tags is not None:
            plen += _value_column(tags, False, bad)[0]  # type: ignore[arg-type]
        if keys is not None:
            utf8_len, joined = _value_column(keys, True, bad)  # type: ignore[arg-type]
            plen += utf8_len
            if " " not in joined:  # one index key per message: hash them all now
                keys_hashed = _string_hashes(keys, joined)  # type: ignore[arg-type]
        if PROP_CLUSTER in names:
            plen += len(self.cluster.encode("utf-8"))
            if self.cluster_bad:
                bad[:] = True
        return plen, keys_hashed

    def record_format(self, fmt: _PropsFormat, uniq_head: str | None, wait: bool) -> bytes:
        """A plain record after its 88-byte head as one bytes %-format: body, topic (with its length
        byte), properties length, then the properties with the constant values filled in
        (``uniq_head`` None: the UNIQ_KEYs are given)."""
        key = (tuple(fmt.names), uniq_head, wait)
        rf = self.record_formats.get(key)
        if rf is None:
            parts = [b"%s%s%s%s"]
            for name in fmt.names:
                if name == cl.PROP_UNIQ_KEY and uniq_head is not None:
                    value = uniq_head.encode("ascii") + b"%s%s"  # time field, counter
                elif name == cl.PROP_WAIT:
                    value = b"true" if wait else b"false"
                elif name == PROP_CLUSTER:
                    value = self.cluster.encode("utf-8").replace(b"%", b"%%")
                else:  # TAGS, KEYS, a given UNIQ_KEY, a user property
                    value = b"%s"
                parts.append(name.encode("utf-8").replace(b"%", b"%%") + b"\x01" + value + b"\x02")
            rf = b"".join(parts)
            if not self.trailing_separator:  # 4.9.1-4.9.x: none after the last property
                rf = rf[:-1]
            self.record_formats[key] = rf
        return rf

    def _put_checked(self, run: _Run, fmt: _PropsFormat, code: int) -> None:
        """Plain messages that passed every check: the side effects, in message order."""
        qv = self._queue_ids(run)
        g = run.given
        if g.store_ts is not None:  # as put_one: a given store time is taken as it is
            ts = g.store_ts
            self.p.last_ts = int(ts[-1])
        else:
            ts = self._store_times(len(qv))
        uniq: tuple[str, np.ndarray, np.ndarray] | None = None
        if g.uniq is None:  # generated: the born time is the store time, the born host the default
            uniq = self.p.keys_gen.many_parts(ts, self.born_addr)
        qoff = self._queue_offsets(run.tids, qv)
        crc = np.fromiter(map(zlib.crc32, run.bodies), np.int64, len(qv)) & INT_MAX
        args = self._format_args(run, fmt, uniq, code)
        rf = self.record_format(fmt, None if uniq is None else uniq[0], not code & WAIT_FALSE)
        phy = self._lay_out(run, rf, args, self._head_fields(run, qv, qoff, crc, ts))
        self._add_columns(run, qv, qoff, phy, ts, uniq)

    def _head_fields(
        self, run: _Run, qv: np.ndarray, qoff: np.ndarray, crc: np.ndarray, ts: np.ndarray
    ) -> dict[str, np.ndarray | int]:
        """The record head's fields (before the physical offset and size): per message or the run's."""
        g = run.given
        born_ts = ts if g.born_ts is None else np.where(g.born_set, g.born_ts, ts)  # type: ignore[arg-type]
        heads: dict[str, np.ndarray | int] = {
            "magic": cl.MAGIC_V1,
            "body_crc": crc,
            "queue_id": qv,
            "queue_offset": qoff,
            "born_timestamp_ms": born_ts,
            "store_timestamp_ms": ts,
            "body_len": run.blen,
        }
        if g.flag is not None:
            heads["flag"] = g.flag
        if g.hosts is None:
            heads |= {"born_addr": self.born_ip, "born_port": self.born_port}
            heads |= {"store_addr": self.store_ip, "store_port": self.store_port}
        else:
            heads |= dict(zip(("born_addr", "born_port", "store_addr", "store_port"), g.hosts, strict=True))
        return heads

    def _queue_ids(self, run: _Run) -> np.ndarray:
        """Queue ids, the round robin's picks made in message order: a topic's picks in a run are
        consecutive positions of its round robin (its first pick ever went through put_one)."""
        qv = run.q.copy()
        picked = run.q < 0
        if not picked.any():
            return qv
        rr = self.p.rr
        for t in np.unique(run.tids[picked]).tolist():
            at = np.flatnonzero(picked & (run.tids == t))
            info = self.tinfo[t]
            assert info is not None and info[0] is not None  # else the checks sent them to put_one
            topic, pos = self.tnames[t], rr[self.tnames[t]]
            qv[at] = (pos + np.arange(len(at), dtype=np.int64)) % info[0].write_queue_nums
            rr[topic] = pos + len(at)
        return qv

    def _store_times(self, n: int) -> np.ndarray:
        """Store (and born) times: the clock, never below the previous record's."""
        p = self.p
        if self.ns_clock is not None:  # read once per few messages: they are microseconds apart
            ns_clock = self.ns_clock
            reads = np.array([ns_clock() for _ in range(-(-n // _CLOCK_EVERY))], dtype=np.int64) // 1_000_000
            ts = np.repeat(reads, _CLOCK_EVERY)[:n]
        else:
            now = p.now
            ts = np.array([now() for _ in range(n)], dtype=np.int64)
        ts[0] = max(int(ts[0]), p.last_ts)
        ts = np.maximum.accumulate(ts)
        p.last_ts = int(ts[-1])
        return ts

    def _queue_offsets(self, tids: np.ndarray, qv: np.ndarray) -> np.ndarray:
        """Queue offsets: per (topic, queue), continuing each queue in message order."""
        n = len(tids)
        ukeys, inv, counts = np.unique(tids * (1 << 32) + qv, return_inverse=True, return_counts=True)
        order = np.argsort(inv, kind="stable")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        bases = np.empty(len(ukeys), dtype=np.int64)
        for g, kv in enumerate(ukeys.tolist()):
            bases[g] = self.p.take_queue_offsets(self.tnames[kv >> 32], kv & 0xFFFFFFFF, int(counts[g]))
        return bases[inv] + rank

    def _format_args(
        self, run: _Run, fmt: _PropsFormat, uniq: tuple[str, np.ndarray, np.ndarray] | None, code: int
    ) -> list[Any]:
        """The per-record arguments of the record format after the head, in its order."""
        user = self.user_names[code >> _NAMES_SHIFT]
        tprefix = [self.topic_prefix.get(t, b"") for t in self.tnames]
        args: list[Any] = [
            run.bodies,
            list(map(tprefix.__getitem__, run.tids.tolist())),
            list(map(_SHORTS.__getitem__, run.plen.tolist())),
        ]
        for name in fmt.names:
            if name == cl.PROP_TAGS:
                enc = {t: t.encode("utf-8") for t in set(run.tags)}  # type: ignore[arg-type]
                args.append(list(map(enc.__getitem__, run.tags)))  # type: ignore[arg-type]
            elif name == cl.PROP_KEYS:
                args.append(list(map(str.encode, run.keys)))  # type: ignore[arg-type]
            elif name == cl.PROP_UNIQ_KEY and uniq is not None:
                tl = uniq[1].tolist()
                hex8 = {v: b"%08X" % v for v in set(tl)}
                args.append(list(map(hex8.__getitem__, tl)))
                args.append(_hex4_bytes(uniq[2]))
            elif name == cl.PROP_UNIQ_KEY:
                args.append(list(map(str.encode, run.given.uniq)))  # type: ignore[arg-type]
            elif name != cl.PROP_WAIT and name != PROP_CLUSTER:  # a user property
                values = run.given.values[user.index(name)]
                args.append(list(map(str.encode, values)))
        return args

    def _lay_out(self, run: _Run, rf: bytes, args: list[Any], heads: dict[str, np.ndarray | int]) -> np.ndarray:
        """Encode the records into the layout, rolling to the next file where one does not fit
        (BLANK first); their physical offsets."""
        out, size = self.p.out, run.size
        n = len(size)
        phy = np.empty(n, dtype=np.int64)
        i0 = 0
        while i0 < n:
            ends = out.pos + np.cumsum(size[i0:])
            over = np.flatnonzero(ends + 8 > out.fs)
            j = i0 + (int(over[0]) if len(over) else n - i0)
            if j > i0:
                phy[i0:j] = out.base + ends[: j - i0] - size[i0:j]
                h = np.zeros(j - i0, dtype=HEAD_V4_DTYPE)
                h["total_size"] = size[i0:j]
                h["phy_offset"] = phy[i0:j]
                for name, v in heads.items():
                    h[name] = v if isinstance(v, int) else v[i0:j]
                cols_ij = [_split_fixed(h.tobytes(), 88, j - i0)] + [c[i0:j] for c in args]
                out.add_piece(b"".join([rf % v for v in zip(*cols_ij, strict=True)]), int(ends[j - i0 - 1]))
            if j < n:
                out.next_file()
            i0 = j
        return phy

    def _add_columns(
        self,
        run: _Run,
        qv: np.ndarray,
        qoff: np.ndarray,
        phy: np.ndarray,
        ts: np.ndarray,
        uniq: tuple[str, np.ndarray, np.ndarray] | None,
    ) -> None:
        """What the dispatcher reads back (§3.11, §4.2): tags codes and index keys, into the plan's columns."""
        p, n, tags, keys = self.p, len(qv), run.tags, run.keys
        if tags is not None:
            codes = {t: p.tags_code(t) for t in set(tags)}
            tcode = np.fromiter(map(codes.__getitem__, tags), np.int64, n)
        else:
            tcode = np.zeros(n, dtype=np.int64)
        cols = p.cols
        gid = np.full(len(self.tnames), -1, dtype=np.int64)
        _, first_at = np.unique(run.tids, return_index=True)
        for i in np.sort(first_at).tolist():  # new topics get their ids in order of appearance
            gid[run.tids[i]] = cols.topic_id(self.tnames[int(run.tids[i])])
        tid = gid[run.tids]
        names = list(cols.topic_ids)
        topic_hash = _topic_prefix_hashes(names)[tid]
        given = run.given
        if uniq is None:
            uhash = topic_key_hashes(topic_hash, *_string_hashes(given.uniq))  # type: ignore[arg-type]
        else:
            uhash = topic_key_hashes(topic_hash, _uniq_key_hashes(*uniq), np.full(n, 32, dtype=np.int64))
        if run.keys_hashed is not None:  # every KEYS value is one key
            krec, khash = np.arange(n, dtype=np.int64), topic_key_hashes(topic_hash, *run.keys_hashed)
        elif keys is not None:
            krec, khash = _keys_index(names, tid, keys)  # type: ignore[arg-type]
        else:
            krec, khash = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        key_rec, key_hash = _merge_index_keys(np.arange(n, dtype=np.int64), uhash, krec, khash)
        cols.add_run((tid, qv, qoff, phy, run.size, ts, np.zeros(n, dtype=np.int64), tcode), key_rec, key_hash)
        cols.origin.extend_strings(["message"] * n if run.origins is None else list(run.origins))
        if uniq is None:
            cols.uniq.extend_strings(list(given.uniq))  # type: ignore[arg-type]
        else:
            cols.uniq.extend_generated(*uniq)
        cols.store_host.extend(repeat(p.default_store, n) if given.store_hosts is None else given.store_hosts)


def _value_column(values: list[str], may_be_empty: bool, bad: np.ndarray) -> tuple[np.ndarray, str]:
    """UTF-8 lengths of one property's values, and the values joined; marks in ``bad`` the messages
    whose value is empty (when that is refused) or holds a separator."""
    joined = "".join(values)
    if "\x01" in joined or "\x02" in joined or not (may_be_empty or all(values)):
        bad |= np.array([(not v and not may_be_empty) or "\x01" in v or "\x02" in v for v in values], dtype=bool)
    if joined.isascii():
        return np.fromiter(map(len, values), np.int64, len(values)), joined
    if not _valid_unicode(joined):  # a lone surrogate: the reference lane refuses it
        bad |= np.array([not _valid_unicode(v) for v in values], dtype=bool)
    return np.array([len(v.encode("utf-8", "surrogatepass")) for v in values], dtype=np.int64), joined


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
