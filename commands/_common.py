"""What every subcommand shares: argument types, output renderers, the one error handler."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperCommand

from rmqstore.errors import RmqstoreError

from ._render import Format, err, escape, render_mapping, render_rows

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["Format", "err", "escape", "render_mapping", "render_rows"]


class Command(TyperCommand):
    """A command whose epilog (examples, crontab lines, tables) is printed as written, not re-wrapped."""

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        if self.epilog:
            formatter.write_paragraph()
            for line in self.epilog.splitlines():
                formatter.write(f"{' ' * formatter.current_indent}  {line}".rstrip() + "\n")


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
    str, typer.Option("--broker-version", help="Broker version whose behaviour to follow (e.g. 4.4.0, 4.9.7, 5.3.3).")
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]

_TRACEBACK = {"on": os.environ.get("RMQSTORE_TRACEBACK") == "1"}


def set_traceback(on: bool) -> None:
    _TRACEBACK["on"] = on or _TRACEBACK["on"]


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors into one line on stderr and their documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RmqstoreError as e:
            if _TRACEBACK["on"]:
                raise
            err.error(str(e))
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe()
            raise typer.Exit(0) from None
        except Exception as e:  # a bug: one line, traceback only on request
            if _TRACEBACK["on"]:
                raise
            err.error(
                f"{type(e).__name__}: {e} (run with --traceback or RMQSTORE_TRACEBACK=1 for details)",
                label="internal error",
            )
            raise typer.Exit(1) from None

    return wrapper


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


@contextmanager
def progress_bar(total: int, label: str, *, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only when stderr is a terminal); yields ``advance(n)``."""
    if quiet or not sys.stderr.isatty() or total <= 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True, highlight=False, markup=False),
        transient=True,
    ) as prog:
        task = prog.add_task(label, total=total)
        yield lambda n: prog.advance(task, n)


def parse_time_ms(text: str) -> int:
    """Epoch ms, ISO-8601, or RocketMQ's ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    from rmqstore.timeparse import parse_time_ms as _p

    return _p(text)
