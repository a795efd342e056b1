"""The entries of a DLedger commit log, header by header, and how they agree with the member's index.

The record walk (``walk.chain``) reads the records inside the entries through the DLedger framing;
this walk is for what only the entries say: their index, term and position, the blanks that close
the files, and the index unit each entry must have.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rmqstore.codec.dledger import (
    BLANK_MAGIC,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    EntryHeader,
    IndexUnit,
    decode_header,
    header_problem,
)
from rmqstore.errors import from_os_error
from rmqstore.problems import ERROR, WARNING, Problem
from rmqstore.store.dledger import DLedgerIndex, Member
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment

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
        if seg.framing.name == "dledger" and seg.size > 0:
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
    data = [s for s in segs if s.framing.name == "dledger"]
    plain = [s for s in segs if s.framing.name != "dledger"]
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
