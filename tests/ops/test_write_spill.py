"""A write whose planned bytes exceed the memory budget: spilled to a temporary file, written the same.

With the budget at zero every encoded record goes through the temporary file; the store written must
be the same byte for byte as with the default budget (both lanes, roll-overs into new files), the dry
run's plan the same, a kill -9 while the spilled bytes are copied rolled back by the next write, and a
full temporary directory one clear error with the store untouched.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, copy_real_store
from test_hostile_files import fill, small_disk
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.ops import write as wr
from rmqstore.ops.write import append as append_mod
from rmqstore.ops.write import columns as columns_mod
from rmqstore.ops.write import plan as plan_mod
from rmqstore.ops.write import spill as spill_mod
from rmqstore.ops.write.spill import SpilledPiece

FIXED = {"clock": lambda: 1_800_000_000_000, "uniq_keys": wr.UniqKeySource(seed=3), "topic_queue_nums": 4}


def _lines(n: int) -> bytes:
    out = []
    for i in range(n):
        m = {"topic": f"T{i % 3}", "tags": "TagA", "keys": f"k-{i}", "uniqKey": f"C0A8000A1F9018B4AAC22A3B{i:08X}"}
        m |= {"wait": True, "properties": {"traceId": f"t{i}"}, "body": "b" * (50 + i % 300)}
        out.append(json.dumps(m, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def _one_by_one(n: int) -> list[wr.Message]:
    return [
        wr.Message(topic="Orders", queue_id=i % 2, body=bytes([i % 256]) * (i % 900), keys=f"o{i} x", flag=i % 5)
        for i in range(n)
    ]


def _hashes(root: Path) -> dict[str, str]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".rmqstore" not in p.parts)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _write_both(root: Path, **kw: object) -> list[wr.WriteResult]:
    batch, _ = wr.read_ndjson_stream(io.BytesIO(_lines(400)), source="in")
    fixed = FIXED | {"uniq_keys": wr.UniqKeySource(seed=3)}
    return [wr.write_messages(root, m, again=True, **fixed, **kw) for m in (batch, _one_by_one(120))]  # type: ignore[arg-type]


def _spill_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill_mod, "MEMORY_BUDGET", 0)
    monkeypatch.setattr(append_mod, "_CHUNK_LIMIT", 0)
    monkeypatch.setattr(columns_mod, "COLUMNS_BUDGET", 0)  # the dispatch columns too, in short segments
    monkeypatch.setattr(columns_mod, "SEGMENT_RECORDS", 37)
    monkeypatch.setattr(plan_mod, "_FAST_BLOCK", 50)  # segments are cut between blocks


def _records(res: wr.WriteResult) -> tuple[list[dict[str, object]], object]:
    recs = res.plan.records
    return [r.to_json() for r in recs], recs.columns(0, len(recs))


def test_a_spilled_plan_writes_the_same_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = copy_real_store("clean-2topics", tmp_path / "kept")
    spilled = copy_real_store("clean-2topics", tmp_path / "spilled")
    dry_kept = [r.plan.to_json() for r in _write_both(kept, dry_run=True)]
    written = _write_both(kept)
    for res in written:
        assert not any(isinstance(p, SpilledPiece) for w in res.plan.writes for p in w.pieces)
        assert not any(isinstance(s, SpilledPiece) for s in res.plan.records._segments)
    _spill_everything(monkeypatch)
    dry_spilled = [r.plan.to_json() for r in _write_both(spilled, dry_run=True)]
    assert json.dumps(dry_spilled).replace("/spilled/", "/kept/") == json.dumps(dry_kept)
    results = _write_both(spilled)
    pieces = [p for r in results for w in r.plan.writes for p in w.pieces]
    assert pieces and all(isinstance(p, SpilledPiece) for p in pieces)
    assert len(results[0].plan.writes) > 3  # rolled over into new files
    assert _hashes(spilled.parent) == _hashes(kept.parent)
    for a, b in zip(results, written, strict=True):
        segments = a.plan.records._segments
        assert len(segments) >= 3 and all(isinstance(s, SpilledPiece) for s in segments)
        (rows_a, cols_a), (rows_b, cols_b) = _records(a), _records(b)
        assert rows_a == rows_b and rows_a[-1]["commitLogOffset"] + rows_a[-1]["storeSize"] == a.plan.end_phy
        assert all((getattr(cols_a, f) == getattr(cols_b, f)).all() for f in ("phy", "queue_offset", "key_hash"))


_KILL = textwrap.dedent(
    """\
    import io, os, sys
    sys.path.insert(0, {repo!r})
    from rmqstore.ops import write as wr
    from rmqstore.ops.write import append, columns, spill
    spill.MEMORY_BUDGET = columns.COLUMNS_BUDGET = 0
    append._CHUNK_LIMIT = 0
    columns.SEGMENT_RECORDS = 16
    copies = []
    write_to = spill.SpilledPiece.write_to
    def die(self, fd, at):
        write_to(self, fd, at)
        copies.append(at)
        if len(copies) == 3:
            os._exit(9)  # killed while the spilled bytes are copied into the commit log
    spill.SpilledPiece.write_to = die
    msgs = [wr.Message(topic="TopicA", queue_id=i % 4, body=b"k" * 700, keys="kill") for i in range(200)]
    wr.write_messages({root!r}, msgs)
    """
)


def test_a_kill_while_copying_spilled_bytes_is_rolled_back(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    before = _hashes(root.parent)
    proc = subprocess.run([sys.executable, "-c", _KILL.format(repo=str(REPO), root=str(root))], timeout=120)
    assert proc.returncode == 9
    assert wr.pending_journal(root) is not None and _hashes(root.parent) != before
    res = wr.write_messages(root, [], **FIXED)  # nothing to write: only the rollback of the killed run
    assert res.rolled_back is not None and wr.pending_journal(root) is None
    assert _hashes(root.parent) == before


def test_a_full_temporary_directory_is_one_error_and_the_store_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_real_store("clean-2topics", tmp_path / "s")
    before = _hashes(root.parent)
    _spill_everything(monkeypatch)
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, 8 << 10)
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        with pytest.raises(OSError) as e:
            wr.write_messages(root, _one_by_one(300), **FIXED)
        assert e.value.filename == str(disk) and e.value.errno == 28
        source = tmp_path / "in.ndjson"
        source.write_bytes(_lines(300))
        res = CliRunner().invoke(app, ["write", str(root), str(source), "-q"])
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.exit_code == 1 and len(lines) == 1, res.stderr
        assert "no space left on the device" in lines[0] and str(disk) in lines[0], lines
    assert _hashes(root.parent) == before and wr.pending_journal(root) is None
