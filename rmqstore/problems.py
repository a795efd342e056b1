"""A finding of a lenient scan: what is wrong, in which file, at which byte (style R5)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path | str
    pos: int | None
    what: str
    severity: str = ERROR
    phy_offset: int | None = None

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
