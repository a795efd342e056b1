"""A session's stop leaves pyspark's accumulator server to finish in its own thread: it still finishes,
closes its socket and says nothing, and the next session of the process runs its jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

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
