"""The journal of a modifying operation: its steps, so a killed run resumes."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.errors import CorruptData, from_os_error
from rmqstore.safety.files import SCRATCH_DIR, atomic_write, fsync_dir, read_if_present

StepHook = Callable[[str], None]


"""Called with ``"<operation>:<step>"`` right after a step is durable (journal saved)."""


def no_step(_step: str) -> None:
    """The default hook: nothing."""


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
