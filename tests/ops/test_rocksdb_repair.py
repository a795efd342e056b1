"""A RocksDB consume queue damaged four ways (database removed, rows removed, units past the commit log end, a
crash that left the database empty): ``check`` names each with its queue and offset; ``recover`` and
``redispatch`` rebuild the database to what the 5.2.0 engine rebuilds (rebuild.json, judged by the decoded
rows, not by file bytes), with the old database whole in the quarantine; killed (SIGKILL) at every step and
run again, they end in the same state."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import data_files, kill_at_every_step
from rocksdbcq import (
    add_unit_past_end,
    decoded,
    empty_database,
    rebuilt_rows,
    remove_units,
    rocksdb_store,
)
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.ops.check import check_store
from rmqstore.store import open_store

runner = CliRunner()
END = 101924  # where the commit log's records end


def removed(root: Path) -> None:
    shutil.rmtree(root / "consumequeue")


def rows_removed(root: Path) -> None:
    remove_units(root, "TopicA", 1, range(40, 50))


def max_row_removed(root: Path) -> None:
    remove_units(root, "TopicB", 2, range(0), max_row=True)


def past_end(root: Path) -> None:
    add_unit_past_end(root, "TopicA", 0, 50, END + 1000)


def crashed(root: Path) -> None:
    empty_database(root)
    (root / "abort").write_text("4242")


DAMAGE: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    # damage: (how, what check says about it, each a piece of one problem's text)
    "removed": (removed, ("no consume queue database",)),
    "rows-removed": (rows_removed, ("TopicA queue 1: max row names queue offset 49, which has no unit",)),
    "max-row-removed": (max_row_removed, ("TopicB queue 2: units up to queue offset 49 but no max row",)),
    "past-end": (
        past_end,
        (
            f"dispatch checkpoint row {END + 1200} is past the commit log end {END}",
            f"TopicA queue 0: unit at queue offset 50 points past the commit log end {END}",
        ),
    ),  # fmt: skip
    "crashed": (crashed, ("no dispatch checkpoint row",)),
}


def damaged(tmp: Path, how: str) -> Path:
    root = rocksdb_store(tmp)
    DAMAGE[how][0](root)
    return root


@pytest.mark.parametrize("how", list(DAMAGE))
def test_check_names_the_damage(tmp_path: Path, how: str) -> None:
    root = damaged(tmp_path, how)
    with open_store(root) as st:
        report = check_store(st)
    texts = [p.what for p in report.problems]
    for want in DAMAGE[how][1]:
        assert any(want in t for t in texts), (want, texts)
    if how in ("removed", "crashed", "rows-removed"):  # records without their unit are named by offset
        assert any(w in t for t in texts for w in ("not in any consume queue", "missing from its consume queue")), texts


def test_check_is_clean_on_the_engine_store(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    with open_store(root) as st:
        report = check_store(st)
    assert report.found.get("error", 0) == 0 and report.found.get("warning", 0) == 0, report.problems


@pytest.mark.parametrize("how", list(DAMAGE))
@pytest.mark.parametrize("command", ["recover", "redispatch"])
def test_rebuilt_to_what_the_engine_serves(tmp_path: Path, how: str, command: str) -> None:
    root = damaged(tmp_path, how)
    q = tmp_path / "q"
    r = runner.invoke(app, argv(command, root, q))
    assert r.exit_code == 0, r.output
    assert decoded(root) == rebuilt_rows()
    kept = list(q.glob("*/files/consumequeue"))
    had_database = how != "removed"
    assert len(kept) == (1 if had_database else 0), kept  # the old database, whole
    if had_database:
        assert (kept[0] / "CURRENT").is_file()
    if (root / "abort").exists():  # redispatch leaves the crash itself to recover
        return
    again = runner.invoke(app, argv("recover", root, tmp_path / "q2"))
    assert again.exit_code == 0 and "steps              none" in again.output, again.output


def test_recover_leaves_a_database_in_line_with_the_commit_log_alone(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    before = data_files(root)
    r = runner.invoke(app, argv("recover", root, tmp_path / "q"))
    assert r.exit_code == 0 and "steps              none" in r.output, r.output
    assert data_files(root) == before


def test_redispatch_refuses_per_topic_rebuild_of_the_database(tmp_path: Path) -> None:
    root = rocksdb_store(tmp_path)
    r = runner.invoke(app, ["redispatch", str(root), "--topic", "TopicA", "--dry-run"])
    assert r.exit_code == 1 and "one RocksDB database" in r.output


def argv(command: str, root: Path, q: Path) -> list[str]:
    version = ["--broker-version", "5.2.0"] if command == "recover" else []
    return [command, str(root), "-q", "--quarantine", str(q), *version]


def state(root: Path) -> tuple[dict, dict]:
    """What the engine reads: the decoded database and every other file's bytes."""
    files = {k: v for k, v in data_files(root).items() if not k.startswith("consumequeue/")}
    return decoded(root), files


@pytest.mark.parametrize("command", ["recover", "redispatch"])
def test_killed_at_every_step_then_rerun_ends_the_same(tmp_path: Path, command: str) -> None:
    steps = kill_at_every_step(
        tmp_path,
        lambda d: damaged(d, "rows-removed"),
        lambda root, q: argv(command, root, q),
        state,
        {0},
        f"{command}:finished",
    )
    for i in range(len(steps)):  # the old database is kept whole, whichever step the kill came at
        assert list((tmp_path / f"q{i}").glob("*/files/consumequeue/CURRENT")), steps[i]
