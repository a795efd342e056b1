"""A finding of a lenient scan: what is wrong, in which file, at which byte (style R5)."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"


class ProblemKind(enum.Enum):
    """What a problem is, for code that acts on it (the text is for people and may change)."""

    OTHER = "other"
    UNLISTABLE = "unlistable"  # a directory that cannot be listed
    HIDDEN_FILE = "hidden-file"  # a dot file in a segment directory
    SUB_DIRECTORY = "sub-directory"  # a directory inside a segment directory
    BAD_NAME = "bad-name"  # a segment file name that is not a 20-digit offset
    UNSTATABLE = "unstatable"
    WRONG_SIZE = "wrong-size"  # a segment file whose size is not the configured one
    MISALIGNED_NAME = "misaligned-name"  # a name that is not a multiple of the file size
    GAP = "gap"  # a segment does not start where the previous one ends


# segment directory problems that make the broker fail to load the directory
LOAD_FAILURES = frozenset(
    {ProblemKind.HIDDEN_FILE, ProblemKind.SUB_DIRECTORY, ProblemKind.BAD_NAME, ProblemKind.WRONG_SIZE}
)


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path | str
    pos: int | None
    what: str
    severity: str = ERROR
    phy_offset: int | None = None
    kind: ProblemKind = ProblemKind.OTHER

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "path": absolute_path(self.path),
            "pos": self.pos,
            "phyOffset": self.phy_offset,
            "what": self.what,
        }

    def __str__(self) -> str:
        at = "" if self.pos is None else f" at byte {self.pos}"
        phy = "" if self.phy_offset is None else f" (phy offset {self.phy_offset})"
        return f"{self.path}{at}{phy}: {self.what}"


def absolute_path(path: Path | str) -> str:
    """A path as machine formats show it: absolute (not resolved: symlinks stay as the user sees them)."""
    text = str(path)
    return text if text.startswith("<") else os.path.abspath(text)


def shown_path(path: Path | str, root: Path | str, *, absolute: bool) -> str:
    """A path as an output shows it: absolute in machine formats (json, ndjson, csv), relative to the
    store root in human ones (``.`` for the root itself), whether the store was named relatively or not."""
    full = absolute_path(path)
    if absolute or full.startswith("<"):
        return full
    base = os.path.abspath(str(root))
    if full == base:
        return "."
    return full[len(base) + 1 :] if full.startswith(base + os.sep) else full


# ------------------------------------------------------------------------------------- verdicts
# One verdict for `info`, `check`, the multi-store summaries and the report: the same facts get the
# same severity everywhere, and the result word says what the worst of them is.

CLEAN = "clean"  # no error and no warning (info findings are normal)
WARNINGS = "warnings"
ERRORS = "errors"
IN_USE = "in use"  # nothing wrong found, but a running broker holds the lock: the files change
UNCLEAN_SHUTDOWN = "unclean shutdown: abort exists, the broker will run abnormal recovery on its next start"


def shutdown_word(clean_shutdown: bool) -> str:
    return "clean" if clean_shutdown else "unclean"


def shutdown_problems(abort_path: Path, lock_path: Path, *, abort: bool, lock_pid: int | None) -> list[Problem]:
    """``abort`` and ``lock`` as findings: a crashed store (abort, nobody holding the lock) is a warning;
    a running broker keeps abort while it runs, so then only the lock is reported, as a fact."""
    if lock_pid is not None:
        what = f"a running broker (pid {lock_pid}) holds the lock: the store changes while it is read"
        return [Problem(lock_path, 0, what, INFO)]
    return [Problem(abort_path, None, UNCLEAN_SHUTDOWN, WARNING)] if abort else []


@dataclass(frozen=True, slots=True)
class StoreVerdict:
    """The worst of a store's findings, with its shutdown and lock state beside it (never mixed in)."""

    errors: int
    warnings: int
    infos: int
    clean_shutdown: bool  # no abort file
    broker_running: bool  # a running process holds the broker's lock

    @classmethod
    def of(cls, found: dict[str, int], *, clean_shutdown: bool, broker_running: bool) -> StoreVerdict:
        """From problem counts per severity (``found``)."""
        return cls(found.get(ERROR, 0), found.get(WARNING, 0), found.get(INFO, 0), clean_shutdown, broker_running)

    @classmethod
    def of_problems(cls, problems: Any, *, clean_shutdown: bool, broker_running: bool) -> StoreVerdict:
        found: dict[str, int] = {}
        for p in problems:
            found[p.severity] = found.get(p.severity, 0) + 1
        return cls.of(found, clean_shutdown=clean_shutdown, broker_running=broker_running)

    @property
    def result(self) -> str:
        if self.errors:
            return ERRORS
        if self.warnings:
            return WARNINGS
        return IN_USE if self.broker_running else CLEAN

    @property
    def clean(self) -> bool:
        return self.result == CLEAN

    def exit_code(self, *, strict: bool = True) -> int:
        """``check`` (strict): 3 (problems found) for errors or warnings, 4 (store locked) for a store
        only in use by a running broker, else 0. ``info``: 3 for errors only."""
        if not strict:
            return 3 if self.errors else 0
        return {ERRORS: 3, WARNINGS: 3, IN_USE: 4}.get(self.result, 0)

    def to_json(self) -> dict[str, Any]:
        values = (self.result, self.errors, self.warnings, self.infos, self.clean_shutdown, self.broker_running)
        return dict(zip(VERDICT_KEYS, values, strict=True))


VERDICT_KEYS = ("result", "errors", "warnings", "infos", "cleanShutdown", "brokerRunning")
