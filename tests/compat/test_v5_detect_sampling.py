"""Version detection samples a bounded spread of the commit log: at most 8 files (the first two, the
last two, evenly spaced ones between), and in each a few records decoded at evenly spaced places, so
evidence in the middle of a store (a burst of V2 records, the ``__CRC32#`` property switched on for a
while) is found without reading the whole store."""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rmqstore.codec.checkpoint import FILE_SIZE
from rmqstore.codec.commitlog import BLANK_MAGIC, encode_record
from rmqstore.store import resolve_config
from rmqstore.store.detect import _FILES_SAMPLED, sampled_files
from rmqstore.store.layout import Segment

FILE = 1 << 16
IP = bytes([127, 0, 0, 1])


def record(phy: int, topic: str = "TopicA", props: bytes = b"KEYS\x01k\x02", i: int = 0) -> bytes:
    return encode_record(
        topic=topic, queue_id=0, queue_offset=i, phy_offset=phy, born_timestamp_ms=1_700_000_000_000 + i,
        born_addr=IP, born_port=1, store_timestamp_ms=1_700_000_000_000 + i, store_addr=IP, store_port=10911,
        body=b"body-%d" % i, properties=props, v2=len(topic.encode()) > 127,
    )  # fmt: skip


def crc_props() -> bytes:
    return b"KEYS\x01k\x02__CRC32#0123456789\x02"


def write_commitlog(root: Path, files: int, size: int, make) -> None:
    """``files`` commit log files of ``size`` bytes, each filled by ``make(file_no, record_no)`` -> (topic,
    properties) records, closed by an 8-byte blank, the rest zeros."""
    d = root / "commitlog"
    d.mkdir(parents=True)
    for f in range(files):
        base, buf, i = f * size, bytearray(size), 0
        pos = 0
        while True:
            topic, props = make(f, i)
            raw = record(base + pos, topic, props, i)
            if pos + len(raw) + 8 > size:
                struct.pack_into(">ii", buf, pos, size - pos, BLANK_MAGIC)
                break
            buf[pos : pos + len(raw)] = raw
            pos, i = pos + len(raw), i + 1
        (d / f"{base:020d}").write_bytes(bytes(buf))
    (root / "consumequeue").mkdir()
    (root / "checkpoint").write_bytes(bytes(FILE_SIZE))


def facts(root: Path) -> dict[str, str]:
    det = resolve_config(root, None, None).detection
    return {f.name: f.where for f in det.facts}


@given(st.integers(0, 200))
def test_sampled_files_spread(n):
    segs = [Segment(Path(f"{i:020d}"), i, 1) for i in range(n)]
    picked = sampled_files(segs)
    idx = [s.base_offset for s in picked]
    assert idx == sorted(set(idx)) and len(idx) == min(n, _FILES_SAMPLED)
    if n > _FILES_SAMPLED:
        assert idx[:2] == [0, 1] and idx[-2:] == [n - 2, n - 1]
        gaps = [b - a for a, b in zip(idx, idx[1:], strict=False)]
        assert max(gaps) <= (n - 4) // (_FILES_SAMPLED - 3) + 2  # evenly spaced: no long unsampled run


LONG_RETRY = "%RETRY%" + "g" * 133  # 140 characters: a V2 record


def test_v2_burst_in_a_middle_file_is_found(tmp_path):
    root = tmp_path / "store"
    write_commitlog(root, 12, 8192, lambda f, i: (LONG_RETRY if f == 6 and i > 3 else "TopicA", b"KEYS\x01k\x02"))
    got = facts(root)
    assert "v2-record" in got and f"{6 * 8192:020d}" in got["v2-record"]


def test_crc_property_in_the_middle_of_one_large_file_is_found(tmp_path):
    """Past the first decoded records, beyond the hop budget: only the places find it."""
    root = tmp_path / "store"
    size = 8 << 20  # about 90,000 records: more than the hop budget
    write_commitlog(root, 1, size, lambda f, i: ("TopicA", crc_props() if 40_000 <= i < 60_000 else b"KEYS\x01k\x02"))
    got = facts(root)
    assert "crc32-property" in got
    at = int(got["crc32-property"].rsplit("@", 1)[1])
    assert size // 3 < at < size * 2 // 3


def test_no_false_evidence_from_magic_codes_inside_bodies(tmp_path):
    """A body holding a V2 magic code and a property string is not a record: it does not store its own
    physical offset, so the places skip it."""
    root = tmp_path / "store"
    d = root / "commitlog"
    d.mkdir(parents=True)
    buf, pos, i = bytearray(FILE), 0, 0
    fake = struct.pack(">ii", 200, -626843477) + bytes(20) + struct.pack(">q", 12345) + bytes(160)  # magic V2
    while pos + 400 < FILE:
        raw = encode_record(
            topic="TopicA", queue_id=0, queue_offset=i, phy_offset=pos, born_timestamp_ms=1, born_addr=IP,
            born_port=1, store_timestamp_ms=1, store_addr=IP, store_port=1, body=fake, properties=b"KEYS\x01k\x02",
        )  # fmt: skip
        buf[pos : pos + len(raw)] = raw
        pos, i = pos + len(raw), i + 1
    (d / f"{0:020d}").write_bytes(bytes(buf))
    (root / "consumequeue").mkdir()
    (root / "checkpoint").write_bytes(bytes(FILE_SIZE))
    got = facts(root)
    assert "v2-record" not in got
    assert "props-trailing-separator" in got


def test_places_stay_cheap_on_zeros(tmp_path):
    """A pre-allocated file of zeros after a short one: nothing found, nothing claimed."""
    root = tmp_path / "store"
    write_commitlog(root, 2, 4096, lambda f, i: ("TopicA", b"KEYS\x01k\x02"))
    (root / "commitlog" / f"{8192:020d}").write_bytes(bytes(4096))
    got = facts(root)
    assert "v2-record" not in got and "crc32-property" not in got
