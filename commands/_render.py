"""The one output renderer: rows and mappings in every ``--format``, and messages on stderr.

Record bytes are data, never markup or formulas:
- table: a boxed table drawn by tabulate (which never reads markup), control characters escaped;
- plain: aligned columns, control characters escaped (``\\n``, ``\\t``, ``\\0``, ``\\xNN``, as text
  bodies show bytes that are not UTF-8), so one row is always one line;
- csv: RFC 4180 quoting, and a cell that a spreadsheet would run as a formula (a text starting
  with ``=``, ``+``, ``-``, ``@``, tab or carriage return) gets a leading ``'`` (OWASP's advice);
- json, ndjson: JSON strings, escaped by JSON itself.
tabulate draws the terminal table, rich only progress bars; both are imported when first needed, and plain
output needs neither, so a one-shot call in a script starts fast.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rmqstore.errors import UsageError

from ._stream import StreamedTable, first_keys, numeric_columns, terminal_width


class Format(str, enum.Enum):
    table = "table"
    plain = "plain"
    json = "json"
    ndjson = "ndjson"
    csv = "csv"
    parquet = "parquet"  # dump commitlog and dump consumequeue only, into a file (-o)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\\0"}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def escape(text: str) -> str:
    """``text`` on one line with no control character: safe to print on a terminal."""
    return _CONTROL.sub(_escape_one, text)


def _escape_one(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def cell(v: Any) -> Any:
    """A value as one cell: containers as compact JSON, None as empty."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    if v is None:
        return ""
    return v


def csv_cell(v: Any) -> Any:
    if isinstance(v, bool):  # JSON's spelling, which spreadsheets and CSV readers take as booleans
        return "true" if v else "false"
    v = cell(v)
    if isinstance(v, str) and v.startswith(_FORMULA_START):
        return "'" + v
    return v


def text_cell(v: Any) -> str:
    v = cell(v)
    return escape(v) if isinstance(v, str) else str(v)


class _Stderr:
    """Messages on stderr: plain text (never markup), one line each, colour only on a terminal."""

    _STYLES = {"error": "1;31", "internal error": "1;31", "warning": "33", "note": ""}

    def print(self, *objects: Any, sep: str = " ", **_rich_options: Any) -> None:
        """Like ``rich.Console.print`` called with markup off: the text as written, on one line."""
        sys.stderr.write(escape(sep.join(str(o) for o in objects)) + "\n")
        sys.stderr.flush()

    def labelled(self, label: str, text: str) -> None:
        code = self._STYLES.get(label, "")
        head = f"\x1b[{code}m{label}:\x1b[0m" if code and sys.stderr.isatty() else f"{label}:"
        sys.stderr.write(f"{head} {escape(str(text))}\n")
        sys.stderr.flush()

    def error(self, text: str, *, label: str = "error") -> None:
        self.labelled(label, text)

    def warning(self, text: str) -> None:
        self.labelled("warning", text)

    def note(self, text: str) -> None:
        self.labelled("note", text)


err = _Stderr()


def _boxed_table(items: list[dict[str, Any]], cols: list[str], title: str | None, out: Any) -> None:
    """The terminal table, drawn by tabulate, which never reads markup; cells are escaped text."""
    import tabulate

    tabulate.PRESERVE_WHITESPACE = True  # a cell shows its data as it is, spaces included
    align = ["right" if r else "left" for r in numeric_columns(items, cols)]
    text = tabulate.tabulate(
        [[text_cell(r.get(c)) for c in cols] for r in items],
        headers=[escape(c) for c in cols],
        tablefmt="rounded_outline",
        disable_numparse=True,  # "007" is a key, not the number 7
        colalign=align or None,
    )
    if title:
        out.write(escape(title) + "\n")
    out.write(text + "\n")


def render_rows(
    rows: Iterable[dict[str, Any]],
    fmt: Format,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    out: Any = None,
) -> int:
    """Write rows in ``fmt`` as they come, every format streamed (json as an array, one row a line;
    table and plain a chunk at a time). Returns the number of rows written."""
    out = out or sys.stdout
    n = 0
    if fmt is Format.parquet:
        raise UsageError("--format parquet is for dump commitlog and dump consumequeue, with -o FILE")
    if fmt is Format.ndjson:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
        return n
    if fmt is Format.csv:
        import csv

        writer = quoting = None
        for row in rows:
            if writer is None:
                cols = list(columns or row.keys())
                writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
                # csv quotes a lone \r only when it is in the line terminator: such rows quote every cell
                quoting = csv.DictWriter(
                    out, fieldnames=cols, extrasaction="ignore", lineterminator="\n", quoting=csv.QUOTE_ALL
                )
                writer.writeheader()
            cells = {k: csv_cell(row.get(k)) for k in writer.fieldnames}
            lone_cr = any(isinstance(v, str) and "\r" in v for v in cells.values())
            (quoting if lone_cr else writer).writerow(cells)
            n += 1
        return n
    if fmt is Format.json:
        return write_json_array(rows, out)
    heads = list(columns) if columns else None
    if heads is None:
        heads, rows = first_keys(rows)
    room = terminal_width(out) if fmt is Format.table else None
    table = StreamedTable(heads, text_cell, out, boxed=fmt is Format.table, room=room)
    return table.write(rows, [escape(c) for c in heads], escape(title) if title else None)


def write_json_array(rows: Iterable[dict[str, Any]], out: Any = None) -> int:
    """A JSON array written as the rows come: one row a line, compact."""
    out = out or sys.stdout
    out.write("[")
    n = 0
    for row in rows:
        out.write(("\n" if n == 0 else ",\n") + json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def render_mapping(data: dict[str, Any], fmt: Format, *, title: str | None = None) -> None:
    """A single object: key/value lines for people, one JSON document for scripts."""
    if fmt in (Format.json, Format.ndjson):
        one_line = {"separators": (",", ":")} if fmt is Format.ndjson else {"indent": 2}
        sys.stdout.write(json.dumps(data, ensure_ascii=False, **one_line) + "\n")  # type: ignore[arg-type]
        return
    rows = [{"field": k, "value": cell(v)} for k, v in data.items()]
    if fmt is Format.table:  # a few lines: drawn whole
        _boxed_table(rows, ["field", "value"], title, sys.stdout)
    else:
        render_rows(rows, fmt, columns=["field", "value"], title=title)
