"""The driver JVM's class data archive: the classes a Spark driver loads, written once when a first
driver exits cleanly and mapped by every later driver of the same Java and Spark.

A Spark driver spends most of its start loading and verifying the same few thousand classes; HotSpot
can map them from an archive instead (class data sharing, ``-XX:SharedArchiveFile``), which takes
about a third off the start. The archive is written by the JVM itself at its exit
(``-XX:ArchiveClassesAtExit``) under a name of its own, and put in place only once that JVM has
exited with status 0: a JVM mapping a torn archive would crash, so nothing else is ever used. Its
name holds what it depends on (the Java runtime, Spark's jars) and its size, checked before use.

The archive lives in ``$XDG_CACHE_HOME/rmqstore/spark-classes`` (``~/.cache`` by default), a folder
only its owner may write; ``RMQSTORE_SPARK_CLASS_CACHE=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SWITCH = "RMQSTORE_SPARK_CLASS_CACHE"
# JVM log lines (an archive it cannot use) go to its standard error, never among a command's data on stdout
_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
_EXIT_WAIT_S = 120.0  # a JVM writing its archive at exit: about 2 s on 2 busy cores
_KEPT_KEYS = 2  # archives kept: this runtime's and the one before
_CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages")


@dataclass(frozen=True)
class ClassCache:
    """The archive options of one driver start."""

    options: str  # JVM options: map the archive, or write one at exit
    pending: Path | None = None  # the archive this driver writes at its exit (put in place by ``finish``)


def cache_dir() -> Path | None:
    """The archive folder (created), or None when it is turned off or not safely ours."""
    if os.environ.get(SWITCH, "").lower() in ("off", "0", "no", "false"):
        return None
    return owned_dir("spark-classes")


def owned_dir(name: str) -> Path | None:
    """``$XDG_CACHE_HOME/rmqstore/NAME`` (created), or None when it is not safely ours: a JVM or a
    Python worker loads code from such folders, so one somebody else may write is never used."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(base) / "rmqstore" / name
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(d)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return d


def archive_key(java: str, spark_home: str, conf: Mapping[str, str]) -> str:
    """What an archive is valid for: this Java runtime, these Spark jars, this class path."""
    h = hashlib.sha256()
    home = Path(os.path.realpath(java)).parent.parent
    for p in (home / "lib" / "modules", home / "lib" / "server" / "libjvm.so"):
        h.update(_stat_line(p))
    jars = Path(spark_home) / "jars"
    try:
        names = sorted(os.listdir(jars))
    except OSError:
        names = []
    for n in names:
        h.update(_stat_line(jars / n))
    for k in _CLASS_PATH_KEYS:
        h.update(f"{k}={conf.get(k, '')}\n".encode())
    return h.hexdigest()[:24]


def _stat_line(p: Path) -> bytes:
    try:
        st = os.stat(p)
    except OSError:
        return f"{p} -\n".encode()
    return f"{p} {st.st_size} {st.st_mtime_ns}\n".encode()


def hotspot_home(java: str) -> Path | None:
    """The Java home of ``java`` when it is a HotSpot runtime of Java 17 or later (dynamic class
    archives; another JVM, OpenJ9 for one, would refuse the options and not start)."""
    home = Path(os.path.realpath(java)).parent.parent
    try:
        release = (home / "release").read_text(errors="replace")
    except OSError:
        return None
    version = re.search(r'^JAVA_VERSION="(\d+)', release, re.MULTILINE)
    if version is None or int(version.group(1)) < 17 or "openj9" in release.lower():
        return None
    return home


def prepare(java: str, spark_home: str, conf: Mapping[str, str]) -> ClassCache:
    """The options of a driver start: the archive when a whole one is there, else write one at exit."""
    d = cache_dir()
    if d is None or hotspot_home(java) is None:
        return ClassCache("")
    key = archive_key(java, spark_home, conf)
    _clear_abandoned(d)
    for p in d.glob(f"{key}-*.jsa"):
        if _whole(p):
            return ClassCache(f"{_LOG_TO_STDERR} -XX:SharedArchiveFile={p}")
    pending = d / f"{key}.{os.getpid()}.part"
    return ClassCache(f"{_LOG_TO_STDERR} -XX:ArchiveClassesAtExit={pending}", pending)


def _whole(p: Path) -> bool:
    """An archive is the size its name says (``KEY-SIZE.jsa``): one cut short is never mapped."""
    try:
        return p.stat().st_size == int(p.stem.rsplit("-", 1)[1])
    except (OSError, ValueError, IndexError):
        return False


def _clear_abandoned(d: Path) -> None:
    """Archives whose JVM is gone without putting them in place (a killed run)."""
    for p in d.glob("*.part"):
        try:
            pid = int(p.suffixes[-2].lstrip("."))
            os.kill(pid, 0)
        except ProcessLookupError:
            p.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError, OSError):
            continue


def finish(cache: ClassCache, jvm: subprocess.Popen[bytes] | None) -> None:
    """After the session stopped: let the driver JVM exit, and put its archive in place if it exited
    cleanly (a JVM that failed or was killed leaves a part file, removed by a later start)."""
    if cache.pending is None or jvm is None:
        return
    try:
        if jvm.stdin is not None:
            jvm.stdin.close()  # the driver exits at the end of its standard input
        code = jvm.wait(_EXIT_WAIT_S)
    except (OSError, subprocess.TimeoutExpired):
        return
    p = cache.pending
    try:
        size = p.stat().st_size
        if code != 0 or size == 0:
            p.unlink()
            return
        final = p.with_name(f"{p.name.split('.', 1)[0]}-{size}.jsa")
        os.replace(p, final)
        # one archive a key, and the newest few keys (another Java or Spark install): 100+ MB each
        others = sorted(p.parent.glob("*.jsa"), key=lambda a: a.stat().st_mtime_ns, reverse=True)
        key = final.name.rsplit("-", 1)[0]
        keep = {final} | set([a for a in others if not a.name.startswith(key)][: _KEPT_KEYS - 1])
        for old in others:
            if old not in keep:
                old.unlink(missing_ok=True)
    except OSError:
        return
