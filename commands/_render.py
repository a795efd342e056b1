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


class Format(str, enum.Enum):
    table = "table"
    plain = "plain"
    json = "json"
    ndjson = "ndjson"
    csv = "csv"


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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric_columns(items: list[dict[str, Any]], cols: list[str]) -> list[bool]:
    """Columns holding only numbers (or nothing): aligned right."""
    return [bool(items) and all(_is_number(r.get(c)) or r.get(c) is None for r in items) for c in cols]


def _plain_table(items: list[dict[str, Any]], cols: list[str], out: Any) -> None:
    """Aligned columns for scripts and pipes: no import beyond the standard library (a one-shot call starts fast)."""
    cells = [[text_cell(r.get(c)) for c in cols] for r in items]
    right = _numeric_columns(items, cols)
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        return "  ".join(parts).rstrip() + "\n"

    out.write(line([escape(c) for c in cols]))
    for row in cells:
        out.write(line(row))


def _boxed_table(items: list[dict[str, Any]], cols: list[str], title: str | None, out: Any) -> None:
    """The terminal table, drawn by tabulate, which never reads markup; cells are escaped text."""
    import tabulate

    tabulate.PRESERVE_WHITESPACE = True  # a cell shows its data as it is, spaces included
    align = ["right" if r else "left" for r in _numeric_columns(items, cols)]
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
    """Write rows in ``fmt``; ndjson and csv stream. Returns the number of rows written."""
    out = out or sys.stdout
    n = 0
    if fmt is Format.ndjson:
        encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder for every row
        for row in rows:
            out.write(encode(row) + "\n")
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
    items = list(rows)
    n = len(items)
    if fmt is Format.json:
        out.write(json.dumps(items, ensure_ascii=False, indent=2) + "\n")
        return n
    cols = list(columns) if columns else (list(items[0].keys()) if items else [])
    if fmt is Format.table:
        _boxed_table(items, cols, title, out)
    else:
        _plain_table(items, cols, out)
    return n


def render_mapping(data: dict[str, Any], fmt: Format, *, title: str | None = None) -> None:
    """A single object: key/value lines for people, one JSON document for scripts."""
    if fmt in (Format.json, Format.ndjson):
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None if fmt is Format.ndjson else 2) + "\n")
        return
    rows = [{"field": k, "value": cell(v)} for k, v in data.items()]
    render_rows(rows, fmt, columns=["field", "value"], title=title)
