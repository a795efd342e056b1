"""The SparkSession the jobs run in: local mode by default, a cluster with ``master="spark://..."``.

Local mode must work out of the box: the driver binds to the loopback address
(``SPARK_LOCAL_IP=127.0.0.1``) and the Python workers run this interpreter. On a cluster the
stores must be visible to every executor under the same path (a shared filesystem) and rmqstore
must be installed in the executors' Python.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from ..errors import MissingExtra
from .source import register

DEFAULT_MASTER = "local[*]"
# Driver log configuration for quiet runs: errors only, on stderr (Spark's default logs INFO/WARN lines).
_QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_logging() -> dict[str, str]:
    """JVM options pointing the driver's log4j2 at ``_QUIET_LOG4J2`` (written once to the temp dir)."""
    path = Path(tempfile.gettempdir()) / "rmqstore-spark-log4j2.properties"
    try:
        current = path.read_text() if path.exists() else None
        if current != _QUIET_LOG4J2:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(_QUIET_LOG4J2)
            os.replace(tmp, path)
    except OSError:
        return {}  # then Spark's own default logging
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{path}"}


def java_executable() -> str | None:
    """The ``java`` Spark will start: ``$JAVA_HOME/bin/java`` or the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        p = Path(home) / "bin" / "java"
        return str(p) if p.exists() else None
    return shutil.which("java")


def check_java() -> str:
    java = java_executable()
    if java is None:
        home = os.environ.get("JAVA_HOME")
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise MissingExtra(
            f"Spark needs a Java 17+ runtime ({where}); install one (e.g. apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )
    return java


def prepare_environment(master: str) -> None:
    """Set what local mode needs unless the user set it already."""
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def get_session(
    master: str | None = None,
    *,
    app_name: str = "rmqstore",
    conf: dict[str, str] | None = None,
    quiet: bool = True,
) -> SparkSession:
    """A running session with the rmqstore data sources registered.

    An active session (a notebook's, a test's) is reused as it is; otherwise one is started on
    ``master`` (default ``local[*]``).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    master = master or DEFAULT_MASTER
    check_java()
    prepare_environment(master)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    if quiet and master.startswith("local"):  # a cluster keeps its own driver options
        settings.update(_quiet_logging())
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@contextlib.contextmanager
def spark_session(master: str | None = None, **kw: object) -> Iterator[SparkSession]:
    """A session for one job: stopped afterwards unless it was already running."""
    had = SparkSession.getActiveSession() is not None
    spark = get_session(master, **kw)  # type: ignore[arg-type]
    try:
        yield spark
    finally:
        if not had:
            spark.stop()
