"""`rmqstore spark ...` against a real standalone cluster on 127.0.0.1, exactly as an operator runs it.

A master and two one-core workers are started with ``spark-class`` from the installed pyspark,
on free ports, in an environment that knows nothing of this checkout: no PYTHONPATH, no
PYSPARK_PYTHON, and a ``python3`` (a bare virtual environment seeing only the site directories of
numpy, pyarrow and pyspark) that cannot import rmqstore. The CLI runs as a separate process with
``--master spark://127.0.0.1:PORT`` and nothing else set; its results must equal the local
engine's. The cluster is stopped by pid. Needs only Java 17 and loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from conftest import REAL_STORES, copy_real_store  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from rmqstore.cli import app  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]
runner = CliRunner()
CASE = "clean-2topics"


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java") if (Path(home) / "bin" / "java").exists() else None
    return shutil.which("java")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site_dir(module: str) -> str:
    import importlib

    return str(Path(importlib.import_module(module).__file__).resolve().parent.parent)  # type: ignore[arg-type]


def bare_python(where: Path, modules: tuple[str, ...]) -> Path:
    """A virtual environment without packages of its own whose ``python3`` sees only the site
    directories holding ``modules`` (listed in a ``.pth``: their own ``.pth`` files, such as an
    editable rmqstore install, are not read)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text("".join(f"{d}\n" for d in dict.fromkeys(_site_dir(m) for m in modules)))
    return where / "bin" / "python3"


def clean_env(tmp: Path, python_bin: Path) -> dict[str, str]:
    """What a worker host or an operator's shell has: PATH (python3 = ``python_bin``), Java, a home."""
    env = {"PATH": f"{python_bin.parent}:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8"}
    java = _java()
    assert java is not None
    env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    return env


class Cluster:
    """A standalone master and two one-core workers, started and stopped by pid."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        import pyspark

        home = Path(pyspark.__file__).resolve().parent
        self.spark_class = str(home / "bin" / "spark-class")
        self.env = {**env, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp)}
        self.tmp = tmp
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115  # closed with the process
        self.procs.append(
            subprocess.Popen(
                [self.spark_class, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp
            )
        )

    def start(self) -> None:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui)),
        )
        self._wait(lambda: self._alive_workers() is not None, "master")
        for i in (1, 2):
            work = self.tmp / f"work{i}"
            work.mkdir()
            self._start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port())),
                *("--work-dir", str(work)),
            )
        self._wait(lambda: self._alive_workers() == 2, "two workers")

    def _alive_workers(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                return int(json.load(r)["aliveworkers"])
        except (OSError, ValueError, KeyError):
            return None

    def _wait(self, ok: object, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not ok():  # type: ignore[operator]
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"{what}: a cluster process exited; see {self.tmp}/*.log")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not up after {timeout} s; see {self.tmp}/*.log")
            time.sleep(0.5)

    def stop(self) -> None:
        for p in reversed(self.procs):  # workers first (they stop their executors), then the master
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, str]]]:
    if _java() is None:
        pytest.skip("Spark needs Java")
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    tmp = tmp_path_factory.mktemp("cluster")
    python = bare_python(tmp / "worker-python", ("numpy", "pyarrow", "pyspark", "py4j"))
    env = clean_env(tmp, python)
    probe = subprocess.run([str(python), "-c", "import rmqstore"], env=env, capture_output=True, text=True, cwd=tmp)
    assert probe.returncode != 0 and "No module named 'rmqstore'" in probe.stderr, "workers' python3 sees rmqstore"
    subprocess.run([str(python), "-c", "import numpy, pyarrow, pyspark"], env=env, check=True)
    c = Cluster(tmp, env)
    try:
        c.start()
        yield c, env
    finally:
        c.stop()


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``rmqstore ARGS`` as its own process, in the operator's clean environment."""
    code = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"
    repo = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=repo
    )


def local(*args: str) -> str:
    r = runner.invoke(app, [*args, "--master", "local[2]", "-q"])
    assert r.exit_code == 0, r.output
    return r.stdout


def parquet_rows(root: Path) -> list[dict]:
    import pyarrow.dataset as ds

    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda r: r["commitLogOffset"])


def tree_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".rmqstore" not in p.parts:
            rel = p.relative_to(root)
            name = f"index#{len([k for k in out if k.startswith('index#')])}" if rel.parts[0] == "index" else str(rel)
            out[name] = p.read_bytes()
    return out


def test_cli_on_a_standalone_cluster_equals_local(cluster: tuple[Cluster, dict[str, str]], tmp_path: Path) -> None:
    c, env = cluster
    store = str(REAL_STORES / CASE / "store")
    on = ("--master", c.url, "-q")

    r = cli(env, "spark", "stats", store, "--format", "json", *on)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(local("spark", "stats", store, "--format", "json"))

    r = cli(env, "spark", "find", store, "--key", "order-5", "--key", "user-7", "--format", "ndjson", *on)
    assert r.returncode == 0, r.stderr
    want = local("spark", "find", store, "--key", "order-5", "--key", "user-7", "--format", "ndjson")
    assert r.stdout == want and want.count("\n") > 5

    out_c, out_l = tmp_path / "export-cluster", tmp_path / "export-local"
    r = cli(env, "spark", "export", store, "--output", str(out_c), "--split-size", "16k", "--format", "json", *on)
    assert r.returncode == 0, r.stderr
    local("spark", "export", store, "--output", str(out_l), "--format", "json")
    rows = parquet_rows(out_c)
    assert json.loads(r.stdout)["rows"] == len(rows) == 500
    assert rows == parquet_rows(out_l)

    copy = copy_real_store(CASE, tmp_path / "copy")
    build_c, build_l = tmp_path / "rebuilt-cluster", tmp_path / "rebuilt-local"
    r = cli(env, "spark", "redispatch", str(copy), "--output", str(build_c), *on)
    assert r.returncode == 0, r.stderr
    r2 = runner.invoke(app, ["redispatch", str(copy), "--engine", "local", "--output", str(build_l), "-q"])
    assert r2.exit_code == 0, r2.output
    assert tree_bytes(build_c) == tree_bytes(build_l) and len(tree_bytes(build_l)) > 3


def test_executor_without_numpy_is_named(cluster: tuple[Cluster, dict[str, str]], tmp_path: Path) -> None:
    c, env = cluster
    python = bare_python(tmp_path / "no-numpy", ("pyspark", "py4j"))
    lib = tmp_path / "only-pyspark"
    lib.mkdir()
    for name in ("pyspark", "py4j"):  # the same packages, without numpy and pyarrow beside them
        (lib / name).symlink_to(Path(_site_dir(name)) / name)
    site = next((tmp_path / "no-numpy" / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(f"{lib}\n")
    t0 = time.monotonic()
    r = cli(env, "spark", "stats", str(REAL_STORES / CASE / "store"), "--master", c.url, "--executor-python",
            str(python), "-q")  # fmt: skip
    assert r.returncode == 1, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]  # after the JVM's start-up notes
    assert len(errors) == 1 and errors[0].startswith("error: the executors' Python"), r.stderr
    assert "cannot import numpy" in errors[0] and "pyarrow" in errors[0]
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 120


def test_unreachable_master_and_bad_settings_fail_fast(tmp_path: Path) -> None:
    if _java() is None:
        pytest.skip("Spark needs Java")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "YARN_", "PYSPARK_"))}
    store = str(REAL_STORES / CASE / "store")
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    cases = [
        (["--master", f"spark://127.0.0.1:{free_port()}"], "Spark master spark://127.0.0.1:"),  # is unreachable
        (["--master", "yarn"], "--master yarn needs HADOOP_CONF_DIR or YARN_CONF_DIR"),
        (["--master", "bogus://x"], "unknown Spark master URL 'bogus://x'"),
        (["--master", f"k8s://https://127.0.0.1:{free_port()}"], "--master k8s:// needs --conf"),
        (["--conf", "novalue"], "--conf 'novalue' is not KEY=VALUE"),
    ]
    for args, message in cases:
        t0 = time.monotonic()
        r = cli(env, "spark", "stats", store, *args, "-q", timeout=60)
        assert r.returncode == 1, (args, r.stderr)
        first = r.stderr.strip().splitlines()[0]
        assert first.startswith(f"error: {message}"), (args, r.stderr)
        assert time.monotonic() - t0 < 30, args
