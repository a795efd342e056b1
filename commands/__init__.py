"""The ``rmqstore`` command line: one sub-app per module, merged here."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from ._common import set_traceback

app = typer.Typer(
    name="rmqstore",
    help="Inspect, recover, re-dispatch, query and expire Apache RocketMQ broker stores offline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=True,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from rmqstore import __version__

        sys.stdout.write(f"rmqstore {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    traceback: Annotated[
        bool, typer.Option("--traceback", help="Show the Python traceback of an internal error.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Inspect, recover, re-dispatch, query and expire Apache RocketMQ broker stores offline.

    Shell completion: rmqstore --install-completion (bash, zsh, fish, PowerShell), or
    rmqstore --show-completion bash > /etc/bash_completion.d/rmqstore.
    """
    set_traceback(traceback)


# Every subcommand module; each defines ``app`` (a typer.Typer).
SUBCOMMAND_MODULES = (
    "info",
    "dump",
    "write",
    "recover",
    "redispatch",
    "query",
    "expire",
    "check",
    "offsets",
    "spark",
)
SUBCOMMANDS = []
for _name in SUBCOMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"{__name__}.{_name}":
            raise
        continue
    SUBCOMMANDS.append(_mod)
    app.add_typer(_mod.app)


def main() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="rmqstore")
    except BrokenPipeError:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
