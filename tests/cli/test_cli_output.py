"""What the command line prints: user data is never markup, a formula, or a broken line."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.cli._render import Format, csv_cell, escape, render_rows

runner = CliRunner()

KEY = "k[/]z"
FORMULA_KEY = "=HYPERLINK(1)"
BODY = b"see [bold]doc[/bold] [min, max]\x00\nnext=1\x1b[2J"
TAGS = "[red]t"


def invoke(*args: str, width: int = 400):
    return runner.invoke(app, list(args), env={"COLUMNS": str(width)})


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small fixture store plus one message whose key, tags and body look like markup and formulas."""
    tmp = tmp_path_factory.mktemp("hostile")
    shutil.copytree(FIXTURES / "small", tmp / "small")
    body = tmp / "body"
    body.write_bytes(BODY)
    store = tmp / "small" / "store"
    r = invoke(
        "write", str(store), "--topic", "TopicA", "--keys", f"{KEY} {FORMULA_KEY}", "--tags", TAGS,
        "--body-file", str(body), "-p", "note=@SUM(A1)",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    return store


@pytest.mark.parametrize("fmt", ["table", "plain"])
@pytest.mark.parametrize(
    "argv",
    [
        ["query", "key", "{store}", "TopicA", KEY],
        ["query", "key", "{store}", "TopicA", FORMULA_KEY],
        ["dump", "commitlog", "{store}", "--key", KEY],
    ],
)
def test_brackets_in_keys_tags_and_bodies_are_shown_as_written(hostile_store, argv, fmt):
    r = invoke(*(a.format(store=hostile_store) for a in argv), "-f", fmt, "--body", "text")
    assert r.exit_code == 0, r.output
    assert "internal error" not in r.output
    out = r.stdout
    assert KEY in out and TAGS in out
    assert "see [bold]doc[/bold] [min, max]\\0\\nnext=1\\x1b[2J" in out
    assert "\x00" not in out and "\x1b" not in out


def test_plain_rows_stay_one_line_each(hostile_store):
    r = invoke("dump", "commitlog", str(hostile_store), "-f", "plain", "--body", "text")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    nd = invoke("dump", "commitlog", str(hostile_store), "-f", "ndjson").stdout.splitlines()
    assert len(lines) == 1 + len(nd)  # a header, then one line per record
    assert sum(KEY in ln for ln in lines) == 1


def test_help_text_is_not_markup():
    r = invoke("offsets", "set", "--help")
    assert r.exit_code == 0
    assert "[min, max]" in " ".join(r.stdout.split())


def test_csv_cells_that_a_spreadsheet_would_run_get_a_quote(hostile_store):
    r = invoke("dump", "commitlog", str(hostile_store), "-f", "csv", "--key", FORMULA_KEY, "--body", "text")
    assert r.exit_code == 0, r.output
    (row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert row["keys"] == f"{KEY} {FORMULA_KEY}"  # not at the start: harmless, unchanged
    assert json.loads(row["properties"])["note"] == "@SUM(A1)"  # inside JSON: starts with {
    r = invoke("query", "key", str(hostile_store), "TopicA", FORMULA_KEY, "-f", "csv", "--body", "text")
    (row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert row["body"].startswith("see [bold]")
    assert row["body"].endswith("\x1b[2J") and "\x00\n" in row["body"]  # CSV quotes data, it does not alter it


@pytest.mark.parametrize("text", ["=1+2", "+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"])
def test_csv_formula_prefix(text):
    assert csv_cell(text) == "'" + text
    out = io.StringIO()
    render_rows([{"a": text, "n": -5}], Format.csv, out=out)
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [["a", "n"], ["'" + text, "-5"]]


@pytest.mark.parametrize("text", ["1", "a=b", "", "x-1", "'=1"])
def test_csv_plain_text_unchanged(text):
    assert csv_cell(text) == text


def test_escape_control_characters():
    assert escape("a\x00b\nc\td\re\x1b\x7f\x9bf") == "a\\0b\\nc\\td\\re\\x1b\\x7f\\x9bf"
    assert escape("[bold]x[/] é \\x41") == "[bold]x[/] é \\x41"
    assert escape("a\u2028b\u2029c") == "a\\u2028b\\u2029c"  # what str.splitlines() splits at


@pytest.mark.parametrize("fmt", [f for f in Format if f is not Format.parquet])
def test_every_format_renders_brackets_and_controls_safely(fmt):
    out = io.StringIO()
    rows = [{"k": "[/]", "v": "[bold]b[/bold]\n"}]
    render_rows(rows, fmt, out=out, title="[x]")
    text = out.getvalue()
    if fmt in (Format.json, Format.ndjson):
        assert json.loads(text.splitlines()[0] if fmt is Format.ndjson else text) in (rows[0], rows)
    else:
        assert "[/]" in text and "[bold]b[/bold]" in text
    if fmt in (Format.table, Format.plain):
        assert "[bold]b[/bold]\\n" in text


# ---------------------------------------------------------------------------------- field parity

SMALL = FIXTURES / "small" / "store"


def _header(argv: list[str], fmt: str) -> list[str]:
    r = invoke(*argv, "-f", fmt)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    return next(csv.reader([first])) if fmt == "csv" else first.split()


def _json_rows(argv: list[str], fmt: str = "json") -> list[dict]:
    r = invoke(*argv, "-f", fmt)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout) if fmt == "json" else [json.loads(line) for line in r.stdout.splitlines()]


# A message row has crcOk when bodies are checked and why when something is not right.
OPTIONAL = ("crcOk", "why")


@pytest.mark.parametrize(
    ("argv", "fields"),
    [
        (["dump", "commitlog", str(SMALL), "--limit", "3"], "COMMITLOG"),
        (["query", "key", str(SMALL), "TopicA", "order-0"], "QUERY"),
        (["query", "id", str(SMALL), "C0A800C800002A9F0000000000000000"], "QUERY_ID"),
        (["query", "offset", str(SMALL), "TopicA", "0", "0"], "QUERY"),
        (["query", "time", str(SMALL), "TopicA", "0", "1700000000007"], "QUERY_TIME"),
    ],
)
def test_one_field_list_per_record_kind_in_every_format(argv, fields):
    from rmqstore.cli import _fields

    want = list(getattr(_fields, fields))
    assert _header(argv, "plain") == want
    assert _header(argv, "csv") == want
    # json and ndjson: the same names in the same order, the optional ones when they say something
    rows = _json_rows(argv)
    assert rows and all(list(row) == [f for f in want if f not in OPTIONAL] for row in rows)
    assert _json_rows(argv, "ndjson") == rows
    table = invoke(*argv, "-f", "table", width=2000).stdout
    for name in getattr(_fields, f"{fields}_TABLE"):
        assert name in table


def test_query_dump_and_the_library_share_the_message_fields():
    from rmqstore.cli import _fields
    from rmqstore.codec.rows import ROW_FIELDS

    assert _fields.COMMITLOG == ROW_FIELDS == _fields.QUERY
    store = str(SMALL)
    dumped = {r["commitLogOffset"]: r for r in _json_rows(["dump", "commitlog", store], "ndjson")}
    for row in _json_rows(["query", "key", store, "TopicA", "order-0"]):
        assert row == dumped[row["commitLogOffset"]]


def test_query_id_shows_hosts_and_properties_in_plain_and_csv():
    argv = ["query", "id", str(SMALL), "C0A800C800002A9F0000000000000000"]
    for fmt in ("plain", "csv"):
        head = _header(argv, fmt)
        assert {"bornHost", "storeHost", "properties"} <= set(head)


def _all_commands():
    import typer.main

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="rmqstore")
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        yield [name]
        if hasattr(cmd, "list_commands"):
            sctx = cmd.context_class(cmd, info_name=name, parent=ctx)
            for sub in cmd.list_commands(sctx):
                yield [name, sub]


def test_every_help_is_plain_text():
    for argv in [[], *_all_commands()]:
        r = invoke(*argv, "--help")
        assert r.exit_code == 0, argv
        assert "╭" not in r.stdout and "Usage:" in r.stdout, argv
