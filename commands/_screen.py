"""One screen of a summary: the tables of ``info``, ``check`` and the like, fitted to the terminal.

On a terminal (table format, default verbosity) the view fits the terminal's width and height: each
table is cut to the width (``_render``'s fitting), and tables of many rows show as many rows as the
lines left allow, then one line saying how many more there are and how to see them (``-v``, or a
machine format). With ``-v``, or when standard output is not a terminal, every row is shown.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from . import _console
from ._render import Format, render_mapping, render_rows

_TABLE_FRAME = 5  # title, top border, header, header rule, bottom border
_RESERVED = 3  # the shell prompt after the output, and the footer's lines


class Screen:
    """Tables written to stdout within a budget of lines (None: no budget, every row)."""

    def __init__(self, fmt: Format) -> None:
        self.fmt = fmt
        fits = fmt is Format.table and not _console.verbose() and _sized_terminal()
        self.left: int | None = _console.height() - _RESERVED if fits else None
        self.cut: list[str] = []

    @property
    def fitted(self) -> bool:
        return self.left is not None

    def _write(self, text: str) -> None:
        sys.stdout.write(text)
        if self.left is not None:
            self.left -= text.count("\n")

    def mapping(self, data: dict[str, Any], title: str) -> None:
        buf = io.StringIO()
        render_mapping(data, self.fmt, title=title, out=buf, compact=self.fitted)
        self._write(buf.getvalue())

    def rows(
        self,
        items: Iterable[dict[str, Any]],
        title: str,
        what: str,
        columns: Sequence[str] | None = None,
        *,
        wrap: int = 0,
    ) -> None:
        """A table of ``what`` (e.g. "queues"): as many rows as fit, the rest counted in a footer;
        long cells wrapped on up to ``wrap`` lines."""
        rows = list(items)
        if not rows:
            return
        shown = len(rows) if self.left is None else min(len(rows), self.left - _TABLE_FRAME - 1)
        if shown < 1:
            self.cut.append(f"{len(rows)} {what}")
            return
        text = self._render(rows[:shown], title, columns, wrap)
        while self.left is not None and text.count("\n") > self.left - 1:  # wrapped cells took more lines
            shown -= 1
            if shown < 1:
                self.cut.append(f"{len(rows)} {what}")
                return
            text = self._render(rows[:shown], title, columns, wrap)
        self._write(text)
        if shown < len(rows):
            self.cut.append(f"{len(rows) - shown} more {what}")

    def _render(self, rows: list[dict[str, Any]], title: str, columns: Sequence[str] | None, wrap: int) -> str:
        buf = io.StringIO()
        render_rows(rows, self.fmt, columns=columns, title=title, out=buf, fit=self.fmt is Format.table, wrap=wrap)
        return buf.getvalue()

    def footer(self, machine: str = "--format json") -> None:
        """What the screen left out, and how to see it."""
        if self.cut:
            note = f"not shown: {', '.join(self.cut)} (-v: all; {machine}: scripts)"
            sys.stdout.write("\n".join(_console.wrap(note, _console.width() or len(note))) + "\n")


def _sized_terminal() -> bool:
    """Standard output is a terminal (or LINES says how tall the screen is)."""
    return sys.stdout.isatty() or bool(os.environ.get("LINES", "").strip())
