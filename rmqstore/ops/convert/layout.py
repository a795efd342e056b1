"""Records laid out again in a commit log of another framing: new files, blanks, and the offsets that change.

Records are moved in runs (numpy byte masks, no per-record Python): the frame heads of the source
are dropped, the heads of the target (a DLedger entry header, or none) put in, files filled as the
writer of that framing fills them (a frame goes to the next file unless it leaves 8 bytes for the
blank), and in each record the PHYSICALOFFSET, a PREPARED TRANSACTION OFFSET that names a record,
and a whole-record CRC property (5.2.0+) are rewritten for the new place.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rmqstore.codec.commitlog import (
    CRC32_RESERVED_LEN,
    HEAD_OFFSETS,
    OFFSETS_V4,
    encode_prop_crc,
    prop_crc_check,
)
from rmqstore.codec.dledger import INDEX_UNIT_SIZE, entry_headers, index_units
from rmqstore.codec.framing import Framing
from rmqstore.errors import InputError
from rmqstore.safety.files import fsync_dir
from rmqstore.store.layout import file_name

PHY_AT = OFFSETS_V4["phy_offset"]
SYS_FLAG_AT = OFFSETS_V4["sys_flag"]
PREPARED_AT = np.array([o["prepared_transaction_offset"] for o in HEAD_OFFSETS], np.int64)
STORE_AT = np.array([o["store_addr"] for o in HEAD_OFFSETS], np.int64)
_CRC_LEAD = ord("_")  # the first byte of the __CRC32# property
_BYTE8 = np.arange(8, dtype=np.int64)


def read_be(u8: np.ndarray, at: np.ndarray, width: int = 8) -> np.ndarray:
    """The big-endian signed ints of ``width`` bytes at positions ``at``."""
    mat = u8[at[:, None] + np.arange(width, dtype=np.int64)]
    return np.ascontiguousarray(mat).view(f">i{width}").ravel().astype(np.int64)


def write_be(u8: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    """Put big-endian longs ``values`` at positions ``at``."""
    u8[at[:, None] + _BYTE8] = values.astype(">i8").view(np.uint8).reshape(-1, 8)


class OffsetMap:
    """Old to new commit log offset of every record written, kept on disk (16 bytes a record), for
    the transaction records whose PREPARED TRANSACTION OFFSET names an earlier record."""

    def __init__(self, path: Path):
        self.path = path
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - open for the whole layout
        self.count = 0

    def add(self, old: np.ndarray, new: np.ndarray) -> None:
        self._file.write(np.stack([old, new], axis=1).astype("<i8").tobytes())
        self.count += len(old)

    def lookup(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each value is the offset of a record written, its new offset)."""
        self._file.flush()
        pairs = np.memmap(self.path, dtype="<i8", mode="r", shape=(self.count, 2))
        i = np.minimum(np.searchsorted(pairs[:, 0], values), self.count - 1)
        found = pairs[i, 0] == values
        return found, np.where(found, pairs[i, 1], values)

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True, slots=True)
class Placed:
    """Records written in one step: their bytes as written, where each starts in them, old and new offsets."""

    out: np.ndarray
    rec_at: np.ndarray
    sizes: np.ndarray
    old_phy: np.ndarray
    new_phy: np.ndarray


class IndexUnits:
    """The DLedger index files of a new member: one 32-byte unit per entry, in files of ``file_size``."""

    def __init__(self, directory: Path, file_size: int):
        self.dir, self.file_size = directory, file_size
        directory.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._base = -1

    def put(self, first_index: int, units: np.ndarray) -> None:
        at, data = first_index * INDEX_UNIT_SIZE, units.reshape(-1)
        while len(data):
            base = at - at % self.file_size
            if base != self._base:
                self._open(base)
            n = min(len(data), base + self.file_size - at)
            os.pwrite(self._fd, data[:n], at - base)  # type: ignore[arg-type]
            at, data = at + n, data[n:]

    def _open(self, base: int) -> None:
        self.close()
        self._fd = os.open(self.dir / file_name(base), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self.file_size)  # DLedger maps its index files at full size
        self._base = base

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            fsync_dir(self.dir)


class LogWriter:
    """The files of a new commit log in ``framing``, filled from ``base`` one run of records at a time.

    ``stale_tail``: a plain blank carries the bytes the broker's reused record buffer holds (before
    4.9.1), else zeros. ``units``: the DLedger index of a DLedger target, its entries numbered
    from ``first_index`` in ``term``."""

    def __init__(
        self,
        directory: Path,
        file_size: int,
        base: int,
        framing: Framing,
        offsets: OffsetMap,
        *,
        stale_tail: bool = False,
        units: IndexUnits | None = None,
        first_index: int = 0,
        term: int = 0,
    ):
        self.dir, self.fs, self.framing, self.offsets = directory, file_size, framing, offsets
        self.base, self.pos, self._fd = base, 0, -1
        self.head = framing.head
        self.units, self.next_index, self.term = units, first_index, term
        self.item = bytearray() if stale_tail else None  # the broker's record buffer, as last filled
        self.files: list[Path] = []
        self.unnamed_prepared = 0  # PREPARED TRANSACTION OFFSETs that name no record: kept as they are
        directory.mkdir(parents=True, exist_ok=True)
        self._open()

    @property
    def end(self) -> int:
        """The commit log offset after the last frame written."""
        return self.base + self.pos

    def _open(self) -> None:
        path = self.dir / file_name(self.base)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self.fs)  # created at full length, as the broker creates its files
        self.files.append(path)

    def _roll(self) -> None:
        """Close the file with the blank of the framing and go on at the start of the next one."""
        rest = self.fs - self.pos
        blank = self.framing.blank_head(rest)  # the file was created full of zeros: they follow it
        if self.item is not None:
            blank += bytes(self.item[8:rest])
        os.pwrite(self._fd, blank, self.pos)
        self.close_file()
        self.base, self.pos = self.base + self.fs, 0
        self._open()

    def close_file(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        self.close_file()
        if self.units is not None:
            self.units.close()
        fsync_dir(self.dir)

    def put(self, records: np.ndarray, sizes: np.ndarray, where: str) -> Iterator[Placed]:
        """Write ``records`` (the records' bytes one after another, ``sizes`` each) after what is written."""
        starts = np.cumsum(sizes) - sizes
        i, n = 0, len(sizes)
        while i < n:
            frames = sizes[i:] + self.head
            ends = self.pos + np.cumsum(frames)
            k = int(np.searchsorted(ends, self.fs - 8, side="right"))
            if k == 0:
                if self.pos == 0:
                    raise InputError(f"{where}: a record of {int(sizes[i])} bytes does not fit a {self.fs}-byte file")
                self._roll()
                continue
            lo, hi = int(starts[i]), int(starts[i + k - 1] + sizes[i + k - 1])
            yield self._write(records[lo:hi], sizes[i : i + k], int(ends[k - 1]))
            i += k

    def _write(self, data: np.ndarray, sizes: np.ndarray, end: int) -> Placed:
        frame_at = np.cumsum(sizes + self.head) - (sizes + self.head)
        rec_at = frame_at + self.head
        pos = self.base + self.pos + frame_at
        if self.head:
            heads = entry_headers(sizes, self.next_index, self.term, pos).tobytes()
            out = np.frombuffer(bytearray(_interleave(heads, self.head, data, sizes)), np.uint8)
        else:
            out = data.copy()
        old = read_be(out, rec_at + PHY_AT)
        new = self.base + self.pos + rec_at
        write_be(out, rec_at + PHY_AT, new)
        self.offsets.add(old, new)
        self._rewrite_prepared(out, rec_at)
        _rewrite_prop_crc(out, rec_at, sizes)
        if self.head:
            if self.units is not None:
                self.units.put(self.next_index, index_units(sizes, self.next_index, self.term, pos))
            self.next_index += len(sizes)
        elif self.item is not None:
            self._fill_item(out, rec_at, sizes)
        os.pwrite(self._fd, out, self.pos)
        self.pos = end
        return Placed(out, rec_at, sizes, old, new)

    def _rewrite_prepared(self, out: np.ndarray, rec_at: np.ndarray) -> None:
        """A PREPARED TRANSACTION OFFSET that names a record written names it at its new offset."""
        widths = (read_be(out, rec_at + SYS_FLAG_AT, 4) >> 4) & 3
        at = rec_at + PREPARED_AT[widths]
        values = read_be(out, at)
        named = np.flatnonzero(values > 0)
        if not len(named):
            return
        found, new = self.offsets.lookup(values[named])
        self.unnamed_prepared += int(np.count_nonzero(~found))
        write_be(out, at[named[found]], new[found])

    def _fill_item(self, out: np.ndarray, rec_at: np.ndarray, sizes: np.ndarray) -> None:
        """Lay the records over the broker's reused buffer, as each append does: only the last one of
        each size larger than every later one shows through."""
        later = np.maximum.accumulate(sizes[::-1])[::-1]
        shows = np.flatnonzero(sizes > np.append(later[1:], 0))
        item = self.item
        assert item is not None
        for j in shows.tolist():
            s = int(sizes[j])
            if s > len(item):
                item.extend(bytes(s - len(item)))
            item[:s] = out[rec_at[j] : rec_at[j] + s].tobytes()


def _rewrite_prop_crc(out: np.ndarray, rec_at: np.ndarray, sizes: np.ndarray) -> None:
    """A record whose properties end with the __CRC32# entry gets the CRC of its new bytes (5.2.0+)."""
    lead = rec_at + sizes - CRC32_RESERVED_LEN
    for j in np.flatnonzero(out[lead] == _CRC_LEAD).tolist():
        p, s = int(rec_at[j]), int(sizes[j])
        stored, computed = prop_crc_check(out, p, s)
        if stored is not None:
            out[p + s - CRC32_RESERVED_LEN : p + s] = np.frombuffer(encode_prop_crc(computed), np.uint8)


_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def _hex_rows(rows: np.ndarray) -> np.ndarray:
    """Upper-case hex digits of each row of bytes: shape (n, 2 x width)."""
    out = np.empty((len(rows), rows.shape[1] * 2), np.uint8)
    out[:, 0::2], out[:, 1::2] = _HEX[rows >> 4], _HEX[rows & 15]
    return out


def msgid_lines(placed: Placed) -> bytes:
    """``{"oldMsgId", "newMsgId"}`` lines of the records placed: store host and port, then the offset (§3.10)."""
    out, rec_at = placed.out, placed.rec_at
    widths = (read_be(out, rec_at + SYS_FLAG_AT, 4) >> 4) & 3
    lines: list[bytes] = []
    order: list[np.ndarray] = []
    for v in np.unique(widths).tolist():
        sel = np.flatnonzero(widths == v)
        host = (16 if v & 2 else 4) + 4  # the store address (IPv6 with 0x20), then its port
        hosts = out[(rec_at[sel] + STORE_AT[v])[:, None] + np.arange(host)]
        old, new = (
            _hex_rows(np.concatenate([hosts, phy[sel].astype(">i8").view(np.uint8).reshape(-1, 8)], axis=1))
            for phy in (placed.old_phy, placed.new_phy)
        )
        parts = [b'{"oldMsgId":"', old, b'","newMsgId":"', new, b'"}\n']
        mat = np.concatenate(
            [
                np.broadcast_to(np.frombuffer(p, np.uint8), (len(sel), len(p))) if isinstance(p, bytes) else p
                for p in parts
            ],
            axis=1,
        )
        lines.append(mat.tobytes())
        order.append(sel)
    if len(order) == 1:
        return lines[0]
    width = [len(b) // len(o) for b, o in zip(lines, order, strict=True)]
    rows = {
        int(j): lines[k][r * width[k] : (r + 1) * width[k]] for k, sel in enumerate(order) for r, j in enumerate(sel)
    }
    return b"".join(rows[j] for j in range(len(rec_at)))


def records_of(span: np.ndarray, rec_at: np.ndarray, sizes: np.ndarray, head: int) -> np.ndarray:
    """The records' bytes one after another: ``span`` (frames one after another) without the frame heads."""
    if not head:
        return span
    view = memoryview(span)
    return np.frombuffer(
        b"".join([view[p : p + n] for p, n in zip(rec_at.tolist(), sizes.tolist(), strict=True)]), np.uint8
    )


def _interleave(heads: bytes, head: int, data: np.ndarray, sizes: np.ndarray) -> bytes:
    """Each record of ``data`` behind its ``head`` bytes of ``heads``: the frames one after another."""
    hv, dv = memoryview(heads), memoryview(data)
    parts: list[memoryview] = []
    at = 0
    for i, n in enumerate(sizes.tolist()):
        parts += (hv[i * head : (i + 1) * head], dv[at : at + n])
        at += n
    return b"".join(parts)
