"""The framing seam: every command gives the same answers on a store whose commit log records sit in toy
frames (tests/toy_framing.py) as on the same store in plain files, offsets aside.

Both sides get their consume queues and index files from ``redispatch`` (through the walker); then
each command's JSON output on the toy store, with its commit log offsets mapped back to the plain
store's, must equal its output on the plain store.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SHARED
from toy_framing import toy_store, wrap_store
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.store import open_store

runner = CliRunner()
SMALL = REPO / "fixtures" / "stores" / "small"
_REAL = [("real-stores", "clean-2topics"), ("real-stores-4.9.4", "clean-2topics")]
CASES = ["small"] + [f"{base}/{case}" for base, case in _REAL if (SHARED / base / case / "store").is_dir()]

# Fields that name where a record is, not what it is: file names, positions inside a file, message
# ids (they hold the offset), sizes of whole files, and how the records fall into files (how many
# files and BLANKs, the files recovery starts in and deletes, the store's own path).
_WHERE = {"msgId", "offsetMsgId", "file", "path", "pos", "position", "fileName", "files", "sizeBytes", "bytes"}
_WHERE |= {"commitlogFiles", "blanks", "startFile", "deletedFiles", "store"}
# Fields whose numbers are never commit log offsets (sizes and lengths could equal one by chance).
_NOT_OFFSETS = ("queue", "size", "length")


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
        if _is_span(value):
            return _span_range(value, back)
        return {k: _same(v, back, k) for k, v in value.items() if k not in _WHERE}
    if isinstance(value, list):
        return [_same(v, back, key) for v in value if not (_is_span(v) and v["kind"] != "corrupt")]
    if isinstance(value, int) and not isinstance(value, bool) and not any(w in key.lower() for w in _NOT_OFFSETS):
        return back.get(value, value)
    return value


def _is_span(row: Any) -> bool:
    """A row of ``dump commitlog`` for bytes that hold no record. Its BLANK and end rows say where a file
    ends, which the frames move: they are left out."""
    return isinstance(row, dict) and row.get("kind") in ("blank", "end", "corrupt") and {"offset", "size"} <= row.keys()


def _span_range(row: dict[str, Any], back: dict[int, int]) -> dict[str, Any]:
    """A damaged span as its first and end offset; an end inside the damage keeps its distance from the
    start (a frame header inside the span makes it longer)."""
    start, end = row["offset"], row["offset"] + row["size"]
    first = back.get(start, start)
    return {"kind": row["kind"], "why": row.get("why"), "offset": first, "end": back.get(end, first + row["size"])}


def _plain_view(value: Any) -> Any:
    return _same(value, {})


COMMANDS = {
    "dump commitlog": ("dump", "commitlog", "{store}", "-f", "ndjson"),
    "dump consumequeue": ("dump", "consumequeue", "{store}", "TopicA", "0", "-f", "ndjson"),
    "query key": ("query", "key", "{store}", "TopicA", "order-0", "-f", "json"),
    "query queue offset": ("query", "offset", "{store}", "TopicB", "0", "1", "-f", "json"),
    "info": ("info", "{store}", "-f", "json"),
    "check": ("check", "{store}", "-f", "json"),
    "dump consumequeue --resolve": ("dump", "consumequeue", "{store}", "TopicB", "1", "--resolve", "-f", "ndjson"),
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


# -- damaged stores: the lenient walk of dump and check ---------------------------------------------

LENIENT = ("dump commitlog", "check")


def _patch(root: Path, phy: int, data: bytes) -> None:
    """Write ``data`` at commit log offset ``phy`` of the store ``root``."""
    with open_store(root) as st:
        size, where = st.config.commitlog_file_size, st.config.commitlog_dir
    with open(where / f"{phy - phy % size:020d}", "r+b") as f:
        f.seek(phy % size)
        f.write(data)


def _record_starts(plain: Path, back: dict[int, int]) -> list[tuple[int, int, int]]:
    """(plain offset, toy offset, size) of every record, in order."""
    toy = {}
    for new, old in back.items():
        toy[old] = max(new, toy.get(old, new))  # a record's start, not the end of the one before it
    rows = _invoke("dump", "commitlog", plain, "-f", "ndjson", "--body", "none")
    return [(r["commitLogOffset"], toy[r["commitLogOffset"]], r["storeSize"]) for r in rows if "storeSize" in r]


def _torn_tail(plain: Path, toy: Path, back: dict[int, int]) -> int:
    """The first bytes of a copy of the last record written after it on both sides (a torn write)."""
    *_, (old, new, size) = _record_starts(plain, back)
    with open_store(plain) as st:
        file_size, where = st.config.commitlog_file_size, st.config.commitlog_dir
    with open(where / f"{old - old % file_size:020d}", "rb") as f:
        f.seek(old % file_size)
        torn = f.read(100)
    assert (old + size) % file_size + len(torn) <= file_size and (new + size) % file_size + len(torn) <= file_size
    _patch(plain, old + size, torn)
    _patch(toy, new + size, torn)
    return old + size


def _bad_record(plain: Path, toy: Path, back: dict[int, int]) -> int:
    """A zeroed MAGICCODE in a record in the middle of the last file (where recovery reads on both sides),
    with records before and after it in its file on both sides."""
    recs = _record_starts(plain, back)
    with open_store(plain) as st:
        file_size = st.config.commitlog_file_size
    i = next(i for i in range(len(recs) // 2, len(recs)) if recs[i][0] // file_size == recs[-1][0] // file_size)
    i = (i + len(recs)) // 2
    assert (
        len({o // file_size for o, _, _ in recs[i - 1 : i + 2]} | {n // file_size for _, n, _ in recs[i - 1 : i + 2]})
        <= 2
    )
    old, new, _ = recs[i]
    _patch(plain, old + 4, bytes(4))
    _patch(toy, new + 4, bytes(4))
    return old


def _texts_without_numbers(value: Any) -> Any:
    """Problem texts with their numbers left out: they count and place bytes inside a file, which frames move."""
    if isinstance(value, dict):
        return {k: re.sub(r"\d+", "N", v) if k in ("what", "stopReason") else _texts_without_numbers(v)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [_texts_without_numbers(v) for v in value]
    return value


@pytest.mark.parametrize("damage", [_torn_tail, _bad_record], ids=["torn tail", "bad record"])
@pytest.mark.parametrize("name", LENIENT)
def test_damage_reads_the_same_on_toy_frames(
    name: str, damage: Callable[[Path, Path, dict[int, int]], int], pair: tuple[Path, Path, dict[int, int]]
) -> None:
    plain, toy, back = pair
    at = damage(plain, toy, back)
    want = _texts_without_numbers(_plain_view(_invoke(*[a.format(store=plain) for a in COMMANDS[name]])))
    with toy_store():
        got = _texts_without_numbers(_same(_invoke(*[a.format(store=toy) for a in COMMANDS[name]]), back))
    assert got == want
    damaged = [r for r in want if r.get("kind") == "corrupt"] if name == "dump commitlog" else want["problems"]
    assert at in [r.get("offset", r.get("phyOffset")) for r in damaged]
