"""Boundaries of the project (style R12): layout, imports, help texts, docs, broker.conf parsing."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer.main
from conftest import FIXTURES, REPO
from typer.testing import CliRunner

import rmqstore
import rmqstore.cli as commands
from rmqstore.errors import EXIT_CODES, ConfigError, RmqstoreError
from rmqstore.store.layout import StoreConfig, load_broker_config

runner = CliRunner()


# --------------------------------------------------------------------------------------- layout


def test_top_level_layout():
    for name in ("pyproject.toml", "rmqstore", "commands", "fixtures", "tests", "man", "benchmarks", "README.md"):
        assert (REPO / name).exists(), name
    ci = REPO / ".ci" / "run"
    assert ci.is_file() and ci.stat().st_mode & 0o111, ".ci/run must be executable"


def test_pyproject_declares_script_dependencies_and_extras():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["scripts"] == {"rmqstore": "rmqstore.cli:main"}
    assert meta["license"] == "Apache-2.0"  # an SPDX expression, not the deprecated table
    names = {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in meta["dependencies"]}
    assert {"typer", "rich", "tabulate", "numpy"} <= names  # tabulate: the one table renderer
    assert "crcmod" not in names  # only the tests use it, as the reference CRC
    extras = {k: {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in v} for k, v in meta["optional-dependencies"].items()}
    assert {"pyspark", "pyarrow"} <= extras["spark"]
    assert {"pytest", "hypothesis", "ruff", "crcmod"} <= extras["dev"]
    pyspark = next(d for d in meta["optional-dependencies"]["spark"] if d.startswith("pyspark"))
    assert ">=4" in pyspark


def library_modules() -> list[str]:
    out = []
    for m in pkgutil.walk_packages(rmqstore.__path__, "rmqstore."):
        if m.name == "rmqstore.spark" or m.name.startswith("rmqstore.spark."):
            continue  # the spark extra imports pyspark on purpose (R14)
        out.append(m.name)
    return sorted(out)


def test_library_imports_no_cli_stack():
    mods = library_modules()
    assert "rmqstore.ops.info" in mods and "rmqstore.codec.describe" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('typer', 'rich', 'tabulate', 'pyspark', 'click', 'commands') if m in sys.modules))"
    )
    out = subprocess.check_output([sys.executable, "-c", code], text=True, cwd=REPO)
    assert out.strip() == "[]"


def test_commands_never_import_click():
    for path in sorted((REPO / "commands").glob("*.py")):
        text = path.read_text()
        assert not re.search(r"^\s*(import click|from click)", text, re.M), path


# ------------------------------------------------------------------------------------ subcommands


def top_level_names(mod) -> list[str]:
    """The names a subcommand module adds to ``rmqstore``: its command, its group, or its commands."""
    cmd = typer.main.get_command(mod.app)
    if not hasattr(cmd, "list_commands"):
        return [cmd.name]
    if isinstance(mod.app.info.name, str):
        return [mod.app.info.name]
    ctx = cmd.context_class(cmd, info_name="x")
    return list(cmd.list_commands(ctx))


def all_names() -> list[tuple[str, object]]:
    return [(name, mod) for mod in commands.SUBCOMMANDS for name in top_level_names(mod)]


def test_info_is_registered():
    assert "info" in [n for n, _ in all_names()]


@pytest.mark.parametrize(("name", "mod"), all_names(), ids=lambda x: x if isinstance(x, str) else "")
def test_subcommand_help_and_man_page(name, mod):
    result = runner.invoke(commands.app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert (REPO / "man" / f"rmqstore-{name}.1").is_file(), f"man page for {name} missing (scripts/gen_man.py)"
    cmd = typer.main.get_command(commands.app)
    ctx = cmd.context_class(cmd, info_name="rmqstore")
    sub = cmd.get_command(ctx, name)
    subs = [sub]
    if hasattr(sub, "list_commands"):
        sctx = sub.context_class(sub, info_name=name, parent=ctx)
        for sub_name in sub.list_commands(sctx):
            r = runner.invoke(commands.app, [name, sub_name, "--help"])
            assert r.exit_code == 0, r.output
            subs.append(sub.get_command(sctx, sub_name))
    for c in subs:
        first = (c.help or "").strip().splitlines()[0] if c.help else ""
        assert first.endswith("."), f"{name}: the help must start with a sentence ending in a full stop: {first!r}"


def test_root_help_lists_every_command():
    result = runner.invoke(commands.app, ["--help"])
    assert result.exit_code == 0
    for name, _ in all_names():
        assert name in result.output


# ------------------------------------------------------------------------------------------- docs


def readme() -> str:
    return (REPO / "README.md").read_text()


def test_readme_exit_codes_match_errors_module():
    section = readme().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|\s*$", section, re.M)
    assert {int(code): text for code, text in rows} == EXIT_CODES


def test_every_error_class_has_a_documented_code():
    def walk(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from walk(sub)

    for cls in walk(RmqstoreError):
        assert cls.exit_code in EXIT_CODES, cls


def readme_commands() -> tuple[str, str]:
    """The two set-up commands: the quick start and the test suite (single lines in ``` blocks)."""
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", readme(), re.S)
    lines = [ln.strip() for b in blocks for ln in b.strip().splitlines() if "pip install" in ln]
    assert len(lines) == 2, lines
    return lines[0], lines[1]


def test_ci_runs_the_readme_test_command_verbatim():
    _, test_cmd = readme_commands()
    assert "pytest" in test_cmd and "[dev" in test_cmd
    script = (REPO / ".ci" / "run").read_text()
    assert test_cmd in script.splitlines()
    assert "set -euo pipefail" in script


def test_readme_quick_start_uses_a_bundled_store():
    quick, _ = readme_commands()
    stores = re.findall(r"(fixtures/stores/\S+/store)", quick)
    assert stores and "rmqstore info" in quick
    if not FIXTURES.is_dir():
        pytest.skip("fixtures/stores not generated yet")
    for s in stores:
        assert (REPO / s).is_dir(), s


def test_fixture_stores_have_the_real_store_shape():
    if not FIXTURES.is_dir():
        pytest.skip("fixtures/stores not generated yet")
    cases = [p for p in FIXTURES.iterdir() if p.is_dir()]
    assert cases
    for case in cases:
        assert (case / "store").is_dir(), case
        assert (case / "broker.conf").is_file(), case


# ------------------------------------------------------------------------------------ broker.conf


def conf(tmp_path, text: str):
    path = tmp_path / "broker.conf"
    path.write_text(text)
    return path


def test_broker_defaults():
    cfg = StoreConfig(store_root=REPO)
    assert (cfg.commitlog_file_size, cfg.cq_file_size) == (1073741824, 6_000_000)
    assert (cfg.max_hash_slot_num, cfg.max_index_num) == (5_000_000, 20_000_000)
    assert (cfg.file_reserved_time_h, cfg.delete_when, cfg.disk_max_used_space_ratio) == (72, "04", 75)
    assert cfg.delay_levels_ms()[:3] == [1000, 5000, 10000] and cfg.delay_levels_ms()[-1] == 7_200_000
    assert cfg.check_crc_on_recover and cfg.message_index_enable and not cfg.message_index_safe


@pytest.mark.parametrize("key", ["mapedFileSizeCommitLog", "mappedFileSizeCommitLog"])
def test_both_spellings_of_the_file_size(tmp_path, key):
    cfg = load_broker_config(conf(tmp_path, f"storePathRootDir=/s\n{key}=65536\n"))
    assert cfg.commitlog_file_size == 65536


def test_conflicting_spellings_are_an_error(tmp_path):
    path = conf(tmp_path, "storePathRootDir=/s\nmapedFileSizeCommitLog=1024\nmappedFileSizeCommitLog=2048\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert e.value.line == 3 and "disagree" in e.value.what


def test_same_value_in_both_spellings_is_fine(tmp_path):
    path = conf(tmp_path, "storePathRootDir=/s\nmapedFileSizeCommitLog=1024\nmappedFileSizeCommitLog=1024\n")
    assert load_broker_config(path).commitlog_file_size == 1024


def test_typo_is_an_error_with_its_line(tmp_path):
    path = conf(tmp_path, "# comment\nstorePathRootDir=/s\n\nmaxIndexNumm=4\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert (e.value.path, e.value.line) == (path, 4)
    assert "maxIndexNum" in e.value.what
    assert str(e.value).startswith(f"{path}:4: ")


def test_relative_paths_are_relative_to_the_conf_file(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "broker.conf"
    path.write_text("storePathRootDir=store\nstorePathCommitLog=store/cl1,/abs/cl2\n")
    cfg = load_broker_config(path)
    assert cfg.store_root == tmp_path.resolve() / "sub" / "store"
    assert cfg.commitlog_dirs == (tmp_path.resolve() / "sub" / "store" / "cl1", Path("/abs/cl2"))


def test_consume_queue_size_is_rounded_up(tmp_path):
    cfg = load_broker_config(conf(tmp_path, "storePathRootDir=/s\nmappedFileSizeConsumeQueue=1001\n"))
    assert cfg.cq_file_size == 1020
    cfg = load_broker_config(conf(tmp_path, "storePathRootDir=/s\nmapedFileSizeConsumeQueue=400\n"))
    assert cfg.cq_file_size == 400


def test_unknown_but_real_broker_keys_are_ignored(tmp_path):
    cfg = load_broker_config(
        conf(tmp_path, "storePathRootDir=/s\nbrokerName=b\nnamesrvAddr=x:9876\nstorePathIndex=/x\n")
    )
    assert cfg.broker_name == "b"


def test_boolean_values_follow_java(tmp_path):
    cfg = load_broker_config(conf(tmp_path, "storePathRootDir=/s\nmessageIndexSafe=TRUE\ncheckCRCOnRecover=yes\n"))
    assert cfg.message_index_safe is True and cfg.check_crc_on_recover is False
