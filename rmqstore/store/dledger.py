"""The DLedger member of a store in DLedger mode: its properties files and its index files.

The member's data files are the store's commit log (``Store.commitlog_segments``, in DLedger
framing). Beside them DLedger keeps ``dledger-<selfId>/checkpoint`` (``endIndex``,
``committedIndex``), ``currterm`` (``currTerm``, ``voteLeader``), each with a ``.bak`` copy, and
``index/``: one 32-byte unit per entry at offset entry index x 32, in files named by the offset of
their first unit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.codec.dledger import INDEX_UNIT_SIZE, IndexUnit, decode_unit, parse_member_file
from rmqstore.errors import from_os_error
from rmqstore.safety.files import read_if_present
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig, list_segments


@dataclass(frozen=True)
class MemberFile:
    """A DLedger member properties file as found (``None`` values: the file is absent)."""

    path: Path
    values: dict[str, str] | None

    def number(self, key: str) -> int | None:
        """``key`` as a Java long, or None when absent or not a number."""
        raw = (self.values or {}).get(key)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None


def read_member_file(path: Path) -> MemberFile:
    data = read_if_present(path, "DLedger member file")
    return MemberFile(path, None if data is None else parse_member_file(data.decode("latin-1")))


@dataclass(frozen=True)
class Member:
    """What the DLedger member's own files say: its checkpoint and its term and vote."""

    checkpoint: MemberFile
    currterm: MemberFile

    @property
    def end_index(self) -> int | None:
        return self.checkpoint.number("endIndex")

    @property
    def committed_index(self) -> int | None:
        return self.checkpoint.number("committedIndex")

    @property
    def term(self) -> int | None:
        return self.currterm.number("currTerm")

    @property
    def vote(self) -> str | None:
        return (self.currterm.values or {}).get("voteLeader")


def read_member(cfg: StoreConfig) -> Member:
    return Member(read_member_file(cfg.dledger_checkpoint_path), read_member_file(cfg.dledger_currterm_path))


class DLedgerIndex:
    """The member's index files: unit ``i`` (entry index ``i``) at index offset ``i x 32``.

    Use it in a ``with`` block: the files looked up stay mapped until it ends."""

    def __init__(self, cfg: StoreConfig):
        self.dir = cfg.dledger_index_dir
        self.file_size = cfg.dledger_index_file_size
        self.segments, self.problems = list_segments(self.dir, self.file_size)
        self._maps = contextlib.ExitStack()
        self._mapped: dict[int, Any] = {}

    def __enter__(self) -> DLedgerIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self._mapped.clear()
        self._maps.close()

    def _buf(self, seg: Segment) -> Any:
        buf = self._mapped.get(seg.base_offset)
        if buf is None:
            try:
                buf = self._maps.enter_context(map_file(seg.path))
            except OSError as e:
                raise from_os_error(e, seg.path, doing="read a DLedger index file") from None
            self._mapped[seg.base_offset] = buf
        return buf

    def segment_of(self, index: int) -> Segment | None:
        at = index * INDEX_UNIT_SIZE
        for seg in self.segments:
            if seg.base_offset <= at < seg.end_offset:
                return seg
        return None

    def unit(self, index: int) -> IndexUnit | None:
        """The unit of entry ``index``, or None when no index file holds its place."""
        seg = self.segment_of(index)
        if seg is None or index * INDEX_UNIT_SIZE + INDEX_UNIT_SIZE > seg.end_offset:
            return None
        return decode_unit(self._buf(seg), index * INDEX_UNIT_SIZE - seg.base_offset)

    def units(self) -> Iterator[tuple[Segment, int, IndexUnit]]:
        """Every written unit in index order: (file, position in it, unit); stops at the first unit
        of zeros (the index's write position)."""
        for seg in self.segments:
            buf = self._buf(seg)
            for pos in range(0, len(buf) - INDEX_UNIT_SIZE + 1, INDEX_UNIT_SIZE):
                unit = decode_unit(buf, pos)
                if unit.magic == 0 and unit.size == 0 and unit.pos == 0 and unit.index == 0:
                    return
                yield seg, pos, unit

    def write_pos(self) -> int:
        """The index offset after the last written unit (DLedger's ``indexWritePos``)."""
        last = None
        for seg, pos, _ in self.units():
            last = seg.base_offset + pos
        if last is None:
            return self.segments[0].base_offset if self.segments else 0
        return last + INDEX_UNIT_SIZE
