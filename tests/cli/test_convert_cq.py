"""`rmqstore convert --cq rocksdb|file`: the 5.2.0 RocksDB store as consume queue files and back, read by
rmqstore as the same queues, units and consumer offsets; a dry run writes nothing; the source never changes;
a run killed at any step, run again, gives the same new store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import data_files, kill_at_every_step
from rocksdbcq import decoded, engine_rows, rocksdb_store, truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.ops.check import check_store
from rmqstore.store import open_store
from rmqstore.store.offsets import read_consumer_offsets
from rmqstore.store.queue.consumequeue import FileConsumeQueues

runner = CliRunner()

OFFSETS = {"offsetTable": {"TopicA@GroupA": {"0": 7, "1": 50}, "TopicB@GroupB": {"3": 12}}}


def with_offsets(root: Path) -> Path:
    (root / "config" / "consumerOffset.json").write_text(json.dumps(OFFSETS))
    return root


def queues_of(root: Path) -> list[tuple]:
    with open_store(root) as st:
        out = []
        for q in st.consume_queues.queues():
            first, units = q.units()
            rng = q.queue_range(st.min_phy_offset())
            rows = [(int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])) for u in units]
            out.append((q.topic, q.queue_id, rng.min_offset, rng.max_offset, first, rows))
        return out


def offsets_of(root: Path) -> dict:
    with open_store(root) as st:
        return read_consumer_offsets(st)[1]


def test_both_ways_keep_queues_units_and_consumer_offsets(tmp_path: Path) -> None:
    src = with_offsets(rocksdb_store(tmp_path / "src"))
    before = data_files(src)
    files, back = tmp_path / "a" / "as-files", tmp_path / "b" / "back"
    r = runner.invoke(app, ["convert", str(src), "--cq", "file", "--output", str(files), "--write-broker-conf"])
    assert r.exit_code == 0, r.output
    assert (files.parent / "broker.conf").read_text().endswith(f"storePathRootDir={files}\nstorePathCommitLog="
                                                               f"{files}/commitlog\nstoreType=default\n")  # fmt: skip
    with open_store(files) as st:
        assert isinstance(st.consume_queues, FileConsumeQueues)
    assert queues_of(files) == queues_of(src)
    assert offsets_of(files) == offsets_of(src)
    want = [(q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in truth()["queues"]]
    assert [q[:4] for q in queues_of(files)] == want
    r = runner.invoke(app, ["convert", str(files), "--cq", "rocksdb", "--output", str(back)])
    assert r.exit_code == 0, r.output
    assert "storeType=defaultRocksDB" in r.output and not (back.parent / "broker.conf").exists()  # shown only
    assert decoded(back) == engine_rows()  # units with store times, max/min rows, checkpoint: as the engine wrote
    assert offsets_of(back) == offsets_of(src)
    for root in (files, back):
        with open_store(root) as st:
            assert check_store(st).found.get("error", 0) == 0
        assert data_files(root)["commitlog/00000000000000000000"] == before["commitlog/00000000000000000000"]
    assert data_files(src) == before


def test_dry_run_writes_nothing_and_refusals(tmp_path: Path) -> None:
    src = rocksdb_store(tmp_path / "src")
    out = tmp_path / "out"
    r = runner.invoke(app, ["convert", str(src), "--cq", "file", "--output", str(out), "--dry-run"])
    assert r.exit_code == 0 and not out.exists(), r.output
    r = runner.invoke(app, ["convert", str(src), "--cq", "rocksdb", "--output", str(out)])
    assert r.exit_code == 2 and "already in the rocksdb layout" in r.output
    out.mkdir()
    (out / "x").write_text("x")
    r = runner.invoke(app, ["convert", str(src), "--cq", "file", "--output", str(out)])
    assert r.exit_code == 8 and "not an empty directory" in r.output
    (src / "abort").write_text("1")
    r = runner.invoke(app, ["convert", str(src), "--cq", "file", "--output", str(tmp_path / "o2")])
    assert r.exit_code == 8 and "recover" in r.output


@pytest.mark.parametrize("layout", ["file", "rocksdb"])
def test_killed_at_every_step_then_rerun_gives_the_same_store(tmp_path: Path, layout: str) -> None:
    def prepare(d: Path) -> Path:
        src = rocksdb_store(d)
        if layout == "file":
            return src
        mid = d / "mid"
        assert runner.invoke(app, ["convert", str(src), "--cq", "file", "--output", str(mid)]).exit_code == 0
        return mid

    def new_store(root: Path) -> list:
        assert not (root.parent / "new.converting").exists()
        return sorted(queues_of(root.parent / "new"))

    def argv(root: Path, _q: Path) -> list[str]:
        return ["convert", str(root), "--cq", layout, "--output", str(root.parent / "new")]

    # 8: killed after the rename, the store is whole and the re-run refuses to write it again
    kill_at_every_step(tmp_path, prepare, argv, new_store, {0, 8}, "convert:finished")
