"""The man pages in man/ are generated from the command tree, current, and render."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
import typer.main
from conftest import REPO

import rmqstore
import rmqstore.cli as commands
from rmqstore.errors import EXIT_CODES

GEN = REPO / "scripts" / "gen_man.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_man", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pages_are_current():
    proc = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, f"stale man pages, run scripts/gen_man.py:\n{proc.stdout}{proc.stderr}"


def test_check_mode_finds_stale_missing_and_extra_pages(tmp_path):
    assert subprocess.run([sys.executable, str(GEN), "--out", str(tmp_path)], capture_output=True).returncode == 0
    page = tmp_path / "rmqstore-info.1"
    page.write_text(page.read_text().replace("Store root", "Shop root"))
    (tmp_path / "rmqstore.1").unlink()
    (tmp_path / "rmqstore-gone.1").write_text(".TH X 1\n")
    proc = subprocess.run([sys.executable, str(GEN), "--check", "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{tmp_path / 'rmqstore-info.1'}: stale",
        f"{tmp_path / 'rmqstore.1'}: missing",
        f"{tmp_path / 'rmqstore-gone.1'}: no such command any more",
    ]


def test_output_is_deterministic():
    gen = load_generator()
    assert gen.render_all() == gen.render_all()


def test_one_page_per_top_level_command():
    root = typer.main.get_command(commands.app)
    ctx = root.context_class(root, info_name="rmqstore")
    names = {n for n in root.list_commands(ctx) if not root.get_command(ctx, n).hidden}
    assert set(load_generator().render_all()) == {"rmqstore.1"} | {f"rmqstore-{n}.1" for n in names}


def test_main_page_sections():
    page = load_generator().render_all()["rmqstore.1"]
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES", "SEE ALSO"):
        assert f".SH {section}\n" in page
    status = page.split(".SH EXIT STATUS\n", 1)[1].split("\n.SH ", 1)[0] + "\n"
    gen = load_generator()
    for code, text in EXIT_CODES.items():
        assert f".TP\n\\fB{code}\\fR\n{gen.esc(text)}\n" in status
    assert f'"rmqstore {rmqstore.__version__}"' in page.splitlines()[0]


def test_epilogs_and_options_reach_the_pages():
    gen = load_generator()
    pages = gen.render_all()
    root = typer.main.get_command(commands.app)
    ctx = root.context_class(root, info_name="rmqstore")
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        subs = [cmd]
        if hasattr(cmd, "list_commands"):
            sctx = cmd.context_class(cmd, info_name=name, parent=ctx)
            subs += [cmd.get_command(sctx, s) for s in cmd.list_commands(sctx)]
        page = pages[f"rmqstore-{name}.1"]
        for c in subs:
            if c.epilog:
                first = next(ln for ln in c.epilog.strip().splitlines() if ln.strip())
                assert gen.esc(first.strip()) in page, (name, first)
            for p in c.params:
                if p.param_type_name == "option" and not p.hidden and p.name != "help":
                    assert gen.esc(max(p.opts, key=len)) in page, (name, p.opts)


def renderer() -> list[str] | None:
    if shutil.which("man"):
        return ["man", "-l"]
    if shutil.which("groff"):
        return ["groff", "-man", "-Tutf8"]
    return None


PAGES = sorted((REPO / "man").glob("*.1"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_renders(page):
    cmd = renderer()
    if cmd is None:
        pytest.skip("neither man nor groff is installed")
    env = {**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "LC_ALL": "C.UTF-8"}
    proc = subprocess.run([*cmd, str(page)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    assert "NAME" in proc.stdout and "SYNOPSIS" in proc.stdout
    assert page.stem.split("-", 1)[-1].split(".")[0] in proc.stdout
