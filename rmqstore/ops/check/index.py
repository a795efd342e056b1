"""Index files against the records, a window of the commit log at a time (store-format.md §5).

Before the walk each index file's header is read and its entries become
:class:`~rmqstore.ops.check.window.Cursors` blocks; during the walk each window matches the entries
that point into it (offsets, keys, rollbacks, time differences) and marks the keys of its records
that some entry holds, so the keys no index file holds are known window by window; after the walk
each file's slot chains are checked a chunk at a time and its findings are given to the report,
file after file, as a check that held every entry at once gives them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec.fields import INT_MAX
from rmqstore.codec.indexfile import ENTRY_DTYPE as INDEX_ENTRY_DTYPE
from rmqstore.codec.indexfile import ENTRY_SIZE as INDEX_ENTRY_SIZE
from rmqstore.codec.indexfile import HEADER_SIZE, IndexFile, IndexHeader, decode_header
from rmqstore.errors import CorruptData
from rmqstore.ops.check.found import Deferred, Firsts, Problems, emit_firsts
from rmqstore.ops.check.window import OFFSET_MAX, Block, Cursors, Window
from rmqstore.problems import ERROR, WARNING
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.walk.chain import indexed
from rmqstore.walk.checked import TopicIds

INDEX_CHUNK = 1 << 18  # index entries (and slots) checked at a time
_RECORD_GROUPS = (("past end", ERROR), ("not a record", ERROR), ("wrong key", ERROR), ("rollback", WARNING),
                  ("time diff", ERROR))  # fmt: skip


def _index_count(ix: IndexFile, h: IndexHeader, out: Problems) -> int:
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


class _Findings:
    """Problems of one file gathered over its chunks of entries: per kind the first ones (as many as
    are listed) and a count, given to ``out`` kind after kind as if every entry were read at once."""

    def __init__(self, out: Problems, path: str) -> None:
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
        e = np.frombuffer(os.pread(fd, (end - first) * INDEX_ENTRY_SIZE, at), dtype=INDEX_ENTRY_DTYPE)
        num = np.arange(first, first + len(e), dtype=np.int64)
        cols = tuple(e[name].astype(np.int64) for name in ("key_hash", "phy_offset", "time_diff", "prev"))
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
    chunk: int  # entries read at a time

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


def _slot_heads(w: _IndexWalk, fd: int, out: Problems) -> None:
    """Slot heads (§5.2), a chunk of slots at a time, and, once every link is counted, entries in no
    chain or in two."""
    ix, count, path = w.ix, w.count, w.ix.path
    keep = out.limit + 1 if out.limit else 0
    past, other = Firsts(keep), Firsts(keep)  # heads past indexCount; heads of another slot's entry
    for lo in range(0, ix.slots, w.chunk):
        n = min(w.chunk, ix.slots - lo)
        heads = np.frombuffer(os.pread(fd, n * 4, HEADER_SIZE + lo * 4), dtype=">i4").astype(np.int64)
        bad_head = (heads < 0) | (heads >= count)
        for s in past.want(lo + np.flatnonzero(bad_head)).tolist():
            past.put(
                s,
                (path, HEADER_SIZE + s * 4, f"slot {s} points to entry {heads[s - lo]}, past indexCount {count}", None),
            )
        live = np.flatnonzero((heads > 0) & ~bad_head)
        wrong = live[w.slot[heads[live]] != lo + live]
        for s in other.want(lo + wrong).tolist():
            what = f"slot {s} starts with entry {heads[s - lo]} whose keyHash belongs to another slot"
            other.put(s, (path, HEADER_SIZE + s * 4, what, None))
        w.link(heads[live])
    for f in (past, other):
        f.settle()
        emit_firsts(out, f, path, "bad slot")

    def at(i: int) -> int:
        return HEADER_SIZE + ix.slots * 4 + (i + 1) * INDEX_ENTRY_SIZE

    def phy(i: int) -> int:
        return int(np.frombuffer(os.pread(fd, 8, at(i) + 4), dtype=">i8")[0])

    what_refs = _Findings(out, path)
    for lo in range(1, count, w.chunk):
        refs = w.refs[lo : min(lo + w.chunk, count)]
        what_refs.add("unreachable", lo - 1 + np.flatnonzero(refs == 0),
                      lambda i: f"entry {i + 1} is in no slot chain: queries never find it", at, phy, WARNING)  # fmt: skip
        what_refs.add("merged chains", lo - 1 + np.flatnonzero(refs > 1),
                      lambda i: f"entry {i + 1} is linked {_links(w, fd, i + 1)} times: slot chains merge", at, phy)  # fmt: skip
    what_refs.flush()


def _links(w: _IndexWalk, fd: int, n: int) -> int:
    """How many links an entry has (only for the few entries listed as linked more than once)."""
    heads = np.frombuffer(os.pread(fd, w.ix.slots * 4, HEADER_SIZE), dtype=">i4")
    links = int((heads == n).sum())
    for first in range(1, w.count, w.chunk):
        c = _IndexChunk.read(fd, w.ix, first, min(first + w.chunk, w.count))
        links += int((c.prev == n).sum())
    return links


def _time_diff(ts: np.ndarray, begin_ms: int) -> np.ndarray:
    """putKey's timeDiff (§5.2): seconds since the header begin, truncated, clamped to int."""
    if begin_ms <= 0:
        return np.zeros(len(ts), dtype=np.int64)
    d = ts - begin_ms
    d = np.where(d >= 0, d // 1000, -((-d) // 1000))
    return np.clip(d, 0, INT_MAX)


@dataclass(slots=True)
class _File:
    """What check keeps of one index file from before the walk to the report."""

    path: Path
    header: IndexHeader | None
    slots: int = 0
    count: int = 0  # indexCount, clamped to the file
    prev_end_ts: int | None = None  # end time of the file before it (None: unknown)
    found: dict[str, Firsts] = field(default_factory=dict)
    first_hit: tuple[int, int] | None = None  # (phy, store time) of entry 1's record
    last_hit: tuple[int, int, int] | None = None  # (number, phy, store time) of the last entry's record
    any_hit: bool = False
    parsed: bool = True
    chains: Deferred | None = None  # slot chain findings, read before the walk


class IndexCheck:
    """Every index file of a store: read before the walk, matched per window, reported after."""

    def __init__(self, st: Store, keep: int, chunk: int) -> None:
        self.cfg = st.config
        self.keep, self.chunk = keep, chunk
        self.files: list[_File] = []
        self.name_problems: list[Any] = []
        self.cursors = Cursors()
        self.cover: tuple[int, int] | None = None  # offsets the index files cover (header begin..end)
        self.missing = Firsts(keep)  # records with keys no index file holds, by record number
        self._found = np.zeros(0, dtype=bool)
        files, self.name_problems = st.index_files()
        prev_end_ts: int | None = None
        for path in files:
            f = self._prepare(path, prev_end_ts)
            self.files.append(f)
            prev_end_ts = f.header.end_timestamp_ms if f.parsed and f.header is not None else None
        self.cursors.freeze()

    def _prepare(self, path: Path, prev_end_ts: int | None) -> _File:
        cfg = self.cfg
        with map_file(path) as buf:
            try:
                ix = IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path),
                               broker=cfg.broker)  # fmt: skip
            except CorruptData:
                return _File(path, None, parsed=False)
            h = ix.header()
            count = _index_count(ix, h, Problems(0))
            f = _File(path, h, cfg.max_hash_slot_num, count, prev_end_ts)
            if count - 1 <= 0:
                return f
            self._chains(ix, f, len(self.files))
            del ix
        lo, hi = h.begin_phy_offset, h.end_phy_offset
        self.cover = (lo, hi) if self.cover is None else (min(self.cover[0], lo), max(self.cover[1], hi))
        return f

    # -- during the walk ----------------------------------------------------------------
    def _read(self, block: Block, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = self.files[block.owner]
        fd = os.open(f.path, os.O_RDONLY)
        try:
            at = HEADER_SIZE + f.slots * 4 + a * INDEX_ENTRY_SIZE
            e = np.frombuffer(os.pread(fd, (b - a) * INDEX_ENTRY_SIZE, at), dtype=INDEX_ENTRY_DTYPE)
        finally:
            os.close(fd)
        return np.arange(a, a + len(e), dtype=np.int64), e["phy_offset"].astype(np.int64), e

    def match(self, w: Window, names: TopicIds, log_min: int, data_end: int) -> None:
        """The entries that point into window ``w`` against its records; then the window's keys
        that no entry holds."""
        self._found = np.zeros(w.keys.size, dtype=bool)
        end = data_end if w.last else OFFSET_MAX
        for block, num, phy, rows in self.cursors.pieces(w.lo, w.hi, self._read):
            self._piece(self.files[block.owner], w, names, num, phy, rows, (log_min, end))
        if self.cfg.message_index_enable and self.cover is not None and w.keys.size:
            self._not_indexed(w, names)

    def _piece(
        self, f: _File, w: Window, names: TopicIds, num: np.ndarray, phy: np.ndarray, rows: np.ndarray,
        bounds: tuple[int, int],
    ) -> None:  # fmt: skip
        """Entries of one file against the records they point to: offsets, keys, rollbacks, time differences."""
        log_min, end = bounds
        assert f.header is not None
        key_hash, tdiff = rows["key_hash"].astype(np.int64), rows["time_diff"].astype(np.int64)
        rec, hit = w.lookup(phy)
        entries_pos = HEADER_SIZE + f.slots * 4
        add = self._adder(f, num, phy, entries_pos)
        past = ~hit & (phy >= end)
        add("past end", ~hit & (phy >= end),
            lambda i: f"entry {num[i]} points to commit log offset {phy[i]}, past the end of data ({end})")  # fmt: skip
        add("not a record", ~hit & (phy >= log_min) & ~past,
            lambda i: f"entry {num[i]} points to commit log offset {phy[i]}, where no record starts")  # fmt: skip
        has_key = np.zeros(len(num), dtype=bool)
        if w.keys.size:
            pair = ((w.first + rec) << 32) | key_hash
            k = np.minimum(np.searchsorted(w.keys, pair), w.keys.size - 1)
            has_key = w.keys[k] == pair
            self._found[k[hit & has_key]] = True
        topic = w.cols["topic"]
        add("wrong key", hit & ~has_key, lambda i: (
            f"entry {num[i]} (keyHash {key_hash[i]}) points to the record at commit log offset {phy[i]} "
            f"({names.names[topic[rec[i]]]}), which has no key with that hash"))  # fmt: skip
        if not hit.any():
            return
        f.any_hit = True
        add("rollback", hit & ~indexed(w.cols["tx"][rec]),
            lambda i: f"entry {num[i]} indexes a rollback record, which the broker never indexes")  # fmt: skip
        ts = w.cols["ts"][rec]
        expect = _time_diff(ts, f.header.begin_timestamp_ms)
        ok_t = expect == tdiff
        one = np.flatnonzero(num == 1)
        if one.size:
            j = int(one[0])
            ok_t[j] |= tdiff[j] == 0  # the first entry of the very first file: header begin was 0
            if f.prev_end_ts is not None:
                ok_t[j] |= _time_diff(ts[j : j + 1], f.prev_end_ts)[0] == tdiff[j]
            else:
                ok_t[j] |= tdiff[j] >= 0  # the file before it is gone: its end time is unknown
            f.first_hit = (int(phy[j]), int(ts[j])) if hit[j] else None
        add("time diff", hit & ~ok_t,
            lambda i: f"entry {num[i]} has timeDiff {tdiff[i]} s, the record's store time gives {expect[i]} s")  # fmt: skip
        last = np.flatnonzero(num == f.count - 1)
        if last.size:
            j = int(last[0])
            f.last_hit = (int(num[j]), int(phy[j]), int(ts[j])) if hit[j] else None

    def _adder(self, f: _File, num: np.ndarray, phy: np.ndarray, entries_pos: int) -> Callable[..., None]:
        def add(group: str, mask: np.ndarray, what: Callable[[int], str]) -> None:
            idx = np.flatnonzero(mask)
            if not idx.size:
                return
            fs = f.found.get(group)
            if fs is None:
                fs = f.found[group] = Firsts(self.keep)
            for n in fs.want(num[idx]).tolist():
                i = int(np.searchsorted(num, n))
                fs.put(n, (str(f.path), entries_pos + n * INDEX_ENTRY_SIZE, what(i), int(phy[i])))
            fs.settle()

        return add

    def _not_indexed(self, w: Window, names: TopicIds) -> None:
        """Keys of the window's records inside the indexed range that no index file holds (§5.3)."""
        assert self.cover is not None
        lo, hi = self.cover
        recs = (w.keys >> 32) - w.first
        in_range = (w.phy[recs] >= lo) & (w.phy[recs] <= hi)
        owners = recs[in_range & ~self._found]  # sorted, since the pairs are
        if not owners.size:
            return
        firsts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
        per_rec = np.diff(np.append(firsts, owners.size))
        rows = owners[firsts]
        for n in self.missing.want(w.first + rows).tolist():
            k = int(np.searchsorted(rows, n - w.first))
            r = int(rows[k])
            phy = int(w.phy[r])
            what = (f"{per_rec[k]} key(s) of the record at commit log offset {phy} "
                    f"({names.names[w.cols['topic'][r]]}) are in no index file")  # fmt: skip
            self.missing.put(n, (self.cfg.index_dir, None, what, phy))
        self.missing.settle()

    # -- after the walk -----------------------------------------------------------------
    def report(self, out: Problems, counts: Any) -> list[tuple[Path, IndexHeader | None]]:
        """Every file's findings, file after file, then the keys no file holds; returns each
        file's header (None where it cannot be read)."""
        out.extend(self.name_problems)
        headers: list[tuple[Path, IndexHeader | None]] = []
        for f in self.files:
            counts["indexFiles"] += 1
            headers.append((f.path, self._report_file(f, out, counts)))
        emit_firsts(out, self.missing, self.cfg.index_dir, "key not indexed", WARNING)
        return headers

    def _report_file(self, f: _File, out: Problems, counts: Any) -> IndexHeader | None:
        cfg, path = self.cfg, f.path
        with map_file(path) as buf:
            try:
                ix = IndexFile(buf, slots=cfg.max_hash_slot_num, entries=cfg.max_index_num, path=str(path),
                               broker=cfg.broker)  # fmt: skip
            except CorruptData as e:
                slots = cfg.max_hash_slot_num
                out.add(path, min(len(buf), HEADER_SIZE + slots * 4 + cfg.max_index_num * INDEX_ENTRY_SIZE), e.what)
                return decode_header(buf, path=str(path)) if len(buf) >= HEADER_SIZE else None
            h = ix.header()
            count = _index_count(ix, h, out)
            del ix
        if count - 1 <= 0:
            return h
        if f.chains is not None:
            f.chains.replay(out)
        for group, severity in _RECORD_GROUPS:
            emit_firsts(out, f.found.get(group), str(path), group, severity)
        counts["indexEntries"] += count - 1
        if f.any_hit:
            if f.first_hit is not None and (h.begin_phy_offset, h.begin_timestamp_ms) != f.first_hit:
                out.add(path, 0, "header begin offset/timestamp differ from entry 1's record", WARNING)
            if f.last_hit is not None and (h.end_phy_offset, h.end_timestamp_ms) != f.last_hit[1:]:
                out.add(path, 8, f"header end offset/timestamp differ from entry {f.last_hit[0]}'s record", WARNING)
        return h

    def _chains(self, ix: IndexFile, f: _File, owner: int) -> None:
        """Slot chains a chunk at a time, then the slot heads (their findings kept for the report);
        the entries to match with the records become cursor blocks."""
        count = f.count
        f.chains = Deferred(self.keep - 1 if self.keep else 0)
        w = _IndexWalk(ix, count, np.full(count, -1, dtype=np.int32), np.zeros(count, dtype=np.uint8),
                       _Findings(f.chains, ix.path), self.chunk)  # fmt: skip
        fd = os.open(ix.path, os.O_RDONLY)
        try:
            for first in range(1, count, self.chunk):
                c = _IndexChunk.read(fd, ix, first, min(first + self.chunk, count))
                _chunk_chains(w, c)
                self.cursors.add(Block(owner, 0, first, first + len(c.num), True), c.phy)
            w.chains.flush()
            _slot_heads(w, fd, f.chains)
        finally:
            os.close(fd)
