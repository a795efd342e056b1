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

import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
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
from rmqstore.codec.consumequeue import ENTRY_SIZE
from rmqstore.codec.framing import is_record_magic
from rmqstore.codec.indexfile import HEADER_SIZE, IndexHeader, decode_header
from rmqstore.codec.javahash import index_key_hash_batch, tags_code
from rmqstore.errors import ConfigError, RecordSizeMismatch
from rmqstore.ops.check.coverage import RecordCheck
from rmqstore.ops.check.found import PER_KIND_LIMIT, Problems, first_of
from rmqstore.ops.check.index import INDEX_CHUNK, IndexCheck
from rmqstore.ops.check.queues import QueueCheck, QueueInfo, fix_segment_problems
from rmqstore.ops.check.records import ROW_DTYPES, empty_rows, record_rows
from rmqstore.ops.check.rocksdbrows import check_rows, database_dispatch_from, dispatch_checkpoint
from rmqstore.ops.check.window import OFFSET_MAX, OFFSET_MIN, Window
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
from rmqstore.store.queue.interface import QueueRange
from rmqstore.store.queue.mappedfiles import QueueDirectories
from rmqstore.walk.chain import indexed
from rmqstore.walk.checked import TopicIds
from rmqstore.walk.dledger import ENTRY, INVALID, Entry, entry_findings, iter_entries, ledger_problems, ledger_state
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Item, Run, intact_record, walk_files
from rmqstore.walk.recovery import walk_start

_Problems = Problems
_first = first_of
_fix_segment_problems = fix_segment_problems
_QueueInfo = QueueInfo
_JAVA_INT_RE = re.compile(r"[+-]?\d+")  # what Integer.parseInt accepts
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_CHUNK = 16 << 20
_KEY_FLUSH = 1 << 16  # index keys hashed at a time
_BATCH = 1 << 16  # records decoded as columns at a time
_INDEX_CHUNK = INDEX_CHUNK
_WINDOW = 1 << 18  # records checked against the queues and index files at a time
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
    """What the walk keeps of the records: the window being filled (check's columns and index key
    pairs, in commit log order), handed to ``sink`` when full; and for the whole walk only counts,
    the first stop at or after ``floor`` (where recovery starts) and the records before the offsets
    recovery may stop at."""

    names: TopicIds = field(default_factory=TopicIds)  # topic name <-> id of every record
    # per record (ROW_DTYPES): phy, size, topic id, queue id, queue offset, the tagsCode the dispatcher
    # computes, store timestamp, transaction type; one array per column and batch of the window
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
    key_parts: list[np.ndarray] = field(default_factory=list)  # record number << 32 | index key hash
    rows_seen: int = 0
    window_first: int = 0  # record number of the window's first record
    lo: int = OFFSET_MIN  # the window matches entries from here
    sink: Callable[[Window], None] | None = None
    floor: int = OFFSET_MIN
    first_stop: int | None = None  # the first offset at or after floor where the broker's walk stops
    records_end: int | None = None  # where the last run of records the walk found ends
    runs: list[_FileRun] = field(default_factory=list)
    blanks: int = 0
    newest: int | None = None  # the newest store timestamp
    size_sum: int = 0
    before: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> records and bytes before it
    _marks: list[int] = field(default_factory=list)  # offsets to count records before at the next window

    @property
    def topics(self) -> list[str]:
        return self.names.names

    @property
    def topic_ids(self) -> dict[str, int]:
        return self.names.ids

    def topic_id(self, name: str) -> int:
        return self.names.id(name)

    def stop(self, phy: int) -> None:
        if self.first_stop is None and phy >= self.floor:
            self.first_stop = phy
            self.mark(phy)

    def mark(self, phy: int) -> None:
        """Count the records before ``phy`` (an offset at or after every record walked so far but
        those of the window being filled)."""
        self._marks.append(phy)

    def flush(self, *, last: bool) -> None:
        """Hand the window to the sink; the last one also takes every entry past the records."""
        cols = {}
        for name in ROW_DTYPES:  # one column at a time: the batches of a column go as it is built
            cols[name] = np.concatenate([part.pop(name) for part in self.parts] or [empty_rows(0)[name]])
        self.parts = []
        phy = cols.pop("phy")
        if not phy.size and not last:
            return
        keys = np.concatenate(self.key_parts) if self.key_parts else np.empty(0, np.int64)
        self.key_parts = []
        keys.sort()  # in place: no second copy of every key
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys
        hi = OFFSET_MAX if last else int(phy[-1]) + 1
        w = Window(self.window_first, phy, cols, keys, self.lo, max(hi, self.lo), last)
        for t in self._marks:
            below = phy < t
            self.before[t] = (self.window_first + int(below.sum()), self.size_sum + int(cols["size"][below].sum()))
        self._marks = []
        if phy.size:
            ts = int(cols["ts"].max())
            self.newest = ts if self.newest is None else max(self.newest, ts)
            self.size_sum += int(cols["size"].sum())
        if self.sink is not None:
            self.sink(w)
        self.window_first, self.lo = self.rows_seen, w.hi

    def records_from(self, phy: int) -> tuple[int, int]:
        """Records (and their bytes) at or after ``phy``, an offset the walk stopped at or the data's end."""
        if phy >= self.data_end or not self.count:
            return 0, 0
        count, size = self.before[phy]
        return self.count - count, self.size_sum - size

    @property
    def count(self) -> int:
        return self.rows_seen

    @property
    def data_end(self) -> int:
        """End of the last readable record (the commit log max as far as data goes)."""
        if self.records_end is None:
            return self.runs[0].seg.base_offset if self.runs else 0
        return self.records_end


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
        self.scan.stop(phy)

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
            run = self._walk_file(seg, buf, items)
            self.scan.runs.append(run)
            if run.blank:  # recovery may stop at the BLANK of the last file it loads
                self.scan.mark(seg.base_offset + run.end_pos)
        self._flush_keys()
        self.scan.flush(last=True)
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
        if self.scan.rows_seen - self.scan.window_first >= _WINDOW:
            self._flush_keys()
            self.scan.flush(last=False)

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


# ------------------------------------------------------------------------------------ index


@dataclass
class _IndexInfo:
    path: Path
    header: IndexHeader | None


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
    stop = scan.first_stop if scan.first_stop is not None and scan.first_stop >= start_phy else scan.data_end
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
    dropped, dropped_bytes = scan.records_from(stop)
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
        dropped_bytes=dropped_bytes,
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
    keep = limit + 1 if limit else 0
    queues: QueueCheck | None = None
    index: IndexCheck | None = None
    if quick:
        infos = _recover_queues(st, out, counts)
        headers = _index_headers(st, counts)
    else:
        queues, index = QueueCheck(st, keep, counts), IndexCheck(st, keep, _INDEX_CHUNK)
        infos = queues.infos
    first = _quick_start(st, segs, infos, _read_checkpoint_quietly(st))
    if quick and progress is not None:
        progress(sum(s.size for s in segs[:first]))
    ends = [q.last_end for q in infos if q.last_end >= 0]
    horizon = max(ends) if ends else (segs[0].base_offset if segs else 0)
    log_dir = segs[-1].path.parent if segs else cfg.commitlog_dir
    records = RecordCheck(st, infos, horizon, log_dir, keep, quick=quick)
    walker = _Walker(st, out, progress, light=quick)
    scan = walker.scan
    if segs:
        scan.floor = segs[first].base_offset
    scan.sink = _sink(scan, queues, index, records, segs[0].base_offset if segs else 0)
    try:
        walker.walk(segs[first:] if quick else segs)
        _classify_tails(scan, out)
        counts["records"] = scan.count
        counts["blanks"] = scan.blanks
        cp = _check_checkpoint(st, out, scan.newest)
        if queues is not None and index is not None:
            queues.report(out)
            headers = [_IndexInfo(p, h) for p, h in index.report(out, counts)]
        check_rows(st, scan.data_end, segs[0].base_offset if segs else 0, out.add)
        fc = _forecast(st, segs, scan, infos, headers, cp)
        _report_forecast(fc, st, out, segs, infos)
        records.report_names(out, segs, scan.names, scan.data_end)
        if not quick:
            records.report_coverage(out, log_dir, scan.names, fc)
        elif scan.count:
            records.report_quick(out, log_dir, fc)
    finally:
        records.close()
    counts["minPhyOffset"] = segs[0].base_offset if segs else 0
    counts["maxPhyOffset"] = scan.data_end
    problems = out.finish()
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    problems = tuple(sorted(problems, key=lambda p: order.get(p.severity, 3)))
    return CheckReport(
        st.root, quick, cfg.broker, dict(counts), fc, problems, dict(out.found), not st.abort_exists(), st.lock_holder()
    )


def _sink(
    scan: _LogScan, queues: QueueCheck | None, index: IndexCheck | None, records: RecordCheck, log_min: int
) -> Callable[[Window], None]:
    """What each window of records is checked against: consume queue units, index entries, its own records."""

    def take(w: Window) -> None:
        if queues is not None:
            queues.match(w, scan.names, log_min, scan.data_end)
        if index is not None:
            index.match(w, scan.names, log_min, scan.data_end)
        records.take(w, scan.names)

    return take


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
