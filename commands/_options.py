"""Options several subcommands take, declared once: the same name, short form and help everywhere."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ._common import (
    TIME_FORMS,
    BrokerConfigOpt,
    BrokerVersionOpt,
    Command,
    DryRunOpt,
    YesOpt,
    default_format,
    reports_errors,
)
from ._render import Format

F = TypeVar("F", bound=Callable[..., Any])

FmtOpt = Annotated[
    Format | None, typer.Option("--format", "-f", help="Output format (default: table on a terminal, else plain).")
]
QuarantineOpt = Annotated[
    Path | None,
    typer.Option(
        "--quarantine",
        help="Folder for the removed bytes and replaced files (default: STORE/../<name>.quarantine/<time>).",
    ),
]
NoQuarantineOpt = Annotated[
    bool, typer.Option("--no-quarantine", help="Do not keep the removed bytes and replaced files.")
]
StoresArg = Annotated[
    list[Path],
    typer.Argument(metavar="STORE...", help="Store root(s), or globs ('/data/broker-*/store').", show_default=False),
]


class ReportFormat(enum.StrEnum):
    html = "html"
    json = "json"


class CheckMode(enum.StrEnum):
    quick = "quick"
    full = "full"
    none = "none"


ReportOutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write the page (or JSON) to this file; default: standard output.")
]
ReportFormatOpt = Annotated[
    ReportFormat, typer.Option("--format", "-f", help="html: the page; json: the figures behind it.")
]
ReportCheckOpt = Annotated[
    CheckMode,
    typer.Option(
        "--check", help="The verdict of check on the page: quick (what the broker concludes at start), full, none."
    ),
]
ReportNowOpt = Annotated[
    str | None,
    typer.Option("--now", help="Evaluate expiry at this time instead of now (the forms of expire --now)."),
]

TopicFilterOpt = Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")]
SinceOpt = Annotated[str | None, typer.Option("--since", help=f"Store time from ({TIME_FORMS}).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Store time up to, inclusive (same forms as --since).")]


@dataclasses.dataclass(frozen=True)
class Reading:
    """How a store is opened and what its data is shown as: the options of every read-only command."""

    broker_config: BrokerConfigOpt = None
    broker_version: BrokerVersionOpt = "auto"
    fmt: FmtOpt = None

    @property
    def format(self) -> Format:
        return default_format(self.fmt)

    def open(self, store: Path) -> Any:
        """``open_store`` with these options (a context manager)."""
        from rmqstore.store import open_store

        return open_store(store, broker_config=self.broker_config, broker=self.broker_version)


@dataclasses.dataclass(frozen=True)
class Reporting:
    """What a report page shows and where it goes: the options of ``report`` and ``spark report``."""

    output: ReportOutputOpt = None
    fmt: ReportFormatOpt = ReportFormat.html
    check: ReportCheckOpt = CheckMode.quick
    now: ReportNowOpt = None
    broker_config: BrokerConfigOpt = None
    broker_version: BrokerVersionOpt = "auto"


@dataclasses.dataclass(frozen=True)
class Changing:
    """The options of every command that changes a store: its rules, plan only or apply, how shown."""

    broker_config: BrokerConfigOpt = None
    broker_version: BrokerVersionOpt = "auto"
    dry_run: DryRunOpt = False
    fmt: FmtOpt = None
    yes: YesOpt = False

    @property
    def format(self) -> Format:
        return default_format(self.fmt)

    @property
    def ask(self) -> bool:
        """``Apply?`` is asked at a terminal unless --yes (never in a dry run: nothing is applied)."""
        return not self.yes and not self.dry_run

    def open(self, store: Path, operation: str, *, writable: bool = True) -> Any:
        """The store under the broker's lock; read-only for a dry run, refused like a real run while a
        broker holds the lock (a context manager)."""
        from rmqstore.store import open_store

        return open_store(
            store,
            broker_config=self.broker_config,
            broker=self.broker_version,
            writable=writable,
            operation=operation,
            dry_run=self.dry_run,
        )


@dataclasses.dataclass(frozen=True)
class Keeping:
    """Where the bytes and files a modifying command removes are kept: one fresh quarantine folder per run."""

    quarantine: QuarantineOpt = None
    no_quarantine: NoQuarantineOpt = False

    def __post_init__(self) -> None:
        if self.quarantine is not None and self.no_quarantine:
            from rmqstore.errors import InputError

            raise InputError("--quarantine and --no-quarantine exclude each other")

    @property
    def keep(self) -> bool:
        return not self.no_quarantine


def command(app: typer.Typer, name: str, *groups: type, **settings: Any) -> Callable[[F], F]:
    """Register a function as command ``name`` of ``app``: the shared command class, the one error
    handler, and each option group passed as the parameter named after its class in lower case."""

    def decorate(fn: F) -> F:
        for group in groups:
            fn = option_group(group.__name__.lower(), group)(fn)
        return app.command(name, cls=Command, **settings)(reports_errors(fn))

    return decorate


def option_group(name: str, group: type) -> Callable[[F], F]:
    """Give a command the options declared as the fields of dataclass ``group`` (``Annotated`` option
    types with defaults), passed to it as one argument ``name``: options that belong together are
    declared once, in one place, for every command that takes them."""
    hints = typing.get_type_hints(group, include_extras=True)
    extra = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name], default=f.default)
        for f in dataclasses.fields(group)
    ]

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != name]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            if name not in kwargs:  # the options one by one (typer), else the group itself (a caller)
                kwargs[name] = group(**{p.name: kwargs.pop(p.name) for p in extra})
            return fn(*args, **kwargs)

        params = own + extra
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return command  # type: ignore[return-value]

    return decorate
