"""``recover`` of a batch consume queue that points past the recovered end of the commit log: the units
``BatchConsumeQueue.truncateDirtyLogicFiles(processOffset)`` drops are cut and quarantined (5.x source:
from the last file back, a file whose first unit points at or past the offset is deleted; in the file
that stays, units are kept up to the first invalid one or the first at or past the offset).
Built from copies of the real 5.2.0 batch-cq store with the commit log cut in a tmp dir."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections import Counter
from pathlib import Path

import pytest
from conftest import copy_real_store
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.store.layout import list_segments
from rmqstore.store.queue.batchconsumequeue import BatchConsumeQueue

runner = CliRunner()
UNIT = 46
BCQ = "batchconsumequeue/TopicBatchCQ"


# ------------------------------------------------------------------ the rule, against the engine's loop


def engine_truncate(files: list[bytearray], phy_offset: int, file_size: int) -> list[bytearray]:
    """BatchConsumeQueue.truncateDirtyLogicFiles as the 5.x source writes it, on in-memory files: the
    write position of the last file moves back; here what lies past it is zeroed, a deleted file dropped."""
    files = [bytearray(f) for f in files]
    while files:
        f = files[-1]
        wrote, stop = 0, False
        for i in range(0, file_size, UNIT):
            offset, size, _, _, base, batch = struct.unpack_from(">qiqqqh", f, i)
            if i == 0:
                if offset >= phy_offset:
                    files.pop()
                    break
                wrote = UNIT
            elif offset >= 0 and size > 0 and base >= 0 and batch > 0:
                if offset >= phy_offset:
                    stop = True
                    break
                wrote = i + UNIT
                if wrote == file_size:
                    stop = True
                    break
            else:
                stop = True
                break
        else:
            stop = True
        if files and files[-1] is f:
            f[wrote:] = bytes(len(f) - wrote)
            break
        if stop:
            break
    return files


def unit(offset: int, size: int = 100, base: int = 0, batch: int = 1) -> bytes:
    return struct.pack(">qiqqqhii", offset, size, 7, 1_700_000_000_000, base, batch, -1, 0)


@st.composite
def queues(draw):
    per_file = draw(st.integers(1, 4))
    n = draw(st.integers(0, per_file * 4))
    offsets = sorted(draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n, unique=True)))
    raw = b"".join(unit(o, base=i) for i, o in enumerate(offsets))
    if draw(st.booleans()) and raw:  # an invalid unit in the middle (size 0)
        k = draw(st.integers(0, len(offsets) - 1))
        raw = raw[: k * UNIT] + unit(offsets[k], size=0) + raw[(k + 1) * UNIT :]
    size = per_file * UNIT
    raw += bytes(-len(raw) % size or (size if not raw else 0))
    return [bytearray(raw[i : i + size]) for i in range(0, len(raw), size)], size, draw(st.integers(0, 5100))


@given(queues())
def test_cut_matches_the_engine_loop(tmp_path_factory, case):
    files, size, phy = case
    d = tmp_path_factory.mktemp("bcq")
    for i, f in enumerate(files):
        (d / f"{i * size:020d}").write_bytes(bytes(f))
    segs, _ = list_segments(d, None)
    q = BatchConsumeQueue("T", 0, d, size)
    cuts = q.truncate_dirty(phy, q.recover())
    got = {s.path.name: bytearray(s.path.read_bytes()) for s in segs}
    for c in cuts:
        if c.verb == "delete":
            del got[c.path.name]
        else:
            got[c.path.name][c.from_pos : c.to_pos] = bytes(c.to_pos - c.from_pos)
            assert not any(got[c.path.name][c.to_pos :])  # to_pos is the end of the data
    want = engine_truncate(files, phy, size)
    assert [bytes(got[k]) for k in sorted(got)] == [bytes(f) for f in want]


def test_max_phy_is_the_last_unit_offset(tmp_path):
    """getMaxPhysicOffset of a batch queue: the last valid unit's offset, not offset + size."""
    assert BatchConsumeQueue("T", 0, tmp_path, 4 * UNIT).recover().max_physic_offset == -1
    (tmp_path / f"{0:020d}").write_bytes(unit(100, 50) + unit(150, 60) + unit(-1, 0) + bytes(UNIT))
    assert BatchConsumeQueue("T", 0, tmp_path, 4 * UNIT).recover().max_physic_offset == 150


# ------------------------------------------------------------------------ the real store, cut


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _cut_commitlog(root: Path, at: int) -> None:
    """The commit log's data from ``at`` on lost (zeros), as a crash before the page reached the disk."""
    f = root / "commitlog" / f"{0:020d}"
    fd = os.open(f, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(os.fstat(fd).st_size - at), at)
    finally:
        os.close(fd)


def _units(path: Path) -> list[int]:
    raw = path.read_bytes() if path.exists() else b""
    out = []
    for i in range(0, len(raw) - UNIT + 1, UNIT):
        off, size = struct.unpack_from(">qi", raw, i)
        if off < 0 or size <= 0:
            break
        out.append(off)
    return out


def test_clean_store_cut_past_the_end_deletes_the_file(tmp_path):
    root = copy_real_store("5.2.0/batch-cq", tmp_path / "s")
    _cut_commitlog(root, 8031)  # the last record kept is TopicPlain's at 7851
    before = _tree(root)
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert _tree(root) == before and not (tmp_path / "s" / "store.quarantine").exists()
    plan = json.loads(r.stdout)
    cuts = [a for a in plan["actions"] if "batchconsumequeue" in a["path"]]
    assert [(Path(a["path"]).parts[-2:], a["action"]) for a in cuts] == [(("1", f"{368:020d}"), "delete")]
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output
    assert not (root / BCQ / "1" / f"{368:020d}").exists()
    assert _units(root / BCQ / "1" / f"{0:020d}")[-1] == 6625
    assert _units(root / BCQ / "0" / f"{368:020d}") == [6994, 7662]  # all before the end: untouched
    (manifest,) = (tmp_path / "q").rglob("manifest.json")
    saved = json.loads(manifest.read_text())
    assert str((root / BCQ / "1" / f"{368:020d}").resolve()) in json.dumps(saved)
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert not [a for a in json.loads(r.stdout)["actions"] if "batchconsumequeue" in a["path"]]


def _crashed(tmp: Path) -> Path:
    """A crash while writing: the commit log from 8815 on never reached the disk, abort left behind."""
    root = copy_real_store("5.2.0/batch-cq", tmp)
    _cut_commitlog(root, 8815)
    (root / "abort").write_text("4242")
    return root


def test_crash_cut_keeps_exactly_the_units_before_the_end(tmp_path):
    orig = copy_real_store("5.2.0/batch-cq", tmp_path / "orig")
    root = _crashed(tmp_path / "s")
    r = runner.invoke(app, ["recover", str(root), "-q", "--quarantine", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output
    for qid in ("0", "1"):
        for f in sorted((orig / BCQ / qid).iterdir()):
            want = [o for o in _units(f) if o < 8815]
            assert _units(root / BCQ / qid / f.name) == want, (qid, f.name)
            got, old = (root / BCQ / qid / f.name).read_bytes(), f.read_bytes()
            n = len(want) * UNIT
            assert got[:n] == old[:n] and not any(got[n:])  # the kept units byte for byte, zeros after
    r = runner.invoke(app, ["check", str(root), "--format", "json"])
    problems = json.loads(r.stdout)["problems"] if r.stdout.strip().startswith("{") else []
    assert not [p for p in problems if "batchconsumequeue" in json.dumps(p)]
    r = runner.invoke(app, ["dump", "consumequeue", str(root), "TopicBatchCQ", "1", "--format", "json"])
    assert max(u["commitLogOffset"] for u in json.loads(r.stdout)) == 8031


def test_crash_cut_killed_at_every_step_then_rerun(tmp_path):
    from conftest import data_files, run_with_hook

    def argv(root: Path, q: Path) -> list[str]:
        return ["recover", str(root), "-q", "--quarantine", str(q)]

    ref = _crashed(tmp_path / "ref")
    steps_file = tmp_path / "steps.txt"
    p = run_with_hook("-", 1, steps_file, argv(ref, tmp_path / "q-ref"))
    assert p.returncode == 0, p.stderr
    steps = steps_file.read_text().split()
    assert "recover:cq-truncate#1" in steps
    want = data_files(ref)
    seen: Counter[str] = Counter()
    for i, step in enumerate(steps):
        seen[step] += 1
        if step.endswith("finished"):
            continue
        root = _crashed(tmp_path / f"run{i}")
        killed = run_with_hook(step, seen[step], None, argv(root, tmp_path / f"q{i}"))
        assert killed.returncode == -9, (step, killed.stderr)
        again = runner.invoke(app, argv(root, tmp_path / f"q{i}"))
        assert again.exit_code == 0, (step, again.output)
        assert data_files(root) == want, f"killed at {step}, then re-run"


@pytest.mark.parametrize("at", [8031, 8815])
def test_plan_names_the_units_cut(tmp_path, at):
    root = copy_real_store("5.2.0/batch-cq", tmp_path)
    _cut_commitlog(root, at)
    r = runner.invoke(app, ["recover", str(root), "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    cuts = [a for a in json.loads(r.stdout)["plan"]["actions"] if "batchconsumequeue" in a["path"]]
    assert cuts and all(a["step"] == "cq-truncate" and a["entriesTotal"] >= 1 for a in cuts)
    assert all("processOffset" in a["why"] for a in cuts)
