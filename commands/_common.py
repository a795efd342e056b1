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
import typer.main
from typer.core import TyperCommand

from rmqstore.errors import RmqstoreError, UsageError, VersionContradicted, from_os_error

from ._render import Format, err, escape, render_mapping, render_rows

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["Format", "err", "escape", "render_mapping", "render_rows"]


# How times are shown (--utc, the default, or --local) and how times without a zone are read.
_TIME = {"local": False, "utc_input": False}


def _time_flag(ctx: Any, param: Any, value: bool) -> None:
    if value:
        _TIME["local"] = param.name == "local_time"
        _TIME["utc_input"] = param.name == "utc_time"


@functools.cache
def _time_options() -> tuple[Any, ...]:
    """The --local and --utc options, built by typer once (its parameter classes are internal)."""
    holder = typer.Typer()

    @holder.command()
    def _options(
        local_time: Annotated[
            bool,
            typer.Option(
                "--local",
                expose_value=False,
                is_eager=True,
                callback=_time_flag,
                help="Show times in local time with their offset (default: UTC).",
            ),
        ] = False,
        utc_time: Annotated[
            bool,
            typer.Option(
                "--utc",
                expose_value=False,
                is_eager=True,
                callback=_time_flag,
                help="Show times in UTC, and read times given without a zone as UTC (default: local, as mqadmin).",
            ),
        ] = False,
    ) -> None:
        pass

    return tuple(p for p in typer.main.get_command(holder).params if p.name in ("local_time", "utc_time"))


class Command(TyperCommand):
    """Every command: --local/--utc for times, and an epilog (examples, crontab lines) printed as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_time_options())

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        if self.epilog:
            formatter.write_paragraph()
            for line in self.epilog.splitlines():
                formatter.write(f"{' ' * formatter.current_indent}  {line}".rstrip() + "\n")


def _store_path(value: Path) -> Path:
    """A folder that holds a store (not the store) is refused here, naming the store (exit 5)."""
    from rmqstore.errors import StoreNotFound

    from ._stores import refuse_parent_of_store

    try:
        refuse_parent_of_store(value)
    except StoreNotFound as e:
        err.error(str(e))
        raise typer.Exit(e.exit_code) from None
    return value


StorePath = Annotated[
    Path, typer.Argument(help="Store root directory (storePathRootDir).", show_default=False, callback=_store_path)
]
BrokerConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--broker-config",
        "-c",
        help="broker.conf with the store settings (default: STORE/broker.conf or STORE/../broker.conf, "
        "else broker defaults with file sizes read from the files).",
    ),
]


def broker_version(value: str | None) -> str | None:
    """``auto``, or a RocketMQ version the library knows the rules of (checked by the library's own test)."""
    if value is None or value.strip() == "auto":
        return value
    from rmqstore.rules import version_for

    try:
        version_for(value.strip())
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    return value.strip()


BrokerVersionOpt = Annotated[
    str,
    typer.Option(
        "--broker-version",
        callback=broker_version,
        help="Broker version whose behaviour to follow: auto (decided from the store), a family "
        "(4.4, 4.9 or 4.9.x, 5 or 5.x) or a version from 4.4.0 to 5.x (e.g. 4.9.7, 5.3.3).",
    ),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", "-n", help="Print the plan and change nothing.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]

_TRACEBACK = {"on": os.environ.get("RMQSTORE_TRACEBACK") == "1"}


def set_traceback(on: bool) -> None:
    """Per run (one process may run several, as the tests do): the option, else the environment."""
    _TRACEBACK["on"] = on or os.environ.get("RMQSTORE_TRACEBACK") == "1"


def show_warnings() -> None:
    """Warnings the library raises (``warnings.warn``) become one ``warning:`` line on stderr each."""
    import warnings

    def show(message: Warning | str, *_args: Any, **_kwargs: Any) -> None:
        err.warning(str(message))

    warnings.showwarning = show  # type: ignore[assignment]
    warnings.simplefilter("always", VersionContradicted)  # each store's, whatever PYTHONWARNINGS says


_STEP_HOOK: list[Callable[[str], None] | None] = [None]


def set_step_hook(hook: Callable[[str], None] | None) -> None:
    """Inject the step callback modifying commands hand to the library (crash tests kill there)."""
    _STEP_HOOK[0] = hook


def step_hook() -> Callable[[str], None] | None:
    return _STEP_HOOK[0]


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors into one line on stderr and their documented exit code; ``--traceback``
    adds the Python traceback before that line and keeps the exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RmqstoreError as e:
            _show_traceback()
            err.error(str(e))
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe()
            raise typer.Exit(0) from None
        except OSError as e:  # a path the operation needs: one line naming it, never "internal error"
            _show_traceback()
            fe = from_os_error(e)
            err.error(str(fe))
            raise typer.Exit(fe.exit_code) from None
        except Exception as e:  # a bug: one line, traceback only on request
            _show_traceback()
            err.error(
                f"{type(e).__name__}: {e} (run with --traceback or RMQSTORE_TRACEBACK=1 for details)",
                label="internal error",
            )
            raise typer.Exit(1) from None

    return wrapper


def _show_traceback() -> None:
    """The exception being handled, on stderr, when --traceback (or RMQSTORE_TRACEBACK=1) asked for it."""
    if _TRACEBACK["on"]:
        import traceback

        traceback.print_exc(file=sys.stderr)


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
    """A user's time (see ``rmqstore.timeparse``); without a zone: local time, or UTC after --utc."""
    import datetime as dt

    from rmqstore.timeparse import parse_time_ms as _p

    return _p(text, tz=dt.UTC if _TIME["utc_input"] else None)


def require_range(
    lo: int | None, hi: int | None, names: str, *, inclusive: bool, shown: tuple[str, str] | None = None
) -> None:
    """An inverted range (or an empty one, when ``hi`` is exclusive) selects nothing: a usage error
    (exit 2) rather than an empty answer that looks like an empty store."""
    if lo is None or hi is None:
        return
    if lo > hi or (lo == hi and not inclusive):
        a, b = shown or (str(lo), str(hi))
        what = "after" if lo > hi else "equal to"
        end = "the end" if inclusive else "the end (exclusive)"
        raise UsageError(f"{names}: the start {a} is {what} {end} {b}; the range selects nothing")


def time_range(since: str | None, until: str | None, names: str) -> tuple[int | None, int | None]:
    """``--since``/``--until`` (or ``--begin``/``--end``) read as times, both ends inclusive."""
    lo = None if since is None else parse_time_ms(since)
    hi = None if until is None else parse_time_ms(until)
    if lo is not None and hi is not None:
        shown = (f"{since} ({lo} ms)", f"{until} ({hi} ms)")
        require_range(lo, hi, names, inclusive=True, shown=shown)
    return lo, hi


def format_time_ms(ms: int) -> str:
    """A time as shown: ISO-8601 in UTC, or local time with its offset after --local."""
    from rmqstore.timeparse import format_time_ms as _f

    return _f(ms, local=_TIME["local"])


TIME_FORMS = "epoch s or ms (by magnitude), now, -1h, ISO-8601, yyyy-MM-dd#HH:mm:ss:SSS"
