"""Aligned and boxed tables that stream: rows go out a chunk at a time, never all held.

The first chunk (up to ``CHUNK_ROWS`` rows, or what arrived in ``CHUNK_SECONDS``) fixes each
column's width and alignment; every later chunk is drawn with the same widths, so the columns line
up down the whole output while the first rows show within a second of the command's start, however
long the scan behind them. On a terminal a boxed table is fitted to the terminal's width: the widest
columns are narrowed and their cells cut with an ellipsis. Aligned plain text is for scripts and
never cut: a later cell longer than its column only pushes the rest of its line.

Self-contained (the standard library only; the box is tabulate's ``rounded_outline``, drawn a line at a
time): the caller gives the cell text function.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from . import _console

CHUNK_ROWS = 1000
CHUNK_SECONDS = 0.5
MIN_WIDTH = 6  # a narrowed column keeps at least this many characters
ELLIPSIS = "…"
Row = dict[str, Any]


def chunks(rows: Iterable[Row], size: int | None = None, seconds: float | None = None) -> Iterator[list[Row]]:
    """``rows`` in lists of at most ``size`` (CHUNK_ROWS), a list closed by the first row that comes
    ``seconds`` (CHUNK_SECONDS) or more after the list began."""
    size = size or CHUNK_ROWS
    seconds = CHUNK_SECONDS if seconds is None else seconds
    it = iter(rows)
    while True:
        start, out = time.monotonic(), []
        for row in it:
            out.append(row)
            if len(out) >= size or time.monotonic() - start >= seconds:
                break
        if not out:
            return
        yield out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def numeric_columns(rows: Sequence[Row], cols: Sequence[str]) -> list[bool]:
    """Columns holding only numbers (or nothing) in ``rows``: aligned right."""
    return [bool(rows) and all(_is_number(r.get(c)) or r.get(c) is None for r in rows) for c in cols]


def fit(widths: list[int], heads: Sequence[int], room: int, overhead: int) -> list[int]:
    """``widths`` narrowed, widest first, until ``sum + overhead`` fits ``room`` (or all are at their minimum)."""
    widths = list(widths)
    floor = [min(w, max(MIN_WIDTH, min(h, MIN_WIDTH * 2))) for w, h in zip(widths, heads, strict=True)]
    excess = sum(widths) + overhead - room
    while excess > 0:
        i = max(range(len(widths)), key=lambda k: widths[k] - floor[k])
        if widths[i] <= floor[i]:
            break
        cut = min(excess, widths[i] - floor[i], max(1, (widths[i] - floor[i]) // 2))
        widths[i] -= cut
        excess -= cut
    return widths


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


class StreamedTable:
    """Draws rows chunk by chunk with the widths of the first chunk; ``boxed`` draws tabulate's rounded outline."""

    def __init__(
        self, cols: Sequence[str], text: Callable[[Any], str], out: Any, *, boxed: bool, room: int | None
    ) -> None:
        self.cols, self.text, self.out, self.boxed, self.room = list(cols), text, out, boxed, room
        self.widths: list[int] = []
        self.right: list[bool] = []
        self.bottom = ""

    def _start(self, first: list[Row], heads: list[str]) -> None:
        cells = [[self.text(r.get(c)) for c in self.cols] for r in first]
        self.right = numeric_columns(first, self.cols)
        self.widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(heads)]
        if self.room is not None:
            overhead = 3 * len(self.cols) + 1 if self.boxed else 2 * (len(self.cols) - 1)
            self.widths = fit(self.widths, [len(h) for h in heads], self.room, overhead)

    def _line(self, values: Sequence[str]) -> str:
        parts = []
        for v, w, r in zip(values, self.widths, self.right, strict=True):
            v = clip(v, w) if self.room is not None else v
            parts.append(v.rjust(w) if r else v.ljust(w))
        if self.boxed:
            return "│ " + " │ ".join(parts) + " │\n"
        return "  ".join(parts).rstrip() + "\n"

    def _rule(self, left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (w + 2) for w in self.widths) + right + "\n"

    def write(self, rows: Iterable[Row], heads: list[str], title: str | None) -> int:
        n = 0
        for chunk in chunks(rows):
            if not self.widths:
                self._start(chunk, heads)
                if title and self.boxed:
                    self.out.write(title + "\n")
                if self.boxed:
                    self.out.write(self._rule("╭", "┬", "╮"))
                self.out.write(self._line(heads))
                if self.boxed:
                    self.out.write(self._rule("├", "┼", "┤"))
                    self.bottom = self._rule("╰", "┴", "╯")
            self.out.write("".join(self._line([self.text(r.get(c)) for c in self.cols]) for r in chunk))
            self.out.flush()
            n += len(chunk)
        if not self.widths:  # no row: the header alone
            self._start([], heads)
            self.out.write(self._rule("╭", "┬", "╮") + self._line(heads) if self.boxed else self._line(heads))
            self.bottom = self._rule("╰", "┴", "╯") if self.boxed else ""
        self.out.write(self.bottom)
        return n


def terminal_width(out: Any) -> int | None:
    """The width of the terminal ``out`` writes to; None when it is not one (a pipe keeps every byte)."""
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return _console.width(out)


def first_keys(rows: Iterable[Row]) -> tuple[list[str], Iterator[Row]]:
    """The keys of the first row (the columns when none are given) and the rows, that row included."""
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return [], iter(())
    return list(first.keys()), itertools.chain([first], it)
