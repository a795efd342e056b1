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
    decode_header,
    header_problem,
)
from rmqstore.errors import from_os_error
from rmqstore.store.dledger import DLedgerIndex
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


def entry_findings(entries: Iterable[Entry], index: DLedgerIndex) -> Iterator[tuple[Entry, str]]:
    """What is wrong between consecutive entries and between each entry and its index unit."""
    last: EntryHeader | None = None
    for e in entries:
        if e.kind != ENTRY or e.header is None:
            continue
        head = e.header
        if last is not None and head.index != last.index + 1:
            yield e, f"entry index {head.index}, expected {last.index + 1} (the one after the previous entry)"
        if last is not None and head.term < last.term:
            yield e, f"entry term {head.term} is lower than the previous entry's {last.term}"
        unit = index.unit(head.index)
        if unit is None:
            yield e, f"no DLedger index unit for entry {head.index} (index offset {head.index * INDEX_UNIT_SIZE})"
        elif not unit.matches(head):
            yield (
                e,
                (
                    f"DLedger index unit of entry {head.index} says position {unit.pos}, size {unit.size}, "
                    f"index {unit.index}, term {unit.term}, magic {unit.magic}"
                ),
            )
        last = head
