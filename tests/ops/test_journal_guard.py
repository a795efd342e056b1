"""A writing command refuses a store another command left half done (its journal is present)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import copy_real_store
from typer.testing import CliRunner

from rmqstore.cli import app

runner = CliRunner()


def digest(root: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("journal", "command"),
    [
        (("write.journal",), ["redispatch"]),
        (("write.journal",), ["recover"]),
        (("recover.journal.json",), ["write", "--topic", "TopicA", "--body", "x"]),
        (("redispatch", "redispatch.journal.json"), ["recover"]),
        (
            ("recover.journal.json",),
            ["offsets", "set", "--group", "G", "--topic", "TopicA", "--queue", "0", "--offset", "0"],
        ),
    ],
)
def test_refuses_while_another_operation_is_unfinished(
    tmp_path: Path, journal: tuple[str, ...], command: list[str]
) -> None:
    root = copy_real_store("delay-tx-retry", tmp_path)
    j = root.joinpath(".rmqstore", *journal)
    j.parent.mkdir(parents=True, exist_ok=True)
    j.write_text("{}")
    before = digest(root)
    args = (
        [command[0], str(root), *command[1:]]
        if command[0] != "offsets"
        else ["offsets", "set", str(root), *command[2:]]
    )
    r = runner.invoke(app, args)
    assert r.exit_code == 8, r.output
    op = "write" if "write" in journal[0] else journal[0].split(".")[0]
    assert f"interrupted `rmqstore {op}`" in r.stderr
    assert digest(root) == before
