"""One resume for every modifying operation: each registers how it finishes a run a kill left half done,
and that one entry point (``rmqstore.safety.journal.resume``) finishes it from the journal alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import data_files, run_with_hook
from test_kill_steps import CASES

from rmqstore.ops import expire, recover, redispatch, truncate, write  # noqa: F401  # each registers its resume
from rmqstore.safety import journal
from rmqstore.store import open_store


def test_every_operation_with_a_journal_is_registered() -> None:
    assert journal.registered() == journal.JOURNALS


@pytest.mark.parametrize("operation", ["write", "recover", "redispatch", "expire", "truncate"])
def test_a_killed_run_is_finished_through_the_one_entry_point(tmp_path: Path, operation: str) -> None:
    prepare, argv, _codes = CASES[operation]
    ref = prepare(tmp_path / "ref")
    steps_file = tmp_path / "steps.txt"
    assert run_with_hook("-", 1, steps_file, argv(ref, tmp_path / "q-ref")).returncode in (0, 9)
    steps = steps_file.read_text().split()
    step = steps[1]  # the first step after the journal is saved: half done, before any commit point
    root = prepare(tmp_path / "killed")
    untouched = data_files(root)
    killed = run_with_hook(step, 1, None, argv(root, tmp_path / "q"))
    assert killed.returncode == -9, killed.stderr
    assert [p.operation for p in journal.pending(root)] == [operation]
    with open_store(root, writable=True, operation=operation) as st:
        resumed = journal.resume(st, operation)
        assert journal.resume(st, operation) is None  # nothing is left to finish
    assert resumed is not None and resumed.operation == operation and resumed.message
    assert journal.pending(root) == []
    # a write killed before its commit point is rolled back; the others are finished as planned
    assert data_files(root) == (untouched if operation == "write" else data_files(ref)), step


def test_journals_of_earlier_versions_are_found(tmp_path: Path) -> None:
    for operation, parts in (("write", ("write.journal",)), ("redispatch", ("redispatch", "redispatch.journal.json"))):
        root = tmp_path / operation
        old = root.joinpath(".rmqstore", *parts)
        old.parent.mkdir(parents=True)
        old.write_text("{}")
        assert journal.found_journal(root, operation) == old
        (pj,) = journal.pending(root)
        assert pj.operation == operation and pj.path == old
        assert pj.to_json()["finishWith"] == f"rmqstore {operation} {root}"
