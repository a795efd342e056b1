"""The plain framing's chain: runs of records of one size are chained with numpy, with the same result."""

from __future__ import annotations

import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqstore.codec.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, read_head
from rmqstore.codec.framing import PLAIN


def _reference(buf: bytes, start: int, end: int, until: int | None) -> tuple[list[int], int, str]:
    """The chain record by record, as the broker steps it."""
    pos, out, limit = start, [], end if until is None else min(until, end)
    while pos + 8 <= end:
        if pos >= limit:
            return out, pos, "until"
        total, magic = read_head(buf, pos)
        if magic in (MAGIC_V1, MAGIC_V2) and 0 < total <= end - pos:
            out.append(pos)
            pos += total
            continue
        if magic == BLANK_MAGIC:
            return out, pos, "blank"
        return out, pos, "end" if total == 0 and magic == 0 else "invalid"
    return out, pos, "end"


def _frames(rng: random.Random, runs: list[tuple[int, int]], tail: str) -> bytes:
    """Runs of (count, size) frames, then a blank, zeros or a broken head; an odd frame now and then."""
    out = bytearray()
    for count, size in runs:
        for _ in range(count):
            magic = MAGIC_V2 if rng.random() < 0.1 else MAGIC_V1
            if rng.random() < 0.01:
                magic = 0x12345678  # a run broken by bytes that are no record
            out += struct.pack(">ii", size, magic) + bytes(size - 8)
    if tail == "blank":
        out += struct.pack(">ii", 64, BLANK_MAGIC) + bytes(56)
    elif tail == "broken":
        out += struct.pack(">ii", 99, 0x0BADBEEF)
    return bytes(out + bytes(16))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    runs=st.lists(st.tuples(st.integers(1, 300), st.sampled_from([8, 9, 16, 100, 383, 1000])), min_size=1, max_size=8),
    tail=st.sampled_from(["blank", "zeros", "broken"]),
    cut=st.floats(0, 1.2),
    until=st.one_of(st.none(), st.floats(0, 1.2)),
)
def test_chain_equals_the_record_by_record_walk(seed, runs, tail, cut, until) -> None:
    buf = _frames(random.Random(seed), runs, tail)
    end = min(len(buf), int(len(buf) * cut))  # the data may end inside a run (a torn tail)
    stop_at = None if until is None else int(len(buf) * until)
    want = _reference(buf, 0, end, stop_at)
    got, pos, reason = PLAIN.chain(buf, 0, end, until=stop_at)
    assert (got.tolist(), pos, reason) == want


def test_a_long_run_is_chained_whole_and_the_buffer_can_be_closed(tmp_path) -> None:
    import mmap

    p = tmp_path / "f"
    p.write_bytes(
        _frames(random.Random(1), [(100_000, 383)], "zeros").replace(struct.pack(">i", 0x12345678), b"\0\0\0\0")
    )
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    positions, pos, reason = PLAIN.chain(m, 0, len(m))
    m.close()  # no view of the mapping is left behind
    assert reason in ("end", "invalid") and positions[0] == 0
    assert (positions[1:] - positions[:-1] == 383).all()
