"""The commit log read at random by physical offset: what a consume queue entry, an index entry or a
message id points at (store-format.md §2, §3)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from rmqstore.codec.commitlog import MIN_RECORD_SIZE_V1, Blank, Record, decode_record, describe_head
from rmqstore.codec.framing import BLANK, END, RECORD
from rmqstore.errors import CorruptData, RecordSizeMismatch, from_os_error
from rmqstore.safety.openfile import open_fd
from rmqstore.store import Store
from rmqstore.store.files import release_pages
from rmqstore.store.layout import Segment, segment_for

ScanProgress = Callable[[int, int], None]  # (bytes just scanned, total bytes of this scan)
_PROGRESS_STEP = 8 << 20  # report scan progress every 8 MiB
_RELEASE_STEP = 32 << 20  # bytes a scan passes before their pages leave the resident set
_SEARCH_WINDOW = 1 << 20  # bytes searched for the needle ahead of the record walk


def map_readonly(path: Path) -> mmap.mmap | bytes:
    """A read-only map kept beyond one block (``map_file`` closes at the end of its block)."""
    try:
        fd = open_fd(path)
        try:
            if os.fstat(fd).st_size == 0:
                return b""
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
    except OSError as e:  # an OS error says what it is (a permission, a missing file), as map_file does
        raise from_os_error(e, path, doing="open it for reading") from None


class MapsOpen:
    """A reader whose mapped files stay open until ``close`` (or the end of its ``with`` block)."""

    _mapped: dict[object, mmap.mmap | bytes]

    def close(self) -> None:
        for m in self._mapped.values():
            if isinstance(m, mmap.mmap):
                m.close()
        self._mapped.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommitLogReader(MapsOpen):
    """Reads single records by commit log offset, mapping the segment files as it needs them and
    keeping them mapped until closed (only the ``keep`` most recent, when given)."""

    def __init__(self, segments: Sequence[Segment], file_size: int, broker: str, *, keep: int | None = None) -> None:
        self.segments = list(segments)
        self.file_size = file_size
        self.broker = broker
        self.keep = keep
        self._mapped: dict[object, mmap.mmap | bytes] = {}

    @classmethod
    def of(cls, st: Store, *, keep: int | None = None) -> CommitLogReader:
        """A reader of ``st``'s commit log files as they are listed now."""
        return cls(st.commitlog_segments()[0], st.config.commitlog_file_size, st.config.broker, keep=keep)

    @property
    def min_phy_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    def buffer(self, seg: Segment) -> mmap.mmap | bytes:
        buf = self._mapped.get(seg.path)
        if buf is None:
            if self.keep is not None and len(self._mapped) >= self.keep:
                old = self._mapped.pop(next(iter(self._mapped)))
                if isinstance(old, mmap.mmap):
                    old.close()
            buf = self._mapped[seg.path] = map_readonly(seg.path)
        return buf

    def locate(self, phy_offset: int) -> tuple[Segment, int] | None:
        seg = segment_for(self.segments, phy_offset, self.file_size)
        return None if seg is None else (seg, phy_offset - seg.base_offset)

    def frame_of(self, phy_offset: int) -> int:
        """Where the frame of the record at ``phy_offset`` starts (the offset itself outside the files)."""
        loc = self.locate(phy_offset)
        if loc is None:
            return phy_offset
        seg, pos = loc
        return seg.base_offset + max(0, int(seg.framing.frame_of(pos)))

    def decode_at(self, phy_offset: int) -> tuple[Segment | None, Record | Blank | CorruptData | None]:
        """Whatever is at ``phy_offset``: None when no file holds it, the error when it does not decode."""
        loc = self.locate(phy_offset)
        if loc is None:
            return None, None
        seg, pos = loc
        buf = self.buffer(seg)
        if pos >= len(buf):
            return seg, CorruptData("past the end of the file", path=seg.path, pos=pos, phy_offset=phy_offset)
        try:
            return seg, decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, broker=self.broker)
        except CorruptData as e:
            return seg, e

    def read(self, phy_offset: int) -> Record:
        """The record at ``phy_offset``; CorruptData if there is none."""
        loc = self.locate(phy_offset)
        if loc is None:
            raise CorruptData(
                "no commit log file holds this offset (deleted or never written)", path="commitlog", pos=phy_offset
            )
        seg, pos = loc
        rec = decode_record(self.buffer(seg), pos, path=str(seg.path), file_from=seg.base_offset, broker=self.broker)
        if isinstance(rec, Blank):
            raise CorruptData("end-of-file blank, not a message", path=seg.path, pos=pos, phy_offset=phy_offset)
        return rec


# -- scanning for a key -------------------------------------------------------------------------------


@dataclass
class ScanStats:
    """What a scan walked: records (every record, not only decoded ones) and bytes."""

    records: int = 0
    scanned_bytes: int = 0


def scan_records(
    reader: CommitLogReader,
    needle: bytes,
    *,
    from_phy: int = 0,
    progress: ScanProgress | None = None,
    notices: list[str] | None = None,
    stats: ScanStats | None = None,
) -> Iterator[Record]:
    """Decode every record from the frame at ``from_phy`` on whose frame contains ``needle``, in order.

    The frames are stepped through the segment's framing, as the dispatcher walks them (this reader
    sits below the walk; a key query stays without numpy); a record is decoded only when ``needle``
    occurs inside its frame, which keeps a full scan close to disk speed. The walk stops where the
    data ends: zeros, a file not ended by a blank, or an invalid frame (a notice says where). A
    candidate whose TOTALSIZE disagrees with its fields is skipped, as the dispatcher skips it.
    """
    segs = [s for s in reader.segments if s.base_offset + s.size > from_phy]
    total = sum(s.size for s in segs) - max(0, from_phy - segs[0].base_offset) if segs else 0
    stats = stats if stats is not None else ScanStats()
    for seg in segs:
        buf = reader.buffer(seg)
        size = len(buf)
        step = seg.framing.step
        pos = reported = released = max(0, from_phy - seg.base_offset)
        # Search for the needle in windows just ahead of the walk, so that a walk which stops
        # early (the usual tail scan) never reads the rest of a 1 GiB file.
        hit, searched_to = -1, pos
        kind = END
        try:
            while True:
                kind, at, end = step(buf, pos, size)
                if kind == BLANK or kind == END:
                    break
                if kind != RECORD or end - at < MIN_RECORD_SIZE_V1:
                    _note(
                        notices,
                        f"commit log data ends at offset {seg.base_offset + pos} ({seg.path.name}): invalid record "
                        f"header ({describe_head(buf, pos + seg.framing.head)}); the broker's recovery truncates here",
                    )
                    return
                while hit < 0 and searched_to < end:
                    window_end = min(size, searched_to + _SEARCH_WINDOW)
                    hit = buf.find(needle, searched_to, min(size, window_end + len(needle) - 1))
                    searched_to = window_end
                if 0 <= hit < end:
                    try:
                        rec = decode_record(
                            buf, at, path=str(seg.path), file_from=seg.base_offset, end=end, broker=reader.broker
                        )
                    except RecordSizeMismatch:
                        rec = None  # the dispatcher skips it: never indexed
                    except CorruptData as e:
                        _note(notices, f"commit log data ends at offset {seg.base_offset + pos}: {e.what}")
                        return
                    if isinstance(rec, Record):
                        yield rec
                    hit, searched_to = -1, end
                stats.records += 1
                pos = end
                if pos - released >= _RELEASE_STEP:
                    release_pages(buf, released, pos, 0)
                    released = pos
                if progress is not None and pos - reported >= _PROGRESS_STEP:
                    progress(pos - reported, total)
                    reported = pos
        finally:
            stats.scanned_bytes += pos - max(0, from_phy - seg.base_offset)
            release_pages(buf, released, pos, 0)
        if progress is not None:
            progress(size - reported, total)
        if kind != BLANK:
            return  # data ended inside this file: later files hold nothing the broker serves


def _note(notices: list[str] | None, msg: str) -> None:
    if notices is not None:
        notices.append(msg)
