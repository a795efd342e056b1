"""The walks' worker pool: a command killed with kill -9 leaves no worker waiting for tasks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import REPO, killed_leaves_no_worker

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


def test_workers_of_a_killed_walk_exit() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED.format(repo=str(REPO))], stdout=subprocess.PIPE, text=True)
    assert killed_leaves_no_worker(proc)
