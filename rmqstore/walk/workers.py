"""The one pool of forked worker processes that the parallel walks and scans share.

concurrent.futures, not ``multiprocessing.Pool``: a worker that dies fails its task
(``BrokenProcessPool``) instead of leaving the caller waiting for ever, and shutting down with
tasks still queued cannot hang the way ``Pool.terminate`` can when it kills a worker that holds
the task queue's lock. Workers are forked so they share the parent's read-only state.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

# glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_BELOW = 64 << 20  # allocations up to this size come from the heap, not from a mapping of their own
_TRIM_ABOVE = 128 << 20  # free heap kept before it goes back to the system
_heap_kept = False


def keep_freed_heap() -> None:
    """Let freed blocks of up to 64 MiB be reused (glibc; elsewhere nothing changes).

    By default glibc maps every block over 128 KiB afresh and unmaps it when freed, so the numpy
    temporaries of each batch of records fault in new zeroed pages: about a quarter of a walk's CPU.
    Kept, the next batch reuses them; resident memory stays at the largest batch's peak."""
    global _heap_kept
    if _heap_kept:
        return
    _heap_kept = True
    import ctypes  # here: 2 ms that only the walks need

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    mallopt(_M_MMAP_THRESHOLD, _KEEP_BELOW)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE)


def worker_pool(processes: int | None = None, *, keep_heap: bool = True) -> ProcessPoolExecutor:
    """``processes`` forked workers (default: one per core, two to four: a walk overlaps its merge).
    With ``keep_heap`` they and this process keep their freed heap (``keep_freed_heap``). They exit once
    this process is gone: a command killed with ``kill -9`` never shuts its pool down, and its workers
    would otherwise wait for tasks for ever."""
    # here: a walk of small files runs in the process, and multiprocessing costs a command's start
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    n = processes or max(2, min(4, os.cpu_count() or 1))
    if keep_heap:
        keep_freed_heap()  # before the fork: the workers inherit it
    return ProcessPoolExecutor(
        n, mp_context=mp.get_context("fork"), initializer=_exit_with_parent, initargs=(os.getpid(),)
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
