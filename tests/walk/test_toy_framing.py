"""The framing seam: every command gives the same answers on a store whose commit log records sit in toy
frames (tests/toy_framing.py) as on the same store in plain files, offsets aside.

Both sides get their consume queues and index files from ``redispatch`` (through the walker); then
each command's JSON output on the toy store, with its commit log offsets mapped back to the plain
store's, must equal its output on the plain store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SHARED
from toy_framing import toy_store, wrap_store
from typer.testing import CliRunner

from rmqstore.cli import app

runner = CliRunner()
SMALL = REPO / "fixtures" / "stores" / "small"
_REAL = [("real-stores", "clean-2topics"), ("real-stores-4.9.4", "clean-2topics")]
CASES = ["small"] + [f"{base}/{case}" for base, case in _REAL if (SHARED / base / case / "store").is_dir()]

# Fields that name where a record is, not what it is: file names, positions inside a file, message
# ids (they hold the offset), and sizes of whole files.
_WHERE = {"msgId", "offsetMsgId", "file", "path", "pos", "position", "fileName", "files", "sizeBytes", "bytes"}


def _invoke(*args: str) -> Any:
    r = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})
    assert r.exit_code in (0, 3), f"{args}: exit {r.exit_code}\n{r.output}"
    out = r.stdout.strip()
    return [json.loads(line) for line in out.splitlines()] if "ndjson" in args else json.loads(out)


def _source(case: str) -> Path:
    return SMALL if case == "small" else SHARED / case


def _rebuilt(root: Path) -> None:
    """Consume queues and index files of ``root`` made by redispatch from its commit log."""
    for sub in ("consumequeue", "index", "checkpoint", "abort"):
        p = root / sub
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    _invoke("redispatch", root, "--no-quarantine", "-f", "json")


@pytest.fixture(params=CASES)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path, dict[int, int]]:
    """(plain store, toy store, toy offset -> plain offset), both rebuilt by redispatch."""
    src = _source(request.param)
    shutil.copytree(src, tmp_path / "plain")
    plain = tmp_path / "plain" / "store"
    _rebuilt(plain)
    (tmp_path / "toy").mkdir()
    shutil.copy2(src / "broker.conf", tmp_path / "toy" / "broker.conf")
    phy_map = wrap_store(plain, tmp_path / "toy" / "store")
    with toy_store():
        _rebuilt(tmp_path / "toy" / "store")
    back = _offset_map(plain, phy_map)
    return plain, tmp_path / "toy" / "store", back


def _offset_map(plain: Path, phy_map: dict[int, int]) -> dict[int, int]:
    """Toy offsets -> plain offsets: each record's start, and each record's end (where the next begins)."""
    rows = _invoke("dump", "commitlog", plain, "-f", "ndjson")
    back = {}
    for r in rows:
        if "storeSize" in r and r["commitLogOffset"] in phy_map:
            new = phy_map[r["commitLogOffset"]]
            back[new] = r["commitLogOffset"]
            back[new + r["storeSize"]] = r["commitLogOffset"] + r["storeSize"]
    return back


def _same(value: Any, back: dict[int, int], key: str = "") -> Any:
    """``value`` with toy offsets mapped to plain ones and the fields that say where left out."""
    if isinstance(value, dict):
        return {k: _same(v, back, k) for k, v in value.items() if k not in _WHERE}
    if isinstance(value, list):
        return [_same(v, back, key) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and "queue" not in key.lower():
        return back.get(value, value)
    return value


def _plain_view(value: Any) -> Any:
    return _same(value, {})


COMMANDS = {
    "dump commitlog": ("dump", "commitlog", "{store}", "-f", "ndjson"),
    "dump consumequeue": ("dump", "consumequeue", "{store}", "TopicA", "0", "-f", "ndjson"),
    "query key": ("query", "key", "{store}", "TopicA", "order-0", "-f", "json"),
    "query queue offset": ("query", "offset", "{store}", "TopicB", "0", "1", "-f", "json"),
    "info": ("info", "{store}", "-f", "json"),
    "check": ("check", "{store}", "-f", "json"),
    "recover --dry-run": ("recover", "{store}", "--dry-run", "-f", "json"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_command_answers_the_same_on_toy_frames(name: str, pair: tuple[Path, Path, dict[int, int]]) -> None:
    plain, toy, back = pair
    args = [a.format(store=plain) for a in COMMANDS[name]]
    want = _plain_view(_invoke(*args))
    with toy_store():
        got = _same(_invoke(*[a.format(store=toy) for a in COMMANDS[name]]), back)
    assert got == want
