"""The write's journal: what a rollback restores, the rollback itself, and what the last finished write recorded."""

from __future__ import annotations

import json
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.errors import CorruptData, UnsafePlan
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, scratch_dir
from rmqstore.safety.journal import Journal, Progress, Resumed, StepHook, found_journal, journal_file, register
from rmqstore.safety.openfile import json_loads, open_fd, read_file
from rmqstore.store import Store
from rmqstore.store.files import data_end as _nonzero_end

JOURNAL_FORMAT = 1


def _journal_path(root: Path) -> Path:
    """The journal of an interrupted write (under its name or an earlier one), else where a write puts it."""
    return found_journal(root, "write") or journal_file(root, "write")


def _journal_dir(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, "write.journal.d")  # the bytes a rollback puts back


def pending_journal(root: Path | str) -> dict[str, Any] | None:
    """The journal of an interrupted write in ``root``, or None."""
    p = _journal_path(Path(root))
    j = Journal.load(p)
    if j is None:
        return None
    if j.data.get("format") != JOURNAL_FORMAT:
        raise CorruptData("the write journal is not readable; restore the store from a backup", path=p, pos=0)
    return j.data


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """What rolling back an interrupted write restored."""

    journal: Path
    pid: int | None
    started_ms: int | None
    files_removed: tuple[Path, ...]
    ranges_zeroed: int
    committed: bool = False  # the write had committed: it was finished, not undone


def save_range(root: Path, path: Path, pos: int, length: int, tag: str) -> str:
    d = _journal_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    name = f"{tag}-{len(os.listdir(d))}"
    fd = open_fd(path)
    try:
        data = os.pread(fd, length, pos)
    finally:
        os.close(fd)
    atomic_write(d / name, data, tmp_dir=d)
    return name


def _zero_range(path: Path, pos: int, length: int) -> None:
    if length <= 0:
        return
    fd = open_fd(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        end = min(pos + length, size)
        if end <= pos:
            return
        m = mmap.mmap(fd, size)
        try:
            step = 1 << 24
            p = pos
            zeros = bytes(min(step, end - pos))
            while p < end:
                n = min(step, end - p)
                m[p : p + n] = zeros[:n]
                p += n
            m.flush()
        finally:
            m.close()
    finally:
        os.close(fd)


def _write_at(path: Path, pos: int, data: bytes) -> None:
    fd = open_fd(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def rel(root: Path, p: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _zero_nonzero(path: Path, pos: int) -> bool:
    """Zero ``path`` from ``pos`` up to its last non-zero byte (holes stay holes)."""
    end = _nonzero_end(path, pos, path.stat().st_size)
    if end > pos:
        _zero_range(path, pos, end - pos)
        return True
    return False


def _rollback(root: Path, j: dict[str, Any]) -> RollbackReport:
    """Undo a journaled write; every step is idempotent, so a killed rollback can run again."""
    removed: list[Path] = []
    zeroed = _rollback_commitlog(root, j["commitlog"], removed)
    zeroed += _rollback_queues(root, j["queues"], removed)
    zeroed += _rollback_index(root, j["index"], removed)
    _rollback_files(root, j, removed)
    return RollbackReport(_journal_path(root), j.get("pid"), j.get("startedMs"), tuple(removed), zeroed)


def _rollback_commitlog(root: Path, cl: dict[str, Any], removed: list[Path]) -> int:
    """Zero what the write appended, remove the files it created, put back the stale bytes it zeroed."""
    jd = _journal_dir(root)
    cl_dir = Path(cl["dir"])
    fs = int(cl["fileSize"])
    zero_from, zero_to = int(cl["zeroFrom"]), int(cl["zeroTo"])
    existing = set(cl["existing"])
    zeroed = 0
    if not cl_dir.is_dir():
        return 0
    for name in sorted(os.listdir(cl_dir)):
        if not name.isdigit():
            continue
        base = int(name)
        if base + fs <= zero_from or base >= zero_to:
            continue  # outside what the write touched
        p = cl_dir / name
        if name not in existing:
            p.unlink()
            removed.append(p)
            continue
        lo = max(zero_from, base) - base
        hi = min(zero_to, base + fs) - base
        if _nonzero_end(p, lo, hi) > lo:  # a file the write never reached (it failed there) is left alone
            _zero_range(p, lo, hi - lo)
            zeroed += 1
    for b in cl["backups"]:
        _write_at(Path(b["path"]), int(b["pos"]), read_file(jd / b["file"]))
    fsync_dir(cl_dir)
    return zeroed


def _rollback_queues(root: Path, queues: list[dict[str, Any]], removed: list[Path]) -> int:
    """Each consume queue back to its end before the write (and the bytes after it, if any)."""
    jd = _journal_dir(root)
    cq_root = root / "consumequeue"
    zeroed = 0
    for q in queues:
        d = root / q["dir"]
        if not d.is_dir():
            continue
        _remove_new_files(d, set(q["existing"]), removed, digits_only=False)
        if q["last"]:
            p = d / q["last"]
            if _zero_nonzero(p, int(q["end"])):
                zeroed += 1
            if q.get("tail"):
                _write_at(p, int(q["end"]), read_file(jd / q["tail"]))
            fsync_dir(d)
        else:
            _remove_empty_dirs(d, cq_root)
    return zeroed


def _rollback_index(root: Path, ix: dict[str, Any], removed: list[Path]) -> int:
    """The last index file's header, slots and entries as they were; new index files removed."""
    jd = _journal_dir(root)
    idir = root / "index"
    if not (ix["tracked"] and idir.is_dir()):
        return 0
    zeroed = 0
    _remove_new_files(idir, set(ix["existing"]), removed, digits_only=True)
    if ix["last"]:
        p = idir / ix["last"]
        ef = int(ix["entriesFrom"])
        if _zero_nonzero(p, ef):
            zeroed += 1
        _write_at(p, 0, read_file(jd / ix["head"]))
        if ix.get("entriesTail"):
            _write_at(p, ef, read_file(jd / ix["entriesTail"]))
    fsync_dir(idir)
    return zeroed


def _remove_new_files(d: Path, keep: set[str], removed: list[Path], *, digits_only: bool) -> None:
    for name in sorted(os.listdir(d)):
        if name not in keep and (name.isdigit() or not digits_only):
            (d / name).unlink()
            removed.append(d / name)


def _rollback_files(root: Path, j: dict[str, Any], removed: list[Path]) -> None:
    """topics.json (and its .bak) and the checkpoint as they were; abort and new directories removed."""
    jd = _journal_dir(root)
    for item in j["files"]:
        p = root / item["path"]
        if item["existed"]:
            atomic_write(p, read_file(jd / item["file"]), tmp_dir=jd)
        elif p.exists():
            p.unlink()
            removed.append(p)
    for item in j["files"]:
        tmp = (root / item["path"]).with_name(Path(item["path"]).name + ".tmp")  # fastjson-era persist temp
        if tmp.name == "topics.json.tmp" and tmp.exists():
            tmp.unlink()
    abort = root / "abort"
    if not j["abortExisted"] and abort.exists():
        abort.unlink()
        removed.append(abort)
    for rel, existed in j["dirsExisted"].items():
        d = Path(rel) if Path(rel).is_absolute() else root / rel
        if not existed and d.is_dir() and not os.listdir(d):
            d.rmdir()


def _remove_empty_dirs(d: Path, stop: Path) -> None:
    while d != stop and d.is_dir() and not os.listdir(d):
        d.rmdir()
        d = d.parent


def _finish_journal(root: Path) -> None:
    _journal_path(root).unlink(missing_ok=True)
    shutil.rmtree(_journal_dir(root), ignore_errors=True)
    scratch = Path(root, SCRATCH_DIR)
    fsync_dir(scratch)
    try:
        scratch.rmdir()  # only when empty: other operations may keep files there
    except OSError:
        pass


def rollback_pending(st: Store) -> RollbackReport | None:
    """Roll back the write a killed run left half done (its journal), if any. Needs a writable store."""
    j = pending_journal(st.root)
    if j is None:
        return None
    if not st.writable:
        raise UnsafePlan(f"{st.root}: an interrupted write must be rolled back; open the store writable")
    if j.get("committed"):  # killed after its commit point: every byte is in place, only clean up
        _record_committed(st.root, j["committed"], st.config.commitlog_dir)
        _finish_journal(st.root)
        return RollbackReport(_journal_path(st.root), j.get("pid"), j.get("startedMs"), (), 0, committed=True)
    report = _rollback(st.root, j)
    _finish_journal(st.root)
    return report


def _resume(st: Store, _on_step: StepHook | None, _progress: Progress | None) -> Resumed:
    report = rollback_pending(st)
    assert report is not None  # the journal is there: resume() found it
    done = (
        "finished an interrupted write that had committed"
        if report.committed
        else "rolled back an interrupted write first"
    )
    return Resumed("write", f"{done} ({report.journal})", report)


register("write", _resume)


LAST_WRITE = "write.last.json"


def _record_committed(root: Path, committed: dict[str, Any], commitlog_dir: Path) -> None:
    """Keep the input digest and offsets of the last write, so a re-run of the same input can tell, and
    the commit log files as this write left them (its records were checked before it appended)."""
    data = {**committed, "commitlogAsLeft": _commitlog_fingerprint(commitlog_dir)}
    atomic_write(Path(root, SCRATCH_DIR, LAST_WRITE), json.dumps(data).encode(), tmp_dir=scratch_dir(root))


def _commitlog_fingerprint(commitlog_dir: Path) -> list[list[Any]]:
    """Name, size and mtime (ns) of every commit log file: any other writer (a broker, a tool) changes it."""
    try:
        names = sorted(n for n in os.listdir(commitlog_dir) if n.isdigit())
    except OSError:
        return []
    out: list[list[Any]] = []
    for n in names:
        st = os.stat(Path(commitlog_dir, n))
        out.append([n, st.st_size, st.st_mtime_ns])
    return out


def last_write(root: Path | str) -> dict[str, Any] | None:
    """What the last finished write recorded (input digest, phy offsets, messages), or None."""
    try:
        p = Path(root, SCRATCH_DIR, LAST_WRITE)
        data = json_loads(read_file(p), path=p)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
