"""The recovery walk done once: the parallel fused walk (checks, CRC and dispatch columns by byte range)
decides exactly what the exact serial walk decides, and its kept columns re-dispatch the same bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import REAL_STORES, SHARED, copy_real_store

from rmqstore.codec.commitlog import MAGIC_V2
from rmqstore.errors import CorruptData
from rmqstore.ops import recover as rec
from rmqstore.store import open_store
from rmqstore.store.files import data_end
from rmqstore.store.layout import Segment
from rmqstore.walk import checked
from rmqstore.walk import kept as kept_module
from rmqstore.walk.chain import Stop, StopKind, indexed, queued, walk_chain
from rmqstore.walk.checked import kept_range
from rmqstore.walk.starts import RecordStarts, first_nonzero, zero_tail_start

_CASES = ("clean-2topics", "crash-midwrite", "delay-tx-retry", "crash-5x-midwrite", "long-topic-v2", "clean-5x-mixed")
STORES = [
    (base, case)
    for base in ("real-stores", "real-stores-4.9.4", "real-stores-5.2.0")
    for case in _CASES
    if (SHARED / base / case / "store").is_dir()
] or [pytest.param("real-stores", "clean-2topics", marks=pytest.mark.skip(reason=f"no real stores under {SHARED}"))]


def _copy(base: str, case: str, dest: Path) -> Path:
    src = SHARED / base / case
    if not (src / "store").is_dir():
        pytest.skip(f"{src} not found")
    if base == "real-stores":
        return copy_real_store(case, dest)
    import shutil

    shutil.copytree(src / "store", dest / "store")
    if (src / "broker.conf").exists():
        shutil.copy2(src / "broker.conf", dest / "broker.conf")
    return dest / "store"


def _flip_body_bit(root: Path) -> None:
    """Flip one body bit of a record in the middle of the first commit log file."""
    from rmqstore.codec.commitlog import decode_record

    f = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(f.read_bytes())
    pos, seen = 0, []
    while pos + 8 <= len(data):
        try:
            r = decode_record(data, pos)
        except Exception:
            break
        if not hasattr(r, "body"):
            break
        if r.body:
            seen.append(
                pos + r.total_size - len(r.body) - 2 - len(r.properties_raw.encode()) - 1 - len(r.topic.encode())
            )
        pos += r.total_size
    if not seen:
        pytest.skip("no record with a body")
    data[seen[len(seen) // 2]] ^= 0x10
    f.write_bytes(bytes(data))


def _plan(root: Path, part_size: int, monkeypatch: pytest.MonkeyPatch, crc: bool = True) -> dict:
    monkeypatch.setattr(checked, "PART_SIZE", part_size)
    with open_store(root, writable=False) as st:
        plan = rec.plan_recover(st, now_ms=1_700_000_000_000, check_crc=crc)
    return plan.to_json()


@pytest.mark.parametrize("damage", [False, True])
@pytest.mark.parametrize(("base", "case"), STORES)
def test_fused_walk_plans_what_the_exact_walk_plans(
    base: str, case: str, damage: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(base, case, tmp_path)
    if damage:
        _flip_body_bit(root)
    (root / "abort").touch()  # recovery from the first file back to the start: the whole chain
    exact = _plan(root, 1 << 40, monkeypatch)
    fused = _plan(root, 4096, monkeypatch)
    assert fused == exact


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for d in ("consumequeue", "index"):
        for p in sorted((root / d).rglob("*")) if (root / d).is_dir() else []:
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    out["checkpoint"] = hashlib.sha256((root / "checkpoint").read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("case", ["clean-2topics", "crash-midwrite", "delay-tx-retry"])
def test_kept_columns_redispatch_the_same_bytes(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    """Columns kept in memory, columns spilled past the memory budget to the temporary file, and the
    second decode of the exact walk's re-dispatch write the same consume queues, index and checkpoint."""
    digests = []
    for part_size, budget, name in ((4096, 1 << 40, "fused"), (4096, 0, "spilled"), (1 << 40, 0, "exact")):
        root = copy_real_store(case, tmp_path / name)
        (root / "abort").touch()
        for d in ("consumequeue", "index"):
            import shutil

            shutil.rmtree(root / d, ignore_errors=True)
        monkeypatch.setattr(checked, "PART_SIZE", part_size)
        monkeypatch.setattr(kept_module, "MEMORY_BUDGET", budget)
        with open_store(root, writable=True) as st:
            plan = rec.plan_recover(st, now_ms=1_700_000_000_000, use_quarantine=False)
            kept = kept_range(root) is not None
            held = checked._KEPT.get(str(root.resolve()))
            spilled = held is not None and held.batches.spilled
            rec.apply_recover(st, plan, clock=lambda: 1_700_000_000_000)
        assert kept == (name != "exact" and plan.dispatch is not None)
        assert spilled == (name == "spilled" and plan.dispatch is not None)
        digests.append(_tree_digest(root))
    assert digests[0] == digests[1] == digests[2]


@pytest.mark.parametrize(
    "pieces",
    [
        [(0, b"")],
        [(5000, b"\x01")],
        [(0, b"abc"), (1 << 20, b"\x00\x00z")],
        [(4096 * 3 + 7, b"x" * 10), (9 << 20, b"\x00" * 100)],
    ],
)
def test_end_of_data_through_extents_matches_the_bytes(pieces: list[tuple[int, bytes]], tmp_path: Path) -> None:
    """first_nonzero / zero_tail_start / data_end on a sparse file agree with a plain scan of its bytes."""
    import mmap

    f = tmp_path / "seg"
    size = 12 << 20
    with open(f, "wb") as fh:
        for at, data in pieces:
            fh.seek(at)
            fh.write(data)
        fh.truncate(size)
    raw = f.read_bytes()
    nz = [i for i, b in enumerate(raw) if b] if any(raw) else []
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for start in (0, 100, 5001, 1 << 20):
            after = [i for i in nz if i >= start]
            assert first_nonzero(m, start, size, path=f) == (after[0] if after else None)
            assert zero_tail_start(m, start, size, path=f) == (after[-1] + 1 if after else start)
            assert data_end(f, start) == (after[-1] + 1 if after else start)


# ------------------------------------------------------------------ the walker's API: stops, chain, facts


def test_stop_is_typed_and_says_where() -> None:
    err = CorruptData("bad magic", path="x", pos=7)
    stop = Stop(7, "invalid", err, Path("x"), 1 << 30)
    assert stop.kind is StopKind.INVALID and stop.kind == "invalid" and stop.reason == "invalid"
    assert stop.phy_offset == (1 << 30) + 7
    assert "bad magic" in stop.explanation
    assert Stop(0, StopKind.BLANK).explanation.startswith("blank record")
    with pytest.raises(ValueError):
        Stop(0, "sideways")


def test_walk_chain_goes_on_only_after_a_blank() -> None:
    segs = [Segment(Path(f"f{i}"), i * 100, 100) for i in range(4)]
    kinds = {0: StopKind.BLANK, 1: StopKind.BLANK, 2: StopKind.INVALID, 3: StopKind.END}
    seen = []

    class _W:
        def __init__(self, seg: Segment, pos: int) -> None:
            seen.append((seg.base_offset, pos))
            self.stop = Stop(50, kinds[seg.base_offset // 100], None, seg.path, seg.base_offset)

    out = list(walk_chain(segs, 0, _W, start_pos=30))
    assert seen == [(0, 30), (100, 0), (200, 0)]  # the INVALID stop of the third file ends the chain
    assert out[-1].stop.phy_offset == 250
    assert [w.stop.kind for w in walk_chain(segs, 3, _W)] == [StopKind.END]
    assert [w.stop.kind for w in walk_chain(segs[:2], 0, _W)] == [StopKind.BLANK] * 2  # no next file


def test_queued_and_indexed_follow_the_transaction_type() -> None:
    import numpy as np

    flags = np.array([0x0, 0x4, 0x8, 0xC, 0x8 | 0x1, 0x10 | 0x4], dtype=np.int64)  # other bits do not matter
    assert queued(flags).tolist() == [True, False, True, False, True, False]
    assert indexed(flags).tolist() == [True, True, True, False, True, True]
    assert bool(queued(0x8)) and not bool(indexed(0xC))


@pytest.mark.parametrize(("base", "case"), STORES)
def test_recovery_facts_are_what_the_plan_and_the_forecast_use(base: str, case: str, tmp_path: Path) -> None:
    from rmqstore.ops.check import check_store

    root = _copy(base, case, tmp_path)
    with open_store(root, writable=False) as st:
        facts = rec.recovery_facts(st)
        plan = rec.plan_recover(st, now_ms=1_700_000_000_000)
        report = check_store(st)
    assert facts.process_offset == plan.process_offset
    assert facts.start_phy == plan.start_phy and facts.max_cq == plan.max_phy_offset_cq
    assert plan.stop.startswith(facts.end.stop)
    ends = {(q.topic, q.queue_id): q.end for q in facts.queues.values()}
    for q in plan.queue_ends:
        seg_base = int(q.last_file) if q.last_file else 0
        assert ends[(q.topic, q.queue_id)] == seg_base + q.end_pos
    assert report.recovery is not None and report.recovery.start_file == plan.start_file


def _first_file(root: Path) -> tuple[bytes, Segment]:
    f = sorted((root / "commitlog").iterdir())[0]
    data = f.read_bytes()
    return data, Segment(f, int(f.name), len(data))


@pytest.mark.parametrize(("base", "case"), STORES)
def test_one_resync_finds_the_next_record_after_damage(base: str, case: str, tmp_path: Path) -> None:
    from rmqstore.walk.requests import scan_requests

    root = _copy(base, case, tmp_path)
    data, seg = _first_file(root)
    with open_store(root, writable=False) as st:
        reqs, stop = scan_requests(data, seg, st.config)
    if len(reqs) < 3:
        pytest.skip("fewer than three records")
    starts = [r.phy_offset - seg.base_offset for r in reqs]
    damaged = bytearray(data)
    damaged[starts[1] : starts[1] + 8] = b"\xff" * 8  # TOTALSIZE and magic of the second record
    rs = RecordStarts(bytes(damaged), len(damaged), seg.base_offset)
    assert rs.resync(starts[1] - 1) == starts[2]
    assert rs.resync(starts[0]) == starts[2]
    last = RecordStarts(data, len(data), seg.base_offset).resync(starts[-1])
    assert last is None or (stop.kind is StopKind.BLANK and last == stop.pos)
    magic_v2 = int.from_bytes(data[starts[2] + 4 : starts[2] + 8], "big") == MAGIC_V2
    no_v2 = RecordStarts(bytes(damaged), len(damaged), seg.base_offset, v2=False).resync(starts[1] - 1)
    assert (no_v2 != starts[2]) if magic_v2 else (no_v2 == starts[2])
