"""The one pool of forked worker processes that the parallel walks and scans share.

concurrent.futures, not ``multiprocessing.Pool``: a worker that dies fails its task
(``BrokenProcessPool``) instead of leaving the caller waiting for ever, and shutting down with
tasks still queued cannot hang the way ``Pool.terminate`` can when it kills a worker that holds
the task queue's lock. Workers are forked so they share the parent's read-only state.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor


def worker_pool(processes: int | None = None) -> ProcessPoolExecutor:
    """``processes`` forked workers (default: one per core, two to four: a walk overlaps its merge)."""
    n = processes or max(2, min(4, os.cpu_count() or 1))
    return ProcessPoolExecutor(n, mp_context=mp.get_context("fork"))


def tied_worker_pool(processes: int) -> ProcessPoolExecutor:
    """:func:`worker_pool` whose workers exit once this process is gone: a parent killed with
    ``kill -9`` never shuts its pool down, and its workers would wait for tasks for ever."""
    return ProcessPoolExecutor(
        processes, mp_context=mp.get_context("fork"), initializer=_exit_with_parent, initargs=(os.getpid(),)
    )


def _exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="rmqstore-parent-watch", daemon=True).start()


def close_pool(pool: ProcessPoolExecutor) -> None:
    """Drop the tasks not started, wait for the few running ones (each is one bounded range)."""
    pool.shutdown(wait=True, cancel_futures=True)
