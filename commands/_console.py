"""The terminal a command runs in: its size, whether colour is wanted, how much to show.

One place answers, for every renderer (tables, plans, record rows, progress bars, messages):
- the width and height output must fit (``COLUMNS``/``LINES`` first, as shells and rich read them,
  else the terminal's own size; None when standard output is no terminal: pipes get every byte);
- colour: never with ``NO_COLOR`` set to anything non-empty (no-color.org), ``TERM=dumb`` or
  ``--no-color``, and only on a terminal;
- verbosity: ``-q`` (no progress bar, fewer notes) and ``-v`` (every row and detail on a terminal),
  set by the global options and by the same options on every command.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

_STATE: dict[str, Any] = {"no_color": False, "quiet": False, "verbose": 0}

ELLIPSIS = "…"
DEFAULT_HEIGHT = 40  # the screen a default view must fit when the terminal does not say


def set_no_color(on: bool = True) -> None:
    _STATE["no_color"] = _STATE["no_color"] or on


def set_quiet(on: bool = True) -> None:
    _STATE["quiet"] = _STATE["quiet"] or on


def add_verbose(n: int = 1) -> None:
    _STATE["verbose"] = _STATE["verbose"] + n


def reset() -> None:
    """Back to the defaults (each in-process run of the app starts from them)."""
    _STATE.update(no_color=False, quiet=False, verbose=0)


def quiet() -> bool:
    return bool(_STATE["quiet"])


def verbose() -> int:
    return int(_STATE["verbose"])


def dumb_terminal() -> bool:
    return os.environ.get("TERM", "") == "dumb"


def color(stream: TextIO) -> bool:
    """Escape sequences for colour on ``stream``: a terminal, and nobody said no."""
    if _STATE["no_color"] or os.environ.get("NO_COLOR") or dumb_terminal():
        return False
    return _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _env_size(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _terminal_size(stream: TextIO) -> os.terminal_size | None:
    if not _isatty(stream):
        return None
    try:
        return os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):
        return None


def width(stream: TextIO | None = None) -> int | None:
    """Columns to fit on ``stream`` (default stdout); None: not a terminal and COLUMNS unset."""
    stream = stream or sys.stdout
    size = _terminal_size(stream)
    env = _env_size("COLUMNS")
    if env is not None:
        return env
    return size.columns if size is not None and size.columns > 0 else None


def height(stream: TextIO | None = None) -> int:
    """Lines a default view should fit on ``stream``."""
    stream = stream or sys.stdout
    env = _env_size("LINES")
    if env is not None:
        return env
    size = _terminal_size(stream)
    return size.lines if size is not None and size.lines > 0 else DEFAULT_HEIGHT


def shorten(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` in at most ``limit`` characters, an ellipsis standing for what was cut; ``keep_end``:
    the end is kept (a path's last folders tell more than its first)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    return ELLIPSIS + text[len(text) - limit + 1 :] if keep_end else text[: limit - 1] + ELLIPSIS


def wrap(text: str, limit: int) -> list[str]:
    """``text`` as lines of at most ``limit`` characters, broken at spaces where it can be."""
    import textwrap

    if limit <= 0 or len(text) <= limit:
        return [text]
    return textwrap.wrap(text, limit, break_long_words=True, break_on_hyphens=False) or [""]
