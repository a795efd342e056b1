"""The entries of a DLedger commit log, header by header, and how they agree with the member's index.

The record walk (``walk.chain``) reads the records inside the entries through the DLedger framing;
this walk is for what only the entries say: their index, term and position, the blanks that close
the files, and the index unit each entry must have.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.codec.dledger import (
    BLANK_MAGIC,
    DLEDGER,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    EntryHeader,
    IndexUnit,
    decode_header,
    encode_member_file,
    header_problem,
)
from rmqstore.errors import CorruptData, from_os_error
from rmqstore.problems import ERROR, WARNING, Problem
from rmqstore.safety.openfile import read_file
from rmqstore.store.dledger import DLedgerIndex, Member
from rmqstore.store.files import data_end, map_file
from rmqstore.store.layout import Segment
from rmqstore.walk.starts import RecordStarts

ENTRY = "entry"
BLANK = "blank"
INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Entry:
    """One frame of a DLedger data file: an entry (with its header), a blank, or bytes that are neither."""

    seg: Segment
    pos: int  # in the file
    kind: str
    size: int  # bytes of the frame (a blank: the rest of the file; invalid: 0)
    header: EntryHeader | None = None
    problem: str | None = None

    @property
    def offset(self) -> int:
        return self.seg.base_offset + self.pos


def file_entries(seg: Segment) -> Iterator[Entry]:
    """The frames of one DLedger data file up to its blank, its zeros, or the first frame that is not
    an entry (reported as INVALID: nothing after it in the file can be placed)."""
    try:
        with map_file(seg.path) as buf:
            size, pos = len(buf), 0
            while pos + 8 <= size:
                head8 = bytes(buf[pos : pos + 8])
                magic, length = (
                    int.from_bytes(head8[:4], "big", signed=True),
                    int.from_bytes(head8[4:], "big", signed=True),
                )
                if magic == BLANK_MAGIC:
                    ok = length == size - pos
                    why = None if ok else f"blank size {length}, expected the {size - pos} bytes to the file end"
                    yield Entry(seg, pos, BLANK if ok else INVALID, size - pos if ok else 0, None, why)
                    return
                if magic == 0 and length == 0:
                    return
                if pos + HEADER_SIZE > size:
                    yield Entry(seg, pos, INVALID, 0, None, f"entry header cut by the file end ({size - pos} bytes)")
                    return
                head = decode_header(buf, pos)
                why = header_problem(head, seg.base_offset + pos, size - pos)
                if why is not None:
                    yield Entry(seg, pos, INVALID, 0, head, why)
                    return
                yield Entry(seg, pos, ENTRY, head.size, head)
                pos += head.size
    except OSError as e:
        raise from_os_error(e, seg.path, doing="read a DLedger data file") from None


def iter_entries(segs: Iterable[Segment]) -> Iterator[Entry]:
    """The frames of every DLedger data file in ``segs`` (the plain files of a migrated store are skipped)."""
    for seg in segs:
        if seg.framing is DLEDGER and seg.size > 0:
            yield from file_entries(seg)


def entry_findings(entries: Iterable[Entry], index: DLedgerIndex) -> Iterator[Problem]:
    """What is wrong between consecutive entries (index sequence, term order), and between each entry
    and its index unit (reported at the unit's place in its index file)."""
    last: EntryHeader | None = None
    for e in entries:
        if e.kind != ENTRY or e.header is None:
            last = None if e.kind == INVALID else last  # what follows damage cannot be placed in sequence
            continue
        head = e.header
        if last is not None and head.index != last.index + 1:
            yield Problem(e.seg.path, e.pos, f"entry index {head.index}, expected {last.index + 1}", ERROR, e.offset)
        if last is not None and head.term < last.term:
            yield Problem(e.seg.path, e.pos, f"entry term {head.term} is lower than the previous entry's {last.term}",
                          ERROR, e.offset)  # fmt: skip
        last = head
        at = head.index * INDEX_UNIT_SIZE
        seg = index.segment_of(head.index)
        unit = index.unit(head.index)
        if seg is None or unit is None:
            yield Problem(index.dir, None, f"no DLedger index unit for entry {head.index} (index offset {at})", ERROR)
        elif not unit.matches(head):
            yield Problem(seg.path, at - seg.base_offset, _unit_mismatch(unit, head), ERROR)


def _unit_mismatch(unit: IndexUnit, head: EntryHeader) -> str:
    said = {"magic": unit.magic, "position": unit.pos, "size": unit.size, "index": unit.index, "term": unit.term}
    want = {"magic": head.magic, "position": head.pos, "size": head.size, "index": head.index, "term": head.term}
    wrong = ", ".join(f"{k} {said[k]}, expected {want[k]}" for k in said if said[k] != want[k])
    return f"DLedger index unit of entry {head.index}: {wrong} (as its entry says)"


# -- the entries a recovery keeps, and what their index and member checkpoint must say ----------

_HEAD = np.dtype(
    [("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"),
     ("channel", ">i4"), ("chain_crc", ">i4"), ("body_crc", ">i4"), ("body_length", ">i4")]
)  # fmt: skip
_UNIT = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
_UNIT_FIELDS = ("magic", "pos", "size", "index", "term")


@dataclass(frozen=True)
class KeptEntries:
    """The headers of the entries before a recovered end, in log order (one numpy column per field)."""

    index: np.ndarray
    term: np.ndarray
    pos: np.ndarray
    size: np.ndarray
    magic: np.ndarray
    files: tuple[tuple[Segment, int], ...]  # each data file read, with the number of its entries

    def __len__(self) -> int:
        return len(self.index)

    @property
    def last_index(self) -> int:
        """The entry index of the last entry kept (DLedger's ledgerEndIndex), -1 when none."""
        return int(self.index[-1]) if len(self.index) else -1

    @property
    def begin_index(self) -> int:
        return int(self.index[0]) if len(self.index) else -1

    def place(self, i: int) -> tuple[Segment, int]:
        """(data file, byte position in it) of entry row ``i``."""
        row = i
        for seg, n in self.files:
            if row < n:
                return seg, int(self.pos[i]) - seg.base_offset
            row -= n
        raise IndexError(i)

    def units(self) -> np.ndarray:
        """The index unit each entry must have, in entry index order."""
        out = np.zeros(len(self.index), _UNIT)
        for name in _UNIT_FIELDS:
            out[name] = getattr(self, name)
        return out


def _entry_starts(buf: Any, seg: Segment, limit: int) -> np.ndarray:
    """Where the entries of one data file start, up to file position ``limit`` (an entry boundary the
    recovery walk reached): the chained sound entries, found with numpy a window at a time."""
    starts = RecordStarts(buf, len(buf), seg.base_offset, framing=seg.framing)
    runs: list[np.ndarray] = []
    pos = 0
    while pos < limit:
        run = starts.run_at(pos)
        if run is None:
            break
        records, pos = run
        runs.append(records[records - HEADER_SIZE < limit] - HEADER_SIZE)
    return np.concatenate(runs) if runs else np.zeros(0, np.int64)


def kept_entries(segs: Iterable[Segment], end: int) -> KeptEntries:
    """The header of every DLedger entry that lies wholly before commit log offset ``end`` (where
    recovery's record walk ended, on an entry boundary); CorruptData names the first entry whose
    index is not the one after the previous entry, or whose term goes down (DLedger's own recovery
    stops there and truncates every entry after it)."""
    cols: dict[str, list[np.ndarray]] = {f: [] for f in _UNIT_FIELDS}
    files: list[tuple[Segment, int]] = []
    for seg in segs:
        if seg.framing is not DLEDGER or seg.size == 0 or seg.base_offset >= end:
            continue
        try:
            with map_file(seg.path) as buf:
                starts = _entry_starts(buf, seg, end - seg.base_offset)
                view = np.ndarray((len(buf) - HEADER_SIZE + 1,), dtype=_HEAD, buffer=buf, strides=(1,))
                heads = view[starts]  # one 48-byte header per entry, copied
                del view
        except OSError as e:
            raise from_os_error(e, seg.path, doing="read a DLedger data file") from None
        for f in _UNIT_FIELDS:
            cols[f].append(heads[f].astype(np.int64))
        files.append((seg, len(heads)))
    arrays = {f: np.concatenate(v) if v else np.zeros(0, np.int64) for f, v in cols.items()}
    kept = KeptEntries(**arrays, files=tuple(files))
    _check_sequence(kept)
    return kept


def _check_sequence(k: KeptEntries) -> None:
    if len(k) < 2:
        return
    jumps = np.flatnonzero(np.diff(k.index) != 1)
    downs = np.flatnonzero(np.diff(k.term) < 0)
    if not jumps.size and not downs.size:
        return
    i = int(min(jumps[0] if jumps.size else len(k), downs[0] if downs.size else len(k))) + 1
    seg, at = k.place(i)
    if jumps.size and jumps[0] + 1 == i:
        what = f"entry index {k.index[i]}, expected {k.index[i - 1] + 1} (the one after the previous entry)"
    else:
        what = f"entry term {k.term[i]} is lower than the previous entry's {k.term[i - 1]}"
    raise CorruptData(
        f"{what}; DLedger's recovery would truncate the log here and every entry after it: "
        "recover does not cut intact entries, repair the entry first",
        path=seg.path,
        pos=at,
        phy_offset=int(k.pos[i]),
    )


@dataclass(frozen=True, slots=True)
class UnitSpan:
    """A byte range of one DLedger index file (``exists`` False: the file is to be created)."""

    path: Path
    start: int
    end: int
    exists: bool = True


def index_repair(index: DLedgerIndex, kept: KeptEntries) -> tuple[list[UnitSpan], list[UnitSpan], list[Path]]:
    """What the member's index must change to hold one unit per kept entry, as DLedger's recovery
    leaves it: (units to write, because they are missing or disagree with their entry; units past
    the last entry kept, to zero; index files wholly past it, to delete)."""
    size = index.file_size
    want = kept.units()
    first, cut = kept.begin_index, (kept.last_index + 1) * INDEX_UNIT_SIZE
    write: list[UnitSpan] = []
    known = {seg.base_offset: seg for seg in index.segments}
    if len(want):
        for base in range(first * INDEX_UNIT_SIZE // size * size, cut, size):
            seg = known.get(base)
            lo, hi = max(base, first * INDEX_UNIT_SIZE), min(base + size, cut)
            write += _unit_runs(index, seg, base, lo, hi, want[(lo // INDEX_UNIT_SIZE - first) :], size)
    zero: list[UnitSpan] = []
    drop: list[Path] = []
    for seg in index.segments:
        if seg.base_offset >= cut:
            drop.append(seg.path)
        elif seg.end_offset > cut:
            end = data_end(seg.path, cut - seg.base_offset)
            if end > cut - seg.base_offset:
                zero.append(UnitSpan(seg.path, cut - seg.base_offset, end))
    return write, zero, drop


def _unit_runs(
    index: DLedgerIndex, seg: Segment | None, base: int, lo: int, hi: int, want: np.ndarray, size: int
) -> list[UnitSpan]:
    """The runs of units in ``[lo, hi)`` (index offsets) of the file at ``base`` that differ from ``want``."""
    n = (hi - lo) // INDEX_UNIT_SIZE
    if seg is None:
        return [UnitSpan(index.dir / f"{base:020d}", lo - base, hi - base, exists=False)]
    have = np.zeros(n, _UNIT)
    room = max(0, min(hi, seg.end_offset) - lo) // INDEX_UNIT_SIZE
    if room:
        with map_file(seg.path) as buf:
            have[:room] = np.frombuffer(buf, _UNIT, count=room, offset=lo - base)
    bad = np.zeros(n, bool)
    for f in _UNIT_FIELDS:
        bad |= have[f] != want[f][:n]
    idx = np.flatnonzero(bad)
    if not idx.size:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    ends = np.concatenate([idx[breaks], [idx[-1]]]) + 1
    return [
        UnitSpan(seg.path, lo - base + int(a) * INDEX_UNIT_SIZE, lo - base + int(b) * INDEX_UNIT_SIZE)
        for a, b in zip(starts, ends, strict=True)
    ]


def unit_bytes(kept: KeptEntries, file_base: int, start: int, end: int) -> bytes:
    """The units of bytes ``[start, end)`` of the index file at ``file_base``, from the kept entries."""
    first = (file_base + start) // INDEX_UNIT_SIZE - kept.begin_index
    units = kept.units()[first : first + (end - start) // INDEX_UNIT_SIZE]
    return units.tobytes()


def member_checkpoint(member: Member, end_index: int) -> tuple[str | None, str | None]:
    """The member checkpoint as found, and what it must say so that the member serves every kept
    entry (None: it says so already): ``endIndex`` and ``committedIndex`` at the last entry kept."""
    path = member.checkpoint.path
    before = read_file(path).decode("latin-1") if member.checkpoint.values is not None else None
    values = dict(member.checkpoint.values or {"committedIndex": "", "endIndex": ""})
    values.update(committedIndex=str(end_index), endIndex=str(end_index))
    if member.committed_index == end_index and member.end_index == end_index:
        return before, None
    return before, encode_member_file(values).decode("latin-1")


@dataclass(frozen=True)
class LedgerState:
    """The DLedger member's ledger as its files give it, read cheaply: the first entry of the first
    data file, the entries of the last file that holds any, and the index units of those two."""

    begin: EntryHeader | None  # the ledger's first entry (ledgerBeginIndex)
    last: Entry | None  # the last entry of the chain of the last file with entries
    stop: Entry | None  # what ended that file's chain when it is not an entry, blank or zeros
    data_files: tuple[Segment, ...]
    divided_offset: int  # where the DLedger files start after a migrated store's plain part (0: none)
    index_write_pos: int
    member: Member

    @property
    def end_index(self) -> int:
        return -1 if self.last is None or self.last.header is None else self.last.header.index

    @property
    def write_pos(self) -> int:
        """Where the next entry goes (DLedger's ``dataWritePos``): the end of the last entry."""
        if self.last is None:
            return self.data_files[0].base_offset if self.data_files else self.divided_offset
        return self.last.offset + self.last.size


def _last_entries(segs: list[Segment]) -> tuple[Entry | None, Entry | None]:
    """The last entry of the last file holding any, and the invalid frame that ended its chain."""
    for seg in reversed(segs):
        last = stop = None
        for e in file_entries(seg):
            if e.kind == ENTRY:
                last = e
            elif e.kind == INVALID:
                stop = e
        if last is not None or stop is not None:
            return last, stop
    return None, None


def ledger_state(segs: list[Segment], index: DLedgerIndex, member: Member) -> LedgerState:
    """The ledger of the DLedger data files among ``segs`` (the store's commit log segments)."""
    data = [s for s in segs if s.framing is DLEDGER]
    plain = [s for s in segs if s.framing is not DLEDGER]
    first = next((e for e in file_entries(data[0]) if e.kind == ENTRY), None) if data else None
    last, stop = _last_entries([s for s in data if s.size > 0])
    end = -1 if last is None or last.header is None else last.header.index
    unit_after = index.unit(end + 1)
    if unit_after is None or (unit_after.magic == 0 and unit_after.size == 0):
        write_pos = (end + 1) * INDEX_UNIT_SIZE
    else:
        write_pos = index.write_pos()  # units past the last entry: where they really end
    return LedgerState(
        begin=None if first is None else first.header,
        last=last,
        stop=stop,
        data_files=tuple(data),
        divided_offset=data[0].base_offset if data and plain else 0,
        index_write_pos=write_pos,
        member=member,
    )


def ledger_problems(state: LedgerState, index: DLedgerIndex) -> list[Problem]:
    """Where the ledger's ends, the member checkpoint and the index disagree (read cheaply, as ``info`` does)."""
    out: list[Problem] = []
    if state.stop is not None:
        e = state.stop
        out.append(Problem(e.seg.path, e.pos, f"{e.problem}: the DLedger chain ends here", ERROR, e.offset))
    member, end = state.member, state.end_index
    if member.checkpoint.values is None:
        out.append(Problem(member.checkpoint.path, None, "the DLedger member checkpoint is missing", WARNING))
    elif member.end_index != end:
        out.append(
            Problem(member.checkpoint.path, None, f"endIndex {member.end_index}, the last entry is {end}", WARNING)
        )
    if member.committed_index is not None and member.committed_index > end:
        out.append(Problem(member.checkpoint.path, None,
                           f"committedIndex {member.committed_index} is past the last entry {end}", WARNING))  # fmt: skip
    for head in (state.begin, None if state.last is None else state.last.header):
        if head is None:
            continue
        unit = index.unit(head.index)
        if unit is None or not unit.matches(head):
            said = "none" if unit is None else f"position {unit.pos}, size {unit.size}, index {unit.index}"
            out.append(Problem(index.dir, None, f"the index unit of entry {head.index} does not match it ({said}): "
                               "the engine rewrites the index from there when it starts", WARNING, head.pos))  # fmt: skip
    if state.index_write_pos > (end + 1) * INDEX_UNIT_SIZE:
        out.append(Problem(index.dir, None, f"index units up to {state.index_write_pos} reach past the last entry "
                           f"{end} (the engine truncates them at start)", WARNING))  # fmt: skip
    return out
