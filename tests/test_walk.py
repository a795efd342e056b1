"""The recovery walk done once: the parallel fused walk (checks, CRC and dispatch columns by byte range)
decides exactly what the exact serial walk decides, and its kept columns re-dispatch the same bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import REAL_STORES, SHARED, copy_real_store

from rmqstore import recover as rec
from rmqstore import walk
from rmqstore.store import open_store

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
    monkeypatch.setattr(walk, "PART_SIZE", part_size)
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
    digests = []
    for part_size, name in ((4096, "fused"), (1 << 40, "exact")):
        root = copy_real_store(case, tmp_path / name)
        (root / "abort").touch()
        for d in ("consumequeue", "index"):
            import shutil

            shutil.rmtree(root / d, ignore_errors=True)
        monkeypatch.setattr(walk, "PART_SIZE", part_size)
        with open_store(root, writable=True) as st:
            plan = rec.plan_recover(st, now_ms=1_700_000_000_000, use_quarantine=False)
            kept = walk.kept_range(root) is not None
            rec.apply_recover(st, plan, clock=lambda: 1_700_000_000_000)
        assert kept == (name == "fused" and plan.dispatch is not None)
        digests.append(_tree_digest(root))
    assert digests[0] == digests[1]


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
            assert walk.first_nonzero(m, start, size, path=f) == (after[0] if after else None)
            assert walk.zero_tail_start(m, start, size, path=f) == (after[-1] + 1 if after else start)
            assert walk.data_end(f, start) == (after[-1] + 1 if after else start)
