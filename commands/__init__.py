"""The ``rmqstore`` command line (installed as ``rmqstore.cli``): one module per subcommand.

A subcommand's module (and the library, numpy, rich...) is imported only when that subcommand
runs, so a one-shot call starts fast; ``rmqstore --help`` lists the commands from ``COMMANDS``.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from . import _console
from ._coerce import install as _install_plain_coercion
from ._common import NO_COLOR_HELP, QUIET_HELP, VERBOSE_HELP, set_traceback, show_warnings, suggest

_install_plain_coercion()

# Top-level command -> (its module, its one-line help as `rmqstore --help` shows it; a test keeps
# the line equal to the command's own).
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("info", "Show the state of a store: shutdown, lock, checkpoint, commit log, queues, index, config."),
    "dump": (
        "dump",
        "Show every byte of a store: commit log records, consume queues, index files, checkpoint, config.",
    ),
    "write": ("write", "Append messages to a store as the broker would, with consume queue and index entries."),
    "recover": (
        "recover",
        "Recover a store after a crash exactly as the broker would at start, showing the plan first.",
    ),
    "redispatch": (
        "redispatch",
        "Rebuild consume queues and index files from the commit log and swap them in atomically.",
    ),
    "convert": (
        "convert",
        "Write STORE again as a new store in another layout: the commit log's framing, or the consume queues'.",
    ),
    "query-by-key": ("query", "Find the messages of TOPIC whose KEYS contain KEY, as mqadmin queryMsgByKey does."),
    "query": ("query", "Find messages by key, unique key, message id, queue offset or time, from the store's files."),
    "diff": ("diff", "Compare the commit logs of two replicas record by record and say where they diverged."),
    "truncate": (
        "truncate",
        "Cut a store back at a commit log offset or time, with its consume queues, index and checkpoint.",
    ),
    "expire": ("expire", "Delete expired commit log, consume queue and index files, as the broker's clean task does."),
    "check": ("check", "Check every file of a store for consistency and report all problems found."),
    "offsets": (
        "offsets",
        "Show consumer progress: `rmqstore offsets STORE` (committed offset, queue min/max, lag).",
    ),
    "report": (
        "report",
        "One HTML page with a store's state, disk, traffic, consumers and expiry, as charts with their numbers.",
    ),
    "spark": (
        "spark",
        "Bulk jobs on Apache Spark over many stores: export to Parquet, statistics, find, redispatch, report.",
    ),
}
SUBCOMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))


def load_module(module: str) -> Any | None:
    """A subcommand module, or None when it is not part of this installation."""
    try:
        return importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{module}":
            raise
        return None


def load_command(name: str) -> Any | None:
    """The click command of a top-level name, built from its module's typer app."""
    mod = load_module(COMMANDS[name][0])
    if mod is None:
        return None
    cmd = typer.main.get_command(mod.app)
    if not mod.app.info.name and isinstance(cmd, TyperGroup):  # several top-level commands in one module
        cmd = cmd.commands.get(name)
    _plain_help(cmd)
    _suggesting(cmd)
    return cmd


def _plain_help(cmd: Any) -> None:
    """Help texts are never rich markup ("[min, max]" stays as written), in every subcommand."""
    if hasattr(cmd, "rich_markup_mode"):
        cmd.rich_markup_mode = None
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)


def _resolve(group: Any, resolve: Any, ctx: Any, args: list[str]) -> Any:
    """A group's command lookup that names the commands a mistyped one may mean (exit 2, as
    click's other usage errors)."""
    name = args[0] if args else ""
    if name and not name.startswith("-") and group.get_command(ctx, name) is None:
        ctx.fail(suggest(name, group.list_commands(ctx)))
    return resolve(ctx, args)


def _suggesting(cmd: Any) -> None:
    """Every group of subcommands (dump, query, offsets, spark) suggests like the top level."""
    if isinstance(cmd, TyperGroup) and not isinstance(cmd.resolve_command, functools.partial):
        cmd.resolve_command = functools.partial(_resolve, cmd, cmd.resolve_command)
        for sub in cmd.commands.values():
            _suggesting(sub)


class _LazyGroup(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            cmd = load_command(cmd_name)
            if cmd is None:
                return None
            self.commands[cmd_name] = cmd
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        return _resolve(self, super().resolve_command, ctx, args)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = []
        for name, (_, line) in COMMANDS.items():
            cmd = self.commands.get(name) or TyperCommand(name=name, help=line)
            rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="rmqstore",
    cls=_LazyGroup,
    help="Inspect, recover, re-dispatch, query and expire Apache RocketMQ broker stores offline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # subcommands inherit it
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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help=VERBOSE_HELP)] = 0,
    no_color: Annotated[bool, typer.Option("--no-color", help=NO_COLOR_HELP)] = False,
) -> None:
    """Inspect, recover, re-dispatch, query and expire Apache RocketMQ broker stores offline.

    Shell completion: rmqstore --install-completion (bash, zsh, fish, PowerShell), or
    rmqstore --show-completion bash > /etc/bash_completion.d/rmqstore.
    """
    set_traceback(traceback)
    _console.reset()  # one in-process run does not inherit the last one's options
    _console.set_quiet(quiet)
    _console.add_verbose(verbose)
    _console.set_no_color(no_color)
    show_warnings()


def __getattr__(name: str) -> Any:
    if name == "SUBCOMMANDS":  # every subcommand module, imported (tests, the man page generator)
        return [m for m in map(load_module, SUBCOMMAND_MODULES) if m is not None]
    raise AttributeError(name)


# Shells typer writes completion scripts for.
_COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _take_completion_shell(argv: list[str]) -> None:
    """Let ``--show-completion bash`` (or ``--install-completion zsh``) use the shell it names.

    Typer otherwise ignores the name and guesses the shell from the process tree, which fails under
    cron, CI or ``nohup`` ("Shell  not supported"); typer's own switch (made for its tests) makes the
    option take a value.
    """
    for flag in ("--show-completion", "--install-completion"):
        if flag in argv[:-1] and argv[argv.index(flag) + 1] in _COMPLETION_SHELLS:
            import os

            os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"


def main() -> None:
    """Console-script entry point."""
    # numpy's BLAS starts a spinning thread per core at import; nothing here multiplies matrices, so
    # one thread spares every command about 0.1 s of CPU (the user's own setting is kept)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.stdout is None:  # started with its standard output closed: the results have nowhere to go
        if sys.stderr is not None:
            sys.stderr.write("error: standard output is closed\n")
        sys.exit(1)
    _take_completion_shell(sys.argv[1:])
    try:
        app(prog_name="rmqstore")
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
