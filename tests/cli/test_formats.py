"""Every output format streams, one field list per record kind, Parquet without Spark, dump | write round trips.

Streaming is tested on a store built from a real one: the records of real-stores-4.9.4/clean-2topics
laid out again and again (PHYSICALOFFSET rewritten) into 4 MiB files, about 48 MB in all, so that a
text dump takes seconds: the first rows must come out while the scan still runs, and the process
must stay small.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import _need_shared, case_dir, copy_real_store, load_truth
from typer.testing import CliRunner

from rmqstore.cli import _stream, app
from rmqstore.cli._render import Format, render_rows
from rmqstore.codec.commitlog import encode_blank

runner = CliRunner()
CASE = "4.9.4/clean-2topics"


def _case_store() -> Path:
    """The real store the format tests read (skipped with a reason where ../shared is absent)."""
    _need_shared(CASE)
    return case_dir(CASE) / "store"


RMQSTORE = str(Path(sys.executable).with_name("rmqstore"))
FILE_SIZE = 4 << 20
FILES = 12
RSS_LIMIT_MB = 300


def invoke(*argv: str, code: int = 0, stdin: str | None = None) -> str:
    r = runner.invoke(app, [str(a) for a in argv], input=stdin)
    assert r.exit_code == code, (argv, r.output)
    return r.stdout


def ndjson_rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real store's records repeated into FILES files of FILE_SIZE bytes, each closed by a BLANK."""
    root = copy_real_store(CASE, tmp_path_factory.mktemp("big"))
    src = root / "commitlog"
    records = []
    for r in load_truth(CASE)["commitlog"]:
        if r["kind"] == "message":
            base = r["offset"] - r["offset"] % 32768
            with open(src / f"{base:020d}", "rb") as f:
                f.seek(r["offset"] - base)
                records.append(f.read(r["size"]))
    for p in src.iterdir():
        p.unlink()
    conf = root.parent / "broker.conf"
    conf.write_text(conf.read_text().replace("mappedFileSizeCommitLog=32768", f"mappedFileSizeCommitLog={FILE_SIZE}"))
    phy = struct.Struct(">q")
    i = 0
    for n in range(FILES):
        out = bytearray(FILE_SIZE)
        pos = 0
        while pos + len(records[i % len(records)]) + 8 <= FILE_SIZE:
            rec = bytearray(records[i % len(records)])
            phy.pack_into(rec, 28, n * FILE_SIZE + pos)  # PHYSICALOFFSET: the record's own offset
            out[pos : pos + len(rec)] = rec
            pos += len(rec)
            i += 1
        out[pos : pos + 8] = encode_blank(FILE_SIZE - pos)
        (src / f"{n * FILE_SIZE:020d}").write_bytes(out)
    return root


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.parametrize("fmt", ["table", "plain", "json", "ndjson", "csv"])
def test_first_rows_come_while_the_scan_runs_and_memory_stays_bounded(big_store: Path, fmt: str) -> None:
    proc = subprocess.Popen(
        [RMQSTORE, "dump", "commitlog", str(big_store), "-f", fmt, "--broker-version", "4.9.4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        start = time.monotonic()
        lines = []
        while len([x for x in lines if b"Topic" in x]) < 2:
            line = proc.stdout.readline()
            assert line, "the output ended before two messages"
            lines.append(line)
        took = time.monotonic() - start
        assert proc.poll() is None, "the whole scan ran before the first rows came out"
        time.sleep(0.5)  # let it scan on, then look at how big it got
        assert _peak_rss_mb(proc.pid) < RSS_LIMIT_MB
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert took < 30  # seconds, on a loaded 2-core machine; about 1 s on a quiet one


def test_a_streamed_json_array_and_the_plain_columns_stay_whole(big_store: Path) -> None:
    rows = json.loads(invoke("dump", "commitlog", big_store, "-f", "json", "--limit", "2500", "--body", "none"))
    assert len(rows) == 2500 and rows[0]["kind"] == "message"
    plain = invoke("dump", "commitlog", big_store, "-f", "plain", "--limit", "2500", "--body", "none").splitlines()
    head = plain[0]
    starts = [head.index(c) for c in ("commitLogOffset", "topic")]
    assert len(plain) == 2501
    for line in plain[1:]:  # widths fixed by the first chunk, kept down the whole output
        assert line[starts[1] :].startswith("Topic"), line


# ------------------------------------------------------------------------ one field list per kind


def test_csv_booleans_and_kind(tmp_path: Path) -> None:
    store = _case_store()
    rows = list(csv.DictReader(io.StringIO(invoke("dump", "commitlog", store, "-f", "csv", "--verify-crc"))))
    assert {r["crcOk"] for r in rows if r["kind"] == "message"} == {"true"}
    assert {r["kind"] for r in rows} <= {"message", "blank", "end"}
    cq = list(csv.DictReader(io.StringIO(invoke("dump", "consumequeue", store, "TopicA", "0", "-f", "csv"))))
    assert cq and {r["kind"] for r in cq} <= {"entry", "end"}
    want = [(e["queueOffset"], e["commitLogOffset"]) for e in _truth_queue("TopicA", 0)["entries"]]
    assert [(int(r["queueOffset"]), int(r["commitLogOffset"])) for r in cq if r["kind"] == "entry"] == want


def _truth_queue(topic: str, qid: int) -> dict:
    return next(q for q in load_truth(CASE)["queues"] if (q["topic"], q["queueId"]) == (topic, qid))


def test_checkpoint_times_are_fields_of_their_own_and_ndjson_is_one_line() -> None:
    store = _case_store()
    nd = invoke("dump", "checkpoint", store, "-f", "ndjson")
    assert nd.count("\n") == 1 and ": " not in nd
    data = json.loads(nd)
    assert data["physicMsgTime"].endswith("Z") and isinstance(data["physicMsgTimestamp"], int)
    (row,) = csv.DictReader(io.StringIO(invoke("dump", "checkpoint", store, "-f", "csv")))
    assert (
        row["physicMsgTimestamp"] == str(data["physicMsgTimestamp"]) and row["physicMsgTime"] == data["physicMsgTime"]
    )
    assert list(row) == list(data)


def test_config_name_with_or_without_json() -> None:
    store = _case_store()
    names = [c["name"] for c in json.loads(invoke("dump", "config", store, "-f", "json"))]
    name = next(n for n in names if n.endswith(".json"))
    assert invoke("dump", "config", store, name.removesuffix(".json"), "-f", "json") == invoke(
        "dump", "config", store, name, "-f", "json"
    )


def test_spans_carry_the_names_of_the_message_fields() -> None:
    rows = ndjson_rows(invoke("dump", "commitlog", _case_store(), "-f", "ndjson"))
    end = [r for r in rows if r["kind"] != "message"]
    assert end and all({"kind", "commitLogOffset", "storeSize"} <= r.keys() for r in end)
    last = [r for r in rows if r["kind"] == "message"][-1]
    assert end[-1]["commitLogOffset"] == last["commitLogOffset"] + last["storeSize"]


# --------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("body", ["base64", "hex"])
def test_dump_ndjson_into_write_round_trips(tmp_path: Path, body: str) -> None:
    store = _case_store()
    dumped = invoke("dump", "commitlog", store, "-f", "ndjson", "--body", body)
    assert '"kind":"end"' in dumped  # a row that is not a message: write skips it
    new = tmp_path / "store"
    invoke("write", new, "-", "--create", "--broker-version", "4.9.4", "-f", "json", stdin=dumped)
    again = ndjson_rows(invoke("dump", "commitlog", new, "-f", "ndjson", "--body", "base64"))
    want = ndjson_rows(invoke("dump", "commitlog", store, "-f", "ndjson", "--body", "base64"))
    fields = ("topic", "queueId", "queueOffset", "body", "bodyCRC", "tags", "keys", "uniqKey", "bornTimestamp")
    got = [{k: r[k] for k in fields} for r in again if r["kind"] == "message"]
    assert got == [{k: r[k] for k in fields} for r in want if r["kind"] == "message"]


def test_write_refuses_a_dumped_body_it_cannot_read_back(tmp_path: Path) -> None:
    store = _case_store()
    argv = ["write", str(tmp_path / "s"), "-", "--create", "--broker-version", "4.9.4"]
    line = invoke("dump", "commitlog", store, "-f", "ndjson", "--body", "none", "--limit", "1")
    r = runner.invoke(app, argv, input=line)
    assert r.exit_code == 1 and "without its body" in r.output
    # --body text shows bytes that are not UTF-8 as escapes: such a body is refused, never written changed
    text = invoke("dump", "commitlog", store, "-f", "ndjson", "--body", "text")
    r = runner.invoke(app, argv, input=text)
    assert r.exit_code == 1 and "matches its bodyCRC" in r.output and not (tmp_path / "s" / "commitlog").exists()


# ----------------------------------------------------------------------------------- parquet


def test_parquet_of_the_commit_log_and_a_consume_queue(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from rmqstore.walk.arrow import COMMITLOG_COLUMNS, CONSUMEQUEUE_COLUMNS, arrow_schema

    store = _case_store()
    out = tmp_path / "log.parquet"
    invoke("dump", "commitlog", store, "-f", "parquet", "-o", out)
    table = pq.read_table(out)
    assert table.schema.equals(arrow_schema(COMMITLOG_COLUMNS, without=("crcOk",)))
    rows = [r for r in ndjson_rows(invoke("dump", "commitlog", store, "-f", "ndjson")) if r["kind"] == "message"]
    for name in ("commitLogOffset", "topic", "queueId", "queueOffset", "msgId", "tags", "uniqKey", "storeTimestamp"):
        assert table.column(name).to_pylist() == [r[name] for r in rows], name
    assert [bytes(b) for b in table.column("body").to_pylist()][:3] == [
        __import__("base64").b64decode(r["body"]) for r in rows[:3]
    ]
    few = tmp_path / "few.parquet"
    invoke("dump", "commitlog", store, "-f", "parquet", "-o", few, "--topic", "TopicB", "--limit", "7", "--verify-crc")
    part = pq.read_table(few)
    assert part.num_rows == 7 and set(part.column("topic").to_pylist()) == {"TopicB"}
    assert part.column("crcOk").to_pylist() == [True] * 7
    cq = tmp_path / "cq.parquet"
    invoke("dump", "consumequeue", store, "TopicA", "0", "-f", "parquet", "-o", cq)
    q = pq.read_table(cq)
    assert q.schema.equals(arrow_schema(CONSUMEQUEUE_COLUMNS))
    want = _truth_queue("TopicA", 0)["entries"]
    assert q.column("commitLogOffset").to_pylist() == [e["commitLogOffset"] for e in want]
    assert not list(tmp_path.glob(".*tmp"))  # written beside, renamed into place


def test_parquet_needs_a_file_and_names_the_extra_when_pyarrow_is_missing(tmp_path: Path) -> None:
    store = _case_store()
    r = runner.invoke(app, ["dump", "commitlog", str(store), "-f", "parquet"])
    assert r.exit_code == 2 and "-o FILE" in r.output
    r = runner.invoke(app, ["info", str(store), "-f", "parquet"])
    assert r.exit_code == 2
    code = (
        "import sys\nsys.modules['pyarrow'] = None\nfrom rmqstore.cli import main\n"
        f"sys.argv = ['rmqstore', 'dump', 'commitlog', {str(store)!r}, '-f', 'parquet', '-o', {str(tmp_path / 'x')!r}]\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "rmqstore[parquet]" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


# ------------------------------------------------------------------------ the streamed table itself


def test_table_chunks_share_the_first_chunks_widths_and_fit_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "CHUNK_ROWS", 2)
    rows = [{"n": i, "text": "x" * (3 if i < 2 else 40)} for i in range(5)]
    out = io.StringIO()
    table = _stream.StreamedTable(["n", "text"], str, out, boxed=True, room=20)
    assert table.write(iter(rows), ["n", "text"], "t") == 5
    lines = out.getvalue().splitlines()
    assert lines[0] == "t" and lines[1].startswith("╭") and lines[-1].startswith("╰")
    assert len({len(line) for line in lines[1:]}) == 1  # every line of the box as wide as the first
    assert lines[-2].endswith("xx │") or "…" in lines[-2]  # a later, longer cell cut, not widening the box
    wide = io.StringIO()
    _stream.StreamedTable(["n", "text"], str, wide, boxed=True, room=16).write(iter(rows), ["n", "text"], None)
    assert all(len(line) <= 16 for line in wide.getvalue().splitlines()) and "…" in wide.getvalue()


def test_plain_never_cuts_and_a_slow_source_is_shown_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stream, "CHUNK_SECONDS", 0.05)
    shown: list[str] = []

    class Out(io.StringIO):
        def flush(self) -> None:
            shown.append(self.getvalue())

    def slow():
        yield {"a": 1, "b": "short"}
        time.sleep(0.2)
        yield {"a": 2, "b": "a much longer value than the first"}  # closes the chunk: its time is up
        time.sleep(0.2)
        assert shown, "the first rows waited for the end"
        yield {"a": 3, "b": "c"}

    out = Out()
    assert render_rows(slow(), Format.plain, out=out) == 3
    assert out.getvalue().splitlines()[2].endswith("a much longer value than the first")
