"""`truncate`: the cut at a record boundary or time, what it leaves (commit log, queues, index, checkpoint),
the quarantine that holds every removed byte, the dry run, and the refusals."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import copy_real_store, copy_replica, data_files, hold_lock
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec import checkpoint as cpmod
from rmqstore.codec import indexfile as ix
from rmqstore.codec.commitlog import Blank
from rmqstore.ops import query
from rmqstore.store import open_store
from rmqstore.store.files import map_file
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()
CUT = 76189  # commonEnd of replica-diverged-midfile


@pytest.fixture()
def master(tmp_path: Path) -> Path:
    return copy_replica("replica-diverged-midfile", "b", tmp_path / "b")


def _messages(root: Path) -> list:
    with open_store(root) as st:
        return [r for _, r in iter_commitlog(st) if not isinstance(r, Blank)]


def test_the_cut_keeps_exactly_the_records_before_it(master: Path, tmp_path: Path) -> None:
    before = _messages(master)
    kept = [r for r in before if r.phy_offset < CUT]
    gone = [r for r in before if r.phy_offset >= CUT]
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "-f", "json", "--quarantine", str(tmp_path / "q")])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["summary"]["recordsRemoved"] == len(gone) == 40
    assert [(m.phy_offset, m.body) for m in _messages(master)] == [(m.phy_offset, m.body) for m in kept]
    cfg_slots, cfg_entries = 128, 512
    with open_store(master) as st:
        for q in st.consume_queues.queues():
            first, units = q.units()
            assert (units["phy_offset"] < CUT).all()
            assert first + len(units) == sum(1 for m in kept if (m.topic, m.queue_id) == (q.topic, q.queue_id))
        files, _ = st.index_files()
        for p in files:
            with map_file(p) as buf:
                f = ix.IndexFile(buf, slots=cfg_slots, entries=cfg_entries)
                h = f.header()
                assert (f.entries_array()["phy_offset"][1:] < CUT).all()
                assert h.end_phy_offset < CUT and h.end_timestamp_ms <= kept[-1].store_timestamp_ms
        cp = st.read_checkpoint()
        assert (
            max(cp.physic_msg_timestamp_ms, cp.logics_msg_timestamp_ms, cp.index_msg_timestamp_ms)
            <= kept[-1].store_timestamp_ms
        )
        for m in (kept[-1], gone[0]):
            key = (m.keys or "").split(" ")[0]
            hits = query.query_key(st, m.topic, key).hits
            assert (m.phy_offset in {h.phy_offset for h in hits}) == (m is kept[-1]), key


def test_every_removed_byte_is_in_the_quarantine(master: Path, tmp_path: Path) -> None:
    original = {p: p.read_bytes() for p in master.rglob("*") if p.is_file()}
    q = tmp_path / "q"
    assert runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "-q", "--quarantine", str(q)]).exit_code == 0  # fmt: skip
    [folder] = q.iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    changed = {p for p, data in original.items() if not p.exists() or p.read_bytes() != data}
    saved = {Path(i["path"]) for i in manifest["items"]}
    assert changed <= saved
    for item in manifest["items"]:
        data = Path(item["saved"]).read_bytes()
        whole = original[Path(item["path"])]
        assert data == (whole[item["from"] : item["to"]] if item["kind"] == "range" else whole)
    for item in reversed(manifest["items"]):  # restore: the store is back as it was
        subprocess.run(item["restore"], shell=True, check=True, capture_output=True)
    assert {p: p.read_bytes() for p in original} == original


def test_a_dry_run_writes_nothing(master: Path, tmp_path: Path) -> None:
    before = data_files(master)
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "--dry-run", "--quarantine", str(tmp_path / "q")])  # fmt: skip
    assert r.exit_code == 0 and "commitlog-truncate" in r.stdout
    assert data_files(master) == before and not (tmp_path / "q").exists() and not (master / ".rmqstore").exists()


def test_an_offset_inside_a_record_is_refused_with_the_nearest_boundaries(master: Path) -> None:
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT + 1)])
    assert r.exit_code == 2
    assert f"nearest record boundaries are {CUT} and {CUT + 286}" in r.output
    assert runner.invoke(app, ["truncate", str(master), "--to-offset", "99999999"]).exit_code == 2


def test_to_time_cuts_at_the_first_record_stored_then(master: Path) -> None:
    first_gone = next(m for m in _messages(master) if m.phy_offset >= CUT)
    r = runner.invoke(app, ["truncate", str(master), "--to-time", str(first_gone.store_timestamp_ms), "-n", "-f", "json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["summary"]["toOffset"] == CUT


def test_a_crashed_or_running_store_is_refused(master: Path) -> None:
    before = data_files(master)
    proc = hold_lock(master)
    try:
        assert runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT)]).exit_code == 4
    finally:
        proc.kill()
        proc.wait()
    (master / "abort").write_bytes(b"")
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT)])
    assert r.exit_code == 8 and "rmqstore recover" in r.output
    (master / "abort").unlink()
    assert data_files(master) == before


def test_the_5x_checkpoint_offsets_come_back_to_the_cut(master: Path) -> None:
    cp_path = master / "checkpoint"
    page = cpmod.with_confirm_offset(cpmod.with_master_flushed_offset(cp_path.read_bytes(), 86305), 86000)
    cp_path.write_bytes(page)
    assert runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "-q", "--no-quarantine"]).exit_code == 0  # fmt: skip
    cp = cpmod.decode(cp_path.read_bytes())
    assert (cp.master_flushed_offset, cp.confirm_phy_offset) == (CUT, CUT)


def test_apply_is_asked_on_a_terminal(master: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmqstore.cli import _plan

    class Tty:
        stdin = stdout = type("T", (), {"isatty": staticmethod(lambda: True)})()

    monkeypatch.setattr(_plan, "sys", Tty)
    before = data_files(master)
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "-f", "plain"], input="n\n")
    assert r.exit_code == 0 and "Apply?" in r.output
    assert data_files(master) == before
    r = runner.invoke(app, ["truncate", str(master), "--to-offset", str(CUT), "-f", "plain", "-q"], input="y\n")
    assert r.exit_code == 0 and data_files(master) != before


def test_a_dledger_store_is_compared_by_entries_and_cut_with_its_ledger(tmp_path: Path) -> None:
    """The real 5.2.0 DLedger store: its last three entries cut from one copy (data, the DLedger index
    units, the member checkpoint and its .bak); diff then finds the other copy ahead by exactly them."""
    full = copy_real_store("5.2.0/dledger-5x-clean", tmp_path / "full")
    cut = copy_real_store("5.2.0/dledger-5x-clean", tmp_path / "cut")
    entry = 120399  # the entry of the third record from the end (its record is at entry + 48)
    r = runner.invoke(app, ["truncate", str(cut), "--to-offset", str(entry), "-f", "json", "--no-quarantine"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["summary"]["recordsRemoved"] == 3
    member = dict(line.split("=") for line in (cut / "dledger-n0" / "checkpoint").read_text().split())
    assert member == {"committedIndex": "396", "endIndex": "396"}
    assert (cut / "dledger-n0" / "checkpoint.bak").read_text() == (cut / "dledger-n0" / "checkpoint").read_text()
    info = json.loads(runner.invoke(app, ["info", str(cut), "-f", "json"]).stdout)
    assert info["problems"] == [] and info["dledger"]["ledgerEndIndex"] == 396
    assert info["dledger"]["indexWritePos"] == 397 * 32 and info["dledger"]["dataWritePos"] == entry
    d = json.loads(runner.invoke(app, ["diff", str(full), str(cut), "-f", "json"]).stdout)
    assert (d["relation"], d["commonEnd"], d["a"]["recordsAfterCommonEnd"]) == ("b-behind", entry, 3)
    assert d["firstDifferenceA"]["offset"] == entry + 48
    r = runner.invoke(app, ["truncate", str(full), "--to-offset", str(entry + 48)])
    assert r.exit_code == 2 and f"{entry} and" in r.output  # inside the entry: the header is part of it


@pytest.mark.parametrize("case", ["5.2.0/lmq-multi-dispatch", "5.2.0/batch-cq"])
def test_lmq_and_batch_queues_are_cut_too(tmp_path: Path, case: str) -> None:
    root = copy_real_store(case, tmp_path / "s")
    msgs = _messages(root)
    cut = msgs[len(msgs) // 2].phy_offset
    assert runner.invoke(app, ["truncate", str(root), "--to-offset", str(cut), "-q", "--no-quarantine"]).exit_code == 0  # fmt: skip
    with open_store(root) as st:
        queues = [*st.consume_queues.queues(), *st.batch_queues.queues()]
        assert any(q.topic.startswith("%LMQ%") for q in queues) or st.batch_queues.queues()
        for q in queues:
            _, units = q.units()
            assert (units["phy_offset"] < cut).all(), (q.topic, q.queue_id)
    assert runner.invoke(app, ["check", str(root)]).exit_code == 0
