"""The one safety layer every modifying operation uses.

- :func:`atomic_write`: temp file in ``STORE/.rmqstore/``, fsync, rename, directory fsync.
- :class:`Journal`: a write-ahead record of an operation's steps in ``STORE/.rmqstore/``; a run
  killed at any step is finished (or rolled back) by the next run of the same operation.
- :class:`Quarantine`: a fresh folder per run holding every removed byte, with one manifest schema
  whose restore commands use absolute, shell-quoted paths (they work from any directory).
- :data:`StepHook`: called after every journaled step; tests inject one that kills the process.
- Topic names from record bytes: :func:`queue_dir` builds ``consumequeue/<topic>/<queueId>`` only for a
  name the broker's ``TopicValidator`` accepts, and proves the path stays inside the store.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CorruptData, RmqstoreError, from_os_error
from .fsutil import SCRATCH_DIR, atomic_write, fsync_dir, fsync_file, scratch_dir


def read_if_present(path: Path, what: str) -> bytes | None:
    """The bytes of a small file the store may lack (None then); a file that cannot be read is damage."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptData(f"cannot read {what}: {e.strerror}", path=path, pos=0) from None


__all__ = [
    "MANIFEST_SCHEMA",
    "Journal",
    "PendingJournal",
    "Quarantine",
    "StepHook",
    "atomic_write",
    "check_topic_name",
    "fsync_dir",
    "fsync_file",
    "no_step",
    "pending_journals",
    "queue_dir",
    "scratch_dir",
]

StepHook = Callable[[str], None]
"""Called with ``"<operation>:<step>"`` right after a step is durable (journal saved)."""


def no_step(_step: str) -> None:
    """The default hook: nothing."""


# -- journals ---------------------------------------------------------------------------------

JOURNAL_FORMAT = 1

# operation -> its journal under <root>/.rmqstore (recover and write keep their own file names)
JOURNALS: dict[str, tuple[str, ...]] = {
    "write": ("write.journal",),
    "recover": ("recover.journal.json",),
    "redispatch": ("redispatch", "redispatch.journal.json"),
    "expire": ("expire.journal.json",),
}


def journal_file(root: Path | str, operation: str) -> Path:
    return Path(root, SCRATCH_DIR, *JOURNALS[operation])


class Journal:
    """Steps done and state kept so far, saved atomically after every change.

    ``data`` is a JSON object: ``operation``, ``done`` (step names in order), ``state`` (values the
    later steps need) and ``failed`` (the step and error of the last failed attempt, or None).
    """

    def __init__(self, path: Path, data: dict[str, Any], hook: StepHook | None = None):
        self.path = path
        self.data = data
        self.data.setdefault("done", [])
        self.data.setdefault("state", {})
        self.hook = hook or no_step

    @classmethod
    def load(cls, path: Path, hook: StepHook | None = None) -> Journal | None:
        raw = read_if_present(path, "the journal")
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except ValueError:
            raise CorruptData("the journal is not readable JSON", path=path, pos=0) from None
        return cls(path, data, hook)

    @property
    def operation(self) -> str:
        return str(self.data.get("operation", "?"))

    @property
    def state(self) -> dict[str, Any]:
        return self.data["state"]

    def done(self, step: str) -> bool:
        return step in self.data["done"]

    def mark(self, step: str) -> None:
        """Record ``step`` as done (durably), then call the step hook."""
        self.data["done"].append(step)
        self.data["failed"] = None
        self.save()
        self.hook(f"{self.operation}:{step}")

    def set(self, **kw: Any) -> None:
        self.state.update(kw)
        self.save()

    def fail(self, step: str, error: BaseException) -> None:
        """Keep what stopped the run, so ``check`` and ``info`` can show it."""
        if isinstance(error, OSError):
            error = from_os_error(error)
        self.data["failed"] = {"step": step, "error": str(error) or type(error).__name__}
        try:
            self.save()
        except OSError:
            pass  # the journal stays as it was: the step is still not done

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(self.data, indent=1).encode())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)


@dataclass(frozen=True, slots=True)
class PendingJournal:
    """An operation a killed or failed run left half done."""

    operation: str
    path: Path
    steps_done: tuple[str, ...]
    failed_step: str | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "journal": str(self.path),
            "stepsDone": list(self.steps_done),
            "failedStep": self.failed_step,
            "blockedBy": self.error,
            "finishWith": f"rmqstore {self.operation} {shlex.quote(str(self.path.parents[len(JOURNALS[self.operation]) - 1].parent))}",
        }

    def __str__(self) -> str:
        why = f"; it stopped at step {self.failed_step}: {self.error}" if self.failed_step else ""
        return f"an interrupted `rmqstore {self.operation}` left its journal {self.path}{why}"


def pending_journals(root: Path | str) -> list[PendingJournal]:
    """Every journal present in the store, with the failed step and error when one was recorded."""
    out = []
    for op in JOURNALS:
        p = journal_file(root, op)
        if not p.exists():
            continue
        failed: dict[str, Any] | None = None
        done: tuple[str, ...] = ()
        try:
            data = json.loads(p.read_bytes())
            if isinstance(data, dict):
                failed = data.get("failed") if isinstance(data.get("failed"), dict) else None
                done = tuple(str(s) for s in data.get("done", []) if isinstance(s, str))
        except (OSError, ValueError):
            failed = {"step": None, "error": "the journal is not readable"}
        out.append(
            PendingJournal(op, p, done, failed.get("step") if failed else None, failed.get("error") if failed else None)
        )
    return out


# -- quarantine -------------------------------------------------------------------------------

MANIFEST_SCHEMA = "rmqstore-quarantine/1"


def default_quarantine_base(root: Path | str) -> Path:
    """``<store parent>/<store name>.quarantine``: each run gets a fresh folder inside."""
    r = Path(root).resolve()
    return r.parent / f"{r.name}.quarantine"


def _stamp(now_ms: int) -> str:
    t = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    return t.strftime("%Y%m%dT%H%M%S") + f"{now_ms % 1000:03d}Z"


def _q(p: Path | str) -> str:
    return shlex.quote(str(p))


class Quarantine:
    """One run's folder for removed bytes, and its ``manifest.json``.

    Manifest schema (``schema`` = :data:`MANIFEST_SCHEMA`): ``operation``, ``store``, ``folder`` (all
    absolute), ``createdMs``, ``howToRestore`` and ``items``; each item has ``kind`` (file, range,
    directory, marker), ``path`` (absolute, where it was), ``saved`` (absolute, where it is now),
    ``why``, ``restore`` (a shell command with absolute quoted paths) and, for files and ranges,
    ``size``/``from``/``to`` and ``sha256`` of the saved bytes.
    """

    def __init__(self, folder: Path, operation: str, store: Path, created_ms: int, items: list[dict[str, Any]]):
        self.folder = folder
        self.operation = operation
        self.store = store
        self.created_ms = created_ms
        self.items = items

    @classmethod
    def fresh(cls, base: Path | str, operation: str, store: Path | str, now_ms: int) -> Quarantine:
        """A new folder ``<base>/<operation>-<UTC time>[-n]`` that no earlier run used."""
        base = Path(base).absolute()
        base.mkdir(parents=True, exist_ok=True)
        stem = f"{operation}-{_stamp(now_ms)}"
        n = 1
        while True:
            folder = base / (stem if n == 1 else f"{stem}-{n}")
            try:
                folder.mkdir()
                break
            except FileExistsError:
                n += 1
        fsync_dir(base)
        return cls(folder, operation, Path(store).resolve(), now_ms, [])

    @classmethod
    def resume(cls, folder: Path | str, operation: str, store: Path | str) -> Quarantine:
        """The folder of an interrupted run (its manifest items, if one was written)."""
        folder = Path(folder)
        items: list[dict[str, Any]] = []
        created = 0
        m = folder / "manifest.json"
        if m.exists():
            data = json.loads(m.read_text())
            items, created = list(data.get("items", [])), int(data.get("createdMs", 0))
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder, operation, Path(store).resolve(), created, items)

    def _saved(self, src: Path, sub: str, suffix: str = "") -> Path:
        try:
            rel = Path(src).resolve().relative_to(self.store)
        except ValueError:
            rel = Path(Path(src).name)
        return self.folder / sub / (str(rel) + suffix)

    def add(self, item: dict[str, Any]) -> dict[str, Any]:
        """Record an item in the manifest (replacing one for the same path and range)."""
        self.items = [i for i in self.items if not (i["path"] == item["path"] and i.get("from") == item.get("from"))]
        self.items.append(item)
        return item

    def save_file(self, src: Path, why: str, *, link: bool = False) -> dict[str, Any]:
        """Keep a copy of ``src`` (a hard link when ``link`` and nothing writes it before it goes)."""
        src = Path(src).absolute()
        dst = self._saved(src, "files")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.unlink(missing_ok=True)
        try:
            if not link:
                raise OSError("copy asked")
            os.link(src, dst)
        except OSError:
            tmp = dst.with_name(dst.name + ".partial")
            shutil.copyfile(src, tmp)
            fsync_file(tmp)
            os.replace(tmp, dst)
        return self.add(
            {
                "kind": "file",
                "path": str(src),
                "saved": str(dst),
                "size": dst.stat().st_size,
                "sha256": sha256_file(dst),
                "why": why,
                "restore": f"cp --sparse=always {_q(dst)} {_q(src)}",
            }
        )

    def save_range(self, src: Path, start: int, end: int, why: str) -> dict[str, Any]:
        """Keep bytes ``[start, end)`` of ``src``."""
        src = Path(src).absolute()
        dst = self._saved(src, "ranges", f".{start}-{end}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        tmp = dst.with_name(dst.name + ".partial")
        with open(src, "rb") as f, open(tmp, "wb") as out:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 22))
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                left -= len(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
        return self.add(
            {
                "kind": "range",
                "path": str(src),
                "from": start,
                "to": end,
                "saved": str(dst),
                "sha256": digest.hexdigest(),
                "why": why,
                "restore": f"dd if={_q(dst)} of={_q(src)} bs=1M seek={start} oflag=seek_bytes conv=notrunc",
            }
        )

    def note(self, path: Path, why: str, restore: str) -> dict[str, Any]:
        """An item that holds no bytes (a removed marker file)."""
        return self.add({"kind": "marker", "path": str(Path(path).absolute()), "why": why, "restore": restore})

    def write_manifest(self, **extra: Any) -> Path:
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "operation": self.operation,
            "store": str(self.store),
            "folder": str(self.folder),
            "createdMs": self.created_ms,
            "howToRestore": (
                "Stop the broker, then run the 'restore' command of every item, last item first; the commands "
                "use absolute paths and work from any directory."
            ),
            **extra,
            "items": self.items,
        }
        p = self.folder / "manifest.json"
        atomic_write(p, json.dumps(manifest, indent=2).encode())
        for d in sorted({q.parent for q in self.folder.rglob("*") if q.is_file()}):
            fsync_dir(d)
        return p


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def move(src: Path, dst: Path, *, missing_ok: bool = False) -> None:
    """Rename a file or directory ``src`` to ``dst`` durably (copy, keeping mtimes, then delete across
    file systems). A directory left at ``dst`` by an earlier copy that did not finish is replaced.
    A missing ``src`` raises FileNotFoundError, or does nothing with ``missing_ok`` (a re-run)."""
    if missing_ok and not os.path.lexists(src):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        tmp = dst.with_name(dst.name + ".partial")
        if src.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            os.replace(tmp, dst)
            shutil.rmtree(src)
        else:
            shutil.copy2(src, tmp)
            fsync_file(tmp)
            os.replace(tmp, dst)
            os.unlink(src)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)


# -- topic names from record bytes -----------------------------------------------------------

# TopicValidator (4.x and 5.x): letters, digits, "%", "|", "_", "-"
_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+")  # fullmatch: "$" would accept a trailing newline
TOPIC_MAX_LENGTH = 255  # 4.x clients allowed 255 (later 127); longer is no file name (NAME_MAX)


def check_topic_name(topic: str) -> str | None:
    """Why the broker would refuse ``topic`` as a topic name, or None when it accepts it."""
    if not topic:
        return "the topic is empty"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic is {len(topic)} characters long, more than {TOPIC_MAX_LENGTH}"
    if not _TOPIC_RE.fullmatch(topic):
        return "only letters, digits and %|_- are allowed"
    return None


def shown(text: str) -> str:
    """Record text as one safe line: control characters and non-ASCII escaped."""
    return text.encode("unicode_escape").decode("ascii").replace("'", "\\'")


class BadTopic(CorruptData):
    """A record names a topic the broker could never have accepted: never dispatched to a path."""

    def __init__(self, topic: str, why: str, *, path: Path | str, pos: int, phy_offset: int | None):
        self.topic = topic
        what = f"record topic '{shown(topic)}' is not a topic name the broker accepts ({why})"
        super().__init__(what, path=path, pos=pos, phy_offset=phy_offset)


def queue_dir(
    root: Path, topic: str, queue_id: int, *, where: tuple[Path | str, int, int | None] | None = None
) -> Path:
    """``<root>/consumequeue/<topic>/<queueId>``, refused (:class:`BadTopic`) for any topic the broker
    refuses, and proven to stay inside ``<root>/consumequeue``.

    ``where`` is (file, pos, phy offset) of the record the topic came from, for the error.
    """
    why = check_topic_name(topic)
    base = Path(root) / "consumequeue"
    d = base / topic / str(int(queue_id))
    if why is None and os.path.normpath(d).startswith(os.path.normpath(base) + os.sep) and d.parent.parent == base:
        return d
    path, pos, phy = where if where is not None else (base, 0, None)
    raise BadTopic(topic, why or "the path leaves the consume queue directory", path=path, pos=pos, phy_offset=phy)


def record_place(commitlog_dir: Path, file_size: int, phy_offset: int) -> tuple[Path, int, int]:
    """(commit log file, byte position in it, phy offset) of a record."""
    base = phy_offset - phy_offset % file_size if file_size > 0 else 0
    return Path(commitlog_dir) / f"{base:020d}", phy_offset - base, phy_offset


class StepFailed(RmqstoreError):
    """A journaled step failed; the journal stays so the next run can finish once the obstacle is gone."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# -- plans: one shape for what every modifying operation will do --------------------------------


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """One change a plan makes to one path, in the same shape for every operation.

    ``verb``: append, zero, delete, move, replace (a whole file or directory swapped in) or rewrite
    (a whole file written again). ``start``/``end``: the byte range for append and zero.
    """

    operation: str
    verb: str
    path: Path
    why: str
    start: int | None = None
    end: int | None = None
    size: int | None = None
    kept: bool = False  # the removed bytes go to the quarantine first

    def to_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "action": self.verb,
            "path": str(self.path),
            "from": self.start,
            "to": self.end,
            "bytes": self.size if self.size is not None else (None if self.start is None else self.end - self.start),
            "kept": self.kept,
            "why": self.why,
        }


def actions_json(
    actions: Iterator[PlannedAction] | list[PlannedAction] | tuple[PlannedAction, ...],
) -> list[dict[str, Any]]:
    """The one JSON mapping of planned actions."""
    return [a.to_json() for a in actions]
