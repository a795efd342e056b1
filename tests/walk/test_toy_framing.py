"""The framing seam: every command gives the same answers on a store whose commit log records sit in toy
frames (tests/toy_framing.py) as on the same store in plain files, offsets aside.

Both sides get their consume queues and index files from ``redispatch`` (through the walker); then
each command's JSON output on the toy store, with its commit log offsets mapped back to the plain
store's, must equal its output on the plain store.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import toy_framing
from conftest import REPO, SHARED
from toy_framing import toy_store, wrap_store
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import Record
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()
SMALL = REPO / "fixtures" / "stores" / "small"
_REAL = [("real-stores", "clean-2topics"), ("real-stores-4.9.4", "clean-2topics")]
CASES = ["small"] + [f"{base}/{case}" for base, case in _REAL if (SHARED / base / case / "store").is_dir()]

# Fields that name where a record is, not what it is: file names, positions inside a file, message
# ids (they hold the offset), and sizes of whole files.
_WHERE = {"msgId", "offsetMsgId", "file", "path", "pos", "position", "fileName", "files", "sizeBytes", "bytes"}
# ... and the paths of the two stores, the names and start offsets of files (the toy files hold fewer
# records), byte ranges inside files and their sizes (a frame head counts), when a plan was made.
_WHERE |= {"store", "brokerConfig", "dirs", "where", "name", "quarantine", "indexFilesKept", "createdAt"}
_WHERE |= {"walkFromPhyOffset", "startFile", "startPhyOffset", "from", "to", "undecodableBytes"}
# ... and how the records fall into files: how many files and BLANKs, the files recovery deletes.
_WHERE |= {"commitlogFiles", "blanks", "deletedFiles"}
# Integer fields holding commit log offsets: these are mapped back (queue offsets, sizes and times are not).
_OFFSET_KEY = re.compile(r"[pP]hy|commitLog|processOffset|lastOffset|prepared|dispatchFrom")
_FILE_NAME = re.compile(r"\b\d{20}\b")  # a commit log file named in a text
_TEXT_OFFSET = re.compile(r"(?<=[oO]ffset )\d+")  # "processOffset 123", "phy offset 123" in a text


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
    if isinstance(value, int) and not isinstance(value, bool) and _OFFSET_KEY.search(key):
        return back.get(value, value)
    if isinstance(value, str):
        value = _TEXT_OFFSET.sub(lambda m: str(back.get(int(m[0]), m[0])), value)
        return _FILE_NAME.sub("<file>", value)
    return value


def _is_span(row: Any) -> bool:
    """A row of ``dump commitlog`` for bytes that hold no record. Its BLANK and end rows say where a file
    ends, which the frames move: they are left out."""
    return (
        isinstance(row, dict)
        and row.get("kind") in ("blank", "end", "corrupt")
        and {"commitLogOffset", "storeSize"} <= row.keys()
    )


def _span_range(row: dict[str, Any], back: dict[int, int]) -> dict[str, Any]:
    """A damaged span as its first and end offset; an end inside the damage keeps its distance from the
    start (a frame header inside the span makes it longer)."""
    start, end = row["commitLogOffset"], row["commitLogOffset"] + row["storeSize"]
    first = back.get(start, start)
    return {
        "kind": row["kind"],
        "why": _same(row.get("why"), back),
        "offset": first,
        "end": back.get(end, first + row["storeSize"]),
    }


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
    "redispatch --dry-run": ("redispatch", "{store}", "--dry-run", "-f", "json"),
    "offsets": ("offsets", "{store}", "-f", "json"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_command_answers_the_same_on_toy_frames(name: str, pair: tuple[Path, Path, dict[int, int]]) -> None:
    plain, toy, back = pair
    args = [a.format(store=plain) for a in COMMANDS[name]]
    want = _plain_view(_invoke(*args))
    with toy_store():
        got = _same(_invoke(*[a.format(store=toy) for a in COMMANDS[name]]), back)
    assert got == want


# -- lookups, repairs and writes: info, query, recover, redispatch, expire, offsets, write, Spark ----------

# Lookups whose arguments come from a record in the middle of the plain store (``_sample``).
LOOKUPS = {
    "query uniq": ("query", "uniq", "{store}", "{topic}", "{uniq}", "-f", "json"),
    "query id": ("query", "id", "{store}", "{uniq}", "-f", "json"),
    "query key --scan": ("query", "key", "{store}", "TopicA", "order-0", "--scan", "-f", "json"),
    "query time": ("query", "time", "{store}", "{topic}", "{queue}", "{time}", "-f", "json"),
}


def _sample(plain: Path) -> dict[str, Any]:
    """A message record in the middle of the plain store, and the lookup arguments it gives."""
    rows = [r for r in _invoke("dump", "commitlog", plain, "-f", "ndjson") if "topic" in r]
    mid = rows[len(rows) // 2]
    props = mid["properties"]
    return {"topic": mid["topic"], "queue": mid["queueId"], "uniq": props["UNIQ_KEY"], "time": mid["storeTimestamp"]}


def _both(plain: Path, toy: Path, back: dict[int, int], *args: Any, **values: Any) -> tuple[Any, Any]:
    """The answers of one command on the toy store (offsets mapped back) and on the plain store."""
    want = _plain_view(_invoke(*[str(a).format(store=plain, **values) for a in args]))
    with toy_store():
        got = _same(_invoke(*[str(a).format(store=toy, **values) for a in args]), back)
    return got, want


@pytest.mark.parametrize("name", LOOKUPS)
def test_lookups_answer_the_same_on_toy_frames(name: str, pair: tuple[Path, Path, dict[int, int]]) -> None:
    plain, toy, back = pair
    got, want = _both(plain, toy, back, *LOOKUPS[name], **_sample(plain))
    assert want and got == want


def _last_record(plain: Path) -> dict[str, Any]:
    return [r for r in _invoke("dump", "commitlog", plain, "-f", "ndjson") if "topic" in r][-1]


def _cq_slot(root: Path, topic: str, queue_id: int, queue_offset: int) -> tuple[Path, int]:
    """The consume queue file and position of one queue offset's entry."""
    qdir = root / "consumequeue" / topic / str(queue_id)
    for f in sorted(qdir.iterdir(), reverse=True):
        if int(f.name) <= queue_offset * 20:
            return f, queue_offset * 20 - int(f.name)
    raise AssertionError(f"no consume queue file holds {topic}/{queue_id}/{queue_offset}")


def test_scans_past_the_index_and_the_dispatch_answer_the_same(pair: tuple[Path, Path, dict[int, int]]) -> None:
    """The newest index file gone: key lookups scan from the last indexed record's frame. The last record's
    consume queue entry gone: its queue offset is found by scanning from the dispatch position."""
    plain, toy, back = pair
    last = _last_record(plain)
    for root in (plain, toy):
        max(p for p in (root / "index").iterdir()).unlink()
        path, pos = _cq_slot(root, last["topic"], last["queueId"], last["queueOffset"])
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(bytes(20))
    values = _sample(plain)
    for args in (COMMANDS["query key"], LOOKUPS["query uniq"]):
        got, want = _both(plain, toy, back, *args, **values)
        assert want and got == want
    args = ("query", "offset", "{store}", last["topic"], last["queueId"], last["queueOffset"], "-f", "json")
    got, want = _both(plain, toy, back, *args)
    assert want and got == want


def _tear(root: Path, at: int, frame: bytes, record: bytes) -> None:
    """Write the first half of ``record`` behind ``frame`` at commit log offset ``at``: a torn write."""
    files = sorted((root / "commitlog").iterdir())
    size = files[0].stat().st_size
    with open(files[at // size], "r+b") as f:
        f.seek(at % size)
        f.write(frame + record[: len(record) // 2])


def _stored(root: Path, back: dict[int, int]) -> Any:
    """What a store holds, as the walker reads it: every record, and every consume queue's entries."""
    with open_store(root) as st:
        records = [_same(r.to_json(), back) for _, r in iter_commitlog(st) if isinstance(r, Record)]
        queues = [(q.topic, q.queue_id) for q in st.consume_queues.queues()]
    return records, [_same(_invoke("dump", "consumequeue", root, t, q, "-f", "ndjson"), back) for t, q in queues]


def test_recover_of_a_torn_tail_answers_the_same(pair: tuple[Path, Path, dict[int, int]]) -> None:
    """A record torn in the middle after the last one (in a toy frame of its full length on the toy
    side): the same recovery plan, and the same store once recovered."""
    plain, toy, back = pair
    last = _last_record(plain)
    end = last["commitLogOffset"] + last["storeSize"]
    toy_end = next(k for k, v in back.items() if v == end)
    with open_store(plain) as st:
        seg = next(s for s in st.commitlog_segments()[0] if s.base_offset <= last["commitLogOffset"] < s.end_offset)
    with open(seg.path, "rb") as f:
        f.seek(last["commitLogOffset"] - seg.base_offset)
        record = bytearray(f.read(last["storeSize"]))
    record[20:28] = (last["queueOffset"] + 1).to_bytes(8, "big")  # QUEUEOFFSET: the next message
    record[28:36] = end.to_bytes(8, "big")  # PHYSICALOFFSET: where it is written
    _tear(plain, end, b"", bytes(record))
    record[28:36] = (toy_end + 8).to_bytes(8, "big")
    _tear(toy, toy_end, b"TOYF" + (len(record) + 8).to_bytes(4, "big"), bytes(record))
    back = {**back, toy_end + 8: end}
    for run in ("--dry-run", "--no-quarantine"):
        got, want = _both(plain, toy, back, "recover", "{store}", run, "-f", "json")
        for out in (got, want):  # the stop names the file and the byte the torn record is at
            assert out["plan"].pop("stop").startswith("invalid record: ")
            out["summary"].pop("stop")
        assert got == want and want["plan"]["recordsLost"] == 1
        lost = want["plan"]["actions"][0]["records"]
        assert [(r["commitLogOffset"], r["torn"]) for r in lost] == [(end, True)]
    want_stored = _stored(plain, {})
    with toy_store():
        assert _stored(toy, back) == want_stored
    got, want = _both(plain, toy, back, "recover", "{store}", "--dry-run", "-f", "json")
    assert got == want and want["plan"]["steps"] == []


def test_write_refuses_toy_frames(pair: tuple[Path, Path, dict[int, int]]) -> None:
    """write lays out plain records only: on toy frames it refuses (exit 7) and changes nothing."""
    plain, toy, back = pair
    args = ["write", "--topic", "TopicA", "--body", "hello", "-f", "json"]
    assert runner.invoke(app, [args[0], str(plain), *args[1:]]).exit_code == 0
    with toy_store():
        before = _stored(toy, back)
        r = runner.invoke(app, [args[0], str(toy), *args[1:]])
        assert r.exit_code == 7
        assert (
            r.stderr.strip()
            == f"error: {toy}: the commit log holds its records in toy frames; writing to it is not supported"
        )
        assert _stored(toy, back) == before


def test_expire_dry_run_answers_the_same(pair: tuple[Path, Path, dict[int, int]]) -> None:
    """A clean pass run by hand, with a pre-allocated (all-zero) file after the last one: the newest file
    holding data is the one a broker writes to, on both sides."""
    plain, toy, _ = pair
    for root in (plain, toy):
        files = sorted((root / "commitlog").iterdir())
        size = files[0].stat().st_size
        (root / "commitlog" / f"{int(files[-1].name) + size:020d}").write_bytes(bytes(size))
        for f in root.rglob("*"):
            os.utime(f, (1_700_000_000, 1_700_000_000))
    args = ("expire", "{store}", "--dry-run", "--force", "-v", "--now", "1700003600000", "--disk-used-ratio", "0.5")
    got, want = _both(plain, toy, {}, *args, "-f", "json")
    assert got == want and want["summary"]["commitLogStop"].startswith("kept <file>")


def test_offsets_set_by_time_answer_the_same(pair: tuple[Path, Path, dict[int, int]]) -> None:
    plain, toy, back = pair
    values = _sample(plain)
    args = ("offsets", "set", "{store}", "--group", "G", "--topic", "{topic}", "--queue", "{queue}")
    got, want = _both(plain, toy, back, *args, "--to-time", "{time}", "-f", "json", **values)
    assert got == want and want["changes"][0]["after"] > 0
    got, want = _both(plain, toy, back, *COMMANDS["offsets"])
    assert got == want and any(o["lastConsumedTimestamp"] for o in want["offsets"])


@pytest.mark.spark
def test_spark_reads_toy_frames_the_same(pair: tuple[Path, Path, dict[int, int]]) -> None:
    """The Spark reader's executors get the toy framing with each split (pickled by value: they cannot
    import the tests) and read the same records."""
    pytest.importorskip("pyspark")
    from pyspark import cloudpickle

    from rmqstore.spark.session import spark_session

    plain, toy, back = pair
    cloudpickle.register_pickle_by_value(toy_framing)
    try:
        with spark_session("local[2]", conf={"spark.ui.showConsoleProgress": "false"}):
            for args in (("stats", "{store}", "-f", "json"), ("find", "{store}", "--key", "order-0", "-f", "ndjson")):
                got, want = _both(plain, toy, back, "spark", *args, "-q")
                assert want and got == want
    finally:
        cloudpickle.unregister_pickle_by_value(toy_framing)


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
    return [(r["commitLogOffset"], toy[r["commitLogOffset"]], r["storeSize"]) for r in rows if r["kind"] == "message"]


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
    near = recs[i - 1 : i + 2]
    assert len({o // file_size for o, _, _ in near}) == 1 == len({n // file_size for _, n, _ in near})
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
