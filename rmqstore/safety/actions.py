"""Planned actions: what a plan will do, shown before it is done."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.errors import RmqstoreError
from rmqstore.problems import absolute_path


class StepFailed(RmqstoreError):
    """A journaled step failed; the journal stays so the next run can finish once the obstacle is gone."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


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
            "path": absolute_path(self.path),
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
