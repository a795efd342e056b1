"""Version detection's sample of a commit log file: the numpy chain finds the same facts, at the same
places and in the same order, as following the file's frames one step at a time (the reference below),
on files of mixed records (V1/V2, IPv4/IPv6 hosts, equal runs, damage, blanks with stale or zero
tails, torn and short files, plain and DLedger framings) and on every real store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ALL_REAL_CASES, REAL_WORLD, case_dir, small_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import damaged, hosts_v4, hosts_v6, records

from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    checked_size,
    encode_prop_crc,
    encode_record,
)
from rmqstore.codec.dledger import DLEDGER, header_for
from rmqstore.codec.framing import BLANK, PLAIN, RECORD, Framing
from rmqstore.safety.openfile import map_readonly
from rmqstore.store import detect
from rmqstore.store.layout import Segment


def reference_file_facts(seg: Segment, hops: int) -> list[detect.Fact]:
    """The facts of one sampled file with every frame followed by ``framing.step``: the record's
    structure by ``checked_size``, its magic and host flags and (for the first ones) its properties
    by the per-record decoder, then the evenly spaced places when the budget runs out."""
    out: list[detect.Fact] = []
    seen = detect._Seen()
    with map_readonly(seg.path) as buf:
        pos, n, end = 0, 0, len(buf)
        while hops > 0:
            hops -= 1
            kind, at, frame_end = seg.framing.step(buf, pos, end)
            if kind == BLANK:
                return out + detect._blank_fact(buf, pos, end, seg)
            if kind != RECORD or checked_size(buf, at, end) is None:
                return out
            out += detect._record_facts(buf, at, seg, seen, n < detect._SAMPLED_RECORDS)
            n += 1
            pos = frame_end
        for i in range(1, detect._PLACES + 1):
            out += detect._place_facts(buf, end * i // (detect._PLACES + 1), seg, seen)
    return out


_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
PROPS = ("as-is", "no-trailing-separator", "crc", "lmq", "none")


@st.composite
def record_bytes(draw: Any, at: int) -> bytes:
    """One record whose PHYSICALOFFSET is mostly its own offset ``at`` (else a random one), with
    properties as a 4.4, 4.9 or 5.x broker leaves them."""
    fields = draw(records())
    hosts = draw(st.sampled_from([0, 0, 0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, _V6]))  # IPv4 in half
    fields["sys_flag"] = fields["sys_flag"] & ~_V6 | hosts
    fields["born_addr"] = draw(hosts_v6 if hosts & BORNHOST_V6_FLAG else hosts_v4)
    fields["store_addr"] = draw(hosts_v6 if hosts & STOREHOSTADDRESS_V6_FLAG else hosts_v4)
    fields["v2"] = draw(st.integers(0, 3)) == 0
    if draw(st.integers(0, 3)):
        fields["phy_offset"] = at
    props = fields["properties"]
    how = draw(st.sampled_from(PROPS))
    if how == "no-trailing-separator":
        props = props[:-1]
    elif how == "crc":
        props += encode_prop_crc(draw(st.integers(0, 2**31 - 1)))
    elif how == "lmq":
        props += b"INNER_MULTI_DISPATCH\x01%LMQ%a\x02" + bytes(20)
    elif how == "none":
        props = b""
    fields["properties"] = props
    return encode_record(**fields)


def _framed(framing: Framing, rec: bytes, base: int, pos: int, index: int, skew: bool) -> bytes:
    if framing is PLAIN:
        return rec
    return header_for(len(rec), index, 0, base + pos + (7 if skew else 0)).encode() + rec


@st.composite
def sampled_file(draw: Any) -> tuple[bytes, Framing, int]:
    """(file bytes, framing, base offset): records one by one and in runs of one size, raw damage, then
    a blank (stale or zero tail), zeros, a torn record or nothing; a quarter of the files are cut anywhere."""
    framing = draw(st.sampled_from([PLAIN, DLEDGER]))
    base = draw(st.sampled_from([0, 1 << 20]))
    out = bytearray()
    pieces = draw(st.integers(1, 10))
    broken = draw(st.integers(-2 * pieces, pieces - 1))  # one piece of raw damage in a third of the files
    for i in range(pieces):
        if i == broken:
            out += draw(damaged())
            continue
        rec = draw(record_bytes(base + len(out) + framing.head))
        copies = draw(st.sampled_from([1, 1, 1, 8, 40, 150]))
        skewed = draw(st.integers(-4 * copies, copies - 1))  # an entry out of the position sequence (DLedger)
        for k in range(copies):
            out += _framed(framing, rec, base, len(out), i * 1000 + k, k == skewed)
    end = draw(st.sampled_from(["blank-stale", "blank-zero", "zeros", "torn", "nothing"]))
    if end.startswith("blank"):
        room = draw(st.integers(8, 200))
        blank = framing.blank_head(room)
        tail = draw(st.binary(min_size=room - 8, max_size=room - 8)) if end == "blank-stale" else bytes(room - 8)
        out += blank + tail
    elif end == "zeros":
        out += bytes(draw(st.integers(1, 300)))
    elif end == "torn":
        out += draw(record_bytes(base + len(out)))[: draw(st.integers(1, 90))]
    cut = draw(st.integers(0, len(out))) if draw(st.integers(0, 3)) == 0 else len(out)
    return bytes(out[:cut]), framing, base


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    made=sampled_file(),
    hops=st.integers(1, 400),
    stepped=st.sampled_from([0, 1, 7, 64, 128]),
)
def test_sampled_file_facts_equal_the_step_by_step_walk(tmp_path, monkeypatch, made, hops, stepped) -> None:
    data, framing, base = made
    if not data:
        return  # an empty file is never sampled
    path = tmp_path / f"{base:020d}"
    path.write_bytes(data)
    seg = Segment(path, base, len(data), framing)
    with monkeypatch.context() as m:
        m.setattr(detect, "_STEPPED", stepped)
        assert detect._file_facts(seg, hops) == reference_file_facts(seg, hops)


def _commitlog_files() -> list[Path]:
    roots = [case_dir(c) / "store" for c in ALL_REAL_CASES] + [REAL_WORLD]
    return sorted(p for r in roots if r.is_dir() for p in r.rglob("*") if p.is_file() and p.name.isdigit())


@pytest.mark.parametrize("stepped", [0, 3, 128])
def test_real_commitlog_files_give_the_facts_of_the_step_by_step_walk(monkeypatch, stepped) -> None:
    files = [p for p in _commitlog_files() if p.parent.name in ("commitlog", "data") and p.stat().st_size]
    if not files:
        pytest.skip("real stores not found")
    monkeypatch.setattr(detect, "_STEPPED", stepped)
    for path in files:
        framing = DLEDGER if path.parent.name == "data" else PLAIN
        seg = Segment(path, int(path.name), path.stat().st_size, framing)
        for hops in (1, 2, 64, 65, 129, 500, 50_000):
            assert detect._file_facts(seg, hops) == reference_file_facts(seg, hops), (path, hops)


def test_a_file_shorter_than_a_head_gives_no_fact(tmp_path) -> None:
    path = tmp_path / f"{0:020d}"
    for data in (b"\x01", bytes(7), small_record()[:5], small_record()[:90]):
        path.write_bytes(data)
        for framing in (PLAIN, DLEDGER):
            assert detect._file_facts(Segment(path, 0, len(data), framing), 1000) == []
