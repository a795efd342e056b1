"""A toy framing of the commit log, for proving the walker's seam: every record sits in a frame of its own.

A frame is ``b"TOYF"``, the frame's length (4 bytes, big-endian: 8 + the record's TOTALSIZE), then
the record, whose PHYSICALOFFSET is the file's base offset plus the position of its first byte. A
full file ends with a ``b"TOYB"`` frame whose length is the rest of the file; zeros end the data.
``wrap_store`` copies a store with its records framed so; ``toy_store`` makes rmqstore read a store
that way. An operation that walks the commit log only through ``rmqstore.walk`` gives the same
answers on the wrapped store as on the plain one, offsets aside.
"""

from __future__ import annotations

import contextlib
import shutil
import struct
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rmqstore.store
from rmqstore.codec import commitlog
from rmqstore.codec.commitlog import MAGIC_V1, MAGIC_V2, OFFSETS_V4, Blank, Record
from rmqstore.codec.framing import BLANK, END, INVALID, RECORD, UNTIL, Framing
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

FRAME = b"TOYF"
FILLER = b"TOYB"
HEAD = ">4si"  # a format, not a struct.Struct: this module is pickled by value for Spark's executors
_PHY_AT = OFFSETS_V4["phy_offset"]
_PREPARED_AT = OFFSETS_V4["prepared_transaction_offset"] if "prepared_transaction_offset" in OFFSETS_V4 else None


class ToyFraming(Framing):
    """Each record behind an 8-byte header of its own (``FRAME``, length); ``FILLER`` ends a full file."""

    name = "toy"
    head = 8
    blank_mark = (FILLER, 0)
    appendable = False

    def step(self, buf: Any, pos: int, end: int) -> tuple[str, int, int]:
        if pos + 8 > end:
            return END, pos, pos
        tag, length = struct.unpack_from(HEAD, buf, pos)
        if tag == FILLER:
            return BLANK, pos, pos + length
        if tag == b"\0\0\0\0" and length == 0:
            return END, pos, pos
        if tag != FRAME or not 16 < length <= end - pos:
            return INVALID, pos, pos
        total, magic = commitlog.read_head(
            buf, pos + 8
        )  # by its module: read_head is a Struct's method, which cannot be pickled
        if magic not in (MAGIC_V1, MAGIC_V2) or total != length - 8:
            return INVALID, pos + 8, pos  # a sound frame around a bad record: the decoder explains the record
        return RECORD, pos + 8, pos + length

    def chain(self, buf: Any, start: int, end: int, until: int | None = None) -> tuple[np.ndarray, int, str]:
        out = array("q")
        pos, limit = start, end if until is None else min(until, end)
        while True:
            if pos >= limit and pos + 8 <= end:
                return np.frombuffer(out, np.int64) if len(out) else np.zeros(0, np.int64), pos, UNTIL
            kind, at, frame_end = self.step(buf, pos, end)
            if kind != RECORD:
                return np.frombuffer(out, np.int64) if len(out) else np.zeros(0, np.int64), pos, kind
            out.append(at)
            pos = frame_end

    def _frames(self, u8: np.ndarray, frame: int, record: int, total: int) -> bool:
        tag, length = struct.unpack_from(HEAD, u8, frame)
        return tag == FRAME and length == total + 8


TOY = ToyFraming()


@contextlib.contextmanager
def toy_store() -> Iterator[None]:
    """rmqstore reads every store's commit log as toy frames while this is open."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rmqstore.store, "commitlog_framing", lambda cfg: TOY)
        yield


def _framed(rec_bytes: bytearray, new_phy: int, phy_map: dict[int, int]) -> bytes:
    struct.pack_into(">q", rec_bytes, _PHY_AT, new_phy)
    if _PREPARED_AT is not None:
        (prepared,) = struct.unpack_from(">q", rec_bytes, _PREPARED_AT)
        if prepared in phy_map:
            struct.pack_into(">q", rec_bytes, _PREPARED_AT, phy_map[prepared])
    return struct.pack(HEAD, FRAME, len(rec_bytes) + 8) + bytes(rec_bytes)


def wrap_store(src: Path, dst: Path, *, tail: bytes = b"") -> dict[int, int]:
    """Copy the store ``src`` to ``dst`` with every commit log record in a toy frame (consume queues,
    index files, checkpoint and abort are left out: rebuild them through the walker). ``tail`` is
    written raw after the last frame (a torn write). Returns the map of old to new physical offsets."""
    shutil.copytree(
        src, dst, ignore=shutil.ignore_patterns("commitlog", "consumequeue", "index", "checkpoint", "abort")
    )
    with open_store(src) as st:
        file_size = st.config.commitlog_file_size
        records = [(rec, bytearray(seg_bytes)) for rec, seg_bytes in _records(st)]
        stale = _blank_tail(st)
        out_dir = st.config.commitlog_dir
    out_dir = dst / out_dir.relative_to(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    phy_map: dict[int, int] = {}
    files: list[bytearray] = [bytearray(file_size)]
    pos = 0
    for rec, raw in records:
        need = len(raw) + 8
        if pos + need > file_size - 8:
            struct.pack_into(HEAD, files[-1], pos, FILLER, file_size - pos)
            files[-1][pos + 8 :] = stale[: file_size - pos - 8].ljust(file_size - pos - 8, b"\0")
            files.append(bytearray(file_size))
            pos = 0
        new_phy = (len(files) - 1) * file_size + pos + 8
        phy_map[rec.phy_offset] = new_phy
        files[-1][pos : pos + need] = _framed(raw, new_phy, phy_map)
        pos += need
    files[-1][pos : pos + len(tail)] = tail
    for i, data in enumerate(files):
        (out_dir / f"{i * file_size:020d}").write_bytes(data)
    return phy_map


def _blank_tail(st: Any) -> bytes:
    """The bytes after the header of the store's first end-of-file blank: a filler is followed by the
    same (brokers before 4.9.1 leave stale bytes there, later ones zeros; version detection tells)."""
    for seg, rec in iter_commitlog(st):
        if isinstance(rec, Blank):
            with open(seg.path, "rb") as f:
                f.seek(rec.pos + 8)
                return f.read()
    return b""


def _records(st: Any) -> Iterator[tuple[Record, bytes]]:
    segs = {s.base_offset: s for s in st.commitlog_segments()[0]}
    for seg, rec in iter_commitlog(st):
        if isinstance(rec, Blank):
            continue
        with open(segs[seg.base_offset].path, "rb") as f:
            f.seek(rec.pos)
            yield rec, f.read(rec.total_size)
