"""DLedger commit log files (DLedger mode, ``enableDLegerCommitLog=true``): entries, index units, member files.

A DLedger data file is a chain of entries. An entry is a 48-byte header (magic 1, entry size =
48 + the record's TOTALSIZE, entry index, term, the entry's position in the data files, channel,
chain CRC, body CRC, body length) followed by one ordinary commit log record, whose PHYSICALOFFSET
(and every consume queue unit, index entry and message id naming it) is the entry position + 48.
An entry that does not fit in the rest of a file, with 8 bytes to spare, goes to the next file: the
rest is a DLedger blank (magic -1, the remaining size, then zeros). The index files hold one
32-byte unit per entry (magic, position, size, entry index, term), at entry index x 32.

``DLedgerFraming`` is this chain as a framing of the commit log, so every walk of the commit log
reads a DLedger store the way it reads a plain one. The member's ``checkpoint`` and ``currterm``
files are Java properties files of ``key=value`` lines.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmqstore.codec.commitlog import MAGIC_V1, MAGIC_V2, explain_invalid
from rmqstore.codec.framing import BLANK, END, INVALID, RECORD, UNTIL, Framing
from rmqstore.errors import CorruptData

if TYPE_CHECKING:
    import numpy as np

ENTRY_MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1, the only magic an entry has had
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE: the rest of the file is not an entry
MIN_BLANK_LEN = 8  # an entry goes to the next file unless 8 bytes are left for the blank
HEADER_SIZE = 48  # DLedgerEntry.BODY_OFFSET: the record starts here
INDEX_UNIT_SIZE = 32
DEFAULT_INDEX_FILE_SIZE = 5 * 1024 * 1024 * INDEX_UNIT_SIZE  # DLedgerConfig: 160 MiB, not a broker setting

_HEADER = struct.Struct(">iiqqqiiii")
_UNIT = struct.Struct(">iqiqq")
# magic, size, index, term, pos (skip channel and both CRCs), body length, record TOTALSIZE, MAGICCODE
_CHAIN = struct.Struct(">iiqqq12xiii")
_SIZE = struct.Struct(">ii")
_FRAME = struct.Struct(">iiqqq")
# the same two layouts as numpy record types (big-endian), for headers and units made by the thousand
_HEADER_DTYPE = [
    ("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"),
    ("channel", ">i4"), ("chain_crc", ">i4"), ("body_crc", ">i4"), ("body_length", ">i4"),
]  # fmt: skip
_UNIT_DTYPE = [("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")]


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """The 48 bytes before a record in a DLedger data file."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0
    body_length: int = 0

    def encode(self) -> bytes:
        return _HEADER.pack(
            self.magic, self.size, self.index, self.term, self.pos,
            self.channel, self.chain_crc, self.body_crc, self.body_length,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class IndexUnit:
    """One 32-byte unit of a DLedger index file: where entry ``index`` is."""

    magic: int
    pos: int
    size: int
    index: int
    term: int

    def encode(self) -> bytes:
        return _UNIT.pack(self.magic, self.pos, self.size, self.index, self.term)

    def matches(self, head: EntryHeader) -> bool:
        return (self.magic, self.pos, self.size, self.index, self.term) == (
            head.magic, head.pos, head.size, head.index, head.term,
        )  # fmt: skip


def decode_header(buf: Any, pos: int, *, path: str | None = None) -> EntryHeader:
    """The entry header at ``pos`` (CorruptData when fewer than 48 bytes are left)."""
    if pos + HEADER_SIZE > len(buf):
        raise CorruptData(f"DLedger entry header needs {HEADER_SIZE} bytes, {len(buf) - pos} left", path=path, pos=pos)
    return EntryHeader(*_HEADER.unpack_from(buf, pos))


def decode_unit(buf: Any, pos: int) -> IndexUnit:
    return IndexUnit(*_UNIT.unpack_from(buf, pos))


def header_for(record_size: int, index: int, term: int, pos: int) -> EntryHeader:
    """The header DLedger writes before a record of ``record_size`` bytes (CRC fields 0, as the broker leaves them)."""
    return EntryHeader(ENTRY_MAGIC, record_size + HEADER_SIZE, index, term, pos, 0, 0, 0, record_size)


def entry_headers(record_sizes: np.ndarray, first_index: int, term: int, positions: np.ndarray) -> np.ndarray:
    """The headers (one row of 48 bytes each) of entries numbered from ``first_index`` holding records of
    ``record_sizes`` at data offsets ``positions``, as :func:`header_for` writes one."""
    import numpy as np  # as in the chain: loaded by the callers that lay entries out only

    n = len(record_sizes)
    heads = np.zeros(n, _HEADER_DTYPE)
    heads["magic"], heads["size"], heads["body_length"] = ENTRY_MAGIC, record_sizes + HEADER_SIZE, record_sizes
    heads["index"], heads["term"], heads["pos"] = np.arange(first_index, first_index + n), term, positions
    return heads.view(np.uint8).reshape(n, HEADER_SIZE)


def index_units(record_sizes: np.ndarray, first_index: int, term: int, positions: np.ndarray) -> np.ndarray:
    """The index units (rows of 32 bytes) of the entries :func:`entry_headers` describes."""
    import numpy as np

    n = len(record_sizes)
    units = np.zeros(n, _UNIT_DTYPE)
    units["magic"], units["pos"], units["size"] = ENTRY_MAGIC, positions, record_sizes + HEADER_SIZE
    units["index"], units["term"] = np.arange(first_index, first_index + n), term
    return units.view(np.uint8).reshape(n, INDEX_UNIT_SIZE)


def blank_bytes(remaining: int) -> bytes:
    """The DLedger blank that closes a file with ``remaining`` bytes left: magic -1, the size, zeros."""
    return _SIZE.pack(BLANK_MAGIC, remaining) + bytes(remaining - 8)


def header_problem(head: EntryHeader, at: int, room: int) -> str | None:
    """What is wrong with an entry header found at data offset ``at`` with ``room`` bytes to the file end."""
    if head.magic != ENTRY_MAGIC:
        return f"entry magic {head.magic}, expected {ENTRY_MAGIC} (or {BLANK_MAGIC} for a blank)"
    if not HEADER_SIZE < head.size <= room:
        return f"entry size {head.size}, expected more than {HEADER_SIZE} and at most the {room} bytes to the file end"
    if head.body_length + HEADER_SIZE != head.size:
        return f"body length {head.body_length} + {HEADER_SIZE} is not the entry size {head.size}"
    if head.pos != at:
        return f"entry position field {head.pos}, expected its offset {at}"
    return None


class DLedgerFraming(Framing):
    """Each record inside a DLedger entry; a DLedger blank fills the rest of a full file."""

    name = "dledger"
    head = HEADER_SIZE
    blank_mark = (_SIZE.pack(BLANK_MAGIC, 0)[:4], 0)
    appendable = False  # entries written to one member of a Raft group make it diverge from its peers
    blank_tells_version = False  # the DLedger library writes its blanks the same in every broker version

    frame_fields = ("entryIndex", "entryTerm", "entryOffset", "entrySize")

    def blank_head(self, remaining: int) -> bytes:
        return _SIZE.pack(BLANK_MAGIC, remaining)

    def frame_values(self, buf: Any, record_pos: int) -> tuple[int, ...]:
        _, size, index, term, pos = _FRAME.unpack_from(buf, record_pos - HEADER_SIZE)
        return index, term, pos, size

    def sound_frames(self, buf: Any, size: int, file_from: int, records: np.ndarray, ends: np.ndarray) -> np.ndarray:
        import numpy as np

        frames = records - HEADER_SIZE
        ok = frames >= 0
        at = np.where(ok, frames, 0)
        be64 = np.ndarray((size - 7,), dtype=">i8", buffer=buf, strides=(1,))
        try:  # two 8-byte reads per entry: magic and size, and the position field (the body length: check)
            ok &= be64[at] == (ENTRY_MAGIC << 32) + (ends - frames)
            ok &= be64[at + 24] == file_from + frames
        finally:
            del be64
        return ok

    def explain(self, buf: Any, pos: int, **where: Any) -> CorruptData:
        file_from = where.get("file_from", 0)
        end = where.get("end") or len(buf)
        if pos + HEADER_SIZE > end:
            why = f"DLedger entry header needs {HEADER_SIZE} bytes, {end - pos} left"
        else:
            why = header_problem(decode_header(buf, pos), file_from + pos, end - pos)
        if why is None:
            return explain_invalid(buf, pos + HEADER_SIZE, **where)
        return CorruptData(why, path=where.get("path", "<buffer>"), pos=pos, phy_offset=file_from + pos)

    def step(self, buf: Any, pos: int, end: int) -> tuple[str, int, int]:
        if pos + 8 > end:
            return END, pos, pos
        magic, size = _SIZE.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            return BLANK, pos, pos + size
        if magic == 0 and size == 0:
            return END, pos, pos
        if magic != ENTRY_MAGIC or not HEADER_SIZE + 8 <= size <= end - pos:
            return INVALID, pos, pos
        _, _, _, _, _, body_len, total, rmagic = _CHAIN.unpack_from(buf, pos)
        if body_len + HEADER_SIZE != size or total != body_len or rmagic not in (MAGIC_V1, MAGIC_V2):
            return INVALID, pos + HEADER_SIZE, pos  # a sound entry around a bad record: the decoder explains it
        return RECORD, pos + HEADER_SIZE, pos + size

    def chain(self, buf: Any, start: int, end: int, until: int | None = None) -> tuple[np.ndarray, int, str]:
        import numpy as np  # as in the plain framing: loaded by the walks that need it only

        out = array("q")
        append = out.append
        unpack = _CHAIN.unpack_from
        pos, limit = start, end if until is None else min(until, end)
        shift = None  # the file's base offset, as the first entry's position field says
        reason = END
        while pos + 8 <= end:
            if pos >= limit:
                reason = UNTIL
                break
            if pos + HEADER_SIZE + 8 <= end:
                magic, size, _, _, epos, body_len, total, rmagic = unpack(buf, pos)
                if (
                    magic == ENTRY_MAGIC
                    and size == body_len + HEADER_SIZE
                    and total == body_len
                    and size <= end - pos
                    and (rmagic == MAGIC_V1 or rmagic == MAGIC_V2)
                    and (shift is None or epos - pos == shift)
                ):
                    shift = epos - pos
                    append(pos + HEADER_SIZE)
                    pos += size
                    continue
            reason = self.step(buf, pos, end)[0]
            if reason == RECORD:  # a sound entry whose position field is not on this file's chain
                reason = INVALID
            break
        return np.frombuffer(out, dtype=np.int64) if len(out) else np.zeros(0, np.int64), pos, reason

    def _frames(self, u8: np.ndarray, frame: int, record: int, total: int) -> bool:
        if frame < 0:
            return False
        magic, size = _SIZE.unpack_from(u8, frame)
        return magic == ENTRY_MAGIC and size == total + HEADER_SIZE


DLEDGER = DLedgerFraming()


def parse_member_file(text: str) -> dict[str, str]:
    """A DLedger member file (``checkpoint``, ``currterm``): ``key=value`` lines, in file order."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def encode_member_file(values: dict[str, str]) -> bytes:
    """The member file of ``values``, one ``key=value`` line each in the order given (as DLedger writes it)."""
    return "".join(f"{k}={v}\n" for k, v in values.items()).encode("latin-1")
