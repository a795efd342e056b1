"""The SparkSession the jobs run in: embedded (``local[*]``) by default, or a cluster.

Local mode works out of the box: the driver binds to the loopback address
(``SPARK_LOCAL_IP=127.0.0.1``) and the Python workers run this interpreter.

On a cluster (``spark://HOST:PORT``, ``yarn``, ``k8s://https://HOST:PORT``) nothing needs to be
set by hand either:

* the master is checked before the JVM starts (port reachable, Hadoop configuration for YARN,
  container image for Kubernetes), so a wrong setting is one line, not a minute of retries;
* the driver binds to the address it reaches the master from, unless ``spark.driver.host`` is set;
* rmqstore itself is shipped to the executors: a zip of the installed package, built on the fly
  and added with ``addPyFile``; numpy and pyarrow must be installed in the executors' Python
  (``executor_python``, default ``python3`` on the workers), which a first tiny job checks,
  naming what is missing there; the same job checks that the stores are visible on the executors;
* ``spark.task.maxFailures`` defaults to 1: the reader is deterministic, so a failed task is
  reported at once instead of after three retries hiding the reason.

The stores must be on a filesystem every executor mounts under the same path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from rmqstore.errors import MissingExtra, RmqstoreError
from rmqstore.spark import classcache
from rmqstore.spark.source import register

DEFAULT_MASTER = "local[*]"
CONNECT_TIMEOUT_S = 5.0
EXECUTOR_WAIT_S = 120.0  # how long a cluster may take to give the application its first executor
_LOCAL = re.compile(r"local(\[(\d+|\*)(,\s*\d+)?\])?")
_MASTER_FORMS = "local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT"
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


# For a driver that only schedules tasks (rows never pass through the JVM): the quick compiler alone
# halves the JVM's start-up CPU (11 s instead of 18 s on 2 busy cores) and costs such a job nothing.
LIGHT_DRIVER_OPTIONS = "-XX:TieredStopAtLevel=1"


class SparkSetupError(RmqstoreError):
    """The Spark master, the executors or a job cannot do what is asked (exit 1)."""

    exit_code = 1


def _quiet_logging() -> dict[str, str]:
    """JVM options pointing the driver's log4j2 at ``_QUIET_LOG4J2``, written once to a folder only
    its owner may write (the JVM reads its configuration there)."""
    folder = classcache.owned_dir("spark-conf")
    if folder is None:
        return {}  # then Spark's own default logging
    path = folder / "log4j2.properties"
    try:
        current = path.read_text() if path.exists() else None
        if current != _QUIET_LOG4J2:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(_QUIET_LOG4J2)
            os.replace(tmp, path)
    except OSError:
        return {}  # then Spark's own default logging
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{path}"}


@contextlib.contextmanager
def _jvm_output(silent: bool) -> Iterator[Path | None]:
    """While the JVM starts, the file descriptors it inherits as its standard output and error point
    away from this process's standard output: at a log file when ``silent`` (its own banner, "WARNING:
    Using incubator modules", "Setting default log level", never reaches the terminal), else at this
    process's standard error. Data on standard output is then never mixed with the JVM's lines, and a
    reader of it sees its end when this process exits, not when the JVM does. Yields the log file."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: the descriptor was closed when this process started
            stream.flush()
    path = Path(tempfile.gettempdir()) / f"rmqstore-spark-{os.getpid()}.log" if silent else None
    # every copy above 2, so that none lands on a standard descriptor the caller closed
    saved = [_dup_above_2(1), _dup_above_2(2)]  # None: closed by the caller, closed again after
    if path is not None:
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    else:
        opened = os.open(os.devnull, os.O_WRONLY) if saved[1] is None else os.dup(saved[1])
    target = _dup_above_2(opened)
    os.close(opened)
    assert target is not None
    os.dup2(target, 1)
    os.dup2(target, 2)
    try:
        yield path
    finally:
        for fd, was in zip((1, 2), saved, strict=True):
            if was is None:
                os.close(fd)
            else:
                os.dup2(was, fd)
                os.close(was)
        os.close(target)


def _dup_above_2(fd: int) -> int | None:
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        return None


def _jvm_said(path: Path | None) -> str:
    """The last lines the JVM wrote to its log file, for an error that needs them."""
    if path is None:
        return ""
    try:
        tail = path.read_text(errors="replace").strip().splitlines()[-3:]
    except OSError:
        return ""
    return f" (JVM: {' / '.join(tail)}; whole log in {path})" if tail else ""


def java_executable() -> str | None:
    """The ``java`` Spark will start: ``$JAVA_HOME/bin/java`` or the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        p = Path(home) / "bin" / "java"
        return str(p) if p.exists() else None
    return shutil.which("java")


def spark_home() -> str:
    """Where the driver's jars are: ``$SPARK_HOME``, else the pyspark package (as ``spark-submit`` finds them)."""
    return os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


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


def is_local(master: str) -> bool:
    return bool(_LOCAL.fullmatch(master.strip()))


def _reach(host: str, port: int, what: str) -> str:
    """Connect to ``host:port``; the local address used (the driver's address towards it)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as s:
            return str(s.getsockname()[0])
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise SparkSetupError(f"{what} is unreachable at {host}:{port}: {reason}") from None


def _host_port(text: str, default_port: int, master: str) -> tuple[str, int]:
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port or default_port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise SparkSetupError(f"Spark master {master!r}: {text!r} is not HOST:PORT")
    return parts.hostname, port


def check_master(master: str, conf: Mapping[str, str]) -> str | None:
    """Fail fast (SparkSetupError) when ``master`` cannot work; the driver's address towards it."""
    m = master.strip()
    if is_local(m):
        return None
    if m.startswith("spark://"):
        errors = []
        for hp in m[len("spark://") :].split(","):  # standby masters: one reachable is enough
            host, port = _host_port(hp, 7077, m)
            try:
                return _reach(host, port, f"Spark master {m}")
            except SparkSetupError as e:
                errors.append(str(e))
        raise SparkSetupError("; ".join(errors))
    if m == "yarn":
        if not any(os.environ.get(v) for v in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")):
            raise SparkSetupError(
                "--master yarn needs HADOOP_CONF_DIR or YARN_CONF_DIR set to the cluster's Hadoop configuration"
            )
        return None
    if m.startswith("k8s://"):
        api = m[len("k8s://") :]
        api = api if "://" in api else f"https://{api}"
        u = urlsplit(api)
        host, port = _host_port(u.netloc, 443 if u.scheme == "https" else 80, m)
        if not conf.get("spark.kubernetes.container.image"):
            raise SparkSetupError(
                "--master k8s:// needs --conf spark.kubernetes.container.image=IMAGE "
                "(an image with Spark, Python 3, numpy and pyarrow)"
            )
        return _reach(host, port, "Kubernetes API server")
    raise SparkSetupError(f"unknown Spark master URL {master!r}; use {_MASTER_FORMS}")


def package_zip() -> Path:
    """A zip of the installed rmqstore package for the executors' ``sys.path``: its ``.py`` files,
    each with its module compiled by this interpreter beside it (``.pyc``, unchecked hash-based).

    Python compiles a module imported from a zip of sources on every import; an executor of this
    Python version loads the compiled one instead (0.4 s less for each worker's import of the job
    modules), one of another version finds the ``.pyc``'s magic number wrong and compiles the source.
    Built under a name holding a hash of the contents and of the Python version, so a running
    application never sees its zip change and an unchanged package is zipped once; in a folder only
    its owner may write (``classcache.owned_dir``: executors run this code), else in a new private
    temporary folder.
    """
    import rmqstore

    root = Path(rmqstore.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".typed") and "__pycache__" not in p.parts)
    h = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    folder = classcache.owned_dir("spark-package") or Path(tempfile.mkdtemp(prefix="rmqstore-package-"))
    out = folder / f"rmqstore-{h.hexdigest()[:16]}.zip"
    if not out.exists():
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for p in files:
                name = f"rmqstore/{p.relative_to(root)}"
                z.write(p, name)
                if p.suffix == ".py":
                    z.writestr(name + "c", _compiled(p.read_bytes(), name))
        os.replace(tmp, out)
    return out


def _compiled(source: bytes, name: str) -> bytes:
    """The ``.pyc`` bytes of a module: unchecked hash-based, so zipimport takes it without comparing
    times with the source beside it (both come from the same build of the zip)."""
    import marshal

    code = compile(source, name, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, source not checked
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


def prepare_environment(master: str, executor_python: str | None) -> None:
    """Set what the Python side needs before the JVM starts, unless the user set it already.

    PySpark takes the executors' interpreter from PYSPARK_PYTHON when the context starts; locally
    that is this interpreter, on a cluster the workers' ``python3`` unless ``executor_python``.
    """
    if executor_python:
        os.environ["PYSPARK_PYTHON"] = executor_python
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


_DAEMON_MODULE = "rmqstore_spark_daemon"
_DAEMON_KEYS = ("spark.python.daemon.module", "spark.python.use.daemon", "spark.executorEnv.PYTHONPATH")


def daemon_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """A local session's executors start ``daemon.py`` (pyspark's daemon from compiled modules; see
    there), copied alone to a folder of its own on the workers' path. None when the caller chose the
    daemon or the workers' path, or no folder is safely ours: pyspark's own daemon then."""
    if any(k in conf for k in _DAEMON_KEYS):
        return {}
    src = Path(__file__).with_name("daemon.py").read_bytes()
    d = classcache.owned_dir(f"spark-daemon-{hashlib.sha256(src).hexdigest()[:16]}")
    if d is None:
        return {}
    target = d / f"{_DAEMON_MODULE}.py"
    try:
        if not target.is_file() or target.read_bytes() != src:
            tmp = d / f".{target.name}.{os.getpid()}"
            tmp.write_bytes(src)
            os.replace(tmp, target)
    except OSError:
        return {}
    return {"spark.python.daemon.module": _DAEMON_MODULE, "spark.executorEnv.PYTHONPATH": str(d)}


def cluster_settings(master: str, driver_host: str | None, conf: Mapping[str, str]) -> dict[str, str]:
    """Defaults for a non-local master: where the driver listens, and no silent task retries."""
    out: dict[str, str] = {"spark.task.maxFailures": "1"}
    if driver_host and "spark.driver.host" not in conf and not os.environ.get("SPARK_LOCAL_IP"):
        out["spark.driver.host"] = driver_host
        out["spark.driver.bindAddress"] = driver_host
    return out


def get_session(
    master: str | None = None,
    *,
    app_name: str = "rmqstore",
    conf: dict[str, str] | None = None,
    quiet: bool = True,
    executor_python: str | None = None,
    stores: Sequence[str] = (),
    silent_jvm: bool = False,
    light_driver: bool = False,
    class_cache: classcache.ClassCache | None = None,
) -> SparkSession:
    """A running session with the rmqstore data sources registered.

    An active session (a notebook's, a test's) is reused as it is; otherwise one is started on
    ``master`` (default ``local[*]``) after the checks above. ``stores`` are checked for
    visibility on the executors of a cluster. ``silent_jvm``: the JVM's standard error goes to a
    log file in the temp directory (named in the error if Spark does not start). ``light_driver``:
    the driver's JVM starts with ``LIGHT_DRIVER_OPTIONS``, for jobs whose rows stay in Python
    (``spark.driver.extraJavaOptions`` given in ``conf`` wins), and the data sources are left for
    ``jobs.read_commitlog`` to register when a DataFrame is read after all. ``class_cache``: the
    driver JVM's class archive options (``spark_session`` prepares them and puts a new archive in place).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    master = (master or DEFAULT_MASTER).strip()
    user = dict(conf or {})
    check_java()
    driver_host = check_master(master, user)
    prepare_environment(master, executor_python)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    settings["spark.sql.python.filterPushdown.enabled"] = "true"
    if is_local(master):
        settings.update(daemon_settings(user))
    else:
        settings.update(cluster_settings(master, driver_host, user))
    if quiet:
        settings.update(_quiet_logging())
    if light_driver:
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{java} {LIGHT_DRIVER_OPTIONS}".strip()
    if class_cache is not None and class_cache.options:
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{java} {class_cache.options}".strip()
    settings.update(user)
    for k, v in settings.items():
        builder = builder.config(k, v)
    with _jvm_output(silent_jvm) as log:
        try:
            spark = builder.getOrCreate()
        except Exception as e:  # the JVM refused the settings or the master
            raise SparkSetupError(f"Spark did not start on {master}: {root_cause(e)}{_jvm_said(log)}") from None
    try:
        if quiet:
            spark.sparkContext.setLogLevel("ERROR")
        if not is_local(master):
            spark.sparkContext.addPyFile(str(package_zip()))  # before register: sources capture the includes
            check_executors(spark, master, stores)
        if not light_driver:  # a light job reads no DataFrame; registering starts a Python worker of its own
            register(spark)
    except BaseException:
        stop_session(spark)
        raise
    return spark


def stop_session(spark: SparkSession) -> None:
    """``spark.stop()`` without its wait for pyspark's accumulator server: that server's handler polls
    the JVM's connection a second at a time until it sees the shutdown flag, so a plain stop waits up to
    1.5 s for nothing. The server is told to stop and left to finish in its own daemon thread."""
    sc = spark.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None and hasattr(server, "server_shutdown"):
        sc._accumulatorServer = None  # type: ignore[assignment]  # so SparkContext.stop() does not wait
        server.server_shutdown = True
        # once the JVM is gone its handler reads a closed connection: an error no one needs to see
        server.handle_error = lambda *_: None
        threading.Thread(target=server.shutdown, name="rmqstore-accumulator-stop", daemon=True).start()
    spark.stop()


@contextlib.contextmanager
def spark_session(
    master: str | None = None, *, archive_notice: Callable[[Path], None] | None = None, **kw: Any
) -> Iterator[SparkSession]:
    """A session for one job: stopped afterwards unless it was already running.

    A failed Spark job becomes one SparkSetupError line with the executor's reason. ``archive_notice``
    is told where the driver will write its class archive when this run writes one (its exit takes
    longer, once).
    """
    had = SparkSession.getActiveSession() is not None
    cache = None if had else _class_cache(kw.get("conf") or {})
    if cache is not None and cache.pending is not None and archive_notice is not None:
        archive_notice(cache.pending.parent)
    spark = get_session(master, class_cache=cache, **kw)
    try:
        yield spark
    except RmqstoreError:
        raise
    except Exception as e:
        if type(e).__module__.split(".")[0] not in ("py4j", "pyspark"):
            raise
        raise SparkSetupError(f"Spark job failed: {root_cause(e)}") from None
    finally:
        if not had:
            stop_session(spark)
            if cache is not None and cache.pending is not None:
                _end_driver(cache)


def _class_cache(conf: Mapping[str, str]) -> classcache.ClassCache | None:
    """The class archive options of a new driver; none when the caller sets the driver's JVM options."""
    java = java_executable()
    if java is None or "spark.driver.extraJavaOptions" in conf:
        return None
    return classcache.prepare(java, spark_home(), conf)


def _end_driver(cache: classcache.ClassCache) -> None:
    """Let the stopped session's driver JVM exit now, so the archive it writes at exit is put in place;
    the next session of this process starts a JVM of its own."""
    gateway = SparkContext._gateway
    if gateway is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    classcache.finish(cache, getattr(gateway, "proc", None))
    SparkContext._gateway = None
    SparkContext._jvm = None


# ---------------------------------------------------------------------------------------------
# Executors


_PROBE = """
def probe(stores):
    import importlib, os, socket, sys
    missing = []
    for name in ("numpy", "pyarrow", "rmqstore"):
        try:
            importlib.import_module(name)
        except Exception as e:
            missing.append(f"{name} ({type(e).__name__}: {e})")
    unseen = [s for s in stores if not os.path.isdir(s)]
    return [(socket.gethostname(), sys.executable, missing, unseen)]
"""


def _probe_function() -> Any:
    """The executor check, as a function pickled by value (the executor cannot import rmqstore yet
    when the check runs, so it must not refer to this module)."""
    ns: dict[str, Any] = {"__name__": "rmqstore_executor_probe"}
    exec(compile(_PROBE, "<rmqstore executor check>", "exec"), ns)  # noqa: S102  # constant source above
    return ns["probe"]


def wait_for_executors(spark: SparkSession, master: str, timeout: float = EXECUTOR_WAIT_S) -> None:
    import time

    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    while status.size() <= 1:  # the driver's own block manager is in it
        if time.monotonic() > deadline:
            raise SparkSetupError(
                f"no executor joined the application on {master} within {timeout:.0f} s "
                "(are workers running, with free cores and enough memory for spark.executor.memory?)"
            )
        time.sleep(0.2)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # type: ignore[union-attr]


def check_executors(spark: SparkSession, master: str, stores: Sequence[str] = ()) -> None:
    """Run one tiny task: numpy, pyarrow and the shipped rmqstore import, and the stores exist."""
    wait_for_executors(spark, master)
    sc = spark.sparkContext
    probe = _probe_function()
    roots = [str(Path(s).resolve()) for s in stores]
    try:
        host, python, missing, unseen = sc.parallelize([0], 1).mapPartitions(lambda _: probe(roots)).collect()[0]
    except Exception as e:
        raise SparkSetupError(f"the executors' Python cannot run rmqstore: {root_cause(e)}") from None
    if missing:
        raise SparkSetupError(
            f"the executors' Python ({python} on {host}) cannot import {'; '.join(missing)}: install numpy and "
            "pyarrow there (rmqstore itself is shipped), or choose another interpreter with --executor-python"
        )
    if unseen:
        raise SparkSetupError(
            f"store {unseen[0]} is not visible on executor host {host}: the stores must be on a filesystem "
            "every executor mounts under the same path"
        )


_CAUSES = (
    re.compile(r"(ModuleNotFoundError: No module named '[^']+')"),
    re.compile(r"^\s*(rmqstore\.errors\.\w+: .+)$", re.M),
    re.compile(r"^\s*(rmqstore\.spark\.session\.\w+: .+)$", re.M),
    re.compile(r"(Cannot run program \"[^\"]+\"[^\n]*)"),
    re.compile(r"^(?:\s*\w+(?:\.\w+)*(?:Error|Exception): )+(.+)$", re.M),
)


def root_cause(e: BaseException) -> str:
    """One line out of a Spark or Python worker failure (Java stack traces and Python tracebacks)."""
    text = str(e)
    for pat in _CAUSES:
        found = pat.findall(text)
        if found:
            line = found[-1] if pat is _CAUSES[-1] else found[0]
            return " ".join(str(line).split())[:400]
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    return first[:400]
