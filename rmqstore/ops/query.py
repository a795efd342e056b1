"""Finding messages in a store without a broker (store-format.md §5.3, §5.4, §5.5, §3.10, §4).

Key and unique-key queries walk the index files exactly as the broker's ``queryMessage`` does:
files newest first, ``isTimeMatched``, ``selectPhyOffset`` (slot, chain walk, time match), the
stop rules, and ``maxNum = min(maxNum, maxMsgsNumBatch)``. That raw answer compares 31-bit key
hashes only, so it can name messages of another key or topic (hash collisions), and a message
indexed twice after a recovery is named twice. The client filters the answer after reading each
message; we do the same, so a result never shows a wrong message:

* key query: the record's topic equals the topic and its KEYS, split on single spaces, contain
  the key (the 4.4.0 client checks the keys only; later clients also check the topic, which the
  index key ``topic#key`` implies anyway);
* unique-key query: topic equal and UNIQ_KEY equal to the key; the client then keeps only the
  earliest-stored match (``all_copies`` keeps every one).

Hits are de-duplicated by commit log offset and sorted ascending, as the broker sorts them.
Both the raw answer (``raw_phy_offsets``, in the order the index walk found them) and the
verified records are returned, with the reason each raw entry was dropped.

What the broker would see after it starts, not what is on disk, decides the answer:

* after an abnormal exit (``abort`` present) the broker drops every index file whose
  endTimestamp is past the checkpoint's indexMsgTimestamp (§5.5) and re-indexes those records
  while recovering; we ignore those files too;
* records after the newest (kept) index file's endPhyOffset are not indexed yet (dispatch was
  behind, or the file was dropped). The broker indexes them as soon as it starts, so we scan
  them from the commit log ("tail scan"): they are the newest and come first in the max budget.

With ``scan=True``, or when the index cannot be used (no index files, ``messageIndexEnable=false``,
a file of the wrong size, a damaged header or chain), the whole commit log is scanned with the
same filter, the same time window (on the exact store timestamp, while the index keeps whole
seconds since the file's begin time) and the same budget (the newest ``max_num`` matches).

Queue lookups (an offset's entry and record, the offset for a time) are the consume queue's own
reading, in :mod:`rmqstore.store.lookup`.

Nothing here writes: a store a broker is running on can be queried (its files are read as they
are at that moment).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.codec.commitlog import (
    TRANSACTION_ROLLBACK_TYPE,
    Record,
)
from rmqstore.codec.indexfile import HEADER_SIZE, IndexFile, IndexHeader, decode_header, is_time_matched
from rmqstore.codec.msgid import decode_offset_msg_id
from rmqstore.errors import CorruptData, InputError
from rmqstore.safety.openfile import json_loads, open_fd, read_file
from rmqstore.store import Store
from rmqstore.store.reader import CommitLogReader, MapsOpen, ScanProgress, ScanStats, map_readonly, scan_records

JAVA_LONG_MAX = (1 << 63) - 1
KEY_QUERY_MAX_NUM = 64  # mqadmin queryMsgByKey asks for 64


@dataclass(frozen=True, slots=True)
class Rejected:
    """A raw index answer the client-side filter drops, and why."""

    phy_offset: int
    why: str


@dataclass(frozen=True, slots=True)
class KeyQueryResult:
    """The answer to one key or unique-key query."""

    topic: str
    key: str
    unique: bool
    max_num: int  # after the maxMsgsNumBatch cap
    begin_ms: int
    end_ms: int
    method: str  # "index", "index+tail" (index plus a scan of records not indexed yet) or "scan"
    raw_phy_offsets: tuple[int, ...]  # what the broker's lookup returns, in the order found (newest first)
    hits: tuple[Record, ...]  # verified, de-duplicated, ascending commit log offset
    rejected: tuple[Rejected, ...] = ()
    index_last_update_timestamp_ms: int = 0  # endTimestamp of the newest index file used
    index_last_update_phy_offset: int = 0  # its endPhyOffset
    tail_from_phy: int | None = None  # records after this offset were scanned, not looked up
    notices: tuple[str, ...] = ()

    @property
    def limited(self) -> bool:
        """The raw answer is full: older matches may exist outside it."""
        return len(self.raw_phy_offsets) >= self.max_num


@dataclass(frozen=True, slots=True)
class MsgIdResult:
    """The answer to ``query id``: an offset msgId read directly, else a unique-key lookup."""

    msg_id: str
    kind: str  # "offset" (decoded and read at its commit log offset) or "unique" (looked up as UNIQ_KEY)
    hits: tuple[Record, ...]
    lookups: tuple[KeyQueryResult, ...] = ()  # one per topic searched, for kind "unique"
    notices: tuple[str, ...] = ()


class IndexUnusable(Exception):
    """The index cannot answer; the reason is the message. Callers fall back to a scan."""


# -- the index, as the broker loads and walks it ----------------------------------------------------


class IndexSet(MapsOpen):
    """The store's index files in name order, read lazily.

    A file is mapped only when a query's time window matches its header; for any other file only
    its 40-byte header is read (once). Nothing large is cached: an ``mmap`` costs address space,
    not memory, and pages are read on demand by the chain walk.
    """

    def __init__(self, st: Store) -> None:
        cfg = st.config
        if not cfg.message_index_enable:
            raise IndexUnusable("messageIndexEnable=false: the broker builds no index")
        # As Store.index_files() lists them (non-numeric names skipped, as the broker skips them),
        # without building a Path per file: a lookup touches only a few of possibly many files.
        try:
            names = sorted(n for n in os.listdir(cfg.index_dir) if n.isdigit())
        except FileNotFoundError:
            names = []
        except OSError as e:
            raise IndexUnusable(f"{cfg.index_dir}: cannot list: {e.strerror}") from None
        if not names:
            raise IndexUnusable(f"no index files in {cfg.index_dir}")
        self.dir = cfg.index_dir
        self.names = names
        self.slots = cfg.max_hash_slot_num
        self.entries = cfg.max_index_num
        self.file_size = cfg.index_file_size()
        self.broker = cfg.broker
        self._headers: dict[int, IndexHeader] = {}
        self._mapped: dict[int, mmap.mmap | bytes] = {}
        self._files: dict[int, IndexFile] = {}  # of the files in ``_mapped``
        # §5.5: after an abnormal exit, files ending past indexMsgTimestamp are destroyed at load.
        # (A running broker also keeps ``abort``; its files are live, nothing is dropped.)
        self.drop_after_ms: int | None = None
        if st.abort_exists() and st.lock_holder() is None:
            try:
                cp = st.read_checkpoint()
            except CorruptData:
                cp = None
            self.drop_after_ms = cp.index_msg_timestamp_ms if cp else 0
        self.newest = self._newest_kept()

    def header(self, i: int) -> IndexHeader:
        h = self._headers.get(i)
        if h is None:
            h = self._read_header(self.dir / self.names[i])
            self._headers[i] = h
        return h

    def _read_header(self, path: Path) -> IndexHeader:
        try:
            fd = open_fd(path)
        except OSError as e:
            raise IndexUnusable(f"{path}: cannot open: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size != self.file_size:
                raise IndexUnusable(
                    f"{path}: {size} bytes, expected {self.file_size} for maxHashSlotNum={self.slots} "
                    f"maxIndexNum={self.entries}"
                )
            h = decode_header(os.pread(fd, HEADER_SIZE, 0), path=str(path))
        finally:
            os.close(fd)
        if not 0 <= h.index_count <= self.entries:
            raise IndexUnusable(f"{path}: header indexCount {h.index_count} outside 0..{self.entries}")
        return h

    def kept(self, h: IndexHeader) -> bool:
        return self.drop_after_ms is None or h.end_timestamp_ms <= self.drop_after_ms

    @property
    def dropped(self) -> int:
        """Files a starting broker would destroy (only the newest ones can be)."""
        return len(self.names) - 1 - self.newest if self.newest is not None else len(self.names)

    def _newest_kept(self) -> int | None:
        for i in reversed(range(len(self.names))):
            if self.kept(self.header(i)):
                return i
        return None

    def _file(self, i: int) -> IndexFile:
        if i not in self._mapped:
            path = self.dir / self.names[i]
            m: mmap.mmap | bytes = b""
            try:
                m = map_readonly(path)
                if isinstance(m, mmap.mmap) and hasattr(mmap, "MADV_RANDOM"):
                    # Chain walks hop across 400 MB: read-ahead would turn each ~0.1 ms page fault
                    # into several milliseconds of reading pages never used.
                    m.madvise(mmap.MADV_RANDOM)
                got = IndexFile(m, slots=self.slots, entries=self.entries, path=str(path), broker=self.broker)
            except CorruptData as e:
                if isinstance(m, mmap.mmap):
                    m.close()
                raise IndexUnusable(str(e)) from None
            self._mapped[i], self._files[i] = m, got
        return self._files[i]

    def lookup(self, index_key: str, *, max_num: int, begin_ms: int, end_ms: int, found: list[int]) -> None:
        """``IndexService.queryOffset`` (§5.4) for an already built ``topic#key``; appends to ``found``."""
        if self.newest is None:
            return
        for i in range(self._newest_starting_by(end_ms), -1, -1):
            h = self.header(i)
            if is_time_matched(h, begin_ms, end_ms):
                f = self._file(i)
                try:
                    f.select_phy_offsets(index_key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms, found=found)
                except CorruptData as e:
                    raise IndexUnusable(str(e)) from None
                except (struct.error, IndexError):
                    raise IndexUnusable(
                        f"{self.dir / self.names[i]}: a slot or chain points past the end of the file"
                    ) from None
            if h.begin_timestamp_ms < begin_ms or len(found) >= max_num:
                break

    def _newest_starting_by(self, end_ms: int) -> int:
        """The newest file whose beginTimestamp is at or before ``end_ms`` (-1: none).

        A file beginning after the window neither matches ``isTimeMatched`` nor triggers a stop
        rule, so the broker's walk passes over it. Files are in time order (each begins where the
        previous one ended), so a binary search finds where the walk has work to do, reading
        O(log n) headers: the cost of a lookup does not grow with the files newer than the window.
        """
        newest = self.newest if self.newest is not None else -1
        if newest < 0 or self.header(newest).begin_timestamp_ms <= end_ms:
            return newest
        lo, hi = 0, newest - 1
        if self.header(lo).begin_timestamp_ms > end_ms:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.header(mid).begin_timestamp_ms <= end_ms:
                lo = mid
            else:
                hi = mid - 1
        return lo


# -- key and unique-key queries ---------------------------------------------------------------------------


def index_key(topic: str, key: str) -> str:
    """The indexed string (§5.3): ``topic#key``."""
    return f"{topic}#{key}"


def matches(rec: Record, topic: str, key: str, *, unique: bool) -> bool:
    """The client's check of a message the index named (see the module docstring)."""
    if rec.topic != topic:
        return False
    if unique:
        return rec.uniq_key == key
    keys = rec.keys
    return bool(keys) and key in keys.split(" ")


def _indexed_match(rec: Record, topic: str, key: str, unique: bool, begin_ms: int, end_ms: int) -> bool:
    """A record the index would name for this query (ROLLBACK records are never indexed, §5.3)."""
    return (
        rec.transaction_type != TRANSACTION_ROLLBACK_TYPE
        and begin_ms <= rec.store_timestamp_ms <= end_ms
        and matches(rec, topic, key, unique=unique)
    )


def _check_query(topic: str, key: str, max_num: int) -> None:
    if not topic:
        raise InputError("topic must not be empty")
    if not key:
        raise InputError("key must not be empty")
    if max_num < 1:
        raise InputError(f"--max must be at least 1, got {max_num}")


class Searcher:
    """Key, unique-key and message id lookups on one store, sharing the mapped files.

    The index files are opened (lazily) once for all lookups; if they cannot be used, every
    lookup scans the commit log and carries a note saying why. Use as a context manager.
    """

    def __init__(self, st: Store) -> None:
        self.st = st
        self.reader = CommitLogReader.of(st)
        self._index: IndexSet | None = None
        self._unusable: str | None = None

    def index(self) -> IndexSet:
        """The index files, or IndexUnusable (remembered: the files do not change under us)."""
        if self._unusable is not None:
            raise IndexUnusable(self._unusable)
        if self._index is None:
            try:
                self._index = IndexSet(self.st)
            except IndexUnusable as e:
                self._unusable = str(e)
                raise
        return self._index

    def _index_failed(self, e: IndexUnusable) -> str:
        self._unusable = str(e)
        if self._index is not None:
            self._index.close()
            self._index = None
        return f"index not usable ({e}); scanning the whole commit log instead"

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        self.reader.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- keys ------------------------------------------------------------------------------------
    def key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = KEY_QUERY_MAX_NUM,
        begin_ms: int = 0,
        end_ms: int = JAVA_LONG_MAX,
        scan: bool = False,
        progress: ScanProgress | None = None,
    ) -> KeyQueryResult:
        """Messages of ``topic`` whose KEYS contain ``key``, as ``mqadmin queryMsgByKey`` shows them."""
        _check_query(topic, key, max_num)
        return self._query(topic, key, False, max_num, begin_ms, end_ms, scan, progress, all_copies=True)

    def uniq(
        self,
        topic: str,
        uniq_key: str,
        *,
        max_num: int | None = None,
        begin_ms: int = 0,
        end_ms: int = JAVA_LONG_MAX,
        scan: bool = False,
        all_copies: bool = False,
        progress: ScanProgress | None = None,
    ) -> KeyQueryResult:
        """The message of ``topic`` with this UNIQ_KEY (the client's msgId): the earliest stored one,
        or every copy with ``all_copies``. ``max_num`` defaults to the broker's defaultQueryMaxNum."""
        n = self.st.config.default_query_max_num if max_num is None else max_num
        _check_query(topic, uniq_key, n)
        return self._query(topic, uniq_key, True, n, begin_ms, end_ms, scan, progress, all_copies=all_copies)

    def _query(
        self, topic: str, key: str, unique: bool, max_num: int, begin_ms: int, end_ms: int, scan: bool,
        progress: ScanProgress | None, *, all_copies: bool,
    ) -> KeyQueryResult:  # fmt: skip
        max_num = min(max_num, self.st.config.max_msgs_num_batch)
        q = _Lookup(topic, key, unique, max_num, begin_ms, end_ms, progress, [], all_copies)
        if not scan:
            try:
                return _query_index(self.index(), self.reader, q)
            except IndexUnusable as e:
                q.notices.append(self._index_failed(e))
        found = _scan_matches(self.reader, q, None)
        hits, later = _finish(found, unique, all_copies)
        return q.result("scan", tuple(r.phy_offset for r in reversed(found)), hits, later)

    # -- message ids -------------------------------------------------------------------------------
    def msg_id(
        self,
        msg_id: str,
        *,
        topics: list[str] | None = None,
        scan: bool = False,
        all_copies: bool = False,
        progress: ScanProgress | None = None,
    ) -> MsgIdResult:
        """Find a message by id as ``mqadmin queryMsgById`` does.

        An offset msgId (§3.10) is decoded and the record at its commit log offset is read; it is
        the answer when that record's own msgId is the same. Anything else, or an offset msgId whose
        record is gone, is looked up as a unique key (UNIQ_KEY, the id clients show) in ``topics``,
        by default in every known topic (with a scan: in any topic).
        """
        mid = msg_id.strip().upper()
        try:
            raw = bytes.fromhex(mid)
        except ValueError:
            raw = b""
        if len(raw) not in (16, 28):
            raise InputError(f"message id {msg_id!r} is not 32 or 56 hex digits (an offset msgId or a unique key)")
        try:
            rec: Record | None = self.reader.read(decode_offset_msg_id(mid).phy_offset)
        except CorruptData:
            rec = None
        if rec is not None and rec.msg_id == mid:
            return MsgIdResult(mid, "offset", (rec,))
        notices: list[str] = []
        if topics is None and not scan:
            try:
                self.index()
            except IndexUnusable as e:
                notices.append(self._index_failed(e))
                scan = True
        if topics is None and scan:
            return self._msg_id_scan(mid, all_copies, progress, notices)
        lookups = [
            self.uniq(t, mid, scan=scan, all_copies=all_copies, progress=progress)
            for t in (topics if topics is not None else known_topics(self.st))
        ]
        hits = sorted((r for q in lookups for r in q.hits), key=lambda r: r.phy_offset)
        for q in lookups:
            notices.extend(n for n in q.notices if n not in notices)
        return MsgIdResult(mid, "unique", tuple(hits), tuple(lookups), tuple(notices))

    def _msg_id_scan(
        self, mid: str, all_copies: bool, progress: ScanProgress | None, notices: list[str]
    ) -> MsgIdResult:
        """One pass over the commit log for a UNIQ_KEY in any topic; per topic as ``uniq``."""
        max_num = min(self.st.config.default_query_max_num, self.st.config.max_msgs_num_batch)
        by_topic: dict[str, list[Record]] = {}
        for rec in scan_records(self.reader, mid.encode("ascii"), progress=progress, notices=notices):
            if rec.uniq_key == mid and rec.transaction_type != TRANSACTION_ROLLBACK_TYPE:
                by_topic.setdefault(rec.topic, []).append(rec)
        lookups = []
        for topic, found in sorted(by_topic.items()):
            found = found[-max_num:]
            hits, later = _finish(found, True, all_copies)
            raw = tuple(r.phy_offset for r in reversed(found))
            lookups.append(KeyQueryResult(topic, mid, True, max_num, 0, JAVA_LONG_MAX, "scan", raw, hits, later))
        hits_all = sorted((r for q in lookups for r in q.hits), key=lambda r: r.phy_offset)
        return MsgIdResult(mid, "unique", tuple(hits_all), tuple(lookups), tuple(notices))


def query_key(st: Store, topic: str, key: str, **kw: Any) -> KeyQueryResult:
    """One :meth:`Searcher.key` lookup."""
    with Searcher(st) as s:
        return s.key(topic, key, **kw)


def query_uniq(st: Store, topic: str, uniq_key: str, **kw: Any) -> KeyQueryResult:
    """One :meth:`Searcher.uniq` lookup."""
    with Searcher(st) as s:
        return s.uniq(topic, uniq_key, **kw)


def query_msg_id(st: Store, msg_id: str, **kw: Any) -> MsgIdResult:
    """One :meth:`Searcher.msg_id` lookup."""
    with Searcher(st) as s:
        return s.msg_id(msg_id, **kw)


@dataclass(frozen=True)
class _Lookup:
    """One key or unique-key query as the broker runs it, and the notices it collects."""

    topic: str
    key: str
    unique: bool
    max_num: int
    begin_ms: int
    end_ms: int
    progress: ScanProgress | None
    notices: list[str]
    all_copies: bool

    def wanted(self, rec: Record) -> bool:
        """A record the index would name for this query."""
        return _indexed_match(rec, self.topic, self.key, self.unique, self.begin_ms, self.end_ms)

    def result(
        self, method: str, raw: tuple[int, ...], hits: tuple[Record, ...], rejected: tuple[Rejected, ...], *index: Any
    ) -> KeyQueryResult:
        """The answer; ``index`` is what the index lookup adds (last update time and offset, tail start)."""
        return KeyQueryResult(
            self.topic, self.key, self.unique, self.max_num, self.begin_ms, self.end_ms, method, raw, hits, rejected,
            *index, notices=tuple(self.notices),
        )  # fmt: skip


def _scan_matches(
    reader: CommitLogReader, q: _Lookup, after_phy: int | None, stats: ScanStats | None = None
) -> list[Record]:
    """Records the index would name, stored after ``after_phy`` (None: all); the newest ``max_num``."""
    found: list[Record] = []
    start = 0 if after_phy is None else reader.frame_of(after_phy)
    for rec in scan_records(
        reader, q.key.encode("utf-8"), from_phy=start, progress=q.progress, notices=q.notices, stats=stats
    ):
        if (after_phy is None or rec.phy_offset > after_phy) and q.wanted(rec):
            found.append(rec)
    return found[-q.max_num :]


def _query_index(idx: IndexSet, reader: CommitLogReader, q: _Lookup) -> KeyQueryResult:
    topic, key, unique, max_num, notices = q.topic, q.key, q.unique, q.max_num, q.notices
    if idx.dropped:
        notices.append(
            f"abort file present: {idx.dropped} index file(s) newer than the checkpoint's indexMsgTimestamp are "
            "ignored, as a starting broker destroys them; their records are scanned from the commit log"
        )
    last = idx.header(idx.newest) if idx.newest is not None else None
    # Everything after the newest indexed record is not in the index yet (None: nothing is).
    after = last.end_phy_offset if last is not None and (last.index_count > 1 or last.end_phy_offset > 0) else None
    stats = ScanStats()
    tail, indexed_first = _tail_matches(reader, q, after, stats)
    if stats.records > indexed_first:
        where = "no index file covers any record" if after is None else f"the index ends at offset {after}"
        notices.append(
            f"{where}; {stats.records - indexed_first} newer record(s) were scanned from the commit log instead"
        )
    raw: list[int] = [r.phy_offset for r in reversed(tail)]
    if len(raw) < max_num:
        idx.lookup(index_key(topic, key), max_num=max_num, begin_ms=q.begin_ms, end_ms=q.end_ms, found=raw)
    scanned = {r.phy_offset: r for r in tail}
    records: list[Record] = []
    rejected: list[Rejected] = []
    seen: set[int] = set()
    for phy in sorted(raw):
        if phy in seen:
            rejected.append(Rejected(phy, "duplicate: indexed twice (re-dispatched after a recovery)"))
            continue
        seen.add(phy)
        rec = scanned.get(phy)
        if rec is None:
            try:
                rec = reader.read(phy)
            except CorruptData as e:
                rejected.append(Rejected(phy, f"unreadable: {e}"))
                continue
        if rec.phy_offset != phy:
            rejected.append(Rejected(phy, f"stale index entry: the record there says offset {rec.phy_offset}"))
        elif not matches(rec, topic, key, unique=unique):
            rejected.append(
                Rejected(phy, f"hash collision: topic {rec.topic!r}, KEYS {rec.keys!r}, UNIQ_KEY {rec.uniq_key!r}")
            )
        else:
            records.append(rec)
    hits, later = _finish(records, unique, q.all_copies)
    last_ms, last_phy = (last.end_timestamp_ms, last.end_phy_offset) if last else (0, 0)
    return q.result(
        "index+tail" if tail else "index", tuple(raw), hits, tuple(rejected) + later, last_ms, last_phy, after
    )


def _tail_matches(reader: CommitLogReader, q: _Lookup, after: int | None, stats: ScanStats) -> tuple[list[Record], int]:
    """Matches among the records the index does not cover yet (stored after ``after``), and
    1 if the scan starts at the newest indexed record itself (0 otherwise)."""
    if not reader.segments:
        return [], 0
    indexed_first = 0
    if after is not None and after >= reader.min_phy_offset and reader.locate(after) is not None:
        # The newest indexed record must be a record, else index and commit log disagree.
        try:
            reader.read(after)
        except CorruptData as e:
            raise IndexUnusable(f"the newest index file's endPhyOffset {after} is not a record: {e.what}") from None
        indexed_first = 1
    elif after is not None:
        after = max(after, reader.min_phy_offset - 1)  # the indexed range is gone: scan what is left
    return _scan_matches(reader, q, after, stats), indexed_first


def _finish(records: list[Record], unique: bool, all_copies: bool) -> tuple[tuple[Record, ...], tuple[Rejected, ...]]:
    """Unique keys: the client keeps the earliest stored match (the first one on a tie)."""
    records = sorted(records, key=lambda r: r.phy_offset)
    if not unique or all_copies or len(records) <= 1:
        return tuple(records), ()
    first = min(records, key=lambda r: r.store_timestamp_ms)
    later = tuple(
        Rejected(r.phy_offset, "another copy of the unique key; the client keeps the earliest stored")
        for r in records
        if r is not first
    )
    return (first,), later


# -- message ids ---------------------------------------------------------------------------------------------


def known_topics(st: Store) -> list[str]:
    """Topics with a consume queue directory or an entry in config/topics.json."""
    names = {q.topic for q in st.consume_queues.queues()}
    try:
        topics = st.config.config_dir / "topics.json"
        data = json_loads(read_file(topics), path=topics)
        names.update(data.get("topicConfigTable", {}))
    except (OSError, ValueError, AttributeError):
        pass  # missing or unreadable: the consume queue directories still name the topics
    return sorted(names)
