"""The walks' worker pool: a command killed with kill -9 leaves no worker waiting for tasks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_KILLED = textwrap.dedent(
    """\
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from rmqstore.walk.workers import worker_pool
    pool = worker_pool(2)
    [f.result() for f in [pool.submit(time.sleep, 0.2) for _ in range(4)]]  # every worker started
    with open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children") as f:
        print(f.read(), flush=True)
    time.sleep(60)  # killed here, its pool never shut down
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie is gone, waiting for init to reap it
    except OSError:
        return False


def test_workers_of_a_killed_walk_exit() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED.format(repo=str(REPO))], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(p) for p in workers)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers)
