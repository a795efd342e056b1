"""Problems as check collects them: every one counted, the first few of a kind listed.

:class:`Problems` is the one collector of a check; :class:`Firsts` keeps, for one file or queue
and one kind, the first findings in entry or record order while the entries arrive a window of
the commit log at a time (in commit log order, which a damaged file need not follow).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.problems import ERROR, Problem

PER_KIND_LIMIT = 20  # problems of one kind listed; the rest are only counted


class Problems:
    """Collects problems; past ``limit`` of one kind (over all files) they are only counted."""

    def __init__(self, limit: int = PER_KIND_LIMIT) -> None:
        self.items: list[Problem] = []
        self.found: Counter[str] = Counter()
        self._per_group: Counter[str] = Counter()
        self._hidden: dict[str, tuple[set[str], str, int]] = {}
        self.limit = limit  # 0: no limit

    def add(
        self,
        path: Path | str,
        pos: int | None,
        what: str,
        severity: str = ERROR,
        phy_offset: int | None = None,
        group: str | None = None,
    ) -> None:
        self.found[severity] += 1
        if group is not None:
            self._per_group[group] += 1
            if self.limit and self._per_group[group] > self.limit:
                self.hide(path, group, severity, 1, counted=True)
                return
        self.items.append(Problem(path, pos, what, severity, phy_offset))

    def hide(self, path: Path | str, group: str, severity: str, n: int, *, counted: bool = False) -> None:
        """Count ``n`` more problems of ``group`` that are not listed."""
        if n <= 0:
            return
        if not counted:
            self.found[severity] += n
        paths, _, had = self._hidden.get(group, (set(), severity, 0))
        paths.add(str(path))
        self._hidden[group] = (paths, severity, had + n)

    def extend(self, problems: Iterable[Problem]) -> None:
        for p in problems:
            self.found[p.severity] += 1
            self.items.append(p)

    def finish(self) -> tuple[Problem, ...]:
        for group, (paths, severity, n) in self._hidden.items():
            where = next(iter(paths)) if len(paths) == 1 else os.path.commonpath(sorted(paths))
            self.items.append(Problem(where, None, f"... and {n} more problem(s) like {group!r} not listed", severity))
        return tuple(self.items)


def first_of(out: Problems, idx: np.ndarray, path: Path | str, group: str, severity: str = ERROR) -> np.ndarray:
    """The first indices worth building a problem for; the others are only counted."""
    if not out.limit:
        return idx
    keep = out.limit + 1
    out.hide(path, group, severity, int(idx.size) - keep)
    return idx[:keep]


# one listed finding: where (file, byte), what, and the commit log offset it names
Finding = tuple[Path | str, int | None, str, int | None]


class Firsts:
    """How many findings of one kind a file or queue has, and the first ``keep`` of them by order
    (entry or record number); ``keep`` 0 keeps all."""

    __slots__ = ("keep", "n", "items")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.n = 0
        self.items: list[tuple[int, Any]] = []

    def want(self, order: np.ndarray) -> np.ndarray:
        """Count the findings at ``order`` (ascending); return those that may be among the first."""
        self.n += int(order.size)
        if not self.keep:
            return order
        cand = order[: self.keep]
        if len(self.items) >= self.keep:
            cand = cand[cand < self.items[-1][0]]
        return cand

    def put(self, order: int, item: Any) -> None:
        self.items.append((order, item))

    def settle(self) -> None:
        """Back to the first ``keep``, in order (after a run of :meth:`put`)."""
        self.items.sort(key=lambda t: t[0])
        if self.keep:
            del self.items[self.keep :]

    def listed(self) -> list[Any]:
        return [item for _, item in self.items]


def emit_firsts(out: Problems, f: Firsts | None, where: Path | str, group: str, severity: str = ERROR) -> None:
    """Give ``out`` the findings of ``f`` as if they had all been found at once (``first_of`` then
    one ``add`` each)."""
    if f is None:
        return
    if out.limit:
        out.hide(where, group, severity, f.n - (out.limit + 1))
    for path, pos, what, phy in f.listed():
        out.add(path, pos, what, severity, phy_offset=phy, group=group)


class Deferred(Problems):
    """The calls a check makes to its collector, kept to be made in order later (findings of a
    file read before the walk, reported after it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def add(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.calls.append(("add", args, kwargs))

    def hide(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.calls.append(("hide", args, kwargs))

    def replay(self, out: Problems) -> None:
        for name, args, kwargs in self.calls:
            getattr(out, name)(*args, **kwargs)
