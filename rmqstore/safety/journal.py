"""The journal of a modifying operation: its steps, so a killed run resumes."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.errors import CorruptData, RmqstoreError, from_os_error
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, read_if_present
from rmqstore.safety.openfile import json_loads, read_file
from rmqstore.safety.plan import JsonModel

StepHook = Callable[[str], None]


"""Called with ``"<operation>:<step>"`` right after a step is durable (journal saved)."""


def no_step(_step: str) -> None:
    """The default hook: nothing."""


JOURNAL_FORMAT = 1


# The modifying operations that keep a journal, each at <root>/.rmqstore/<operation>.journal.json.
JOURNALS = ("write", "recover", "redispatch", "expire", "truncate")
# Where earlier versions kept theirs: still found, and resumed the same way.
_EARLIER_NAMES: dict[str, tuple[tuple[str, ...], ...]] = {
    "write": (("write.journal",),),
    "redispatch": (("redispatch", "redispatch.journal.json"),),
}


def journal_file(root: Path | str, operation: str) -> Path:
    """Where ``operation`` writes its journal."""
    return Path(root, SCRATCH_DIR, f"{operation}.journal.json")


def found_journal(root: Path | str, operation: str) -> Path | None:
    """The journal of an interrupted ``operation`` in the store, under its name or an earlier one."""
    for p in (journal_file(root, operation), *(Path(root, SCRATCH_DIR, *n) for n in _EARLIER_NAMES.get(operation, ()))):
        if p.exists():
            return p
    return None


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
            data = json_loads(raw, path=path)
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
class PendingJournal(JsonModel):
    """An operation a killed or failed run left half done."""

    operation: str
    root: Path
    path: Path
    steps_done: tuple[str, ...]
    failed_step: str | None
    error: str | None

    json_keys = "operation path=journal steps_done failed_step error=blockedBy finish_with"

    @property
    def finish_with(self) -> str:
        return f"rmqstore {self.operation} {shlex.quote(str(self.root))}"

    def __str__(self) -> str:
        why = f"; it stopped at step {self.failed_step}: {self.error}" if self.failed_step else ""
        return f"an interrupted `rmqstore {self.operation}` left its journal {self.path}{why}"


def pending(root: Path | str) -> list[PendingJournal]:
    """Every journal present in the store, with the failed step and error when one was recorded."""
    out = []
    for op in JOURNALS:
        p = found_journal(root, op)
        if p is None:
            continue
        failed: dict[str, Any] | None = None
        done: tuple[str, ...] = ()
        try:
            data = json_loads(read_file(p), path=p)
            if isinstance(data, dict):
                failed = data.get("failed") if isinstance(data.get("failed"), dict) else None
                done = tuple(str(s) for s in data.get("done", []) if isinstance(s, str))
        except (OSError, ValueError, RmqstoreError):
            failed = {"step": None, "error": "the journal is not readable"}
        step, error = (failed.get("step"), failed.get("error")) if failed else (None, None)
        out.append(PendingJournal(op, Path(root), p, done, step, error))
    return out


# -- resuming: one entry point for every operation ----------------------------------------------

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Resumed:
    """What finishing an interrupted run did: one line to say so, and the operation's own result."""

    operation: str
    message: str
    outcome: Any


# (store opened writable, step hook, progress) -> what finishing did
Resume = Callable[[Any, StepHook | None, Progress | None], Resumed]
_RESUMES: dict[str, Resume] = {}


def register(operation: str, resume_with: Resume) -> None:
    """Name how ``operation`` finishes a run a kill left half done (each operation's module does)."""
    if operation not in JOURNALS:
        raise ValueError(f"{operation!r} keeps no journal")
    _RESUMES[operation] = resume_with


def registered() -> tuple[str, ...]:
    return tuple(op for op in JOURNALS if op in _RESUMES)


def resume(
    st: Any, operation: str, *, on_step: StepHook | None = None, progress: Progress | None = None
) -> Resumed | None:
    """Finish the run of ``operation`` that a kill (or a failed step) left in the store ``st`` (opened
    writable), through the operation's registered resume; None when no journal of it is there."""
    if found_journal(st.root, operation) is None:
        return None
    resume_with = _RESUMES.get(operation)
    if resume_with is None:
        raise RmqstoreError(f"nothing resumes an interrupted {operation}: import rmqstore.ops.{operation} first")
    return resume_with(st, on_step, progress)
