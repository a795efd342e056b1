"""The append plan's state: where each record goes (commit log files, roll-over with a BLANK record),
the queue offsets it takes, the topics it creates, and the plan it all adds up to (§3.4, §4.3, §9.4)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from rmqstore.codec.commitlog import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE, encode_blank
from rmqstore.codec.javahash import java_hash
from rmqstore.errors import InputError, UnsafePlan
from rmqstore.ops.write.append_point import StaleRange
from rmqstore.ops.write.append_point import check_supported as _check_supported
from rmqstore.ops.write.append_point import find_append_point as _find_append_point
from rmqstore.ops.write.append_point import index_end_phy as _index_end_phy
from rmqstore.ops.write.columns import RecordColumns, _ColumnsBuilder
from rmqstore.ops.write.effects import known_topics, write_effects
from rmqstore.ops.write.journal import pending_journal
from rmqstore.ops.write.spill import Spill, SpilledPiece
from rmqstore.ops.write.uniq import UniqKeySource
from rmqstore.ops.write.validate import (
    _V1_TOPIC_MAX,
    _HostCache,
    _load_topics,
    _PropsFormat,
    check_send_topic,
    java_hashmap_order,
    topic_for_new,
    utf8,
)
from rmqstore.rules import rules_for
from rmqstore.safety.actions import PlannedAction, actions_json
from rmqstore.store import Store
from rmqstore.store import config as cfgmod
from rmqstore.store.layout import file_name
from rmqstore.store.queue.batchconsumequeue import batch_cq_topics
from rmqstore.walk.requests import DispatchRequest

_CHUNK_LIMIT = 8 << 20  # bytes of records put one by one before they become a piece


class WriteOptions(NamedTuple):
    """How a write plans (the keyword arguments of :func:`~rmqstore.write.plan_write`).

    ``clock`` gives the store time in ms (default: the system clock). Hosts are ``ip:port``; the store
    host defaults to the last record's, else ``brokerIP1:listenPort``, else ``127.0.0.1:listenPort``;
    the born host to ``127.0.0.1:0``. ``topic_queue_nums`` is the producer's ``defaultTopicQueueNums``
    used when a topic is auto-created; ``max_topic_length`` the topic length limit.
    """

    clock: Callable[[], int] | None = None
    dispatch: bool = True
    store_host: str | None = None
    born_host: str | None = None
    allow_system_topic: bool = False
    max_topic_length: int = _V1_TOPIC_MAX
    uniq_keys: UniqKeySource | None = None
    topic_queue_nums: int = 4


@dataclass(frozen=True, slots=True)
class FileWrite:
    """Bytes to put into one commit log file at ``pos`` (records and the BLANK header that ends it),
    as consecutive pieces."""

    path: Path
    base_offset: int
    pos: int
    pieces: tuple[bytes | bytearray | SpilledPiece, ...]  # past the memory budget: in a temporary file
    create: bool  # the file does not exist yet: create it at full size first

    @property
    def data(self) -> bytes:
        return b"".join(p if isinstance(p, bytes | bytearray) else bytes(p) for p in self.pieces)


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
    effects: tuple[PlannedAction, ...] = ()  # every file changed after the commit log (effects.write_effects)
    known_topics: frozenset[str] = frozenset()  # topics holding messages already, config or not

    @property
    def files_created(self) -> tuple[Path, ...]:
        return tuple(w.path for w in self.writes if w.create)

    @property
    def bytes_written(self) -> int:
        return self.end_phy - self.start_phy

    operation: ClassVar[str] = "write"

    def planned_actions(self) -> tuple[PlannedAction, ...]:
        """The plan in the common action shape (see :class:`rmqstore.safety.PlannedAction`)."""
        out = []
        if self.stale is not None and not self.stale.padding:
            s = self.stale
            why = "stale bytes after the last valid record"
            out.append(PlannedAction("write", "zero", s.path, why, s.pos, s.pos + s.length, kept=True))
        for w in self.writes:
            size = sum(len(p) for p in w.pieces)
            why = "new file" if w.create else "records appended"
            out.append(PlannedAction("write", "append", w.path, why, w.pos, w.pos + size))
        return tuple(out) + self.effects

    def details(self, limit: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """The messages as they will be stored (the first ``limit`` of them)."""
        rows = self.records if limit is None else itertools.islice(self.records, limit)
        return {"messages": [r.to_json() for r in rows]}

    def to_json(self) -> dict[str, Any]:
        """What the write does: its summary and actions (the encoded bytes stay in memory, never in JSON)."""
        return {"summary": self.summary(), "actions": actions_json(self.planned_actions())}

    def summary(self) -> dict[str, Any]:
        return {
            "messages": len(self.records),
            "startPhyOffset": self.start_phy,
            "endPhyOffset": self.end_phy,
            "bytes": self.bytes_written,
            "blanks": len(self.blanks),
            "filesCreated": [p.name for p in self.files_created],
            "topicsCreated": [t.topic_name for t in self.new_topics if t.topic_name not in self.known_topics],
            "topicConfigsAdded": [t.topic_name for t in self.new_topics],
            "dispatch": self.dispatch,
            "catchUpRecords": len(self.catch_up) if self.dispatch else 0,
            "staleBytesZeroed": self.stale.length if self.stale and not self.stale.padding else 0,
        }


class Layout:
    """The commit log bytes being planned: the file being filled (its base offset and the position
    in it), the records put one by one since the last piece (``chunk``), and the finished writes.
    Pieces past the memory budget of :class:`~.spill.Spill` wait in its temporary file."""

    __slots__ = ("dir", "fs", "existing", "writes", "blanks", "base", "pos", "chunk", "pieces", "chunk_pos", "spill")

    def __init__(self, commitlog_dir: Path, fs: int, end_phy: int, existing: set[int]):
        self.dir, self.fs, self.existing = commitlog_dir, fs, existing
        self.writes: list[FileWrite] = []
        self.blanks: list[tuple[int, int]] = []
        self.base = end_phy - end_phy % fs
        self.pos = end_phy - self.base
        self.chunk = bytearray()  # records put one by one, after ``pieces``
        self.pieces: list[bytes | bytearray | SpilledPiece] = []  # what goes into the current file, in order
        self.chunk_pos = self.pos
        self.spill = Spill()

    def flush(self, next_base: int) -> None:
        """Close the current file's write; the next bytes go to the file at ``next_base``."""
        if self.chunk:
            self.pieces.append(self.spill.keep(self.chunk))
        if self.pieces:
            base = self.base
            path = self.dir / file_name(base)
            self.writes.append(FileWrite(path, base, self.chunk_pos, tuple(self.pieces), base not in self.existing))
        self.base = next_base
        self.chunk = bytearray()
        self.pieces = []
        self.chunk_pos = 0

    def next_file(self) -> None:
        """End the current file with a BLANK record (§3.4); go on at offset 0 of the next file."""
        remaining = self.fs - self.pos
        if remaining >= 8:
            self.chunk += encode_blank(remaining)
            self.blanks.append((self.base + self.pos, remaining))
        self.flush(self.base + self.fs)
        self.pos = 0

    def place(self, size: int, origin: str) -> int:
        """The physical offset of the next record of ``size`` bytes, after rolling over when it does not fit."""
        fs = self.fs
        if size + 8 > fs - self.pos:
            if size + 8 > fs:
                raise InputError(f"{origin}: the record is {size} bytes; it cannot fit in a {fs}-byte commit log file")
            self.next_file()
        return self.base + self.pos

    def add_piece(self, data: bytes, end_pos: int) -> None:
        """Records encoded at once, ending at ``end_pos`` of the current file."""
        self.settle(0)
        self.pieces.append(self.spill.keep(data))
        self.pos = end_pos

    def settle(self, limit: int = _CHUNK_LIMIT) -> None:
        """Make the records put one by one a piece once they are over ``limit`` bytes (memory stays bounded)."""
        if len(self.chunk) > limit:
            self.pieces.append(self.spill.keep(self.chunk))
            self.chunk = bytearray()


class Planner:
    """One plan being built: the store's facts and rules, and what the records planned so far took
    (queue offsets, round-robin positions, new topics, the store time reached, the bytes laid out)."""

    def __init__(self, st: Store, opts: WriteOptions):
        cfg = self.cfg = st.config
        _check_supported(st)
        if pending_journal(st.root) is not None:
            raise UnsafePlan(f"{st.root}: an interrupted write must be rolled back first (run `rmqstore write` again)")
        self.st, self.opts = st, opts
        self.now = opts.clock or (lambda: time.time_ns() // 1_000_000)
        self.rules = rules = rules_for(cfg.broker)
        self.prop_crc = cfg.enabled_append_prop_crc and rules.prop_crc
        self.lmq = cfg.enable_multi_dispatch and rules.multi_dispatch
        self.lmq_reserve = self.lmq and rules.lmq_reserves_crc_bytes
        self.lmq_keys: set[tuple[str, int]] = set()
        self.levels = cfg.delay_levels_ms()
        self.keys_gen = opts.uniq_keys or UniqKeySource()
        self.ap = ap = _find_append_point(st)
        self.index_end = _index_end_phy(st)
        if cfg.message_index_enable and self.index_end > 0 and self.index_end >= ap.end_phy:
            raise UnsafePlan(
                f"{cfg.index_dir}: the index refers to commit log offset {self.index_end}, beyond the end of valid "
                f"records at {ap.end_phy}; run `rmqstore recover` first"
            )
        self._default_hosts()
        self.topics, _ = _load_topics(cfg)
        self.template = self.topics.get(cfgmod.AUTO_CREATE_TEMPLATE)
        self.new_topics: dict[str, cfgmod.TopicConfig] = {}
        self.topic_info: dict[str, tuple[cfgmod.TopicConfig | None, bytes]] = {}
        self.batch_topics = batch_cq_topics(cfg)
        self.rr: dict[str, int] = {}  # round-robin position per topic
        self.formats_by_cap: dict[int, dict[tuple[str, ...], _PropsFormat]] = {
            0: {},
            16: {},
            rules.properties_capacity: {},
        }
        self.cols = cols = _ColumnsBuilder()
        # the reference lane's column appends, bound once (the builder clears these lists in place)
        self.appends = (*(c.append for c in cols.one), cols.keys.append, cols.origin.append)
        self.appends += (cols.one_uniq.append, cols.store_host.append)
        self.tags_codes: dict[str, int] = {}
        self.out = Layout(cfg.commitlog_dir, cfg.commitlog_file_size, ap.end_phy, {s.base_offset for s in ap.segments})
        self.last_ts = ap.last_store_ts
        # next queue offsets: from the consume queues, then past records not yet dispatched (§9.4.3)
        self.next_qoff: dict[tuple[str, int], int] = {}
        for r in ap.pending:
            if r.sys_flag & TRANSACTION_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                key = (r.topic, r.queue_id)
                self.next_qoff[key] = max(self.queue_offset(*key), r.queue_offset + 1)

    def _default_hosts(self) -> None:
        cfg, opts = self.cfg, self.opts
        self.hosts = hosts = _HostCache()
        if opts.store_host:
            self.default_store = hosts.get_host(opts.store_host, "--store-host", "store host")
        elif self.ap.last_store_host is not None:
            self.default_store = self.ap.last_store_host
        else:
            conf_host = f"{cfg.broker_ip or '127.0.0.1'}:{cfg.listen_port}"
            self.default_store = hosts.get_host(conf_host, "broker.conf", "brokerIP1")
        self.default_born = hosts.get_host(opts.born_host or "127.0.0.1:0", "--born-host", "born host")

    def queue_offset(self, topic: str, qid: int) -> int:
        """The next queue offset of a queue (without taking it)."""
        key = (topic, qid)
        v = self.next_qoff.get(key)
        if v is None:
            v = self.next_qoff[key] = self.st.consume_queues.queue(topic, qid).tail().max_offset
        return v

    def take_queue_offsets(self, topic: str, qid: int, count: int = 1) -> int:
        """The first of ``count`` consecutive queue offsets of a queue, taken."""
        first = self.next_qoff.get((topic, qid))
        if first is None:
            first = self.queue_offset(topic, qid)
        self.next_qoff[(topic, qid)] = first + count
        return first

    def topic_entry(self, topic: str, origin: str) -> tuple[cfgmod.TopicConfig | None, bytes]:
        """Check a topic at its first use; its topics.json entry (auto-created when new) and its name's bytes."""
        opts = self.opts
        any_script = not self.rules.broker_checks_topic_name
        check_send_topic(
            topic, allow_system=opts.allow_system_topic, max_length=opts.max_topic_length, any_script=any_script
        )
        if topic in self.batch_topics:  # never appended as a plain queue (the 5.x broker then refuses the store)
            raise InputError(f"{origin}: topic {topic!r} has queue.type=BatchCQ: write does not append to batch queues")
        if len(utf8(topic, origin, "topic")) > _V1_TOPIC_MAX and not self.rules.v2_magic:  # a V1 record's 1-byte length
            raise InputError(f"{origin}: topic {topic!r} is longer than 127 bytes: only 5.1.0+ brokers store it")
        tc = self.topics.get(topic)
        if tc is None:
            tc = topic_for_new(topic, self.cfg, self.template, queue_nums=opts.topic_queue_nums)
            if tc is not None:
                self.new_topics[topic] = tc
        out = self.topic_info[topic] = (tc, topic.encode("utf-8"))
        return out

    def pick_queue(self, topic: str, tc: cfgmod.TopicConfig | None, origin: str) -> int:
        """The producer's round robin over the topic's write queues, from where its queues' offsets point."""
        if tc is None or tc.write_queue_nums <= 0:
            raise InputError(f"{origin}: topic {topic!r} has no write queues to choose from; give queueId")
        n = tc.write_queue_nums
        pos = self.rr.get(topic)
        if pos is None:
            pos = sum(self.queue_offset(topic, q) for q in range(n)) % n
        self.rr[topic] = pos + 1
        return pos % n

    def props_format(self, names: Iterable[str], cap: int) -> _PropsFormat:
        """Cached serialiser for a key sequence; ``cap`` 0 keeps the given order (raw messages)."""
        cache = self.formats_by_cap[cap]
        key = tuple(names)
        f = cache.get(key)
        if f is None:
            if len(cache) > 10_000:  # every message has its own property names: do not hoard
                cache.clear()
            f = cache[key] = _PropsFormat(list(key) if cap == 0 else java_hashmap_order(key, initial_capacity=cap))
        return f

    def tags_code(self, tags: str) -> int:
        code = self.tags_codes.get(tags)
        if code is None:
            code = self.tags_codes[tags] = java_hash(tags)
        return code

    def finish(self) -> WritePlan:
        out, ap = self.out, self.ap
        out.flush(out.base)
        records = self.cols.finish()
        end_phy = self.cols.end if len(records) else ap.end_phy
        return WritePlan(
            root=self.st.root,
            start_phy=ap.end_phy,
            end_phy=end_phy,
            records=records,
            writes=tuple(out.writes),
            blanks=tuple(out.blanks),
            stale=ap.stale if len(records) else None,
            dispatch=self.opts.dispatch,
            catch_up=ap.pending,
            new_topics=tuple(self.new_topics.values()),
            index_end_phy=self.index_end,
            last_store_timestamp_ms=self.last_ts,
            lmq_queues=tuple(sorted(self.lmq_keys)),
            effects=write_effects(self.st, records, ap.pending, self.new_topics.values(), dispatch=self.opts.dispatch),
            known_topics=known_topics(self.st, ap.pending) if self.new_topics else frozenset(),
        )
