"""The driver JVM's lifetime as the commands see it: started without this process's standard output (a
reader of the data sees its end when the command exits, not when the JVM does), stopped without waiting
for pyspark's accumulator server, which finishes in its own thread, closes its socket and says nothing,
and the next session of the process runs its jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not shutil.which("java") and not os.environ.get("JAVA_HOME"), reason="Spark needs Java"),
]

_TWO_SESSIONS = """
import json, threading
from rmqstore.spark.session import spark_session

out = []
for _ in range(2):
    with spark_session("local[1]", light_driver=True, silent_jvm=True) as spark:
        server = spark.sparkContext._accumulatorServer
        acc = spark.sparkContext.accumulator(0)
        rdd = spark.sparkContext.parallelize(range(10), 2)
        rdd.foreach(lambda x: acc.add(x))  # the JVM sends the updates through the accumulator server
        out.append({"total": rdd.sum(), "acc": acc.value})
    for t in threading.enumerate():
        if t.name == "rmqstore-accumulator-stop":
            t.join(10)
    out[-1]["left"] = [t.name for t in threading.enumerate() if t.name == "rmqstore-accumulator-stop"]
    out[-1]["closed"] = server.socket.fileno() == -1
print(json.dumps(out))
"""


def test_the_accumulator_server_finishes_after_the_stop_and_the_next_session_works() -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "RMQSTORE_SPARK_CLASS_CACHE": "off"}
    p = subprocess.run([sys.executable, "-c", _TWO_SESSIONS], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = json.loads(p.stdout)
    assert [(r["total"], r["acc"], r["left"], r["closed"]) for r in runs] == [(45, 45, [], True)] * 2
    assert "Traceback" not in p.stderr and "Exception occurred" not in p.stderr, p.stderr[-2000:]


_OUTPUTS = """
import json, os
from pyspark import SparkContext
from rmqstore.spark.session import spark_session

with spark_session("local[1]", light_driver=True, silent_jvm=SILENT) as spark:
    jvm = SparkContext._gateway.proc.pid
    print(json.dumps({"mine": [os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2)],
                      "jvm": [os.readlink(f"/proc/{jvm}/fd/{fd}") for fd in (1, 2)]}))
"""


@pytest.mark.parametrize("silent", [True, False])
def test_the_jvm_never_holds_the_commands_standard_output(silent: bool, tmp_path) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "RMQSTORE_SPARK_CLASS_CACHE": "off"}
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        code = _OUTPUTS.replace("SILENT", str(silent))
        p = subprocess.run([sys.executable, "-c", code], env=env, stdout=out, stderr=err, timeout=300)
    assert p.returncode == 0, (tmp_path / "err").read_text()[-2000:]
    got = json.loads((tmp_path / "out").read_text().splitlines()[-1])
    assert got["mine"] == [str(tmp_path / "out"), str(tmp_path / "err")]
    # silent: both go to the log file; else both to this process's standard error
    assert got["jvm"][0] == got["jvm"][1] != got["mine"][0]
    assert (got["jvm"][0] == got["mine"][1]) is not silent


def test_a_command_started_with_its_standard_error_closed_still_gives_only_its_rows() -> None:
    """The JVM's copies of the descriptors never land on a standard one the caller closed."""
    store = Path(__file__).resolve().parents[2] / "fixtures" / "stores" / "small" / "store"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "RMQSTORE_SPARK_CLASS_CACHE": "off"}
    argv = [sys.executable, "-m", "rmqstore.cli", "spark", "stats", str(store), "--master", "local[1]", "-f", "csv"]
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=300)  # noqa: PLW1509
    lines = p.stdout.decode().splitlines()
    assert p.returncode == 0
    assert lines[0].startswith("store,topic,queueId,hour,") and all(line.startswith(str(store)) for line in lines[1:])
