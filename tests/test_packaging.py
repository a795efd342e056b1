"""The wheel: one top-level name (rmqstore), the man pages, a working console script, completion.

The wheel is built from this checkout and installed, without its dependencies, into a fresh venv
that sees the dependencies of the running interpreter through a .pth file: no network needed.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

import rmqstore

pytestmark = pytest.mark.slow

DEPENDENCIES = ("typer", "click", "rich", "numpy", "shellingham")


def _setuptools_can_build() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def _build_wheel(out: Path) -> Path:
    # Without build isolation when the running setuptools can build the project (offline), else
    # pip fetches the build requirements itself.
    isolation = ["--no-build-isolation"] if _setuptools_can_build() else []
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(out), str(REPO)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("rmqstore-*.whl")
    return wheel


def _dependency_dirs() -> list[str]:
    dirs = []
    for name in DEPENDENCIES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        d = str(
            Path(mod.__file__).resolve().parents[1]
            if mod.__file__.endswith("__init__.py")
            else Path(mod.__file__).parent
        )
        if d not in dirs:
            dirs.append(d)
    return dirs


def _fresh_venv(venv: Path) -> Path:
    """A venv without pip that sees the running interpreter's dependencies (a .pth file); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True).strip()
    )
    (site / "_rmqstore_test_deps.pth").write_text("".join(d + "\n" for d in _dependency_dirs()))
    return py


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, venv) with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp / "dist")
    venv = tmp / "venv"
    py = _fresh_venv(venv)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return wheel, venv


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, capture_output=True, text=True, cwd=venv, env={**env, "COLUMNS": "100"})


def test_wheel_holds_only_the_rmqstore_name_and_the_man_pages(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    data = f"rmqstore-{rmqstore.__version__}.data/data/"
    tops = {n.split("/", 1)[0] for n in names if not n.startswith(data)}
    assert tops == {"rmqstore", f"rmqstore-{rmqstore.__version__}.dist-info"}
    assert "rmqstore/cli/__init__.py" in names and "rmqstore/cli/query.py" in names
    pages = {n[len(data) :] for n in names if n.startswith(data)}
    assert pages == {f"share/man/man1/{p.name}" for p in (REPO / "man").glob("*.1")}
    # every package of the library is in the wheel
    for init in (REPO / "rmqstore").rglob("__init__.py"):
        assert init.relative_to(REPO).as_posix() in names, init
    top_level = zipfile.ZipFile(wheel).read(f"rmqstore-{rmqstore.__version__}.dist-info/top_level.txt")
    assert top_level.decode().split() == ["rmqstore"]


def test_installed_script_version_man_pages_and_completion(installed):
    _, venv = installed
    exe = venv / "bin" / "rmqstore"
    r = _run(venv, str(exe), "--version")
    assert r.returncode == 0 and r.stdout == f"rmqstore {rmqstore.__version__}\n", r.stderr
    for page in (REPO / "man").glob("*.1"):
        assert (venv / "share" / "man" / "man1" / page.name).read_bytes() == page.read_bytes()
    r = _run(venv, str(exe), "--show-completion", "bash")
    assert r.returncode == 0, r.stderr
    assert "_RMQSTORE_COMPLETE" in r.stdout and "complete " in r.stdout
    probe = "import importlib.util as u, rmqstore.cli as c; print(u.find_spec('commands') is None, c.__file__)"
    r = _run(venv, str(venv / "bin" / "python"), "-c", probe)
    assert r.returncode == 0, r.stderr
    absent, where = r.stdout.split()
    assert absent == "True" and where.startswith(str(venv))


def test_completion_answers_subcommands():
    env = {**os.environ, "_RMQSTORE_COMPLETE": "complete_bash", "COMP_WORDS": "rmqstore que", "COMP_CWORD": "1"}
    r = subprocess.run([sys.executable, "-m", "rmqstore.cli"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert set(r.stdout.split()) == {"query", "query-by-key"}


def test_editable_install_as_ci_does_it(tmp_path):
    """pip install -e . maps rmqstore.cli onto commands/ (setuptools' editable finder)."""
    if not _setuptools_can_build():
        pytest.skip("setuptools >= 77 is needed to build without network access")
    venv = tmp_path / "venv"
    py = _fresh_venv(venv)
    # the PEP 660 editable wheel pip builds for `pip install -e .`, built by this interpreter's setuptools
    hook = f"from setuptools import build_meta as b; print(b.build_editable({str(tmp_path)!r}))"
    proc = subprocess.run([sys.executable, "-c", hook], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel = tmp_path / proc.stdout.strip().splitlines()[-1]
    cmd = [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = _run(venv, str(venv / "bin" / "rmqstore"), "--version")
    assert r.returncode == 0 and r.stdout == f"rmqstore {rmqstore.__version__}\n", r.stderr
    probe = "import rmqstore.cli.query as q, rmqstore as r; print(q.__file__, r.__file__)"
    r = _run(venv, str(py), "-c", probe)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(REPO / "commands" / "query.py"), str(REPO / "rmqstore" / "__init__.py")]
