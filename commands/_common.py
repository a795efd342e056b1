"""What every subcommand shares: argument types, output renderers, the one error handler."""

from __future__ import annotations

import csv
import enum
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from tabulate import tabulate

from rmqstore.errors import RmqstoreError, from_os_error

P = ParamSpec("P")
R = TypeVar("R")

err = Console(stderr=True, highlight=False, soft_wrap=True)


class Format(str, enum.Enum):
    table = "table"
    plain = "plain"
    json = "json"
    ndjson = "ndjson"
    csv = "csv"


StorePath = Annotated[Path, typer.Argument(help="Store root directory (storePathRootDir).", show_default=False)]
BrokerConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--broker-config",
        "-c",
        help="broker.conf with the store settings (default: STORE/broker.conf or STORE/../broker.conf, "
        "else broker defaults with file sizes read from the files).",
    ),
]
BrokerVersionOpt = Annotated[
    str,
    typer.Option(
        "--broker-version",
        help="Broker version whose behaviour to follow (e.g. 4.4.0, 4.9.7, 5.3.3); auto: decided from the store.",
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]

_TRACEBACK = {"on": os.environ.get("RMQSTORE_TRACEBACK") == "1"}


def set_traceback(on: bool) -> None:
    _TRACEBACK["on"] = on or _TRACEBACK["on"]


_STEP_HOOK: list[Callable[[str], None] | None] = [None]


def set_step_hook(hook: Callable[[str], None] | None) -> None:
    """Inject the step callback modifying commands hand to the library (crash tests kill there)."""
    _STEP_HOOK[0] = hook


def step_hook() -> Callable[[str], None] | None:
    return _STEP_HOOK[0]


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors into one line on stderr and their documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RmqstoreError as e:
            if _TRACEBACK["on"]:
                raise
            err.print(f"[bold red]error:[/] {escape(str(e))}")
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe()
            raise typer.Exit(0) from None
        except OSError as e:  # a path the operation needs: one line naming it, never "internal error"
            if _TRACEBACK["on"]:
                raise
            fe = from_os_error(e)
            err.print(f"[bold red]error:[/] {escape(str(fe))}")
            raise typer.Exit(fe.exit_code) from None
        except Exception as e:  # a bug: one line, traceback only on request
            if _TRACEBACK["on"]:
                raise
            err.print(
                f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))} "
                "(run with --traceback or RMQSTORE_TRACEBACK=1 for details)"
            )
            raise typer.Exit(1) from None

    return wrapper


def escape(text: str) -> str:
    return text.replace("[", r"\[")


def _quiet_broken_pipe() -> None:
    # Point stdout at /dev/null so the interpreter's final flush does not raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def is_tty() -> bool:
    return sys.stdout.isatty()


def default_format(fmt: Format | None) -> Format:
    if fmt is not None:
        return fmt
    return Format.table if is_tty() else Format.plain


def _cell(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    if v is None:
        return ""
    return v


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
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
        return n
    if fmt is Format.csv:
        writer = None
        for row in rows:
            if writer is None:
                cols = list(columns or row.keys())
                writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
                writer.writeheader()
            writer.writerow({k: _cell(row.get(k)) for k in writer.fieldnames})
            n += 1
        return n
    items = list(rows)
    n = len(items)
    if fmt is Format.json:
        out.write(json.dumps(items, ensure_ascii=False, indent=2) + "\n")
        return n
    cols = list(columns) if columns else (list(items[0].keys()) if items else [])
    if fmt is Format.table and out is sys.stdout:
        t = Table(title=title, show_lines=False, header_style="bold")
        for c in cols:
            t.add_column(c, overflow="fold")
        for row in items:
            t.add_row(*(str(_cell(row.get(c))) for c in cols))
        Console(highlight=False).print(t)
        return n
    if title and fmt is Format.table:
        out.write(title + "\n")
    out.write(tabulate([[_cell(r.get(c)) for c in cols] for r in items], headers=cols, tablefmt="plain") + "\n")
    return n


def render_mapping(data: dict[str, Any], fmt: Format, *, title: str | None = None) -> None:
    """A single object: key/value lines for people, one JSON document for scripts."""
    if fmt in (Format.json, Format.ndjson):
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None if fmt is Format.ndjson else 2) + "\n")
        return
    rows = [{"field": k, "value": _cell(v)} for k, v in data.items()]
    render_rows(rows, fmt, columns=["field", "value"], title=title)


@contextmanager
def progress_bar(total: int, label: str, *, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only when stderr is a terminal); yields ``advance(n)``."""
    if quiet or not sys.stderr.isatty() or total <= 0:
        yield lambda n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as prog:
        task = prog.add_task(label, total=total)
        yield lambda n: prog.advance(task, n)


def parse_time_ms(text: str) -> int:
    """Epoch ms, ISO-8601, or RocketMQ's ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    from rmqstore.timeparse import parse_time_ms as _p

    return _p(text)
