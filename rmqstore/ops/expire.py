"""Expire old files the way the broker's clean services do (store-format.md §10, §5.5, §1.2).

What one run deletes is planned by :func:`rmqstore.walk.expiry.plan_expire` (one pass of the
broker's ``CleanCommitLogService`` and ``CleanConsumeQueueService``); this module
applies the plan under the store's lock and its own expire lock.

Deleting oldest first leaves a consistent store after every single step (a broker is in the same
state between its two clean services), so a run killed midway is finished by the next one: the
consume queue and index passes only depend on the commit log files left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rmqstore.errors import ExpireRunning, InputError, RmqstoreError, StoreLocked
from rmqstore.safety.files import SCRATCH_DIR, fsync_dir, move, scratch_dir
from rmqstore.safety.journal import Journal, Progress, Resumed, StepHook, journal_file, register
from rmqstore.safety.openfile import open_fd
from rmqstore.safety.quarantine import Quarantine
from rmqstore.store import Store, open_store
from rmqstore.store.layout import StoreConfig
from rmqstore.timeparse import format_time_ms
from rmqstore.walk.expiry import (
    DiskUsage,
    ExpirePlan,
    FileAction,
    commitlog_used_ratio,
    forced_clean_level,
)

# Exit codes of `rmqstore expire` (the project-wide codes plus two of its own).
EXIT_NOTHING_TO_DO = 0  # no file to delete
EXIT_ERROR = 1  # bad input, configuration or an I/O error
EXIT_OVER_FORCED_RATIO = 3  # after the run the disk is still above the forced-clean level
EXIT_LOCKED = StoreLocked.exit_code  # 4: a running broker holds the store (it cleans itself)
EXIT_DELETED = 9  # files were deleted (or, in a dry run, would be)
EXIT_EXPIRE_RUNNING = ExpireRunning.exit_code  # 11: another `rmqstore expire` holds this store's expire lock

EXIT_CODES: dict[int, str] = {
    EXIT_NOTHING_TO_DO: "nothing to do",
    EXIT_DELETED: "files deleted (dry run: files would be deleted)",
    EXIT_OVER_FORCED_RATIO: "the commit log's disk is above the forced-clean level after the run (dry run: now)",
    EXIT_LOCKED: "a running broker holds the store; it cleans the store itself",
    EXIT_EXPIRE_RUNNING: "another rmqstore expire run holds this store's expire lock",
    EXIT_ERROR: "error (bad option or broker.conf, I/O error)",
    5: "not a store",
    6: "a commit log directory a broker would not load",
    7: "unsupported store",
}

EXPIRE_LOCK = "expire.lock"


# -- applying ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpireResult:
    done: tuple[FileAction, ...]
    quarantine_dir: Path | None = None
    freed_size: int = 0
    skipped: tuple[FileAction, ...] = field(default_factory=tuple)  # already gone when applied


def _check_quarantine(plan: ExpirePlan, config: StoreConfig | None, qdir: Path) -> None:
    q = qdir.resolve()
    for a in plan.actions:
        d = a.path.parent.resolve()
        if q == d or d in q.parents:
            raise InputError(f"--quarantine {qdir} is inside {d}: the broker would try to load files from it")
    if config is not None:
        for d in (*config.log_dirs, config.dledger_index_dir, config.consumequeue_dir, config.index_dir):
            d = Path(d).resolve()
            if q == d or d in q.parents:
                raise InputError(f"--quarantine {qdir} is inside {d}: the broker would try to load files from it")


def _quarantine(plan: ExpirePlan, base: Path) -> Quarantine:
    """A fresh ``expire-<UTC time>`` folder and its manifest, written before the first file moves."""
    q = Quarantine.fresh(base, "expire", plan.store_root, int(time.time() * 1000))
    for a in plan.actions:
        src, saved = Path(os.path.abspath(a.path)), q.folder / a.rel_path
        q.add(
            {
                "kind": "file",
                "path": str(src),
                "saved": str(saved),
                "size": a.size,
                "mtimeMs": a.mtime_ms,
                "why": a.why,
                "restore": f"mv -n {shlex.quote(str(saved))} {shlex.quote(str(src))}",  # mv keeps the mtime
            }
        )
    q.write_manifest(
        now=format_time_ms(plan.now_ms),
        minPhyOffset=plan.min_phy_offset,
        newMinPhyOffset=plan.new_min_phy_offset,
        note="files missing here were not moved yet when the run stopped and are still in the store",
    )
    return q


def apply_expire(
    plan: ExpirePlan,
    *,
    config: StoreConfig | None = None,
    on_action: Callable[[FileAction], None] | None = None,
    on_step: StepHook | None = None,
) -> ExpireResult:
    """Delete (or move to a fresh folder inside the plan's quarantine) exactly the plan's files, oldest first.

    Commit log files go first, then consume queue files, then index files; each removal is made
    durable (directory fsync) before the next, so a crash never leaves a hole. The plan's files are
    journaled first: a run killed midway is finished by the next run (its registered resume), which
    removes exactly the files this plan chose. ``on_step`` is called with ``expire:<path>`` after each.
    """
    if not plan.actions:
        return ExpireResult(())
    q = None
    if plan.quarantine is not None:
        _check_quarantine(plan, config, plan.quarantine)
        q = _quarantine(plan, Path(plan.quarantine))
    journal = Journal(
        journal_file(plan.store_root, "expire"),
        {
            "operation": "expire",
            "quarantine": str(q.folder) if q else None,
            "files": [[str(a.path), a.rel_path, a.size] for a in plan.actions],
        },
        on_step,
    )
    journal.save()
    journal.hook("expire:journal")
    return _run(journal, {str(a.path): a for a in plan.actions}, on_action)


def _resume(st: Store, on_step: StepHook | None, _progress: Progress | None) -> Resumed:
    """Finish the files of an expire run that was killed midway."""
    journal = Journal.load(journal_file(st.root, "expire"), on_step)
    assert journal is not None  # the journal is there: resume() found it
    result = _run(journal, {}, None)
    return Resumed("expire", f"finished an interrupted expire run: {len(result.done)} file(s) removed", result)


register("expire", _resume)


def _run(
    journal: Journal, actions: dict[str, FileAction], on_action: Callable[[FileAction], None] | None
) -> ExpireResult:
    run_dir = Path(journal.data["quarantine"]) if journal.data.get("quarantine") else None
    done: list[FileAction] = []
    skipped: list[FileAction] = []
    freed = 0
    for path_s, rel, size in journal.data["files"]:
        path = Path(path_s)
        a = actions.get(path_s) or FileAction("file", path, rel, size, 0, "planned by the interrupted run")
        if journal.done(rel):
            continue
        try:
            if run_dir is not None:
                move(path, run_dir / rel)
            else:
                os.unlink(path)
        except FileNotFoundError:
            skipped.append(a)
            journal.mark(rel)
            continue
        except OSError as e:
            raise RmqstoreError(
                f"{path}: cannot {'move' if run_dir else 'delete'}: {e.strerror}; "
                f"{len(done)} file(s) done before it, the store is consistent (re-run to finish the plan)"
            ) from None
        fsync_dir(path.parent)
        done.append(a)
        freed += size
        journal.mark(rel)
        if on_action is not None:
            on_action(a)
    journal.remove()
    try:
        journal.path.parent.rmdir()  # the scratch directory, when nothing else uses it
    except OSError:
        pass
    journal.hook("expire:finished")
    return ExpireResult(tuple(done), run_dir, freed, tuple(skipped))


def over_forced_ratio(plan: ExpirePlan, config: StoreConfig, disk_usage: DiskUsage) -> tuple[float, bool]:
    """The commit log partition's used ratio now, and whether it is above the forced-clean level
    (on a DLedger store: the data directories' and DLedger's level)."""
    if plan.dledger is not None:
        ratio = min(disk_usage(d) for d in config.dledger_data_dirs)
    else:
        ratio = commitlog_used_ratio(config, disk_usage)
    return ratio, ratio > forced_clean_level(plan)


def exit_code(plan: ExpirePlan, *, over_forced: bool, detailed: bool = False) -> int:
    """The run's exit status: 3 above the forced-clean level; 9 for files deleted (a dry run: would be)
    only when ``detailed`` (``--detailed-exitcode``), as schedulers retry anything but 0; else 0."""
    if over_forced:
        return EXIT_OVER_FORCED_RATIO
    return EXIT_DELETED if detailed and not plan.nothing_to_do else EXIT_NOTHING_TO_DO


# -- locks ------------------------------------------------------------------------------------


@contextlib.contextmanager
def expire_lock(root: Path, *, create: bool = True) -> Iterator[None]:
    """Hold ``<root>/.rmqstore/expire.lock`` (flock) so two runs never work on one store at once.

    With ``create=False`` (dry runs, which change nothing) only an existing lock file is checked.
    """
    path = Path(root, SCRATCH_DIR, EXPIRE_LOCK)
    fd: int | None = None
    if create:
        scratch_dir(Path(root))
        fd = open_fd(path, os.O_RDWR | os.O_CREAT)
    else:
        with contextlib.suppress(FileNotFoundError):
            fd = open_fd(path)
    if fd is None:
        yield
        return
    acquired = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise ExpireRunning(f"{path}: another rmqstore expire run is working on this store") from None
            raise
        acquired = True
        yield
    finally:
        if acquired and create:
            # a real run holds the broker's lock around this one: no other run can be waiting on the file
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # only when nothing else uses the scratch directory
        os.close(fd)  # closing releases the flock


@contextlib.contextmanager
def open_for_expire(
    root: Path,
    *,
    broker_config: Path | None = None,
    broker: str | None = None,
    dry_run: bool = False,
) -> Iterator[Store]:
    """Take the expire lock, then open the store; a store a running broker holds is refused.

    A real run takes the broker's own lock for its whole duration (so no broker starts under
    it); a dry run only probes it.
    """
    hint = "; a running broker deletes expired files itself (deleteWhen, diskMaxUsedSpaceRatio)"
    with open_store(root, broker_config=broker_config, broker=broker):
        pass  # a store at all (StoreNotFound, UnsupportedStore) before anything is created in it
    with contextlib.ExitStack() as stack:
        if dry_run:  # probes only: a dry run creates nothing in the store
            stack.enter_context(expire_lock(Path(root), create=False))
        try:  # the broker's lock first: a refused run creates nothing (not even the expire lock)
            st = stack.enter_context(
                open_store(
                    root, broker_config=broker_config, broker=broker, writable=True, operation="expire", dry_run=dry_run
                )
            )
        except StoreLocked as e:
            raise StoreLocked(f"{e}{hint}") from None
        if not dry_run:
            stack.enter_context(expire_lock(Path(root), create=True))
        yield st


__all__ = [
    "EXIT_CODES",
    "EXIT_DELETED",
    "EXIT_ERROR",
    "EXIT_EXPIRE_RUNNING",
    "EXIT_LOCKED",
    "EXIT_NOTHING_TO_DO",
    "EXIT_OVER_FORCED_RATIO",
    "ExpireResult",
    "ExpireRunning",
    "apply_expire",
    "exit_code",
    "expire_lock",
    "open_for_expire",
    "over_forced_ratio",
]
