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

from rmqstore.codec.rows import cell, csv_cells
from rmqstore.codec.rows import csv_cell as csv_cell  # the cell rule, for the tests
from rmqstore.errors import UsageError

from . import _console
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


def escape(text: str) -> str:
    """``text`` on one line with no control character: safe to print on a terminal."""
    return _CONTROL.sub(_escape_one, text)


def _escape_one(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def text_cell(v: Any) -> str:
    v = cell(v)
    return escape(v) if isinstance(v, str) else str(v)


class _Stderr:
    """Messages on stderr: plain text (never markup), one line each, colour only on a terminal that
    wants it (not with NO_COLOR, TERM=dumb or --no-color)."""

    _STYLES = {"error": "1;31", "internal error": "1;31", "warning": "33", "note": ""}

    def print(self, *objects: Any, sep: str = " ", **_rich_options: Any) -> None:
        """Like ``rich.Console.print`` called with markup off: the text as written, on one line."""
        sys.stderr.write(escape(sep.join(str(o) for o in objects)) + "\n")
        sys.stderr.flush()

    def labelled(self, label: str, text: str) -> None:
        code = self._STYLES.get(label, "")
        head = f"\x1b[{code}m{label}:\x1b[0m" if code and _console.color(sys.stderr) else f"{label}:"
        sys.stderr.write(f"{head} {escape(str(text))}\n")
        sys.stderr.flush()

    def error(self, text: str, *, label: str = "error") -> None:
        self.labelled(label, text)

    def warning(self, text: str) -> None:
        self.labelled("warning", text)

    def note(self, text: str) -> None:
        self.labelled("note", text)


err = _Stderr()


def _boxed_table(
    items: list[dict[str, Any]],
    cols: list[str],
    title: str | None,
    out: Any,
    *,
    fit: bool = False,
    wrap: int = 0,
    header: bool = True,
) -> None:
    """The terminal table, drawn by tabulate, which never reads markup; cells are escaped text.
    With ``fit``, the table fits the terminal's width (see ``_fit``), long cells wrapped on up to
    ``wrap`` lines (0: cut) and, with -v, wrapped whole."""
    import tabulate

    tabulate.PRESERVE_WHITESPACE = True  # a cell shows its data as it is, spaces included
    numeric = numeric_columns(items, cols)
    cells = [[text_cell(r.get(c)) for c in cols] for r in items]
    headers = [escape(c) for c in cols]
    limit = _console.width() if fit else None  # the screen's width, wherever the text is gathered
    hidden: list[str] = []
    if limit is not None:
        cells, headers, numeric, hidden = _fit(cells, headers, numeric, limit, 1 << 30 if _console.verbose() else wrap)
    tabulate.MIN_PADDING = 0 if limit is not None else _TABULATE_PAD  # a fitted header takes no spare room
    text = tabulate.tabulate(
        cells,
        headers=headers if header else (),
        tablefmt="rounded_outline",
        disable_numparse=True,  # "007" is a key, not the number 7
        colalign=["right" if r else "left" for r in numeric] or None,
    )
    if title:
        out.write(_console.shorten(escape(title), limit or len(title)) + "\n")
    out.write(text + "\n")
    if hidden:
        note = f"({len(hidden)} more column(s): {', '.join(hidden)}; --format plain or json shows them)"
        out.write("\n".join(_console.wrap(note, limit or len(note))) + "\n")


_TABULATE_PAD = 2  # tabulate pads a header by two at least, unless told not to (a fitted table)
_MIN_TEXT = 8  # a text column is not cut narrower than this


def _fit(
    cells: list[list[str]], headers: list[str], numeric: list[bool], limit: int, wrap: int
) -> tuple[list[list[str]], list[str], list[bool], list[str]]:
    """Cells wrapped inside their column on up to ``wrap`` lines, the rest cut (an ellipsis), so the
    table is at most ``limit`` wide; numbers are never cut. Columns that cannot fit even so are left
    out (last first) and named. Returns cells, headers, numeric flags and the names left out."""
    hidden: list[str] = []
    while True:
        natural = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
        budget = limit - (3 * len(headers) + 1)
        floor = sum(w if n else min(w, _MIN_TEXT) for w, n in zip(natural, numeric, strict=True))
        if floor <= budget or len(headers) <= 1:
            break
        hidden.insert(0, headers.pop())
        numeric = numeric[:-1]
        cells = [row[:-1] for row in cells]
    caps = _caps(natural, numeric, budget)
    if caps == natural:
        return cells, headers, numeric, hidden
    cells = [[_cut(v, w, wrap) if len(v) > w else v for v, w in zip(row, caps, strict=True)] for row in cells]
    headers = [_console.shorten(h, max(w, 1)) for h, w in zip(headers, caps, strict=True)]
    return cells, headers, numeric, hidden


def _cut(text: str, width: int, lines: int) -> str:
    """``text`` on at most ``lines`` lines of ``width``, the last one ending in an ellipsis if cut."""
    if lines <= 1:
        return _console.shorten(text, width, keep_end=text.startswith("/"))
    parts = _console.wrap(text, width)
    if len(parts) > lines:
        parts = [*parts[: lines - 1], _console.shorten(" ".join(parts[lines - 1 :]), width)]
    return "\n".join(parts)


def _caps(natural: list[int], numeric: list[bool], budget: int) -> list[int]:
    """Widths within ``budget``: the last text column (the message, as a rule) keeps the most room;
    the other text columns get a quarter of the width at most, then all are narrowed to one cap."""
    text = [i for i, n in enumerate(numeric) if not n]
    side = max(budget // 4, _MIN_TEXT)
    pre = [min(w, side) if i in text[:-1] else w for i, w in enumerate(natural)]
    caps = _level(pre, numeric, budget)
    spare = budget - sum(caps)
    for i in text[:-1]:  # what the message did not need goes back to the others
        more = min(spare, natural[i] - caps[i])
        caps[i] += max(more, 0)
        spare -= max(more, 0)
    return caps


def _level(natural: list[int], numeric: list[bool], budget: int) -> list[int]:
    """Widths within ``budget``: the widest text columns are narrowed first, all to one cap."""
    fixed = sum(w for w, n in zip(natural, numeric, strict=True) if n)
    text = sorted(w for w, n in zip(natural, numeric, strict=True) if not n)
    room, cap = budget - fixed, max(text, default=0)
    for i, w in enumerate(text):  # the largest cap c with sum(min(w, c)) <= room
        rest = len(text) - i
        if w * rest >= room - sum(text[:i]):
            cap = max((room - sum(text[:i])) // rest, _MIN_TEXT)
            break
    return [w if n else min(w, cap) for w, n in zip(natural, numeric, strict=True)]


def render_rows(
    rows: Iterable[dict[str, Any]],
    fmt: Format,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    out: Any = None,
    fit: bool = False,
    wrap: int = 0,
    header: bool = True,
) -> int:
    """Write rows in ``fmt`` as they come, every format streamed (json as an array, one row a line;
    table and plain a chunk at a time). Returns the number of rows written. ``fit``: a table of a few
    rows (summaries and plans) drawn whole to fit the terminal, long cells wrapped on up to ``wrap``
    lines; record rows keep every byte and stream."""
    out = out or sys.stdout
    n = 0
    if fmt is Format.parquet:
        raise UsageError("--format parquet is for dump commitlog and dump consumequeue, with -o FILE")
    if fmt is Format.ndjson:
        encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder for every row
        for row in rows:
            out.write(encode(row) + "\n")
            n += 1
        return n
    if fmt is Format.csv:
        import csv

        writer = quoting = None
        cols: list[str] = []
        for row in rows:
            if writer is None:
                cols = list(columns or row.keys())
                writer = csv.writer(out, lineterminator="\n")
                quoting = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
                writer.writerow(cols)
            cells, lone_cr = csv_cells(row, cols)
            (quoting if lone_cr else writer).writerow(cells)
            n += 1
        return n
    if fmt is Format.json:
        return write_json_array(rows, out)
    if fit and fmt is Format.table:
        items = list(rows)
        cols = list(columns) if columns else (list(items[0].keys()) if items else [])
        _boxed_table(items, cols, title, out, fit=True, wrap=wrap, header=header)
        return len(items)
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


def render_mapping(
    data: dict[str, Any],
    fmt: Format,
    *,
    title: str | None = None,
    fit: bool = True,
    out: Any = None,
    compact: bool = False,
) -> None:
    """A single object: key/value lines for people (a table fits the terminal), one JSON document for
    scripts; ``compact``: a table without its field/value header, values on two lines at most."""
    if fmt in (Format.json, Format.ndjson):
        one_line = {"separators": (",", ":")} if fmt is Format.ndjson else {"indent": 2}
        (out or sys.stdout).write(json.dumps(data, ensure_ascii=False, **one_line) + "\n")  # type: ignore[arg-type]
        return
    rows = [{"field": k, "value": cell(v)} for k, v in data.items()]
    cols = ["field", "value"]
    render_rows(rows, fmt, columns=cols, title=title, fit=fit, out=out, wrap=2 if compact else 3, header=not compact)
