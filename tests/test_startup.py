"""A one-shot call imports only what its command needs (startup speed; see benchmarks/bench_startup.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main
from conftest import FIXTURES, REPO

import rmqstore.cli as cli

SMALL = FIXTURES / "small" / "store"
HEAVY = ("numpy", "rich", "pyspark", "pyarrow", "tabulate")


def modules_after(*argv: str) -> set[str]:
    code = (
        "import sys\nfrom rmqstore.cli import main\n"
        f"sys.argv = ['rmqstore', *{list(argv)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    line = proc.stderr.rsplit("MODULES ", 1)[1]
    return set(line.split())


def test_help_and_version_import_no_heavy_module_and_no_subcommand():
    for argv in (["--help"], ["--version"]):
        mods = modules_after(*argv)
        assert not {m for m in mods if m.split(".")[0] in HEAVY}, argv
        assert not {m for m in mods if m.startswith("rmqstore.cli.") and not m.startswith("rmqstore.cli._")}, argv


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["info", str(SMALL), "-f", "plain"], "rmqstore.cli.info"),
        (["query", "key", str(SMALL), "TopicA", "order-0", "-f", "plain"], "rmqstore.cli.query"),
    ],
)
def test_a_command_imports_its_module_only(argv, module):
    mods = modules_after(*argv)
    assert module in mods
    others = {f"rmqstore.cli.{m}" for m in cli.SUBCOMMAND_MODULES} - {module}
    assert not mods & others
    assert not {m for m in mods if m.split(".")[0] in ("rich", "pyspark", "pyarrow", "tabulate")}


def test_the_static_command_list_matches_the_commands():
    root = typer.main.get_command(cli.app)
    ctx = root.context_class(root, info_name="rmqstore")
    assert root.list_commands(ctx) == list(cli.COMMANDS)
    for name, (module, line) in cli.COMMANDS.items():
        cmd = root.get_command(ctx, name)
        assert cmd is not None, name
        assert cmd.get_short_help_str(1000) == line, name
        assert sys.modules[f"rmqstore.cli.{module}"].app is not None
    # every module in commands/ (but the shared ones) is a listed command
    files = {p.stem for p in (REPO / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert files == set(cli.SUBCOMMAND_MODULES)
