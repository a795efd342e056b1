"""The lenient walk of one commit log file: what it yields for intact, damaged, torn and oddly ended files,
as dump reads them (every byte accounted for) and as the broker reads them (``as_broker``)."""

from __future__ import annotations

import struct
from pathlib import Path

from conftest import small_record
from toy_framing import FILLER, HEAD, TOY

from rmqstore.codec.commitlog import encode_blank
from rmqstore.store.layout import Segment
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Item, Run, walk_file

SIZE = 4096
BASE = 1 << 20


def _records(n: int, *, start: int = 0, base: int = BASE) -> bytearray:
    out = bytearray()
    for i in range(n):
        out += small_record(queue_offset=i, phy_offset=base + start + len(out), body=b"x" * (i + 1))
    return out


def _file(data: bytes | bytearray, *, blank: bool = True) -> bytes:
    buf = bytearray(SIZE)
    buf[: len(data)] = data
    if blank:
        buf[len(data) : len(data) + 8] = encode_blank(SIZE - len(data))
    return bytes(buf)


def _walk(buf: bytes, **kw: object) -> list[Item]:
    return list(walk_file(buf, Segment(Path("f"), BASE, len(buf)), **kw))  # type: ignore[arg-type]


def _starts(data: bytes | bytearray) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += struct.unpack_from(">i", data, pos)[0]
    return out


def test_an_intact_file_is_one_run_and_its_blank() -> None:
    data = _records(5)
    run, end = _walk(_file(data))
    assert isinstance(run, Run) and run.positions.tolist() == _starts(data) and run.end_pos == len(data)
    assert run.record_bytes == len(data)
    assert end == BlankEnd(len(data), SIZE - len(data), None)


def test_a_bad_record_is_damage_up_to_the_next_record() -> None:
    data = _records(5)
    starts = _starts(data)
    data[starts[2] + 4 : starts[2] + 8] = bytes(4)  # MAGICCODE
    items = _walk(_file(data))
    assert [type(i) for i in items] == [Run, Damage, Run, BlankEnd]
    damage = items[1]
    assert isinstance(damage, Damage) and (damage.pos, damage.resume) == (starts[2], starts[3])
    assert damage.why.startswith("bad magic code 0x00000000")


def test_a_record_holding_another_offset_is_damage_only_to_dump() -> None:
    data = _records(4)
    starts = _starts(data)
    struct.pack_into(">q", data, starts[1] + 28, 7)  # PHYSICALOFFSET
    strict = _walk(_file(data))
    assert [type(i) for i in strict] == [Run, Damage, Run, BlankEnd]
    assert strict[1].why == f"PHYSICALOFFSET field is 7, the record is at {BASE + starts[1]}"  # type: ignore[union-attr]
    read = _walk(_file(data), as_broker=True)
    assert [p for r in read if isinstance(r, Run) for p in r.positions.tolist()] == starts


def test_a_blank_of_the_wrong_size_ends_the_file_only_for_the_broker() -> None:
    data = _records(3)
    starts = _starts(data)
    blank = encode_blank(999)
    data[starts[1] : starts[1] + 8] = blank  # a BLANK where the second record starts
    strict = _walk(_file(data))
    assert [type(i) for i in strict] == [Run, Damage, Run, BlankEnd]
    assert strict[1].why == f"BLANK record with TOTALSIZE 999 but {SIZE - starts[1]} bytes to the end of the file"  # type: ignore[union-attr]
    read = _walk(_file(data), as_broker=True)
    assert [type(i) for i in read] == [Run, BlankEnd]
    assert read[1].total == 999 and read[1].error is not None  # type: ignore[union-attr]


def test_zeros_inside_the_data_and_after_it() -> None:
    data = _records(4)
    starts = _starts(data)
    data[starts[1] : starts[2]] = bytes(starts[2] - starts[1])
    gap = _walk(_file(data))
    assert [type(i) for i in gap] == [Run, Damage, Run, BlankEnd]
    assert gap[1] == Damage(starts[1], starts[2], None)
    clean = _walk(_file(data[: starts[1]], blank=False))
    assert clean[-1] == DataEnd(starts[1], None, starts[1], None)


def test_a_torn_tail_and_a_short_tail_end_the_data() -> None:
    data = _records(3)
    torn = small_record(phy_offset=BASE + len(data))[:60]
    end = _walk(_file(data + torn, blank=False))[-1]
    zeros = len(data) + len(torn.rstrip(b"\0"))
    assert isinstance(end, DataEnd) and (end.pos, end.garbage, end.zeros) == (len(data), len(data), zeros)
    assert end.error is not None
    full = _records(3)
    buf = _file(full, blank=False)[: len(full) + 5] + b"\x01"
    short = _walk(buf)[-1]
    assert short == DataEnd(len(full), len(full), len(buf), short.error) and short.error is not None
    assert short.why == "6 bytes, too short for a record"
    assert _walk(bytes(full))[-1] == DataEnd(len(full), None, len(full), None)  # records fill the file


def test_nothing_at_or_after_until() -> None:
    data = _records(4)
    starts = _starts(data)
    data[starts[2] + 4 : starts[2] + 8] = bytes(4)
    items = _walk(_file(data), until=starts[2])
    assert [type(i) for i in items] == [Run]


def _toy_file(data: bytearray, n: int) -> tuple[bytes, list[int]]:
    """The records of ``data`` each in a toy frame (records rewritten to hold their new offsets)."""
    buf, records = bytearray(SIZE), []
    pos = 0
    for start in _starts(data)[:n]:
        total = struct.unpack_from(">i", data, start)[0]
        rec = bytearray(data[start : start + total])
        struct.pack_into(">q", rec, 28, BASE + pos + 8)
        buf[pos : pos + 8 + total] = struct.pack(HEAD, b"TOYF", total + 8) + rec
        records.append(pos + 8)
        pos += 8 + total
    struct.pack_into(HEAD, buf, pos, FILLER, SIZE - pos)
    return bytes(buf), records


def test_runs_of_framed_records() -> None:
    data = _records(5)
    buf, records = _toy_file(data, 5)
    seg = Segment(Path("f"), BASE, SIZE, TOY)
    run, end = walk_file(buf, seg)
    assert isinstance(run, Run) and run.positions.tolist() == records and run.record_bytes == len(data)
    assert isinstance(end, BlankEnd) and end.pos == run.end_pos
    part = run.within(BASE + records[1], BASE + records[3])
    assert part.positions.tolist() == records[1:3] and part.end_pos == records[3] - 8
