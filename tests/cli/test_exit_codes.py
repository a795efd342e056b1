"""The README's exit-code table holds with and without --traceback, case by case."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import case_dir, copy_real_store, hold_lock
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.errors import EXIT_CODES

runner = CliRunner()

LATER, EARLIER = "2026-11-23T00:00:00Z", "2026-11-22T00:00:00Z"

# (name, argv with {store} for a copy of clean-2topics, exit code, text the one error line holds)
CASES = [
    ("missing store", ["info", "/nonexist"], 5, "/nonexist: no such directory"),
    ("missing broker config", ["info", "{store}", "--broker-config", "/nonexist.conf"], 1, "/nonexist.conf"),
    ("locked store", ["recover", "{store}", "-q"], 4, "held by a running broker"),
    ("locked store, dry run", ["recover", "{store}", "-q", "--dry-run"], 4, "held by a running broker"),
    ("inverted offsets", ["dump", "commitlog", "{store}", "--from-offset", "10", "--to-offset", "5"], 2, "after"),
    ("empty offsets", ["dump", "commitlog", "{store}", "--from-offset", "10", "--to-offset", "10"], 2, "equal"),
    ("inverted times", ["dump", "commitlog", "{store}", "--since", LATER, "--until", EARLIER], 2, "--since/--until"),
    ("inverted query window", ["query", "key", "{store}", "TopicA", "k", "--begin", LATER, "--end", EARLIER], 2, ""),
    ("inverted spark window", ["spark", "find", "{store}", "--since", LATER, "--until", EARLIER], 2, "--since"),
    ("empty queue page", ["dump", "consumequeue", "{store}", "TopicA", "0", "--count", "0"], 2, ""),
    ("index file is a directory", ["check", "{store}", "-q"], 6, "index/"),
    ("index file is a directory, dump", ["dump", "index", "{store}"], 6, "index/"),
    (
        "index file is a directory, expire",
        ["expire", "{store}", "--dry-run", "--force", "--now", "+1000d"],
        6,
        "index/",
    ),
    ("unknown version family", ["info", "{store}", "--broker-version", "4.x"], 2, ""),
]


def _prepare(name: str, root: Path) -> object:
    if "spark" in name:
        pytest.importorskip("pyspark")  # the extra; no Spark session is started
    if name.startswith("index file is a directory"):
        first = sorted((root / "index").iterdir())[0]
        first.unlink()
        first.mkdir()
    return hold_lock(root) if name.startswith("locked store") else None


@pytest.mark.parametrize("traceback", [False, True], ids=["plain", "traceback"])
@pytest.mark.parametrize(("name", "argv", "code", "text"), CASES, ids=[c[0] for c in CASES])
def test_exit_code(tmp_path, name, argv, code, text, traceback):
    root = copy_real_store("clean-2topics", tmp_path)
    holder = _prepare(name, root)
    try:
        args = [a.format(store=root) for a in argv]
        r = runner.invoke(app, (["--traceback"] if traceback else []) + args)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert r.exit_code == code and code in EXIT_CODES, (r.exit_code, r.output)
    last = r.stderr.strip().splitlines()[-1]
    assert text in last or text in r.stderr, r.stderr
    if code != 2:  # usage errors come from the option parser or the command: one line either way
        assert last.startswith("error: "), r.stderr
        assert ("Traceback (most recent call last)" in r.stderr) == traceback
        assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]) == 1
    assert not r.stdout.strip() or code == 2


def test_broker_version_families(tmp_path):
    if not case_dir("5.2.0/clean-5x-mixed").is_dir():
        pytest.skip("the 5.2.0 real stores are not here")
    root = copy_real_store("5.2.0/clean-5x-mixed", tmp_path)
    for given, family in [("5", "5.0-5.3.1"), ("5.x", "5.0-5.3.1"), ("5.3.3", "5.3.2+")]:
        r = runner.invoke(app, ["info", str(root), "--broker-version", given, "-f", "json"])
        assert r.exit_code == 0 and "contradicts" not in r.stderr, r.stderr
        assert json.loads(r.stdout)["brokerFamily"] == family
    for given in ("4.4", "4.9", "4.9.x"):
        r = runner.invoke(app, ["info", str(root), "--broker-version", given, "-f", "json"])
        assert r.exit_code == 0
        (warning,) = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
        assert f"--broker-version {given} " in warning and "contradicts the store" in warning
        assert json.loads(r.stdout)["brokerFamily"] == given.removesuffix(".x")


def test_no_stray_files(tmp_path):
    """A refused run leaves nothing behind (the copy is the test's own)."""
    root = copy_real_store("clean-2topics", tmp_path)
    before = sorted(p.name for p in root.iterdir())
    runner.invoke(app, ["dump", "commitlog", str(root), "--from-offset", "9", "--to-offset", "1"])
    assert sorted(p.name for p in root.iterdir()) == before
    shutil.rmtree(root)
