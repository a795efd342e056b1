"""The command line at a terminal: screens that fit, progress bars, colours, prompts and the habits
operators bring (-h, -q, -v, NO_COLOR, TERM=dumb, did you mean, Apply? [y/N]).

Most tests run ``rmqstore`` in a real pseudo-terminal of 80 x 40 (``tests/ptyrun.py``), as tmux
would; the ones that only read the command tree use typer's runner.
"""

from __future__ import annotations

import filecmp
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, SHARED
from ptyrun import CLI, run_in_pty
from typer.testing import CliRunner

from rmqstore.cli import COMMANDS, app, load_command

MARKUP = re.compile(r"\[/?(progress|bold|red|green|yellow|blue|cyan|magenta|dim)[^\]]*\]")
ERROR_IN_RED = "\x1b[1;31merror:"


def shared_stores() -> list[Path]:
    """Every store under ../shared: a folder with commitlog/, or a DLedger member's store."""
    if not SHARED.is_dir():
        return []
    found = {p.parent for p in SHARED.glob("**/commitlog") if p.is_dir()}
    found |= {p.parent for p in SHARED.glob("*/*/store/dledger-*")}
    return sorted(found)


def fits(lines: list[str], cols: int = 80, rows: int = 40) -> None:
    too_wide = [line for line in lines if len(line) > cols]
    assert not too_wide, f"{len(too_wide)} line(s) wider than {cols}: {too_wide[0]!r}"
    assert len(lines) < rows, f"{len(lines)} lines do not fit {rows} (with the prompt after them)"
    assert not [line for line in lines if MARKUP.search(line)], "markup text shown"


def copy_store(tmp_path: Path, case: str) -> Path:
    shutil.copytree(FIXTURES / case, tmp_path / case)
    return tmp_path / case / "store"


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


# ---------------------------------------------------------------------------- screens that fit


def test_info_of_every_shared_store_fits_80_columns_and_40_lines():
    """In process with the terminal's size in COLUMNS and LINES (as a shell exports them); one store
    in a real pseudo-terminal too."""
    stores = shared_stores()
    if not stores:
        pytest.skip(f"real stores not present in {SHARED}")
    runner = CliRunner()
    for store in stores:
        r = runner.invoke(app, ["info", str(store), "-f", "table"], env={"COLUMNS": "80", "LINES": "40"})
        assert r.exit_code in (0, 3), r.output[-2000:]
        fits(r.output.splitlines())
        assert r.stdout.startswith("Store")
    run = run_in_pty(["info", str(stores[0]), "-q"])
    assert run.code in (0, 3) and run.screen_lines[0] == "Store"
    fits(run.screen_lines)


def test_info_v_shows_every_queue_and_the_version_facts(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    short = run_in_pty(["info", str(store), "-q"], rows=24)
    fits(short.screen_lines, rows=24)
    assert "not shown:" in short.raw and "-v: all" in short.raw
    full = run_in_pty(["info", str(store), "-q", "-v"], rows=24)
    assert full.code == short.code
    assert "not shown:" not in full.raw and "Consume queues" in full.raw
    assert all(len(line) <= 80 for line in full.screen_lines)


def test_check_fits_80_columns_and_its_details_are_in_json(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["check", str(store)])
    fits(run.screen_lines)
    assert run.code == 3 and "listed above" in run.raw
    data = subprocess.run([*CLI, "check", str(store), "-f", "json"], capture_output=True, text=True)
    assert data.returncode == 3 and '"problems"' in data.stdout


def test_a_pipe_gets_every_byte_of_a_long_value():
    """No terminal: the plain rows are not cut (scripts read them)."""
    store = FIXTURES / "small" / "store"
    out = subprocess.run([*CLI, "info", str(store)], capture_output=True, text=True, env=_env(COLUMNS="80"))
    assert out.returncode == 0
    assert str(store / "commitlog") in out.stdout and "…" not in out.stdout


def test_the_width_helper_cuts_text_columns_and_keeps_numbers(monkeypatch):
    from io import StringIO

    from rmqstore.cli._render import Format, render_rows

    monkeypatch.setenv("COLUMNS", "40")
    rows = [{"name": "x" * 100, "offset": 123456789012, "what": "y " * 80}]
    out = StringIO()
    render_rows(rows, Format.table, out=out, fit=True)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines), lines
    assert "123456789012" in out.getvalue() and "…" in out.getvalue()


# ---------------------------------------------------------------------------- progress bars


def test_progress_bar_renders_without_markup_and_fits(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["check", str(store), "-f", "json"], stdout_tty=False)
    assert "━" in run.raw, "no bar drawn on a terminal"
    assert "[progress." not in run.raw and not MARKUP.search(run.raw)
    drawn = [part for part in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", run.raw)) if "━" in part]
    assert drawn and all(len(part) <= 80 for part in drawn), drawn
    quiet = run_in_pty(["check", str(store), "-f", "json", "-q"], stdout_tty=False)
    assert "━" not in quiet.raw


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    proc = subprocess.run([*CLI, "check", str(store), "-f", "json"], capture_output=True, text=True)
    assert "━" not in proc.stderr and "\x1b" not in proc.stderr


# ---------------------------------------------------------------------------- colours


@pytest.mark.parametrize(
    "env, argv",
    [({"NO_COLOR": "1"}, []), ({"NO_COLOR": "yes"}, []), ({"TERM": "dumb"}, []), ({}, ["--no-color"])],
)
def test_no_colour_when_asked(env, argv, tmp_path):
    run = run_in_pty([*argv, "info", str(tmp_path / "missing")], env=env)
    assert run.code == 5 and "error:" in run.raw
    assert "\x1b[" not in run.raw, run.raw


def test_errors_are_red_at_a_colour_terminal(tmp_path):
    run = run_in_pty(["info", str(tmp_path / "missing")])
    assert ERROR_IN_RED in run.raw
    after = run_in_pty(["info", str(tmp_path / "missing"), "--no-color"])
    assert "\x1b[" not in after.raw


def test_term_dumb_draws_no_progress_bar(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["check", str(store), "-f", "json"], env={"TERM": "dumb"}, stdout_tty=False)
    assert "━" not in run.raw and "\x1b[" not in run.raw


# ---------------------------------------------------------------------------- -h, -q, -v


def leaf_commands() -> list[tuple[list[str], object]]:
    """Every command a user can run, with the words that name it."""
    out = []
    for name in COMMANDS:
        cmd = load_command(name)
        subs = getattr(cmd, "commands", None)
        if subs:
            out += [([name, sub], c) for sub, c in subs.items()]
        else:
            out.append(([name], cmd))
    return out


def test_every_command_takes_h_q_and_v():
    runner = CliRunner()
    for words, cmd in leaf_commands():
        opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
        assert {"-q", "-v", "--no-color"} <= opts, (words, sorted(opts))
        r = runner.invoke(app, [*words, "-h"])
        assert r.exit_code == 0 and "Usage:" in r.output, (words, r.output)
    for words in (["-h"], ["dump", "-h"], ["offsets", "-h"], ["query", "-h"]):
        r = runner.invoke(app, words)
        assert r.exit_code == 0 and "Usage:" in r.output, words


def test_q_and_v_work_before_and_after_the_command(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    for argv in (["-q", "info", str(store)], ["info", str(store), "-q"], ["-v", "info", str(store)]):
        run = run_in_pty(argv, rows=24)
        assert run.code in (0, 3), (argv, run.raw[-500:])
    assert "━" not in run_in_pty(["-q", "check", str(store)]).raw
    assert "not shown:" not in run_in_pty(["-v", "info", str(store), "-q"], rows=24).raw


# ---------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize(
    "argv, said",
    [
        (["infoo", "STORE"], "No such command 'infoo'. Did you mean 'info'?"),
        (["offsets", "lag", "STORE"], "No such command 'lag'."),
        (["dump", "comitlog", "STORE"], "Did you mean 'commitlog'"),
        (["spark", "exprt"], "Did you mean 'export'"),
    ],
)
def test_mistyped_commands_are_named_with_suggestions(argv, said):
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert said in r.output
    if argv[0] == "offsets":
        assert "show" in r.output and "set" in r.output and "unexpected extra argument" not in r.output


def test_offsets_store_still_means_offsets_show():
    r = CliRunner().invoke(app, ["offsets", str(FIXTURES / "small" / "store")])
    assert r.exit_code == 0, r.output


# ---------------------------------------------------------------------------- Apply? [y/N]


def test_recover_at_a_terminal_answered_no_writes_nothing(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    before = tmp_path / "before"
    shutil.copytree(store.parent, before)
    run = run_in_pty(["recover", str(store)], answers={"Apply? [y/N]": "n\n"})
    assert run.code == 0, run.raw[-1500:]
    assert "planned actions" in run.raw and "not applied: nothing was written" in run.raw
    assert same_tree(before, store.parent)


def test_recover_at_a_terminal_answered_yes_recovers(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["recover", str(store)], answers={"Apply? [y/N]": "y\n"})
    assert run.code == 0, run.raw[-1500:]
    assert "recovered: commit log ends at" in run.raw and not (store / "abort").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["redispatch", "{store}"],
        ["truncate", "{store}", "--to-offset", "0"],
        ["write", "{store}", "--topic", "TopicA", "--body", "x"],
    ],
)
def test_other_changing_commands_ask_too(argv, tmp_path):
    case = "crashed-cq-behind" if argv[0] == "redispatch" else "small"
    store = copy_store(tmp_path, case)
    before = tmp_path / "before"
    shutil.copytree(store.parent, before)
    run = run_in_pty([a.format(store=store) for a in argv], answers={"Apply? [y/N]": "\n"})
    assert run.code == 0, run.raw[-1500:]
    assert "Apply? [y/N]" in run.raw and "nothing was written" in run.raw
    assert same_tree(before, store.parent)


def test_yes_applies_without_asking(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["recover", str(store), "-y"])
    assert run.code == 0 and "Apply?" not in run.raw
    assert not (store / "abort").exists()


def test_no_terminal_no_question(tmp_path):
    """cron and scripts: standard input and output are no terminal, the plan is applied as before."""
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["recover", str(store)], stdin_tty=False, stdout_tty=False)
    assert run.code == 0 and "Apply?" not in run.raw + run.stdout
    assert not (store / "abort").exists()


def test_a_dry_run_never_asks(tmp_path):
    store = copy_store(tmp_path, "crashed-torn-tail")
    run = run_in_pty(["recover", str(store), "--dry-run"])
    assert run.code == 0 and "Apply?" not in run.raw and (store / "abort").exists()


# ---------------------------------------------------------------------------- man pages


def test_the_readme_says_how_to_read_the_man_pages_of_an_editable_install():
    readme = (REPO / "README.md").read_text()
    assert "man -l man/rmqstore-info.1" in readme
    for name in COMMANDS:
        page = REPO / "man" / f"rmqstore-{name}.1"
        assert page.is_file(), page
    if shutil.which("man") is None:
        return
    shown = subprocess.run(
        ["man", "-l", "man/rmqstore-info.1"], cwd=REPO, capture_output=True, text=True, env=_env(MANPAGER="cat")
    )
    assert shown.returncode == 0 and "rmqstore" in shown.stdout


def _env(**extra: str) -> dict[str, str]:
    import os

    return {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}, **extra}


# ---------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_with_q_prints_nothing_on_stderr_not_even_the_jvm_banner():
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark")
    store = FIXTURES / "small" / "store"
    proc = subprocess.run([*CLI, "spark", "stats", str(store), "-q", "-f", "csv"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "SCHEDULE_TOPIC_XXXX" in proc.stdout
    assert "WARNING: Using incubator modules" not in proc.stderr
    assert "Setting default log level" not in proc.stderr
    assert proc.stderr == ""


def test_the_readme_terminal_section_names_options_every_command_has():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## At a terminal", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(-{1,2}[a-z][a-z-]*)`", section)) | set(
        re.findall(r" (-[a-z]|--[a-z][a-z-]+)\b", section)
    )
    assert {"-h", "-q", "-v", "--no-color", "--yes", "-y"} <= named, named
    recover = load_command("recover")
    opts = {o for p in recover.params for o in getattr(p, "opts", ())} | {"-h"}
    assert named - {"--format", "--execute", "--help"} <= opts, named - opts
    for line in section.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines():
        words = line.split("#", 1)[0].split()
        words = words[1:] if "=" in words[0] else words
        assert words[0] == "rmqstore" and words[1] in COMMANDS, line
