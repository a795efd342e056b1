"""Consistency check of a whole store, like a file system's fsck (store-format.md §2-§8, §11).

:func:`check_store` never stops at the first problem: it decodes leniently and collects
:class:`~rmqstore.problems.Problem` values, each naming a file and a byte position.
``lostqueues`` adds the queues an abnormal recovery would leave without their messages.

Full check:

* commit log (§2.4, §3.11): file names, sizes and continuity; every record's magic, TOTALSIZE
  against ``calMsgLength``, body CRC, stored PHYSICALOFFSET against its real position; a BLANK at
  the end of every file but the last; after an unreadable stretch the walk resynchronises on the
  next record whose magic and stored offset agree with its position, so one bad record does not
  hide the rest. Zeros after the end of data are normal; other bytes there are a dirty tail the
  broker truncates.
* consume queues (§4): every entry against the record it points to (topic, queue, queue offset,
  size, tagsCode incl. delay-level delivery times), zero entries followed by data (gaps),
  fillPreBlank fillers only as a prefix, entries past the end of the commit log; records missing
  from their queue.
* index files (§5): header sanity, slot chains, every entry's key hash against the keys of the
  record it points to, time differences against the record's store time; keys missing.
* checkpoint (§6), abort and lock (§7), config/*.json (§11).
* what the broker concludes at start (§8): where recovery starts and stops, what it truncates
  and deletes, and which records would never be dispatched.

``quick=True`` computes only that last part (what a broker reads at start), without verifying
every consume queue entry and index entry.

Vectorised with numpy where it counts: the commit log walk builds sorted arrays of record
fields once; consume queue and index entries are matched against them with ``searchsorted``.
"""

from __future__ import annotations

import os
import re
import zlib
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec.commitlog import (
    HEAD_V4,
    PROP_DELAY,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    is_v1_ipv4,
    parse_properties,
    prop_crc_check,
)
from rmqstore.codec.consumequeue import ENTRY_DTYPE, ENTRY_SIZE, EXT_ADDR_MAX, FILLER_SIZE
from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.framing import is_record_magic
from rmqstore.codec.indexfile import ENTRY_SIZE as INDEX_ENTRY_SIZE
from rmqstore.codec.indexfile import HEADER_SIZE, IndexFile, IndexHeader, decode_header
from rmqstore.codec.javahash import index_key_hash_batch, tags_code
from rmqstore.codec.topic import SkippedQueue
from rmqstore.dispatch.multiqueue import lmq_listed, lmq_skipped
from rmqstore.errors import ConfigError, CorruptData, RecordSizeMismatch
from rmqstore.ops.check.records import ROW_DTYPES, empty_rows, record_rows
from rmqstore.ops.check.rocksdbrows import check_rows, database_dispatch_from, dispatch_checkpoint
from rmqstore.problems import (
    ERROR,
    INFO,
    WARNING,
    Problem,
    ProblemKind,
    StoreVerdict,
    absolute_path,
    shutdown_problems,
)
from rmqstore.rules import rules_for
from rmqstore.safety.openfile import read_file
from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store import config as cfgjson
from rmqstore.store.config import COMPACTION_CHECKPOINTS
from rmqstore.store.dledger import DLedgerIndex, read_member
from rmqstore.store.files import map_file, release_pages
from rmqstore.store.layout import DEFAULT_DELAY_LEVELS, Segment, file_name, parse_delay_levels
from rmqstore.store.offsets import read_consumer_offsets
from rmqstore.store.queue.batchconsumequeue import BatchConsumeQueue
from rmqstore.store.queue.interface import ConsumeQueue, QueueRange
from rmqstore.store.queue.mappedfiles import QueueDirectories
from rmqstore.walk.chain import indexed, queued
from rmqstore.walk.checked import TopicIds
from rmqstore.walk.dledger import ENTRY, INVALID, Entry, entry_findings, iter_entries, ledger_problems, ledger_state
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Item, Run, intact_record, walk_files
from rmqstore.walk.recovery import walk_start

PER_KIND_LIMIT = 20  # problems of one kind listed; the rest are only counted
_JAVA_INT_RE = re.compile(r"[+-]?\d+")  # what Integer.parseInt accepts
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_CHUNK = 16 << 20
_KEY_FLUSH = 1 << 16  # index keys hashed at a time
_BATCH = 1 << 16  # records decoded as columns at a time
_INDEX_CHUNK = 1 << 20  # index entries checked at a time
_CONFIG_SUFFIXES = (".json", ".json.bak")
_COMPACT_CONFIG = tuple(cfgjson.COMPACT_FILES) + tuple(f"{n}.bak" for n in cfgjson.COMPACT_FILES)
_TYPED_CONFIG: dict[str, Callable[..., Any]] = {
    "topics.json": cfgjson.load_topics,
    "consumerOffset.json": cfgjson.load_consumer_offsets,
    "delayOffset.json": cfgjson.load_delay_offsets,
}

Progress = Callable[[int], None]
COUNT_KEYS = (
    "commitlogFiles",
    "records",
    "blanks",
    "queues",
    "cqEntries",
    "cqSlots",
    "indexFiles",
    "indexEntries",
    "configFiles",
    "committedOffsets",
)


# ----------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class RecoveryForecast(JsonModel):
    """What the broker concludes when it loads this store (§8)."""

    json_keys = "last_exit_ok=lastExitOK mode start_file stop_phy_offset stop_reason dropped_records dropped_bytes deleted_files deleted_index_files cq_max_phy_offset truncated_queues dispatch_from"

    last_exit_ok: bool  # no abort file
    mode: str  # "normal" | "abnormal"
    start_file: str | None  # commit log file recovery starts in
    stop_phy_offset: int  # processOffset: where the commit log ends after recovery
    stop_reason: str
    dropped_records: int  # readable records at or after the stop: lost by the truncation
    dropped_bytes: int
    deleted_files: tuple[str, ...]  # commit log files deleted by truncateDirtyFiles
    deleted_index_files: tuple[str, ...]  # abnormal start: index files newer than the checkpoint
    cq_max_phy_offset: int  # maxPhyOffsetOfConsumeQueue with this broker's meaning (§8.6)
    truncated_queues: int  # queues with entries at or past the stop: truncateDirtyLogicFiles cuts them
    dispatch_from: int  # where dispatch resumes after recovery (§9.3)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Everything :func:`check_store` found."""

    store: Path
    quick: bool
    broker: str
    counts: dict[str, int]
    recovery: RecoveryForecast | None
    problems: tuple[Problem, ...]
    found: dict[str, int]  # problems found per severity, including those not listed
    clean_shutdown: bool = True  # no abort file
    lock_holder_pid: int | None = None  # a running broker's pid

    @property
    def clean(self) -> bool:
        """No error and no warning (info findings are normal)."""
        return not self.found.get(ERROR) and not self.found.get(WARNING)

    @property
    def verdict(self) -> StoreVerdict:
        """The one verdict ``info`` gives too: result, counts by severity, shutdown and lock."""
        running = self.lock_holder_pid is not None
        return StoreVerdict.of(self.found, clean_shutdown=self.clean_shutdown, broker_running=running)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"store": absolute_path(self.store), "mode": "quick" if self.quick else "full"}
        out["brokerVersion"] = self.broker
        out.update(self.counts)
        out.update(self.verdict.to_json())
        if self.recovery is not None:
            out["recovery"] = self.recovery.to_json()
        return out

    def one_line(self) -> str:
        parts = [f"{self.found.get(s, 0)} {n}" for s, n in ((ERROR, "error(s)"), (WARNING, "warning(s)"))]
        return f"check found {', '.join(parts)} in {self.store}"

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(), "problems": [p.to_json() for p in self.problems]}


class _Problems:
    """Collects problems; past ``limit`` of one kind (over all files) they are only counted."""

    def __init__(self, limit: int = PER_KIND_LIMIT) -> None:
        self.items: list[Problem] = []
        self.found: Counter[str] = Counter()
        self._per_group: Counter[str] = Counter()
        self._hidden: dict[str, tuple[set[str], str, int]] = {}
        self.limit = limit  # 0: no limit

    def add(
        self,
        path: Path | str,
        pos: int | None,
        what: str,
        severity: str = ERROR,
        phy_offset: int | None = None,
        group: str | None = None,
    ) -> None:
        self.found[severity] += 1
        if group is not None:
            self._per_group[group] += 1
            if self.limit and self._per_group[group] > self.limit:
                self.hide(path, group, severity, 1, counted=True)
                return
        self.items.append(Problem(path, pos, what, severity, phy_offset))

    def hide(self, path: Path | str, group: str, severity: str, n: int, *, counted: bool = False) -> None:
        """Count ``n`` more problems of ``group`` that are not listed."""
        if n <= 0:
            return
        if not counted:
            self.found[severity] += n
        paths, _, had = self._hidden.get(group, (set(), severity, 0))
        paths.add(str(path))
        self._hidden[group] = (paths, severity, had + n)

    def extend(self, problems: Iterable[Problem]) -> None:
        for p in problems:
            self.found[p.severity] += 1
            self.items.append(p)

    def finish(self) -> tuple[Problem, ...]:
        for group, (paths, severity, n) in self._hidden.items():
            where = next(iter(paths)) if len(paths) == 1 else os.path.commonpath(sorted(paths))
            self.items.append(Problem(where, None, f"... and {n} more problem(s) like {group!r} not listed", severity))
        return tuple(self.items)


# --------------------------------------------------------------------------- commit log walk


@dataclass
class _FileRun:
    """How the walk of one commit log file ended."""

    seg: Segment
    records: int = 0
    end_pos: int = 0  # where the run of readable records ended
    blank: bool = False  # a BLANK ended the file (else the data did)
    garbage_pos: int | None = None  # first byte after the data that no record explains
    tail_what: str | None = None  # the decode error at garbage_pos, if any


@dataclass
class _LogScan:
    """Fields of every readable record, in commit log order (so sorted by phy offset)."""

    names: TopicIds = field(default_factory=TopicIds)  # topic name <-> id of every record
    # per record (ROW_DTYPES): phy, size, topic id, queue id, queue offset, the tagsCode the dispatcher
    # computes, store timestamp, transaction type; one array per column and batch until finish()
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
    key_parts: list[np.ndarray] = field(default_factory=list)  # record number << 32 | index key hash
    rows_seen: int = 0
    stops: list[int] = field(default_factory=list)  # phy offsets where the broker's walk stops
    records_end: int | None = None  # where the last run of records the walk found ends
    runs: list[_FileRun] = field(default_factory=list)
    blanks: int = 0
    # numpy views, built by finish()
    a_phy: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    keys_sorted: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @property
    def topics(self) -> list[str]:
        return self.names.names

    @property
    def topic_ids(self) -> dict[str, int]:
        return self.names.ids

    def topic_id(self, name: str) -> int:
        return self.names.id(name)

    def finish(self) -> None:
        cols = {}
        for name in ROW_DTYPES:  # one column at a time: the batches of a column go as it is built
            cols[name] = np.concatenate([part.pop(name) for part in self.parts] or [empty_rows(0)[name]])
        self.parts = []
        self.a_phy = cols.pop("phy")
        self.arrays = cols
        self._topics_in_order()
        keys = np.concatenate(self.key_parts) if self.key_parts else np.empty(0, np.int64)
        self.key_parts = []
        keys.sort()  # in place: no second copy of every key
        self.keys_sorted = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys

    def _topics_in_order(self) -> None:
        """Topic ids renumbered in the order the topics first appear in the commit log."""
        topic = self.arrays["topic"]
        n = len(self.names.names)
        if not n or not topic.size:
            return
        first = np.full(n, topic.size, dtype=np.int64)
        np.minimum.at(first, topic, np.arange(topic.size))
        order = np.argsort(first, kind="stable")
        if (order == np.arange(n)).all():
            return
        renumber = np.empty(n, dtype=np.int32)
        renumber[order] = np.arange(n, dtype=np.int32)
        names = [self.names.names[i] for i in order.tolist()]
        self.names = TopicIds()
        for name in names:
            self.names.id(name)
        self.arrays["topic"] = renumber[topic]

    @property
    def count(self) -> int:
        return int(self.a_phy.size)

    @property
    def data_end(self) -> int:
        """End of the last readable record (the commit log max as far as data goes)."""
        if self.records_end is None:
            return self.runs[0].seg.base_offset if self.runs else 0
        return self.records_end

    def lookup(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Record number of each offset and whether a record starts exactly there."""
        idx = np.searchsorted(self.a_phy, phys)
        safe = np.minimum(idx, max(self.count - 1, 0))
        hit = (idx < self.count) & (self.a_phy[safe] == phys) if self.count else np.zeros(len(phys), bool)
        return safe, hit


@dataclass
class _OpenFile:
    """The commit log file a walk is in, mapped."""

    seg: Segment
    buf: Any
    view: memoryview
    size: int
    run: _FileRun
    shifts: list[tuple[int, int]]

    @property
    def path(self) -> str:
        return str(self.seg.path)


class _Walker:
    """Lenient walk over commit log files, building a :class:`_LogScan`."""

    columnar = True  # off: every record through the per-record path (the reference the tests compare with)

    def __init__(self, st: Store, out: _Problems, progress: Progress | None, *, light: bool = False) -> None:
        self.light = light  # only what recovery reads: no tagsCode, no index keys
        self.st = st
        self.cfg = st.config
        self.broker = st.config.broker
        # 5.2.0+ forceVerifyPropCRC: recovery checks the __CRC32# property of every record
        self.prop_crc = st.config.force_verify_prop_crc and rules_for(self.broker).prop_crc
        self.out = out
        self.progress = progress
        self.v2_ok = rules_for(self.broker).v2_magic
        try:
            self.levels = st.config.delay_levels_ms()
        except ValueError:
            self.levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
        self.scan = _LogScan()
        self._tags_cache: dict[str | None, int] = {}
        self._key_strs: list[str] = []
        self._key_recs: list[int] = []
        self._topics: dict[bytes, tuple[str, int]] = {}
        self._number = 0  # record number of the record on the per-record path
        self._slow_rows: list[tuple[int, ...]] = []

    # -- helpers ------------------------------------------------------------------
    def _stop(self, phy: int) -> None:
        if not self.scan.stops or self.scan.stops[-1] != phy:
            self.scan.stops.append(phy)

    def _props(self, raw: str) -> dict[str, str]:
        return fast_properties(raw, broker=self.broker)

    def _tags_code(self, tags: str | None) -> int:
        code = self._tags_cache.get(tags)
        if code is None:
            code = self._tags_cache[tags] = tags_code(tags)
        return code

    def _flush_keys(self) -> None:
        if self._key_strs:
            hashes = index_key_hash_batch(self._key_strs).astype(np.int64)
            self.scan.key_parts.append((np.asarray(self._key_recs, dtype=np.int64) << 32) | hashes)
            self._key_strs, self._key_recs = [], []

    # -- the walk -----------------------------------------------------------------
    def walk(self, segs: Sequence[Segment]) -> _LogScan:
        for seg, buf, items in walk_files(segs, broker=self.broker, as_broker=True):
            self.scan.runs.append(self._walk_file(seg, buf, items))
        self._flush_keys()
        return self.scan

    def _walk_file(self, seg: Segment, buf: Any, items: Iterator[Item]) -> _FileRun:
        run = _FileRun(seg)
        shifts: list[tuple[int, int]] = []
        reported = 0
        with memoryview(buf) as view:
            f = _OpenFile(seg, buf, view, len(buf), run, shifts)
            u8 = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.zeros(0, np.uint8)
            for item in items:
                if isinstance(item, Run):
                    for lo in range(0, len(item.positions), _BATCH):
                        batch = item.positions[lo : lo + _BATCH]
                        self._records(f, u8, batch)
                        release_pages(buf, int(batch[0]), int(batch[-1]), 0)  # read once: not kept resident
                    run.records += len(item.positions)
                    self.scan.records_end = seg.base_offset + item.end_pos
                    if item.end_pos - reported >= _CHUNK and self.progress is not None:
                        self.progress(item.end_pos - reported)
                        reported = item.end_pos
                elif isinstance(item, Damage):
                    self._damage(f, item)
                elif isinstance(item, BlankEnd):
                    self._blank(f, item)
                else:
                    self._data_end(f, item)
            del u8
        if self.progress is not None:
            self.progress(seg.size - reported)
        self._report_shifts(seg, run, shifts)
        if len(self._key_strs) > 200_000:
            self._flush_keys()
        return run

    def _records(self, f: _OpenFile, u8: np.ndarray, p: np.ndarray) -> None:
        """A batch of records the walk found readable: the plain ones as columns, the others (and
        every one when ``columnar`` is off) through :meth:`_record`, in commit log order."""
        first = self.scan.rows_seen
        if self.columnar and not self.prop_crc:  # the __CRC32# property is checked record by record
            got = record_rows(f.buf, u8, p, f.seg, self.cfg, first, self.scan.topic_id, light=self.light)
            cols, slow = got.cols, got.slow
            if got.key_pairs.size:
                self.scan.key_parts.append(got.key_pairs)
        else:
            cols, slow = empty_rows(len(p)), np.arange(len(p))
        for k in slow.tolist():
            self._number = first + k
            self._record(f, int(p[k]))
        if self._slow_rows:
            table = np.array(self._slow_rows, dtype=np.int64)
            for i, name in enumerate(ROW_DTYPES):
                cols[name][slow] = table[:, i]
            self._slow_rows = []
        self.scan.parts.append(cols)
        self.scan.rows_seen += len(p)

    def _record(self, f: _OpenFile, pos: int) -> None:
        """One record the walk found readable: a V1 record with IPv4 hosts is read straight from the
        buffer (its lengths add up, the walk checked), any other through the decoder."""
        buf, view, base = f.buf, f.view, f.seg.base_offset
        (total, magic, crc, qid, _, qoff, phy_field, sys_flag, _, _, _, store_ts, _, _, _, _,
         body_len) = HEAD_V4.unpack_from(buf, pos)  # fmt: skip
        if not is_v1_ipv4(magic, sys_flag) or body_len < 0:
            self._decoded(f, pos)
            return
        p = pos + HEAD_V4.size + body_len
        q = p + 1 + buf[p]
        props_len = (buf[q] << 8) | buf[q + 1]
        if props_len >= 0x8000:  # a negative PROPERTIESLENGTH counts as 0
            self._decoded(f, pos)
            return
        if body_len:
            start = pos + HEAD_V4.size
            computed = zlib.crc32(view[start : start + body_len]) & 0x7FFFFFFF
            if computed != crc:
                self._crc_problem(f.path, pos, base + pos, crc, computed)
        if self.prop_crc:
            self._check_prop_crc(buf, f.path, pos, base, total)
        topic = self._topic(bytes(view[p + 1 : q]))
        raw = str(view[q + 2 : pos + total], "utf-8", "replace") if props_len else ""
        self._accept(
            f.path, pos, base + pos, magic, phy_field, sys_flag, qid, qoff, total, store_ts, topic, raw, f.shifts
        )

    def _decoded(self, f: _OpenFile, pos: int) -> None:
        """A record off the straight path (V2, IPv6 hosts, odd lengths), through the decoder."""
        buf, base = f.buf, f.seg.base_offset
        rec = intact_record(buf, pos, path=f.path, file_from=base, broker=self.broker)
        if rec.body and not rec.crc_ok():
            self._crc_problem(f.path, pos, base + pos, rec.body_crc, _crc(rec.body))
        if self.prop_crc:
            self._check_prop_crc(buf, f.path, pos, base, rec.total_size)
        self._accept(
            f.path, pos, base + pos, rec.magic, rec.phy_offset, rec.sys_flag, rec.queue_id, rec.queue_offset,
            rec.total_size, rec.store_timestamp_ms, self._topic(rec.topic.encode()), rec.properties_raw, f.shifts,
        )  # fmt: skip

    def _damage(self, f: _OpenFile, d: Damage) -> None:
        """Bytes no record explains, with records after them: zeros inside the data, or a bad record."""
        base = f.seg.base_offset
        self._stop(base + d.pos)
        if d.error is None:
            what = (
                f"zero bytes from byte {d.pos} to {d.resume} inside the data: the broker stops reading here "
                "and truncates the records after it"
            )
            self.out.add(f.path, d.pos, what, phy_offset=base + d.pos, group="zero gap")
            return
        skipped = "" if isinstance(d.error, RecordSizeMismatch) else "unreadable "
        what = f"{d.error.what}; {d.resume - d.pos} {skipped}bytes up to the next valid record at byte {d.resume}"
        self.out.add(f.path, d.pos, what, phy_offset=base + d.pos, group="bad record")

    def _blank(self, f: _OpenFile, b: BlankEnd) -> None:
        self.scan.blanks += 1
        if b.error is not None:
            what = f"BLANK record says {b.total} bytes remain, the file has {f.size - b.pos} left"
            self.out.add(f.path, b.pos, what, WARNING, phy_offset=f.seg.base_offset + b.pos)
        f.run.blank, f.run.end_pos = True, b.pos

    def _data_end(self, f: _OpenFile, e: DataEnd) -> None:
        """The data of the file ends at ``e.pos``: zeros, a frame too short to read, or a bad record."""
        run = f.run
        self._stop(f.seg.base_offset + e.pos)
        run.end_pos, run.garbage_pos = e.pos, e.garbage
        if e.garbage is not None and f.size - e.pos < 8:
            run.tail_what = f"{f.size - e.pos} bytes too short for a record header"
        elif e.error is not None:
            run.tail_what = e.error.what

    def _topic(self, raw: bytes) -> tuple[str, int]:
        """Topic name and id, decoded as decode_record does (UTF-8, bad bytes replaced)."""
        got = self._topics.get(raw)
        if got is None:
            name = raw.decode("utf-8", "replace")
            got = self._topics[raw] = (name, self.scan.topic_id(name))
        return got

    def _check_prop_crc(self, buf: Any, path: str, pos: int, base: int, total: int) -> None:
        stored, computed = prop_crc_check(buf, pos, total)
        if stored == computed:
            return
        self._stop(base + pos)
        what = "no __CRC32# property" if stored is None else f"__CRC32# property {stored}, computed {computed}"
        self.out.add(
            path,
            pos,
            f"{what} (forceVerifyPropCRC): recovery stops at this record and truncates everything after it",
            phy_offset=base + pos,
            group="crc",
        )

    def _crc_problem(self, path: str, pos: int, phy: int, stored: int, computed: int) -> None:
        stop = self.cfg.check_crc_on_recover
        if stop:
            self._stop(phy)
        self.out.add(
            path,
            pos,
            f"body CRC mismatch: stored {stored}, computed {computed}"
            + ("; recovery stops at this record and truncates everything after it" if stop else ""),
            phy_offset=phy,
            group="crc",
        )

    def _accept(
        self,
        path: str,
        pos: int,
        phy: int,
        magic: int,
        phy_field: int,
        sys_flag: int,
        queue_id: int,
        queue_offset: int,
        total: int,
        store_ts: int,
        topic: tuple[str, int],
        raw: str,
        shifts: list[tuple[int, int]],
    ) -> None:
        """Record-level checks after a successful decode, and the record's row in the scan."""
        name, tid = topic
        if not is_record_magic(magic, v2=self.v2_ok):
            self._stop(phy)
            self.out.add(
                path, pos, f"V2 record (magic 0xDAA320AB): broker {self.broker} reads it as corrupt", group="v2"
            )
        if phy_field != phy:
            shifts.append((pos, phy_field - phy))
        schedule = name == SCHEDULE_TOPIC
        props = self._props(raw) if raw and (schedule or not self.light) else {}
        code = self._tags_code(props.get(PROP_TAGS)) if props else 0
        if schedule and PROP_DELAY in props:
            raw_level = props[PROP_DELAY]
            if not _JAVA_INT_RE.fullmatch(raw_level):
                self._stop(phy)
                self.out.add(
                    path,
                    pos,
                    f"DELAY={raw_level!r} is not a number: the broker treats this record as invalid",
                    phy_offset=phy,
                    group="delay",
                )
            else:
                level = min(int(raw_level), len(self.levels))
                if level > 0:
                    code = store_ts + self.levels[level - 1]
        tx = sys_flag & TRANSACTION_MASK
        if tx and tx != TRANSACTION_COMMIT_TYPE and queue_offset != 0:
            self.out.add(
                path,
                pos,
                f"prepared/rollback record with QUEUEOFFSET {queue_offset}: the broker writes 0",
                WARNING,
                phy_offset=phy,
                group="tx queue offset",
            )
        number = self._number
        self._slow_rows.append((phy, total, tid, queue_id, queue_offset, code, store_ts, tx))
        if indexed(tx) and props and not self.light:  # §5.3: rollback is not indexed
            uniq = props.get(PROP_UNIQ_KEY)
            if uniq:
                self._key_strs.append(f"{name}#{uniq}")
                self._key_recs.append(number)
            keys = props.get(PROP_KEYS)
            if keys:
                for token in keys.split(" "):
                    if token:
                        self._key_strs.append(f"{name}#{token}")
                        self._key_recs.append(number)
            if len(self._key_strs) >= _KEY_FLUSH:  # hash in bounded batches: memory stays flat
                self._flush_keys()

    def _report_shifts(self, seg: Segment, run: _FileRun, shifts: list[tuple[int, int]]) -> None:
        if not shifts:
            return
        path = str(seg.path)
        deltas = {d for _, d in shifts}
        if len(shifts) == run.records and len(deltas) == 1 and run.records > 1:
            (delta,) = deltas
            self.out.add(
                path,
                shifts[0][0],
                f"the stored PHYSICALOFFSET of all {run.records} records is {delta:+d} off their position: the file "
                f"name does not match its content (the records belong in {file_name(seg.base_offset + delta)})",
                phy_offset=seg.base_offset + shifts[0][0],
            )
            return
        for pos, delta in shifts:
            self.out.add(
                path,
                pos,
                f"stored PHYSICALOFFSET {seg.base_offset + pos + delta} differs from the record's position "
                f"{seg.base_offset + pos}: consume queue entries built from it point elsewhere",
                phy_offset=seg.base_offset + pos,
                group="phy offset",
            )


def _first(out: _Problems, idx: np.ndarray, path: Path | str, group: str, severity: str = ERROR) -> np.ndarray:
    """The first indices worth building a problem for; the others are only counted."""
    if not out.limit:
        return idx
    keep = out.limit + 1
    out.hide(path, group, severity, int(idx.size) - keep)
    return idx[:keep]


def _crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def fast_properties(raw: str, *, broker: str) -> dict[str, str]:
    """``parse_properties`` (the codec's one splitter, fast path included), under its earlier name."""
    return parse_properties(raw, broker=broker)


def _classify_tails(scan: _LogScan, out: _Problems) -> None:
    """File ends: BLANKs between files, dirty tails, preallocated files (§2.3, §3.4, §8.5)."""
    runs = scan.runs
    with_data = [i for i, r in enumerate(runs) if r.records or r.garbage_pos is not None]
    last = with_data[-1] if with_data else -1
    for i, run in enumerate(runs):
        path, seg = str(run.seg.path), run.seg
        if i < last:
            if not run.blank:
                later = len(runs) - i - 1
                if run.garbage_pos is not None and run.tail_what:
                    out.add(path, run.garbage_pos, run.tail_what, phy_offset=seg.base_offset + run.garbage_pos)
                elif run.garbage_pos is not None:
                    out.add(path, run.garbage_pos, "non-zero bytes after the end of data", WARNING)
                out.add(
                    path,
                    run.end_pos,
                    f"data ends at byte {run.end_pos} without a BLANK record while later files hold data: "
                    f"recovery stops here and drops the {later} later file(s)",
                    phy_offset=seg.base_offset + run.end_pos,
                )
        elif i == last:
            if run.garbage_pos is not None:
                what = f"{run.tail_what}; " if run.tail_what else ""
                out.add(
                    path,
                    run.garbage_pos,
                    f"dirty tail: {what}non-zero bytes after the last record that the broker would truncate",
                    WARNING,
                    phy_offset=seg.base_offset + run.garbage_pos,
                )
        elif not run.records and seg.base_offset > scan.data_end:
            out.add(path, 0, "empty (preallocated) file after the end of data: recovery deletes it", INFO)


def _fix_segment_problems(problems: Iterable[Problem], segs: Sequence[Segment], expected: int) -> list[Problem]:
    """Give the size problems of :func:`~rmqstore.layout.list_segments` a byte position: where
    the file ends (truncated) or where it should have ended (too long)."""
    sizes = {str(s.path): s.size for s in segs}
    out = []
    for p in problems:
        if p.pos is None and str(p.path) in sizes and p.kind is ProblemKind.WRONG_SIZE:
            p = Problem(p.path, min(sizes[str(p.path)], expected), p.what, p.severity, p.phy_offset)
        out.append(p)
    return out


# --------------------------------------------------------------------------- consume queues


@dataclass
class _QueueInfo:
    topic: str
    queue_id: int
    first_qoff: int  # queue offset at the start of the first file
    end_qoff: int  # first queue offset after the valid entries (the max offset)
    last_phy: int  # start of the last valid entry, -1 if none
    last_end: int  # offset + size of the last valid real entry, -1 if none
    entries: int = 0
    fillers: int = 0
    filler_end: int = -1  # queue offset after the fillPreBlank prefix (-1: none)
    batch: bool = False  # a 5.x batch consume queue (first/end offsets count messages, not units)


def _load_queue(q: ConsumeQueue, segs: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All entries of a queue: the entry array, queue offsets, file numbers and byte positions."""
    parts, qoffs, files, poss = [], [], [], []
    for i, seg in enumerate(segs):
        arr = q.read(seg)
        k = len(arr)
        parts.append(arr)
        qoffs.append(seg.base_offset // ENTRY_SIZE + np.arange(k, dtype=np.int64))
        files.append(np.full(k, i, dtype=np.int64))
        poss.append(np.arange(k, dtype=np.int64) * ENTRY_SIZE)
    if not parts:
        empty = np.empty(0, np.int64)
        return np.empty(0, dtype=ENTRY_DTYPE), empty, empty, empty
    return np.concatenate(parts), np.concatenate(qoffs), np.concatenate(files), np.concatenate(poss)


def _check_queues(st: Store, scan: _LogScan, out: _Problems, counts: Counter[str]) -> list[_QueueInfo]:
    infos = []
    cfg = st.config
    fsize = cfg.cq_file_size
    log_min = scan.runs[0].seg.base_offset if scan.runs else 0
    data_end = scan.data_end
    for q in st.consume_queues.queues():
        topic, qid = q.topic, q.queue_id
        segs, seg_problems = q.files()
        out.extend(_fix_segment_problems(seg_problems, segs, fsize))
        counts["queues"] += 1
        for seg in segs:
            if seg.base_offset % ENTRY_SIZE:
                out.add(seg.path, 0, f"file name {seg.base_offset} is not a multiple of {ENTRY_SIZE}")
            if seg.size % ENTRY_SIZE:
                cut = seg.size - seg.size % ENTRY_SIZE
                out.add(seg.path, cut, f"file ends inside an entry ({seg.size % ENTRY_SIZE} stray bytes)")
        if not segs:
            infos.append(_QueueInfo(topic, qid, 0, 0, -1, -1))
            continue
        arr, qoff, fno, pos = _load_queue(q, segs)
        counts["cqSlots"] += len(arr)
        counts["cqEntries"] += int(np.count_nonzero(arr["size"]))  # a preallocated slot is all zero
        infos.append(_verify_queue(topic, qid, segs, arr, qoff, fno, pos, scan, out, log_min, data_end, cfg))
    for bq in st.batch_queues.queues():
        counts["queues"] += 1
        infos.append(_verify_batch_queue(bq, scan, out, counts))
    return infos


def _verify_batch_queue(q: BatchConsumeQueue, scan: _LogScan, out: _Problems, counts: Counter[str]) -> _QueueInfo:
    """A 5.x batch consume queue: every unit is a record of this topic and queue at its base offset (§4.7)."""
    topic, qid = q.topic, q.queue_id
    units = [(q.directory / u.file, u.pos, u.entry) for u in q.scan()]
    counts["cqEntries"] += len(units)
    counts["cqSlots"] += len(units)
    if not units:
        return _QueueInfo(topic, qid, 0, 0, -1, -1)
    a = scan.arrays
    rec, hit = scan.lookup(np.array([u[2].phy_offset for u in units], dtype=np.int64))
    want_topic = scan.topic_ids.get(topic, -1)
    for (path, pos, e), r, h in zip(units, rec.tolist(), hit.tolist(), strict=True):
        if not h:
            out.add(path, pos, f"batch unit points to commit log offset {e.phy_offset}, where no record starts")
        elif a["topic"][r] != want_topic or a["qid"][r] != qid or a["size"][r] != e.size:
            out.add(
                path,
                pos,
                f"batch unit (commit log offset {e.phy_offset}, size {e.size}) does not match the record there "
                f"({scan.topics[a['topic'][r]]} queue {a['qid'][r]} size {a['size'][r]})",
                phy_offset=e.phy_offset,
            )
    first, last = units[0][2], units[-1][2]
    return _QueueInfo(
        topic,
        qid,
        first.base_offset,
        last.base_offset + last.batch_size,
        last.phy_offset,
        last.phy_offset + last.size,
        len(units),
        0,
        -1,
        batch=True,
    )


@dataclass
class _Entries:
    """One consume queue's entries as arrays, and where each one is on disk."""

    segs: Sequence[Segment]
    qoff: np.ndarray
    fno: np.ndarray
    pos: np.ndarray
    phy: np.ndarray
    size: np.ndarray
    tags: np.ndarray

    @property
    def qdir(self) -> Path:
        return self.segs[0].path.parent

    def where(self, i: int) -> tuple[Path, int]:
        return self.segs[int(self.fno[i])].path, int(self.pos[i])

    def report(self, out: _Problems, idx: np.ndarray, group: str, what: Callable[[int], str]) -> None:
        """A problem at each entry of ``idx`` that points at a commit log offset (the first few built)."""
        for i in _first(out, idx, self.qdir, group):
            p, b = self.where(i)
            out.add(p, b, what(int(i)), phy_offset=int(self.phy[i]), group=group)


def _queue_prefix(e: _Entries, out: _Problems) -> tuple[int, np.ndarray, np.ndarray, int]:
    """Invalid entries, the gap that ends the queue, misplaced fillers; returns (end of the valid prefix,
    the real entries before it, the fillers before it, the first real entry)."""
    phy, size, tags, qoff = e.phy, e.size, e.tags, e.qoff
    valid = (phy >= 0) & (size > 0)
    zero = (phy == 0) & (size == 0) & (tags == 0)
    filler = (phy == 0) & (size == FILLER_SIZE) & (tags == 0)
    for i in _first(out, np.flatnonzero(~valid & ~zero), e.qdir, "invalid entry"):
        p, b = e.where(i)
        out.add(p, b, f"invalid entry: commit log offset {phy[i]}, size {size[i]}", group="invalid entry")
    bad = np.flatnonzero(~valid)
    end = int(bad[0]) if bad.size else len(phy)
    after = np.flatnonzero(valid[end:] & ~filler[end:])
    if after.size:
        p, b = e.where(end)
        out.add(
            p,
            b,
            f"gap at queue offset {qoff[end]}: an empty or invalid entry followed by {after.size} valid entries; the broker "
            f"stops reading the queue here (max offset {qoff[end]}) and loses them",
            phy_offset=None,
        )
    real = valid.copy()
    real[end:] = False
    # fillPreBlank fillers: only before the first real entry of the queue's first file
    fill_idx = np.flatnonzero(filler[:end])
    nonfill = np.flatnonzero(real & ~filler)
    first_real = int(nonfill[0]) if nonfill.size else end
    for i in _first(out, fill_idx[fill_idx > first_real], e.qdir, "filler"):
        p, b = e.where(i)
        out.add(p, b, "fillPreBlank filler entry after real entries", group="filler")
    return end, real & ~filler, fill_idx, first_real


def _entries_off_records(
    e: _Entries, idx_real: np.ndarray, hit: np.ndarray, out: _Problems, log_min: int, data_end: int
) -> None:
    """Entries that point past the end of the data or where no record starts (expired ones aside)."""
    e_phy = e.phy[idx_real]
    past = ~hit & (e_phy >= data_end)
    inside = ~hit & (e_phy >= log_min) & ~past
    e.report(
        out,
        idx_real[past],
        "past end",
        lambda i: (
            f"entry for queue offset {e.qoff[i]} points to commit log offset {e.phy[i]}, past the end of the "
            f"commit log data ({data_end}): the broker truncates the queue there at start"
        ),
    )
    e.report(
        out,
        idx_real[inside],
        "not a record",
        lambda i: f"entry for queue offset {e.qoff[i]} points to commit log offset {e.phy[i]}, where no record starts",
    )


def _entry_mismatches(
    e: _Entries, topic: str, qid: int, ri: np.ndarray, ei: np.ndarray, scan: _LogScan, out: _Problems, cfg: Any
) -> None:
    """Entries whose record (``ri``, for entries ``ei``) disagrees with them."""
    a = scan.arrays
    mismatch = {
        "topic": a["topic"][ri] != scan.topic_ids.get(topic, -1),
        "queue id": a["qid"][ri] != qid,
        "queue offset": a["qoff"][ri] != e.qoff[ei],
        "size": a["size"][ri] != e.size[ei],
        "tagsCode": a["tags"][ri] != e.tags[ei],
        "transaction type": ~queued(a["tx"][ri]),
    }
    if cfg.enable_consume_queue_ext:
        mismatch["tagsCode"] &= e.tags[ei] > EXT_ADDR_MAX  # ext addresses are not tag hashes
    if cfg.enable_multi_dispatch and (mismatch["topic"] | mismatch["queue id"]).any():
        # a multi-dispatch queue: the record names it in INNER_MULTI_DISPATCH, with this queue offset
        listed = lmq_listed(cfg, topic, qid, scan.a_phy[ri], e.qoff[ei])
        for name in ("topic", "queue id", "queue offset"):
            mismatch[name] &= ~listed
    any_bad = np.zeros(len(ei), dtype=bool)
    for m in mismatch.values():
        any_bad |= m

    def what(j: int) -> str:
        i, r = int(ei[j]), int(ri[j])
        fields = [name for name, m in mismatch.items() if m[j]]
        rec_desc = (
            f"topic {scan.topics[a['topic'][r]]} queue {a['qid'][r]} queueOffset {a['qoff'][r]} size {a['size'][r]} "
            f"tagsCode {a['tags'][r]}"
        )
        if "transaction type" in fields:
            rec_desc += " (a prepared/rollback record, which never gets an entry)"
        return (
            f"entry for queue offset {e.qoff[i]} (commit log offset {e.phy[i]}, size {e.size[i]}, tagsCode "
            f"{e.tags[i]}) does not match the record there: {', '.join(fields)} differ ({rec_desc})"
        )

    bad = np.flatnonzero(any_bad)
    for j in _first(out, bad, e.qdir, "entry mismatch"):
        p, b = e.where(int(ei[j]))
        out.add(p, b, what(int(j)), phy_offset=int(e.phy[ei[j]]), group="entry mismatch")


def _verify_queue(
    topic: str,
    qid: int,
    segs: Sequence[Segment],
    arr: np.ndarray,
    qoff: np.ndarray,
    fno: np.ndarray,
    pos: np.ndarray,
    scan: _LogScan,
    out: _Problems,
    log_min: int,
    data_end: int,
    cfg: Any,
) -> _QueueInfo:
    phy, size = arr["phy_offset"].astype(np.int64), arr["size"].astype(np.int64)
    e = _Entries(segs, qoff, fno, pos, phy, size, arr["tags_code"].astype(np.int64))
    first_qoff = segs[0].base_offset // ENTRY_SIZE
    end, real, fill_idx, first_real = _queue_prefix(e, out)
    idx_real = np.flatnonzero(real)
    rec, hit = scan.lookup(phy[idx_real])
    _entries_off_records(e, idx_real, hit, out, log_min, data_end)
    ok = np.flatnonzero(hit)
    _entry_mismatches(e, topic, qid, rec[ok], idx_real[ok], scan, out, cfg)
    last_phy = last_end = -1
    if idx_real.size:
        last = int(idx_real[-1])
        last_phy, last_end = int(phy[last]), int(phy[last] + size[last])
    end_qoff = int(qoff[end - 1]) + 1 if end else first_qoff
    prefix = fill_idx[fill_idx < first_real]
    filler_end = int(qoff[prefix[-1]]) + 1 if prefix.size else -1
    return _QueueInfo(
        topic, qid, first_qoff, end_qoff, last_phy, last_end, int(idx_real.size), int(fill_idx.size), filler_end
    )


def _report_records(scan: _LogScan, out: _Problems, mask: np.ndarray, log_dir: Path, group: str, why: str) -> None:
    """A problem for each record in ``mask`` (the first few built, the rest counted)."""
    a = scan.arrays
    for r in _first(out, np.flatnonzero(mask), log_dir, group):
        out.add(
            log_dir,
            None,
            f"record at commit log offset {scan.a_phy[r]} ({scan.topics[a['topic'][r]]} queue {a['qid'][r]} "
            f"queueOffset {a['qoff'][r]}) {why}",
            phy_offset=int(scan.a_phy[r]),
            group=group,
        )


def _check_queue_names(st: Store, segs: list[Segment], scan: _LogScan, out: _Problems) -> np.ndarray:
    """Records (NOT/COMMIT) whose topic and queue id cannot be a consume queue directory: one warning per
    queue, worded as the dispatch of recover and redispatch reports it (they skip those records too).
    Returns the mask of those records."""
    a = scan.arrays
    bad = np.zeros(scan.count, dtype=bool)
    if not scan.count:
        return bad
    consumable = queued(a["tx"])
    pairs, first = np.unique(
        (a["topic"].astype(np.int64) << 32) | (a["qid"].astype(np.int64) & 0xFFFFFFFF), return_index=True
    )
    bases = [sg.base_offset for sg in segs]
    for pair, r in zip(pairs.tolist(), first.tolist(), strict=True):
        name, qid = scan.topics[pair >> 32], int(a["qid"][r])
        why = st.consume_queues.path_problem(name, qid)
        if why is None:
            continue
        mask = consumable & (a["topic"] == pair >> 32) & (a["qid"] == qid)
        if not mask.any():
            continue
        r = int(np.flatnonzero(mask)[0])
        phy = int(scan.a_phy[r])
        seg = segs[max(0, bisect_right(bases, phy) - 1)]
        q = SkippedQueue(name, qid, why, str(seg.path), phy - seg.base_offset, phy, int(mask.sum()))
        out.add(seg.path, q.pos, q.what(), WARNING, phy)
        bad |= mask
    for q in lmq_skipped(st, scan.data_end) if rules_for(st.config.broker).multi_dispatch else ():
        out.add(q.path, q.pos, q.what(), WARNING, q.phy_offset)
    return bad


def _check_coverage(
    scan: _LogScan,
    queues: list[_QueueInfo],
    out: _Problems,
    horizon: int,
    log_dir: Path,
    forecast: RecoveryForecast,
    skipped: np.ndarray,
) -> None:
    """Records (NOT/COMMIT) without their consume queue entry (§4.3, §9); ``skipped`` ones have no queue."""
    if not scan.count:
        return
    a = scan.arrays
    by_key = {(q.topic, q.queue_id): q for q in queues}
    consumable = queued(a["tx"]) & ~skipped
    # one group per (topic, queue id) of the records, mapped back with the inverse index
    pairs = (a["topic"].astype(np.int64) << 32) | (a["qid"].astype(np.int64) & 0xFFFFFFFF)
    order = np.argsort(pairs, kind="stable")
    sorted_pairs = pairs[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_pairs[1:] != sorted_pairs[:-1])))
    inverse = np.empty(scan.count, dtype=np.int64)
    inverse[order] = np.cumsum(np.concatenate(([False], sorted_pairs[1:] != sorted_pairs[:-1])))
    reps = order[starts]  # one record of each (topic, queue id)
    groups = np.stack([a["topic"][reps], a["qid"][reps]], axis=1)
    g_first = np.full(len(groups), -1, dtype=np.int64)
    g_end = np.full(len(groups), -1, dtype=np.int64)
    g_exists = np.zeros(len(groups), dtype=bool)
    g_fill = np.full(len(groups), -1, dtype=np.int64)
    for g, (tid, qid) in enumerate(groups.tolist()):
        q = by_key.get((scan.topics[tid], qid))
        if q is not None:
            g_first[g], g_end[g], g_exists[g], g_fill[g] = q.first_qoff, q.end_qoff, True, q.filler_end
    first, end, exists = g_first[inverse], g_end[inverse], g_exists[inverse]
    filled = consumable & exists & (a["qoff"] >= first) & (a["qoff"] < g_fill[inverse])
    why = "has a fillPreBlank filler as its consume queue entry: it cannot be consumed"
    _report_records(scan, out, filled, log_dir, "filler over record", why)
    expired = exists & (a["qoff"] < first)
    missing = consumable & ~expired & (~exists | (a["qoff"] >= end))
    pending = missing & (scan.a_phy >= horizon)
    behind = missing & ~pending
    no_dir = np.bincount(inverse[behind & ~exists], minlength=len(groups))
    for g in np.flatnonzero(no_dir):
        tid, qid = groups[g].tolist()
        out.add(
            log_dir,
            None,
            f"{no_dir[g]} record(s) of {scan.topics[tid]} queue {qid} have no consume queue directory "
            "(deleted, or cleaned as unused)",
            INFO,
        )
    _report_records(scan, out, behind & exists, log_dir, "missing from queue", "is missing from its consume queue")
    if pending.any():
        idx = np.flatnonzero(pending)
        lo = int(scan.a_phy[idx[0]])
        dispatched = (scan.a_phy >= forecast.dispatch_from) & (scan.a_phy < forecast.stop_phy_offset)
        never = int((pending & ~dispatched).sum())
        if never == 0:  # nothing is lost, but the queues are behind: what info warns about too
            sev, why = WARNING, "the broker dispatches them when it starts"
        else:
            sev = ERROR if not forecast.last_exit_ok else WARNING
            why = f"dispatch after recovery covers offsets from {forecast.dispatch_from} only: {never} never get dispatched"
        out.add(
            log_dir,
            None,
            f"{idx.size} record(s) from commit log offset {lo} are not in any consume queue yet; {why}",
            sev,
            lo,
        )


# ------------------------------------------------------------------------------------ index


@dataclass
class _IndexInfo:
    path: Path
    header: IndexHeader | None


def _check_index(st: Store, scan: _LogScan, out: _Problems, counts: Counter[str]) -> list[_IndexInfo]:
    cfg = st.config
    files, name_problems = st.index_files()
    out.extend(name_problems)
    infos: list[_IndexInfo] = []
    slots, max_entries = cfg.max_hash_slot_num, cfg.max_index_num
    log_min = scan.runs[0].seg.base_offset if scan.runs else 0
    data_end = scan.data_end
    found = np.zeros(scan.keys_sorted.size, dtype=bool)  # keys some index file holds
    cover_lo, cover_hi = None, None
    prev_end_ts: int | None = None
    for path in files:
        counts["indexFiles"] += 1
        with map_file(path) as buf:
            try:
                ix = IndexFile(buf, slots=slots, entries=max_entries, path=str(path), broker=cfg.broker)
            except CorruptData as e:
                out.add(path, min(len(buf), HEADER_SIZE + slots * 4 + max_entries * INDEX_ENTRY_SIZE), e.what)
                infos.append(_IndexInfo(path, decode_header(buf, path=str(path)) if len(buf) >= HEADER_SIZE else None))
                prev_end_ts = None
                continue
            h = ix.header()
            infos.append(_IndexInfo(path, h))
            n = _verify_index_file(ix, h, scan, out, (log_min, data_end), prev_end_ts, found)
            del ix
        counts["indexEntries"] += n
        if n:
            cover_lo = h.begin_phy_offset if cover_lo is None else min(cover_lo, h.begin_phy_offset)
            cover_hi = h.end_phy_offset if cover_hi is None else max(cover_hi, h.end_phy_offset)
        prev_end_ts = h.end_timestamp_ms
    if cfg.message_index_enable and cover_lo is not None and scan.keys_sorted.size:
        _check_index_coverage(scan, found, out, st.config.index_dir, cover_lo, cover_hi)
    return infos


def _index_count(ix: IndexFile, h: IndexHeader, out: _Problems) -> int:
    """The header's indexCount (clamped to the file), after reporting the header's own problems."""
    path, max_entries = ix.path, ix.max_entries
    count = h.index_count
    if count < 0 or count > max_entries:
        out.add(path, 36, f"indexCount {count} is outside [0, maxIndexNum={max_entries}]")
        count = min(max(count, 0), max_entries)
    n_entries = max(count, 1) - 1
    if h.hash_slot_count < 0 or h.hash_slot_count > n_entries:
        out.add(path, 32, f"hashSlotCount {h.hash_slot_count} exceeds the {n_entries} entries", WARNING)
    if h.begin_timestamp_ms > h.end_timestamp_ms or h.begin_phy_offset > h.end_phy_offset:
        out.add(path, 0, "header begin timestamp/offset is after the end one", WARNING)
    return count


_INDEX_DTYPE = np.dtype([("h", ">i4"), ("p", ">i8"), ("t", ">i4"), ("v", ">i4")])


class _Findings:
    """Problems of one file gathered over its chunks of entries: per kind the first ones (as many as
    are listed) and a count, given to ``out`` kind after kind as if every entry were read at once."""

    def __init__(self, out: _Problems, path: str) -> None:
        self.out, self.path = out, path
        self.kinds: dict[str, tuple[str, list[int], list[tuple[int, str, int | None]]]] = {}

    def add(self, group: str, idx: np.ndarray, what: Callable[[int], str], at: Callable[[int], int],
            phy: Callable[[int], int | None], severity: str = ERROR) -> None:  # fmt: skip
        sev, n, items = self.kinds.setdefault(group, (severity, [0], []))
        n[0] += int(idx.size)
        room = self.out.limit + 1 - len(items) if self.out.limit else idx.size
        for i in idx[: max(room, 0)].tolist():
            items.append((at(i), what(i), phy(i)))

    def flush(self) -> None:
        for group, (sev, n, items) in self.kinds.items():
            self.out.hide(self.path, group, sev, n[0] - len(items))
            for at, what, phy in items:
                self.out.add(self.path, at, what, sev, phy_offset=phy, group=group)
        self.kinds = {}


@dataclass
class _IndexChunk:
    """Entries ``first``..``first + len - 1`` of one index file as arrays (entry 0 is never used)."""

    first: int
    entries_pos: int  # where entry 0 is in the file
    num: np.ndarray  # entry numbers
    key_hash: np.ndarray
    phy: np.ndarray
    tdiff: np.ndarray
    prev: np.ndarray

    @classmethod
    def read(cls, fd: int, ix: IndexFile, first: int, end: int) -> _IndexChunk:
        """Read with pread, not through the mapping: the pages read do not stay resident."""
        at = HEADER_SIZE + ix.slots * 4 + first * INDEX_ENTRY_SIZE
        e = np.frombuffer(os.pread(fd, (end - first) * INDEX_ENTRY_SIZE, at), dtype=_INDEX_DTYPE)
        num = np.arange(first, first + len(e), dtype=np.int64)
        cols = (e["h"].astype(np.int64), e["p"].astype(np.int64), e["t"].astype(np.int64), e["v"].astype(np.int64))
        return cls(first, HEADER_SIZE + ix.slots * 4, num, *cols)

    def at(self, i: int) -> int:
        return self.entries_pos + int(self.num[i]) * INDEX_ENTRY_SIZE

    def phy_of(self, i: int) -> int:
        return int(self.phy[i])


@dataclass
class _IndexWalk:
    """What the check of one index file keeps over its chunks: each entry's slot (-1: negative
    keyHash) and how often it is linked (0, 1, 2 = more), and the findings so far."""

    ix: IndexFile
    count: int
    slot: np.ndarray
    refs: np.ndarray
    chains: _Findings
    records: _Findings
    first_hit: tuple[int, int] | None = None  # (phy, store time) of entry 1's record
    last_hit: tuple[int, int, int] | None = None  # (number, phy, store time) of the last entry's record
    any_hit: bool = False

    def link(self, targets: np.ndarray) -> None:
        """Count links to the entries ``targets`` (saturating at 2)."""
        if targets.size:
            u, c = np.unique(targets, return_counts=True)
            self.refs[u] = np.minimum(self.refs[u] + np.minimum(c, 2).astype(np.uint8), 2)


def _chunk_chains(w: _IndexWalk, c: _IndexChunk) -> None:
    """Hash slot chains (§5.2) of a chunk: keyHash signs, prev links and the slots they link."""
    num, key_hash, prev, slots = c.num, c.key_hash, c.prev, w.ix.slots
    slot = np.where(key_hash >= 0, key_hash % slots, -1)
    w.slot[num] = slot
    add = w.chains.add
    add("negative hash", np.flatnonzero(key_hash < 0),
        lambda i: f"entry {num[i]} has a negative keyHash {key_hash[i]}", c.at, c.phy_of)  # fmt: skip
    add("bad prev", np.flatnonzero((prev < 0) | (prev >= num)),
        lambda i: f"entry {num[i]} links to entry {prev[i]}, not an earlier one", c.at, c.phy_of)  # fmt: skip
    okp = (prev > 0) & (prev < num)
    prev_slot = np.full(len(num), -1, dtype=np.int64)
    prev_slot[okp] = w.slot[prev[okp]]
    add(
        "chain slot",
        np.flatnonzero(okp & (prev_slot != slot)),
        lambda i: f"entry {num[i]} (slot {slot[i]}) links to entry {prev[i]} of slot {prev_slot[i]}: chains mixed",
        c.at,
        c.phy_of,
    )
    w.link(prev[okp])


def _slot_heads(w: _IndexWalk, fd: int, out: _Problems) -> None:
    """Slot heads (§5.2) and, once every link is counted, entries in no chain or in two."""
    ix, count, path = w.ix, w.count, w.ix.path
    heads = np.frombuffer(os.pread(fd, ix.slots * 4, HEADER_SIZE), dtype=">i4").astype(np.int32)
    bad_head = (heads < 0) | (heads >= count)
    for s in _first(out, np.flatnonzero(bad_head), path, "bad slot"):
        what = f"slot {s} points to entry {heads[s]}, past indexCount {count}"
        out.add(path, HEADER_SIZE + int(s) * 4, what, group="bad slot")
    live = np.flatnonzero((heads > 0) & ~bad_head)
    head_slot = w.slot[heads[live]]
    for s in _first(out, live[head_slot != live], path, "bad slot"):
        what = f"slot {s} starts with entry {heads[s]} whose keyHash belongs to another slot"
        out.add(path, HEADER_SIZE + int(s) * 4, what, group="bad slot")
    for lo in range(0, live.size, _INDEX_CHUNK):
        w.link(heads[live[lo : lo + _INDEX_CHUNK]])
    del heads, live, bad_head
    refs = w.refs[1:count]

    def at(i: int) -> int:
        return HEADER_SIZE + ix.slots * 4 + (i + 1) * INDEX_ENTRY_SIZE

    def phy(i: int) -> int:
        return int(np.frombuffer(os.pread(fd, 8, at(i) + 4), dtype=">i8")[0])

    what_refs = _Findings(out, path)
    what_refs.add("unreachable", np.flatnonzero(refs == 0),
                  lambda i: f"entry {i + 1} is in no slot chain: queries never find it", at, phy, WARNING)  # fmt: skip
    merged = np.flatnonzero(refs > 1)
    what_refs.add("merged chains", merged, lambda i: f"entry {i + 1} is linked {_links(w, fd, i + 1)} times: slot chains merge", at, phy)  # fmt: skip
    what_refs.flush()


def _links(w: _IndexWalk, fd: int, n: int) -> int:
    """How many links an entry has (only for the few entries listed as linked more than once)."""
    heads = np.frombuffer(os.pread(fd, w.ix.slots * 4, HEADER_SIZE), dtype=">i4")
    links = int((heads == n).sum())
    for first in range(1, w.count, _INDEX_CHUNK):
        c = _IndexChunk.read(fd, w.ix, first, min(first + _INDEX_CHUNK, w.count))
        links += int((c.prev == n).sum())
    return links


def _chunk_records(
    w: _IndexWalk, c: _IndexChunk, h: IndexHeader, scan: _LogScan, bounds: tuple[int, int], found: np.ndarray,
    prev_end_ts: int | None,
) -> None:  # fmt: skip
    """Entries of a chunk against the records they point to: offsets, keys, rollbacks, time differences."""
    log_min, data_end = bounds
    num, phy, key_hash, tdiff = c.num, c.phy, c.key_hash, c.tdiff
    rec, hit = scan.lookup(phy)
    past = ~hit & (phy >= data_end)
    inside = ~hit & (phy >= log_min) & ~past
    add = w.records.add
    add("past end", np.flatnonzero(past),
        lambda i: f"entry {num[i]} points to commit log offset {phy[i]}, past the end of data ({data_end})", c.at, c.phy_of)  # fmt: skip
    add("not a record", np.flatnonzero(inside),
        lambda i: f"entry {num[i]} points to commit log offset {phy[i]}, where no record starts", c.at, c.phy_of)  # fmt: skip
    has_key = np.zeros(len(num), dtype=bool)
    if scan.keys_sorted.size:
        pair = (rec << 32) | key_hash
        k = np.minimum(np.searchsorted(scan.keys_sorted, pair), scan.keys_sorted.size - 1)
        has_key = scan.keys_sorted[k] == pair
        found[k[hit & has_key]] = True
    add(
        "wrong key",
        np.flatnonzero(hit & ~has_key),
        lambda i: (
            f"entry {num[i]} (keyHash {key_hash[i]}) points to the record at commit log offset {phy[i]} "
            f"({scan.topics[scan.arrays['topic'][rec[i]]]}), which has no key with that hash"
        ),
        c.at,
        c.phy_of,
    )
    if not hit.any():
        return
    w.any_hit = True
    a = scan.arrays
    add("rollback", np.flatnonzero(hit & ~indexed(a["tx"][rec])),
        lambda i: f"entry {num[i]} indexes a rollback record, which the broker never indexes", c.at, c.phy_of, WARNING)  # fmt: skip
    ts = a["ts"][rec]
    expect = _time_diff(ts, h.begin_timestamp_ms)
    ok_t = expect == tdiff
    if c.first == 1:
        ok_t[0] |= tdiff[0] == 0  # the first entry of the very first file: header begin was 0
        if prev_end_ts is not None:
            ok_t[0] |= _time_diff(ts[:1], prev_end_ts)[0] == tdiff[0]
        else:
            ok_t[0] |= tdiff[0] >= 0  # the file before it is gone: its end time is unknown
        w.first_hit = (int(phy[0]), int(ts[0])) if hit[0] else None
    add("time diff", np.flatnonzero(hit & ~ok_t),
        lambda i: f"entry {num[i]} has timeDiff {tdiff[i]} s, the record's store time gives {expect[i]} s", c.at, c.phy_of)  # fmt: skip
    if c.first + len(num) == w.count:
        w.last_hit = (int(num[-1]), int(phy[-1]), int(ts[-1])) if hit[-1] else None


def _verify_index_file(
    ix: IndexFile, h: IndexHeader, scan: _LogScan, out: _Problems, bounds: tuple[int, int], prev_end_ts: int | None,
    found: np.ndarray,
) -> int:  # fmt: skip
    """Check one index file, its entries a chunk at a time; marks in ``found`` the keys of ``scan``
    it holds and returns its entry count."""
    count = _index_count(ix, h, out)
    if max(count, 1) - 1 == 0:
        return 0
    w = _IndexWalk(ix, count, np.full(count, -1, dtype=np.int32), np.zeros(count, dtype=np.uint8),
                   _Findings(out, ix.path), _Findings(out, ix.path))  # fmt: skip
    fd = os.open(ix.path, os.O_RDONLY)
    try:
        for first in range(1, count, _INDEX_CHUNK):
            c = _IndexChunk.read(fd, ix, first, min(first + _INDEX_CHUNK, count))
            _chunk_chains(w, c)
            _chunk_records(w, c, h, scan, bounds, found, prev_end_ts)
        w.chains.flush()
        _slot_heads(w, fd, out)
        w.records.flush()
    finally:
        os.close(fd)
    if w.any_hit:
        if w.first_hit is not None and (h.begin_phy_offset, h.begin_timestamp_ms) != w.first_hit:
            out.add(ix.path, 0, "header begin offset/timestamp differ from entry 1's record", WARNING)
        if w.last_hit is not None and (h.end_phy_offset, h.end_timestamp_ms) != w.last_hit[1:]:
            out.add(ix.path, 8, f"header end offset/timestamp differ from entry {w.last_hit[0]}'s record", WARNING)
    return count - 1


def _time_diff(ts: np.ndarray, begin_ms: int) -> np.ndarray:
    """putKey's timeDiff (§5.2): seconds since the header begin, truncated, clamped to int."""
    if begin_ms <= 0:
        return np.zeros(len(ts), dtype=np.int64)
    d = ts - begin_ms
    d = np.where(d >= 0, d // 1000, -((-d) // 1000))
    return np.clip(d, 0, INT_MAX)


def _check_index_coverage(scan: _LogScan, found: np.ndarray, out: _Problems, index_dir: Path, lo: int, hi: int) -> None:
    """Keys of records inside the indexed range that no index file holds (§5.3); ``found`` marks
    the keys of ``scan.keys_sorted`` some index file holds."""
    recs = scan.keys_sorted >> 32
    in_range = (scan.a_phy[recs] >= lo) & (scan.a_phy[recs] <= hi)
    missing = scan.keys_sorted[in_range & ~found]
    if not missing.size:
        return
    owners = missing >> 32  # sorted, since the pairs are
    firsts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
    recs_missing = owners[firsts]
    per_rec = np.diff(np.append(firsts, owners.size))
    keep = _first(out, np.arange(recs_missing.size), index_dir, "key not indexed", WARNING)
    for r, n in zip(recs_missing[keep].tolist(), per_rec[keep].tolist(), strict=True):
        out.add(
            index_dir,
            None,
            f"{n} key(s) of the record at commit log offset {scan.a_phy[r]} ({scan.topics[scan.arrays['topic'][r]]}) "
            "are in no index file",
            WARNING,
            phy_offset=int(scan.a_phy[r]),
            group="key not indexed",
        )


# ---------------------------------------------------------------------- checkpoint, markers


def _read_checkpoint(path: Path, out: _Problems | None) -> Any:
    """The checkpoint as the broker reads it: it maps 4096 bytes, so a short file reads as if
    padded with zeros and bytes past 4096 are ignored (§6)."""
    try:
        data = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if out is not None:
            out.add(path, None, f"cannot read: {e.strerror}")
        return None
    if len(data) != cpmod.FILE_SIZE and out is not None:
        effect = "the broker extends it with zeros" if len(data) < cpmod.FILE_SIZE else "the broker ignores the rest"
        out.add(
            path, min(len(data), cpmod.FILE_SIZE), f"checkpoint is {len(data)} bytes, expected 4096: {effect}", WARNING
        )
    return cpmod.decode(data[: cpmod.FILE_SIZE].ljust(cpmod.FILE_SIZE, b"\0"), path=str(path))


def _check_checkpoint(st: Store, out: _Problems, newest_ts: int | None) -> Any:
    path = st.config.checkpoint_path
    cp = _read_checkpoint(path, out)
    if cp is None:
        out.add(
            path, None, "no checkpoint: an abnormal start would re-dispatch everything from the first file", WARNING
        )
        return None
    if newest_ts is None:
        return cp
    for pos, name, value in (
        (0, "physicMsgTimestamp", cp.physic_msg_timestamp_ms),
        (8, "logicsMsgTimestamp", cp.logics_msg_timestamp_ms),
        (16, "indexMsgTimestamp", cp.index_msg_timestamp_ms),
    ):
        if value > newest_ts:
            out.add(
                path,
                pos,
                f"{name} {value} is newer than the newest record ({newest_ts}): abnormal recovery could start after "
                "records that are not in the consume queues and never dispatch them",
            )
        elif value and value < newest_ts and name != "indexMsgTimestamp":
            out.add(path, pos, f"{name} is {(newest_ts - value) / 1000:.3f} s behind the newest record", INFO)
    return cp


def _check_markers(st: Store, out: _Problems) -> None:
    cfg = st.config
    out.extend(shutdown_problems(cfg.abort_path, cfg.lock_path, abort=st.abort_exists(), lock_pid=st.lock_holder()))
    if st.abort_exists() and not cfg.abort_path.is_file():  # recover's plan refuses it before any change
        out.add(cfg.abort_path, 0, "abort is not a regular file: recover cannot remove it (a directory?)")


def _check_config(st: Store, out: _Problems, counts: Counter[str]) -> None:
    d = st.config.config_dir
    compaction = [p for p in (st.root / "compaction" / n for n in COMPACTION_CHECKPOINTS) if p.is_file()]
    for p in [*(sorted(d.iterdir()) if d.is_dir() else ()), *compaction]:
        name = p.name
        if name.endswith(".json.tmp"):
            out.add(p, None, "leftover temporary file of an interrupted persist (the broker ignores it)", INFO)
            continue
        if not (name.endswith(_CONFIG_SUFFIXES) or name in _COMPACT_CONFIG or p in compaction) or not p.is_file():
            continue
        counts["configFiles"] += 1
        _check_config_file(p, out)


def _check_config_file(p: Path, out: _Problems) -> None:
    """One fastjson file the broker loads by ``ConfigManager.load``: its main copy, or its .bak."""
    is_bak = p.name.endswith(".bak")
    try:
        raw = read_file(p)
    except OSError as e:
        out.add(p, None, f"cannot read: {e.strerror}")
        return
    if not raw:
        out.add(p, 0, "empty file: the broker loads the .bak copy instead" if not is_bak else "empty file", WARNING)
        return
    try:
        data = cfgjson.loads(raw, path=p)
        typed = _TYPED_CONFIG.get(p.name.removesuffix(".bak"))
        if typed is not None:
            typed(data, path=p)
    except ConfigError as e:
        sev = WARNING if is_bak else ERROR
        tail = "; the broker falls back to the .bak copy (older state)" if not is_bak else "; no fallback left"
        out.add(p, cfgjson.byte_of(raw, e.line, e.what), f"does not parse: {e.what}{tail}", sev)


def _check_offsets(st: Store, out: _Problems, counts: Counter[str]) -> None:
    """Committed offsets in consumerOffset.json against the queues' ranges (§4.4, §11.4)."""
    try:
        cf, table = read_consumer_offsets(st)
    except ConfigError:
        return  # reported by _check_config
    if cf.raw is None:
        return
    path = cf.path if cf.source == "file" else cf.path.with_name(cf.path.name + ".bak")
    min_phy = st.min_phy_offset()
    ranges: dict[tuple[str, int], Any] = {}
    key_at = _string_positions(cf.raw)
    # queue directories the listing does not hold have no files: their range needs no look
    listed = {(q.topic, q.queue_id) for q in st.consume_queues.queues()}
    by_directory = isinstance(st.consume_queues, QueueDirectories)
    for (topic, group), queues in table.items():
        pos = key_at(f'"{topic}@{group}"'.encode())
        for qid, committed in queues.items():
            counts["committedOffsets"] += 1
            rng = ranges.get((topic, qid))
            if rng is None and by_directory and (topic, qid) not in listed:
                rng = ranges[(topic, qid)] = QueueRange(topic, qid, 0, 0, -1, -1)
            elif rng is None:
                rng = ranges[(topic, qid)] = st.consume_queues.queue(topic, qid).queue_range(min_phy)
            where = f"{group} on {topic} queue {qid}: committed offset {committed}"
            if committed > rng.max_offset:
                out.add(
                    path,
                    pos,
                    f"{where} is past the queue's max offset {rng.max_offset}: the broker answers the next pull "
                    "with OFFSET_OVERFLOW_BADLY and corrects it (to the min offset when that is 0: everything is "
                    "consumed again)",
                    WARNING,
                    group="offset past max",
                )
            elif committed < rng.min_offset:
                out.add(
                    path,
                    pos,
                    f"{where} is behind the queue's min offset {rng.min_offset}: "
                    f"{rng.min_offset - committed} message(s) expired unconsumed",
                    INFO,
                    group="offset before min",
                )


def _string_positions(raw: bytes) -> Callable[[bytes], int | None]:
    """Where a quoted string first appears in ``raw`` (as ``raw.find``), from one pass over the
    file's strings: a find per key is quadratic in a file of many offsets. Without an escaped
    quote in the file every ``"`` opens or closes a string, so the first string token equal to
    the key is the first match; with one, each key is searched for."""
    if b'\\"' in raw:
        return lambda quoted: (lambda at: at if at >= 0 else None)(raw.find(quoted))
    first: dict[bytes, int] = {}
    for m in _JSON_STRING.finditer(raw):
        first.setdefault(m.group(0), m.start())
    return first.get


# ------------------------------------------------------------------------------- recovery


def _forecast_stop(scan: _LogScan, segs: Sequence[Segment], start_phy: int) -> int:
    """Where the broker's walk from ``start_phy`` stops, from the stops the lenient walk saw."""
    stops = [s for s in scan.stops if s >= start_phy]
    stop = stops[0] if stops else scan.data_end
    # a BLANK at the end of the last loaded file ends the walk there ("recover last physics file over")
    last = segs[-1]
    run = next((r for r in scan.runs if r.seg.path == last.path), None)
    if run is not None and run.blank:
        stop = min(stop, last.base_offset + run.end_pos)
    return stop


def _dispatch_from(rules: Any, abort: bool, first_phy: int, start_phy: int, stop: int, cq_max: int) -> int:
    """Where the re-dispatch after the broker's recovery starts."""
    if rules.restart_dispatches_from_stop:
        dispatch_from = stop
    elif rules.cq_max_includes_size:
        dispatch_from = max(first_phy, cq_max)
    else:
        dispatch_from = stop
    if abort:
        return min(dispatch_from, start_phy)
    if rules.normal_dispatch_beyond_cq:
        return min(dispatch_from, max(cq_max, start_phy))
    return dispatch_from


def _forecast(
    st: Store,
    segs: Sequence[Segment],
    scan: _LogScan,
    queues: Sequence[_QueueInfo],
    index: Sequence[_IndexInfo],
    cp: Any,
) -> RecoveryForecast:
    """What the broker's recovery would do, from the lenient walk's findings; the start file is
    recovery's own rule (:func:`rmqstore.walk.recovery.walk_start`)."""

    cfg = st.config
    rules = rules_for(cfg.broker)
    abort = st.abort_exists()
    ends = [q.last_end if rules.cq_max_includes_size else q.last_phy for q in queues if q.last_phy >= 0]
    cq_max = max(ends) if ends else -1
    cq_max = dispatch_checkpoint(st, cq_max)
    segs = loaded_segments(segs, cfg.commitlog_file_size, cfg.broker)
    mode = "abnormal" if abort else "normal"
    if not segs:
        return RecoveryForecast(not abort, mode, None, 0, "no commit log files", 0, 0, (), (), cq_max, 0, 0)
    start, _why = walk_start(segs, abort, cp if cp is not None else cpmod.Checkpoint(0, 0, 0), cfg, rules, cq_max)
    start_phy = segs[start].base_offset
    stop = _forecast_stop(scan, segs, start_phy)
    beyond = scan.a_phy >= stop if scan.count else np.zeros(0, bool)
    dropped = int(beyond.sum())
    from_db = database_dispatch_from(st, segs[0].base_offset, stop, cq_max)
    deleted_index: tuple[str, ...] = ()
    if abort:
        limit_ts = cp.index_msg_timestamp_ms if cp is not None else 0
        deleted_index = tuple(
            i.path.name for i in index if i.header is not None and i.header.end_timestamp_ms > limit_ts
        )
    return RecoveryForecast(
        last_exit_ok=not abort,
        mode=mode,
        start_file=segs[start].path.name,
        stop_phy_offset=stop,
        stop_reason=_stop_reason(scan, stop),
        dropped_records=dropped,
        dropped_bytes=int(scan.arrays["size"][beyond].sum()) if dropped else 0,
        deleted_files=tuple(s.path.name for s in segs if s.base_offset > stop),
        deleted_index_files=deleted_index,
        cq_max_phy_offset=cq_max,
        truncated_queues=sum(1 for q in queues if q.last_phy >= stop) if cq_max >= stop else 0,
        dispatch_from=_dispatch_from(rules, abort, segs[0].base_offset, start_phy, stop, cq_max)
        if from_db is None
        else from_db,
    )


def _loads_prefix_only(broker: str) -> bool:
    """4.4.0 (and older) and 4.9.2 stop loading at a file of the wrong size; the others fail (§2.4)."""
    return rules_for(broker).loads_prefix_only


def loaded_segments(segs: Sequence[Segment], file_size: int, broker: str) -> list[Segment]:
    """The commit log files a broker of this version loads (§2.4): 5.1.3+ deletes an empty last
    file; 4.4.0 and 4.9.2 stop at the first file of the wrong size (the others refuse to start)."""
    segs = list(segs)
    if segs and segs[-1].size == 0 and rules_for(broker).deletes_empty_last_file:
        segs.pop()
    bad = next((i for i, s in enumerate(segs) if s.size != file_size), None)
    if bad is not None and _loads_prefix_only(broker):
        segs = segs[:bad]
    return segs


def _stop_reason(scan: _LogScan, stop: int) -> str:
    if stop >= scan.data_end:
        return "end of data"
    for run in scan.runs:
        seg = run.seg
        if seg.base_offset <= stop < seg.base_offset + max(seg.size, 1):
            return f"invalid data in {seg.path.name} at byte {stop - seg.base_offset}"
    return "end of data"


def _report_forecast(
    fc: RecoveryForecast, st: Store, out: _Problems, segs: Sequence[Segment], queues: Sequence[_QueueInfo]
) -> None:
    cfg = st.config
    log_dir = cfg.commitlog_dir
    loaded = loaded_segments(segs, cfg.commitlog_file_size, cfg.broker)
    bad = next((s for s in loaded if s.size != cfg.commitlog_file_size), None)
    if bad is None and len(loaded) < len(segs) and segs[len(loaded)].size != 0:
        first_skipped = segs[len(loaded)]
        out.add(
            first_skipped.path,
            min(first_skipped.size, cfg.commitlog_file_size),
            f"broker {cfg.broker} stops loading the commit log at this file of the wrong size: it and the "
            f"{len(segs) - len(loaded) - 1} file(s) after it are ignored, their records lost",
        )
    elif bad is not None:
        out.add(
            bad.path,
            min(bad.size, cfg.commitlog_file_size),
            f"broker {cfg.broker} refuses to start with a commit log file of the wrong size",
        )
    segs = loaded
    if not segs and any(q.last_phy >= 0 for q in queues):
        out.add(log_dir, None, "no commit log file: the broker deletes every consume queue at start", WARNING)
    if fc.dropped_records:
        seg = next((s for s in segs if s.base_offset <= fc.stop_phy_offset < s.base_offset + s.size), None)
        path, pos = (seg.path, fc.stop_phy_offset - seg.base_offset) if seg else (log_dir, None)
        out.add(
            path,
            pos,
            f"the broker's {fc.mode} recovery stops at commit log offset {fc.stop_phy_offset} ({fc.stop_reason}) and "
            f"truncates {fc.dropped_records} readable record(s), {fc.dropped_bytes} bytes, after it",
            phy_offset=fc.stop_phy_offset,
        )
    if fc.deleted_index_files:
        out.add(
            cfg.index_dir,
            None,
            f"abnormal recovery deletes {len(fc.deleted_index_files)} index file(s) newer than the checkpoint "
            f"({', '.join(fc.deleted_index_files)}) and rebuilds their keys only for re-dispatched records",
            INFO,
        )
    if fc.truncated_queues:
        out.add(
            cfg.consumequeue_dir,
            None,
            f"{fc.truncated_queues} consume queue(s) end past the recovered commit log end "
            f"{fc.stop_phy_offset}: the broker truncates them",
            WARNING,
        )


# ------------------------------------------------------------------------------- entry point


def check_store(
    st: Store, *, quick: bool = False, progress: Progress | None = None, limit: int = PER_KIND_LIMIT
) -> CheckReport:
    """Check ``st`` and return every problem found (reads only).

    ``limit`` caps how many problems of one kind are listed (0: all); the others are counted in
    :attr:`CheckReport.found` and summarised by one line per kind.
    """
    out = _Problems(limit)
    counts: Counter[str] = Counter(dict.fromkeys(COUNT_KEYS, 0))
    cfg = st.config
    segs, seg_problems = st.commitlog_segments()
    if segs and segs[-1].size == 0 and rules_for(cfg.broker).deletes_empty_last_file:
        last = str(segs[-1].path)
        seg_problems = [p for p in seg_problems if str(p.path) != last or p.kind is not ProblemKind.WRONG_SIZE]
        out.add(last, 0, "empty last file: the broker deletes it when it loads the store", INFO)
    out.extend(_fix_segment_problems(seg_problems, segs, cfg.commitlog_file_size))
    counts["commitlogFiles"] = len(segs)
    _check_markers(st, out)
    _check_config(st, out, counts)
    _check_offsets(st, out, counts)
    if cfg.dledger:
        _check_dledger(st, segs, out, counts, quick=quick)
    walker = _Walker(st, out, progress, light=quick)
    if quick:
        queues = _recover_queues(st, out, counts)
        index = _index_headers(st, counts)
        cp0 = _read_checkpoint_quietly(st)
        first = _quick_start(st, segs, queues, cp0)
        if progress is not None:
            progress(sum(s.size for s in segs[:first]))
        scan = walker.walk(segs[first:])
    else:
        scan = walker.walk(segs)
    scan.finish()
    _classify_tails(scan, out)
    counts["records"] = scan.count
    counts["blanks"] = scan.blanks
    newest = int(scan.arrays["ts"].max()) if scan.count else None
    cp = _check_checkpoint(st, out, newest)
    if not quick:
        queues = _check_queues(st, scan, out, counts)
        index = _check_index(st, scan, out, counts)
    check_rows(st, scan.data_end, segs[0].base_offset if segs else 0, out.add)
    fc = _forecast(st, segs, scan, queues, index, cp)
    _report_forecast(fc, st, out, segs, queues)
    ends = [q.last_end for q in queues if q.last_end >= 0]
    horizon = max(ends) if ends else (segs[0].base_offset if segs else 0)
    log_dir = segs[-1].path.parent if segs else cfg.commitlog_dir
    skipped = _check_queue_names(st, segs, scan, out)
    if not quick:
        _check_coverage(scan, queues, out, horizon, log_dir, fc, skipped)
    elif scan.count:
        _quick_dispatch(scan, out, horizon, log_dir, fc)
    counts["minPhyOffset"] = segs[0].base_offset if segs else 0
    counts["maxPhyOffset"] = scan.data_end
    problems = out.finish()
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    problems = tuple(sorted(problems, key=lambda p: order.get(p.severity, 3)))
    return CheckReport(
        st.root, quick, cfg.broker, dict(counts), fc, problems, dict(out.found), not st.abort_exists(), st.lock_holder()
    )


def _check_dledger(st: Store, segs: Sequence[Segment], out: _Problems, counts: Counter[str], *, quick: bool) -> None:
    """The DLedger entries (headers, sequence, terms, each against its index unit), the member's
    checkpoint and index against the ledger; ``quick`` reads only the ledger's ends, as ``info``."""
    cfg = st.config
    with DLedgerIndex(cfg) as index:
        out.extend(index.problems)
        state = ledger_state(list(segs), index, read_member(cfg))
        out.extend(p for p in ledger_problems(state, index) if quick or p.severity != ERROR)
        if quick:
            return
        entries = 0

        def walked() -> Iterator[Entry]:
            nonlocal entries
            for e in iter_entries(segs):
                if e.kind == INVALID:
                    out.add(
                        e.seg.path, e.pos, f"{e.problem}; the DLedger chain of this file ends here", ERROR, e.offset
                    )
                entries += e.kind == ENTRY
                yield e

        for p in entry_findings(walked(), index):
            out.add(p.path, p.pos, p.what, p.severity, p.phy_offset, group="DLedger entry")
    counts["dledgerEntries"] = entries


def _read_checkpoint_quietly(st: Store) -> Any:
    return _read_checkpoint(st.config.checkpoint_path, None)


def _quick_start(st: Store, segs: Sequence[Segment], queues: Sequence[_QueueInfo], cp: Any) -> int:
    """Index of the commit log file the broker's recovery starts in."""
    empty = _LogScan()
    fc = _forecast(st, segs, empty, queues, (), cp)
    for i, s in enumerate(segs):
        if s.path.name == fc.start_file:
            return i
    return 0


def _recover_queues(st: Store, out: _Problems, counts: Counter[str]) -> list[_QueueInfo]:
    """Consume queue recovery only (§8.4): the valid end of each queue from its last three files."""
    infos = []
    cfg = st.config
    for q in st.consume_queues.queues():
        topic, qid = q.topic, q.queue_id
        segs, seg_problems = q.files()
        out.extend(_fix_segment_problems(seg_problems, segs, cfg.cq_file_size))
        counts["queues"] += 1
        if not segs:
            infos.append(_QueueInfo(topic, qid, 0, 0, -1, -1))
            continue
        rng = q.queue_range(0)
        infos.append(
            _QueueInfo(
                topic, qid, segs[0].base_offset // ENTRY_SIZE, rng.max_offset, rng.last_phy_offset, rng.last_phy_end
            )
        )
    return infos


def _index_headers(st: Store, counts: Counter[str]) -> list[_IndexInfo]:
    files, _ = st.index_files()
    infos = []
    for p in files:
        counts["indexFiles"] += 1
        with map_file(p) as buf:
            infos.append(_IndexInfo(p, decode_header(buf, path=str(p)) if len(buf) >= HEADER_SIZE else None))
    return infos


def _quick_dispatch(scan: _LogScan, out: _Problems, horizon: int, log_dir: Path, fc: RecoveryForecast) -> None:
    """Quick mode: records after the consume queues' end that the broker will never dispatch."""
    a = scan.arrays
    consumable = queued(a["tx"])
    pending = consumable & (scan.a_phy >= horizon) & (scan.a_phy < fc.stop_phy_offset)
    if not pending.any():
        return
    never = pending & (scan.a_phy < fc.dispatch_from)
    n, lost = int(pending.sum()), int(never.sum())
    lo = int(scan.a_phy[np.flatnonzero(pending)[0]])
    if not lost:
        out.add(
            log_dir,
            None,
            f"{n} record(s) from commit log offset {lo} are not in any consume queue yet; the broker "
            "dispatches them when it starts",
            WARNING,
            lo,
        )
    else:
        sev = ERROR if not fc.last_exit_ok else WARNING
        out.add(
            log_dir,
            None,
            f"{lost} of {n} undispatched record(s) from commit log offset {lo} lie before "
            f"where dispatch resumes ({fc.dispatch_from}): they are never dispatched",
            sev,
            lo,
        )
