"""The run lane: runs of plain producer messages, checked and encoded a run at a time.

A plain message is a producer's message with every store-level field left to the broker (see
``PLAIN_FIELDS``), IPv4 default hosts, no delay, no user properties: its properties are TAGS, KEYS,
WAIT, UNIQ_KEY (and CLUSTER). The lane gives exactly the bytes the reference lane
(:func:`~rmqstore.write.encode_one.put_one`) gives; a message it cannot vouch for (a topic that fails
its checks, a V2 topic, a limit exceeded, a separator in a value) goes through the reference lane,
which raises the error the broker would. Record heads are one numpy array, each record one bytes
%-format with the constant parts of its properties built in; UNIQ_KEYs and the index key hashes are
computed as arrays.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from rmqstore.codec.columnar import HEAD_V4_DTYPE
from rmqstore.codec.commitlog import MAGIC_V1, PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, PROP_WAIT
from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.messages import Message, MessageBatch
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
PLAIN_FIELDS = (
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
PLAIN_DEFAULTS = (False, (), 0, 0, 0, None, None, None, None, None, 0, 0, True)
_SHORTS = [i.to_bytes(2, "big") for i in range(_PROPS_MAX + 1)]  # PROPERTIESLENGTH fields
_CLOCK_EVERY = 8  # plain messages per clock reading (a few microseconds apart)
_NO_QUEUE = -(1 << 40)  # queue id "none given" in an int64 column
_TopicInfo = tuple[cfgmod.TopicConfig | None, bytes]


class Block:
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


def run_codes(tags: list[str | None], keys: list[str | None]) -> list[int]:
    """The lane's run code of plain messages: bit 0 TAGS, bit 1 KEYS (a non-blank value)."""
    if None not in tags and None not in keys and "" not in keys and not any(map(str.isspace, keys)):
        return [3] * len(tags)  # the usual batch: every message has both
    return [(t is not None) | (bool(ks) and not ks.isspace()) << 1 for t, ks in zip(tags, keys, strict=True)]


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

    def part(self, a: int, b: int) -> _Run:
        def cut(v: Any) -> Any:
            return None if v is None else v[a:b]

        kh = self.keys_hashed
        return _Run(
            cut(self.origins),
            self.topics[a:b],
            self.tids[a:b],
            self.q[a:b],
            self.bodies[a:b],
            cut(self.tags),
            cut(self.keys),
            None if kh is None else (kh[0][a:b], kh[1][a:b]),
            self.size[a:b],
            self.plen[a:b],
            self.blen[a:b],
        )

    def origin(self, i: int) -> str:
        return "message" if self.origins is None else self.origins[i]


class RunLane:
    """Puts runs of plain messages for a :class:`Planner` (see the module's description)."""

    def __init__(self, p: Planner):
        self.p = p
        cfg, rules = p.cfg, p.rules
        self.born_addr, self.born_port = p.default_born
        self.store_addr, self.store_port = p.default_store
        # the lane renders producer properties as they are: not for stores whose broker edits them further
        self.usable = (
            len(self.born_addr) == 4
            and len(self.store_addr) == 4
            and rules.props_trailing_separator
            and not p.prop_crc
            and not p.lmq
        )
        self.born_ip = int.from_bytes(self.born_addr, "big") if self.usable else 0
        self.store_ip = int.from_bytes(self.store_addr, "big") if self.usable else 0
        self.cluster = cfg.broker_cluster_name
        self.cluster_bad = not self.cluster or "\x01" in self.cluster or "\x02" in self.cluster
        self.run_formats: dict[int, _PropsFormat] = {}
        self.record_formats: dict[tuple[tuple[str, ...], str], bytes] = {}
        self.topic_prefix: dict[str, bytes] = {}
        self.ns_clock = time.time_ns if p.opts.clock is None else None
        self.tnames: list[str] = []
        self.tinfo: list[_TopicInfo | None] = []

    def run_format(self, code: int) -> _PropsFormat:
        f = self.run_formats.get(code)
        if f is None:
            p = self.p
            names = ([PROP_TAGS] if code & 1 else []) + ([PROP_KEYS] if code & 2 else []) + [PROP_WAIT, PROP_UNIQ_KEY]
            f = p.props_format(names, 16)
            if p.rules.cluster_property:
                names = [*f.names, PROP_CLUSTER]
                if p.rules.drops_wait_property:
                    names.remove(PROP_WAIT)
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
                self._put_checked(run.part(a, i), fmt)
            put_one(self.p, blk.message(lo + i))
            a = i + 1
        if a < hi - lo:
            self._put_checked(run.part(a, hi - lo) if a else run, fmt)

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
        plen, keys_hashed = self._properties_length(fmt, tags, keys, bad)
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
        return _Run(origins, topics, tids, q, bodies, tags, keys, keys_hashed, size, plen, blen), bad

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
        self, fmt: _PropsFormat, tags: list[str] | None, keys: list[str] | None, bad: np.ndarray
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """Each message's properties length (names, values, separators), and the hashes of its KEYS
        when every message has one index key."""
        names = fmt.names
        k = len(bad)
        plen = np.full(k, sum(len(n) + 2 for n in names) + 32, dtype=np.int64)  # 32: a generated UNIQ_KEY
        if PROP_WAIT in names:
            plen += 4  # "true"
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

    def record_format(self, fmt: _PropsFormat, uniq_head: str) -> bytes:
        """A plain record after its 88-byte head as one bytes %-format: body, topic (with its length
        byte), properties length, then the properties with the constant values filled in."""
        key = (tuple(fmt.names), uniq_head)
        rf = self.record_formats.get(key)
        if rf is None:
            parts = [b"%s%s%s%s"]
            for name in fmt.names:
                if name == PROP_TAGS or name == PROP_KEYS:
                    value = b"%s"
                elif name == PROP_UNIQ_KEY:
                    value = uniq_head.encode("ascii") + b"%s%s"  # time field, counter
                elif name == PROP_WAIT:
                    value = b"true"
                else:  # CLUSTER
                    value = self.cluster.encode("utf-8").replace(b"%", b"%%")
                parts.append(name.encode("utf-8").replace(b"%", b"%%") + b"\x01" + value + b"\x02")
            rf = self.record_formats[key] = b"".join(parts)
        return rf

    def _put_checked(self, run: _Run, fmt: _PropsFormat) -> None:
        """Plain messages that passed every check: the side effects, in message order."""
        qv = self._queue_ids(run)
        ts = self._store_times(len(qv))
        uniq_head, utime, uctr = self.p.keys_gen.many_parts(ts, self.born_addr)
        qoff = self._queue_offsets(run.tids, qv)
        crc = np.fromiter(map(zlib.crc32, run.bodies), np.int64, len(qv)) & INT_MAX
        args = self._format_args(run, fmt, utime, uctr)
        phy = self._lay_out(run, self.record_format(fmt, uniq_head), args, qv, qoff, crc, ts)
        self._add_columns(run, qv, qoff, phy, ts, uniq_head, utime, uctr)

    def _queue_ids(self, run: _Run) -> np.ndarray:
        """Queue ids, the round robin's picks made in message order."""
        qv = run.q.copy()
        p = self.p
        for i in np.flatnonzero(run.q < 0).tolist():
            info = self.tinfo[int(run.tids[i])]
            qv[i] = p.pick_queue(run.topics[i], info[0] if info else None, run.origin(i))
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

    def _format_args(self, run: _Run, fmt: _PropsFormat, utime: np.ndarray, uctr: np.ndarray) -> list[Any]:
        """The per-record arguments of the record format after the head, in its order."""
        tprefix = [self.topic_prefix.get(t, b"") for t in self.tnames]
        args: list[Any] = [
            run.bodies,
            list(map(tprefix.__getitem__, run.tids.tolist())),
            list(map(_SHORTS.__getitem__, run.plen.tolist())),
        ]
        for name in fmt.names:
            if name == PROP_TAGS:
                enc = {t: t.encode("utf-8") for t in set(run.tags)}  # type: ignore[arg-type]
                args.append(list(map(enc.__getitem__, run.tags)))  # type: ignore[arg-type]
            elif name == PROP_KEYS:
                args.append([k.encode("utf-8") for k in run.keys])  # type: ignore[union-attr]
            elif name == PROP_UNIQ_KEY:
                tl = utime.tolist()
                hex8 = {v: b"%08X" % v for v in set(tl)}
                args.append(list(map(hex8.__getitem__, tl)))
                args.append(_hex4_bytes(uctr))
        return args

    def _lay_out(
        self,
        run: _Run,
        rf: bytes,
        args: list[Any],
        qv: np.ndarray,
        qoff: np.ndarray,
        crc: np.ndarray,
        ts: np.ndarray,
    ) -> np.ndarray:
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
                h["magic"] = MAGIC_V1
                h["body_crc"] = crc[i0:j]
                h["queue_id"] = qv[i0:j]
                h["queue_offset"] = qoff[i0:j]
                h["phy_offset"] = phy[i0:j]
                h["born_timestamp_ms"] = ts[i0:j]
                h["born_addr"] = self.born_ip
                h["born_port"] = self.born_port
                h["store_timestamp_ms"] = ts[i0:j]
                h["store_addr"] = self.store_ip
                h["store_port"] = self.store_port
                h["body_len"] = run.blen[i0:j]
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
        uniq_head: str,
        utime: np.ndarray,
        uctr: np.ndarray,
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
        uhash = topic_key_hashes(topic_hash, _uniq_key_hashes(uniq_head, utime, uctr), np.full(n, 32, dtype=np.int64))
        if run.keys_hashed is not None:  # every KEYS value is one key
            krec, khash = np.arange(n, dtype=np.int64), topic_key_hashes(topic_hash, *run.keys_hashed)
        elif keys is not None:
            krec, khash = _keys_index(names, tid, keys)  # type: ignore[arg-type]
        else:
            krec, khash = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        key_rec, key_hash = _merge_index_keys(np.arange(n, dtype=np.int64), uhash, krec, khash)
        cols.add_run((tid, qv, qoff, phy, run.size, ts, np.zeros(n, dtype=np.int64), tcode), key_rec, key_hash)
        cols.keys.extend(keys if keys is not None else repeat(None, n))
        cols.origin.extend(repeat("message", n) if run.origins is None else run.origins)
        cols.topic.extend(run.topics)
        cols.uniq.extend_generated(uniq_head, utime, uctr)
        cols.store_host.extend(repeat(p.default_store, n))


def _value_column(values: list[str], may_be_empty: bool, bad: np.ndarray) -> tuple[np.ndarray, str]:
    """UTF-8 lengths of one property's values, and the values joined; marks in ``bad`` the messages
    whose value is empty (when that is refused) or holds a separator."""
    joined = "".join(values)
    if "\x01" in joined or "\x02" in joined or not (may_be_empty or all(values)):
        bad |= np.array([(not v and not may_be_empty) or "\x01" in v or "\x02" in v for v in values], dtype=bool)
    if joined.isascii():
        return np.fromiter(map(len, values), np.int64, len(values)), joined
    return np.array([len(v.encode("utf-8")) for v in values], dtype=np.int64), joined
