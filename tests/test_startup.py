"""A one-shot call imports only what its command needs (startup speed; see benchmarks/bench_startup.py)."""

from __future__ import annotations

import os
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


def test_a_key_query_needs_neither_numpy_nor_pydantic():
    mods = modules_after("query", "key", str(SMALL), "TopicA", "order-0", "-f", "plain")
    assert "rmqstore.ops.query" in mods
    assert not {m for m in mods if m.split(".")[0] in ("numpy", "pydantic", "pydantic_core")}


def test_info_converts_its_options_without_pydantic():
    mods = modules_after("info", str(SMALL), "-f", "plain")
    assert not {m for m in mods if m.split(".")[0] in ("pydantic", "pydantic_core")}


# Each case: (argv, substring of the message) with typer's own (pydantic) conversion and ours alike.
BAD_VALUES = [
    (["dump", "commitlog", str(SMALL), "--limit", "-1"], "Input should be greater than or equal to 0"),
    (["dump", "commitlog", str(SMALL), "--limit", "x"], "Input should be a valid integer"),
    (["dump", "commitlog", str(SMALL), "-f", "bogus"], "'bogus' is not one of 'table', 'plain'"),
    (["dump", "commitlog", str(SMALL), "--broker-version", "banana"], "banana"),
]


def _run_with(plain: bool, argv: list[str]) -> tuple[int, str]:
    """Run the command line in a child, with or without the plain conversion installed."""
    code = (
        "import sys\n"
        + ("" if plain else "import rmqstore.cli._coerce as c\nc.install = lambda: None\n")
        + "from rmqstore.cli import main\n"
        f"sys.argv = ['rmqstore', *{argv!r}]\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    return proc.returncode, " ".join(proc.stderr.split())


@pytest.mark.parametrize(("argv", "message"), BAD_VALUES)
def test_plain_conversion_refuses_what_typer_refuses(argv, message):
    ours, theirs = _run_with(True, argv), _run_with(False, argv)
    assert ours[0] == theirs[0] == 2, (ours, theirs)
    assert message in ours[1]
    assert message in theirs[1] or message.startswith("'bogus'")  # typer prefixes "Value error, "


def test_plain_conversion_gives_typer_s_values():
    argv = ["dump", "consumequeue", str(SMALL), "TopicA", "0", "-f", "json", "--from-index", " 1", "--count", "2"]
    runs = []
    for plain in (True, False):
        prefix = "" if plain else "import rmqstore.cli._coerce as c\nc.install = lambda: None\n"
        code = f"{prefix}import sys\nfrom rmqstore.cli import main\nsys.argv = ['rmqstore', *{argv!r}]\nmain()\n"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
        runs.append((proc.returncode, proc.stdout))
    assert runs[0] == runs[1]
    assert runs[0][0] == 0 and '"queueOffset":1,' in runs[0][1]


@pytest.mark.parametrize("given", [None, "2"])
def test_numpy_s_blas_runs_one_thread_unless_the_user_says_otherwise(given):
    """numpy's BLAS starts a spinning thread per core when it loads; no command multiplies matrices."""
    code = (
        "import os, sys\nfrom rmqstore.cli import main\n"
        f"sys.argv = ['rmqstore', 'info', {str(SMALL)!r}, '-f', 'plain']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "import numpy\n"  # loaded after main() set the variable: its BLAS reads it now
        "sys.stderr.write('\\nTHREADS %s %d\\n' % (os.environ.get('OPENBLAS_NUM_THREADS'), "
        "len(os.listdir('/proc/self/task'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    setting, threads = proc.stderr.rsplit("THREADS ", 1)[1].split()
    assert setting == (given or "1")
    # the interpreter's thread, and BLAS's own beyond the first (no more than the cores)
    assert int(threads) == min(int(setting), os.cpu_count() or 1)


def test_a_command_with_its_standard_output_closed_says_so_in_one_line():
    argv = [sys.executable, "-m", "rmqstore.cli", "info", str(SMALL)]
    proc = subprocess.run(argv, stderr=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=lambda: os.close(1))  # noqa: PLW1509
    assert proc.returncode == 1
    assert proc.stderr == "error: standard output is closed\n"
