"""The executors' daemon of local sessions: Spark's source zips of the installed pyspark go last on
the workers' path (so the compiled modules load), another Spark home's stay first; the daemon file is
kept in a folder only its owner may write, and a caller's own daemon or workers' path wins."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rmqstore.spark import session  # noqa: E402
from rmqstore.spark.daemon import installed_first  # noqa: E402


def _home(root: Path) -> tuple[str, str, str]:
    (root / "pyspark" / "python" / "lib").mkdir(parents=True)
    (root / "pyspark" / "__init__.py").write_text("")
    lib = root / "pyspark" / "python" / "lib"
    return str(root), str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_the_installed_pysparks_zips_go_last_and_another_homes_stay(tmp_path: Path) -> None:
    site, own_zip, own_py4j = _home(tmp_path / "site")
    other = str(tmp_path / "cluster" / "python" / "lib" / "pyspark.zip")
    path = ["", own_zip, own_py4j, other, "/usr/lib/python3.11", site]
    assert installed_first(path) == ["", other, "/usr/lib/python3.11", site, own_zip, own_py4j]
    assert installed_first([own_zip, own_py4j]) == [own_zip, own_py4j]  # no pyspark outside them: unchanged


def test_daemon_settings_write_the_file_once_and_yield_to_the_caller(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    got = session.daemon_settings({})
    folder = Path(got["spark.executorEnv.PYTHONPATH"])
    module = folder / f"{got['spark.python.daemon.module']}.py"
    assert module.read_bytes() == Path(session.__file__).with_name("daemon.py").read_bytes()
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    before = module.stat().st_mtime_ns
    assert session.daemon_settings({}) == got and module.stat().st_mtime_ns == before
    for key in ("spark.python.daemon.module", "spark.python.use.daemon", "spark.executorEnv.PYTHONPATH"):
        assert session.daemon_settings({key: "x"}) == {}


def test_a_folder_others_may_write_is_never_used(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    got = session.daemon_settings({})
    folder = Path(got["spark.executorEnv.PYTHONPATH"])
    os.chmod(folder, 0o777)
    assert session.daemon_settings({}) == {}


def test_the_executors_zip_holds_each_module_compiled_and_a_python_of_another_version_compiles_the_source(
    tmp_path: Path, monkeypatch
) -> None:
    """What a cluster's executors import rmqstore from: the compiled module where the magic number is
    this Python's, the source where it is not (the zip's ``.pyc`` then is skipped)."""
    import subprocess
    import zipfile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    z = session.package_zip()
    assert z.parent == tmp_path / "rmqstore" / "spark-package" and session.package_zip() == z
    with zipfile.ZipFile(z) as f:
        names = set(f.namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert "rmqstore/spark/jobs.py" in sources and {n + "c" for n in sources} <= names
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import rmqstore.spark.stats as m; print(m.__file__)"
    got = subprocess.run([sys.executable, "-c", probe, str(z)], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == f"{z}/rmqstore/spark/stats.pyc"
    # the same zip with every .pyc's magic number changed: another Python version's view of it
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(z) as src, zipfile.ZipFile(other, "w") as dst:
        for n in src.namelist():
            data = src.read(n)
            dst.writestr(n, b"\x00\x00\r\n" + data[4:] if n.endswith(".pyc") else data)
    got = subprocess.run([sys.executable, "-c", probe, str(other)], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == f"{other}/rmqstore/spark/stats.py"
