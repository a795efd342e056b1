"""`write --dry-run` lists every file the run creates or changes, and only really new topics as created."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import copy_real_store
from typer.testing import CliRunner

from rmqstore.cli import app

runner = CliRunner()


def files(root: Path) -> dict[Path, str]:
    """Every file of the store but rmqstore's own journal, with its sha256."""
    return {
        p: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and ".rmqstore" not in p.relative_to(root).parts
    }


def planned(root: Path, *args: str) -> dict:
    r = runner.invoke(app, ["write", str(root), *args, "--dry-run", "-f", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    ("case", "args"),
    [
        ("clean-2topics", ["--topic", "TopicA", "--body", "x"]),  # no config/: topics.json created
        ("clean-2topics", ["--topic", "Fresh", "--body", "x"]),
        ("crash-midwrite", ["--topic", "TopicB", "--body", "y"]),  # catch-up of 30 records, abort kept
    ],
)
def test_dry_run_lists_every_file_the_run_changes(tmp_path, case, args):
    root = copy_real_store(case, tmp_path)
    plan = planned(root, *args)
    before = files(root)
    r = runner.invoke(app, ["write", str(root), *args, "--quarantine", str(tmp_path / "q"), "-f", "json"])
    assert r.exit_code == 0, r.output
    after = files(root)
    changed = {p for p in after if before.get(p) != after[p]} | (before.keys() - after.keys())
    paths = {Path(a["path"]) for a in plan["actions"]}
    assert all(p.is_absolute() for p in paths)
    missing = sorted(str(p) for p in changed if p not in paths and p.parent not in paths)
    assert not missing, missing
    listed_files = {p for p in paths if p.name != "index"}
    assert listed_files <= changed, sorted(str(p) for p in listed_files - changed)  # nothing listed in vain


def test_topics_already_holding_messages_are_not_created(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    assert not (root / "config").exists()
    old = planned(root, "--topic", "TopicA", "--body", "x")["summary"]
    assert old["topicsCreated"] == [] and old["topicConfigsAdded"] == ["TopicA"]
    new = planned(root, "--topic", "Brand_New", "--body", "x")["summary"]
    assert new["topicsCreated"] == new["topicConfigsAdded"] == ["Brand_New"]
    actions = planned(root, "--topic", "TopicA", "--body", "x")["actions"]
    (topics,) = [a for a in actions if a["path"].endswith("/config/topics.json")]
    assert topics["action"] == "rewrite" and "TopicA" in topics["why"]
