"""The write's journal: what a rollback restores, the rollback itself, and what the last finished write recorded."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..append_point import queue_end as _queue_end
from ..errors import CorruptData, UnsafePlan
from ..fsutil import SCRATCH_DIR, atomic_write, fsync_dir, scratch_dir
from ..indexfile import HEADER_SIZE as INDEX_HEADER_SIZE
from ..indexfile import decode_header as decode_index_header
from ..layout import list_segments
from ..safety import Journal
from ..store import Store
from ..walk import data_end as _nonzero_end

if TYPE_CHECKING:
    from .append import WritePlan

JOURNAL_NAME = "write.journal"
_JOURNAL_FORMAT = 1


def _journal_path(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME)


def _journal_dir(root: Path) -> Path:
    return Path(root, SCRATCH_DIR, JOURNAL_NAME + ".d")


def pending_journal(root: Path | str) -> dict[str, Any] | None:
    """The journal of an interrupted write in ``root``, or None."""
    p = _journal_path(Path(root))
    j = Journal.load(p)
    if j is None:
        return None
    if j.data.get("format") != _JOURNAL_FORMAT:
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


def _save_range(root: Path, path: Path, pos: int, length: int, tag: str) -> str:
    d = _journal_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    name = f"{tag}-{len(os.listdir(d))}"
    with open(path, "rb") as f:
        f.seek(pos)
        data = f.read(length)
    atomic_write(d / name, data, tmp_dir=d)
    return name


def _zero_range(path: Path, pos: int, length: int) -> None:
    if length <= 0:
        return
    fd = os.open(path, os.O_RDWR)
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
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def _rel(root: Path, p: Path) -> str:
    try:
        return str(p.relative_to(root))
    except ValueError:
        return str(p)


def _build_journal(st: Store, plan: WritePlan) -> dict[str, Any]:
    """Record the state a rollback restores; copies the non-zero bytes the write may overwrite."""
    cfg = st.config
    root = st.root
    fs = cfg.commitlog_file_size
    cl_names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit()) if cfg.commitlog_dir.is_dir() else []
    zero_to = plan.end_phy
    backups: list[dict[str, Any]] = []
    if plan.stale is not None:
        s = plan.stale
        zero_to = max(zero_to, s.phy_offset + s.length)
        backups.append(
            {"path": str(s.path), "pos": s.pos, "file": _save_range(root, s.path, s.pos, s.length, "commitlog")}
        )
    queues: list[dict[str, Any]] = []
    if plan.dispatch:
        keys = plan.records.queues()
        keys |= {(r.topic, r.queue_id) for r in plan.catch_up}
        keys |= set(plan.lmq_queues)  # the %LMQ% entries are rolled back with the rest
        for topic, qid in sorted(keys):
            d = st.queue_dir(topic, qid)
            segs, _ = list_segments(d, cfg.cq_file_size)
            entry: dict[str, Any] = {"dir": _rel(root, d), "existing": [s.path.name for s in segs], "last": None}
            if segs:
                last = segs[-1]
                end = _queue_end(segs) - last.base_offset
                entry["last"] = last.path.name
                entry["end"] = end
                nz = _nonzero_end(last.path, end, last.size)
                if nz > end:
                    entry["tail"] = _save_range(root, last.path, end, nz - end, "cq")
            queues.append(entry)
    index: dict[str, Any] = {"tracked": plan.dispatch and cfg.message_index_enable, "existing": [], "last": None}
    if index["tracked"]:
        files, _ = st.index_files()
        index["existing"] = [p.name for p in files]
        if files:
            last = files[-1]
            slots_end = INDEX_HEADER_SIZE + cfg.max_hash_slot_num * 4
            index["last"] = last.name
            index["head"] = _save_range(root, last, 0, slots_end, "index")  # header and hash slots
            with open(last, "rb") as f:
                head = f.read(INDEX_HEADER_SIZE)
            count = max(decode_index_header(head, path=str(last)).index_count, 1)
            entries_from = slots_end + count * 20
            index["entriesFrom"] = entries_from
            nz = _nonzero_end(last, entries_from, last.stat().st_size)
            if nz > entries_from:
                index["entriesTail"] = _save_range(root, last, entries_from, nz - entries_from, "index-tail")
    saved_files: list[dict[str, Any]] = []
    for p in (cfg.config_dir / "topics.json", cfg.config_dir / "topics.json.bak", cfg.checkpoint_path):
        item: dict[str, Any] = {"path": _rel(root, p), "existed": p.exists()}
        if item["existed"]:
            item["file"] = _save_range(root, p, 0, p.stat().st_size, "file")
        saved_files.append(item)
    dirs = {_rel(root, d): d.is_dir() for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.index_dir, cfg.config_dir)}
    return {
        "format": _JOURNAL_FORMAT,
        "pid": os.getpid(),
        "startedMs": time.time_ns() // 1_000_000,
        "commitlog": {
            "dir": str(cfg.commitlog_dir),
            "fileSize": fs,
            "existing": cl_names,
            "zeroFrom": plan.start_phy,
            "zeroTo": zero_to,
            "backups": backups,
        },
        "queues": queues,
        "index": index,
        "files": saved_files,
        "dirsExisted": dirs,
        "abortExisted": cfg.abort_path.exists(),
    }


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
        _zero_range(p, lo, hi - lo)
        zeroed += 1
    for b in cl["backups"]:
        _write_at(Path(b["path"]), int(b["pos"]), (jd / b["file"]).read_bytes())
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
                _write_at(p, int(q["end"]), (jd / q["tail"]).read_bytes())
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
        _write_at(p, 0, (jd / ix["head"]).read_bytes())
        if ix.get("entriesTail"):
            _write_at(p, ef, (jd / ix["entriesTail"]).read_bytes())
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
            atomic_write(p, (jd / item["file"]).read_bytes(), tmp_dir=jd)
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
        data = json.loads(Path(root, SCRATCH_DIR, LAST_WRITE).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
