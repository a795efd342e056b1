"""The driver JVM's class archive: written once by a driver that exits cleanly, mapped by later ones,
never a torn or foreign one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rmqstore.spark import classcache  # noqa: E402

# A session started and stopped as the commands do; prints the driver JVM's arguments and a job's result.
_DRIVER = """
import json, sys
from rmqstore.spark.session import spark_session
with spark_session("local[1]", light_driver=True, silent_jvm=True) as spark:
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    total = spark.sparkContext.parallelize(range(10), 2).sum()
print(json.dumps({"args": args, "total": total}))
"""


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != classcache.SWITCH}
    return {**env, "XDG_CACHE_HOME": str(cache), "SPARK_LOCAL_IP": "127.0.0.1"}


def _java(tmp_path: Path, release: str = 'JAVA_VERSION="17.0.15"\n') -> str:
    """A Java home's layout (``bin/java``, ``release``): what the archive's options depend on."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    (home / "bin" / "java").write_text("")
    (home / "release").write_text(release)
    return str(home / "bin" / "java")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_prepare_maps_only_a_whole_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(classcache.SWITCH, raising=False)
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"x")
    java = _java(tmp_path)
    key = classcache.archive_key(java, str(home), {})
    d = classcache.cache_dir()
    assert d == tmp_path / "rmqstore" / "spark-classes"
    torn = d / f"{key}-100.jsa"
    torn.write_bytes(b"\0" * 60)  # cut short: its name says 100 bytes
    abandoned = d / f"{key}.{_dead_pid()}.part"
    abandoned.write_bytes(b"\0" * 10)
    cache = classcache.prepare(java, str(home), {})
    assert cache.pending == d / f"{key}.{os.getpid()}.part"
    assert "ArchiveClassesAtExit" in cache.options and "SharedArchiveFile" not in cache.options
    assert not abandoned.exists()
    whole = d / f"{key}-64.jsa"
    whole.write_bytes(b"\0" * 64)
    cache = classcache.prepare(java, str(home), {})
    assert cache.pending is None and f"-XX:SharedArchiveFile={whole}" in cache.options
    assert "-Xlog:disable" in cache.options  # the JVM's warnings never reach stdout
    # another jar (a Spark upgrade) or another class path: another key, the old archive left unused
    (home / "jars" / "b.jar").write_bytes(b"y")
    assert classcache.archive_key(java, str(home), {}) != key
    assert classcache.archive_key(java, str(home), {"spark.jars": "/x.jar"}) != key


def test_only_hotspot_17_or_later(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(classcache.SWITCH, raising=False)
    for release in ('JAVA_VERSION="11.0.2"\n', 'JAVA_VERSION="17.0.9"\nJVM_VARIANT="Openj9"\n', ""):
        java = _java(tmp_path, release)
        assert classcache.prepare(java, str(tmp_path), {}).options == "", release
    assert classcache.prepare(_java(tmp_path, 'JAVA_VERSION="21"\n'), str(tmp_path), {}).options


def test_no_archive_from_a_folder_others_may_write(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(classcache.SWITCH, raising=False)
    d = tmp_path / "rmqstore" / "spark-classes"
    d.mkdir(parents=True)
    d.chmod(0o777)
    assert classcache.cache_dir() is None
    assert classcache.prepare(_java(tmp_path), str(tmp_path), {}).options == ""
    d.chmod(0o700)
    monkeypatch.setenv(classcache.SWITCH, "off")
    assert classcache.cache_dir() is None


def _exiting(code: int) -> subprocess.Popen[bytes]:
    """A process that ends at the end of its standard input with ``code``, as the driver JVM does."""
    prog = f"import sys; sys.stdin.read(); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", prog], stdin=subprocess.PIPE)


def test_failed_driver_leaves_no_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(classcache.SWITCH, raising=False)
    cache = classcache.prepare(_java(tmp_path), str(tmp_path), {})
    assert cache.pending is not None
    cache.pending.write_bytes(b"\0" * 32)  # what a dying JVM may leave
    classcache.finish(cache, _exiting(1))
    assert list(cache.pending.parent.iterdir()) == []


def test_archives_of_older_runtimes_are_let_go(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(classcache.SWITCH, raising=False)
    d = classcache.cache_dir()
    for i, name in enumerate(("a" * 24 + "-1.jsa", "b" * 24 + "-1.jsa")):
        (d / name).write_bytes(b"\0")
        os.utime(d / name, ns=(i * 10**9, i * 10**9))  # b is the newer
    cache = classcache.prepare(_java(tmp_path), str(tmp_path), {})
    cache.pending.write_bytes(b"\0" * 48)
    classcache.finish(cache, _exiting(0))
    key = cache.pending.name.split(".")[0]
    assert sorted(p.name for p in d.iterdir()) == sorted([f"{key}-48.jsa", "b" * 24 + "-1.jsa"])


@pytest.mark.spark
@pytest.mark.skipif(not shutil.which("java") and not os.environ.get("JAVA_HOME"), reason="Spark needs Java")
def test_driver_writes_then_maps_the_archive(tmp_path):
    cache = tmp_path / "cache"
    store = Path(__file__).resolve().parents[2] / "fixtures" / "stores" / "small"
    cli = [sys.executable, "-m", "rmqstore.cli", "spark", "stats", str(store), "--master", "local[1]", "-f", "json"]
    first = subprocess.run(cli, env=_env(cache), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    assert sum(r["messages"] for r in json.loads(first.stdout)) > 0  # stdout is the rows only: no JVM log line
    # the JVM exits while the accumulator server may still be finishing: nothing is said of it
    assert "Traceback" not in first.stderr and "Exception occurred" not in first.stderr, first.stderr[-2000:]
    d = cache / "rmqstore" / "spark-classes"
    assert f"note: this first run also writes the Spark driver's class archive into {d}" in first.stderr
    archives = [p.name for p in d.iterdir()]
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives  # put in place, no part left
    assert classcache._whole(d / archives[0])

    second = subprocess.run([sys.executable, "-c", _DRIVER], env=_env(cache), capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    got = json.loads(second.stdout)
    assert got["total"] == 45
    assert f"-XX:SharedArchiveFile={d / archives[0]}" in got["args"]
    assert [p.name for p in d.iterdir()] == archives
    again = subprocess.run([*cli, "-q"], env=_env(cache), capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == first.stdout and "class archive" not in again.stderr
