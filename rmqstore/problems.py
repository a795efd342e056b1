"""A finding of a lenient scan: what is wrong, in which file, at which byte (style R5)."""

from __future__ import annotations

import enum
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
            "path": str(self.path),
            "pos": self.pos,
            "phyOffset": self.phy_offset,
            "what": self.what,
        }

    def __str__(self) -> str:
        at = "" if self.pos is None else f" at byte {self.pos}"
        phy = "" if self.phy_offset is None else f" (phy offset {self.phy_offset})"
        return f"{self.path}{at}{phy}: {self.what}"
