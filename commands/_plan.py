"""The one plan renderer: what a modifying command will do (or did), in every ``--format``.

A plan is shown as its planned actions (:class:`rmqstore.safety.PlannedAction`, one record kind,
fields in ``_fields.PLAN_ACTION``), a short summary mapping for the facts the actions do not carry
(records lost, where removed bytes go, ...) and optional detail tables (queue diffs, offsets before
and after, messages). json is one document: ``summary``, ``actions``, the detail tables by name and,
after applying, ``result``; ndjson and csv are the action rows alone (one record kind per stream);
table and plain show the summary, the actions and each non-empty detail table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import typer

from rmqstore.problems import shown_path
from rmqstore.safety.actions import PlannedAction, actions_json
from rmqstore.safety.journal import Progress, Resumed, resume
from rmqstore.safety.plan import Plan

from ._common import step_hook
from ._fields import PLAN_ACTION, PLAN_ACTION_TABLE
from ._render import Format, cell, render_mapping, render_rows

T = TypeVar("T")


@dataclass(frozen=True)
class Detail:
    """A table that belongs to a plan: its rows and the columns people see."""

    rows: list[dict[str, Any]]
    columns: Sequence[str] | None = None
    title: str | None = None  # shown above the table (default: its JSON name)


@dataclass(frozen=True)
class PlanView:
    """What a command shows of a plan."""

    operation: str
    actions: Iterable[PlannedAction]
    summary: dict[str, Any] = field(default_factory=dict)
    details: Mapping[str, Detail] = field(default_factory=dict)
    plan: dict[str, Any] | None = None  # the library's whole plan, for scripts (json only)
    root: str | None = None  # the store: table and plain show paths relative to it


def plan_view(
    plan: Plan,
    tables: Mapping[str, tuple[Sequence[str] | None, str | None]],
    *,
    summary: dict[str, Any] | None = None,
    details: Mapping[str, list[dict[str, Any]]] | None = None,
    with_plan: bool = False,
) -> PlanView:
    """What a command shows of ``plan``: its actions, its summary (or ``summary``) and its detail rows
    (or ``details``) under the columns and titles of ``tables``; ``with_plan``: its whole JSON too."""
    rows = plan.details() if details is None else details
    shown = {name: Detail(rows[name], cols, title) for name, (cols, title) in tables.items()}
    return PlanView(
        plan.operation,
        plan.planned_actions(),
        plan.summary() if summary is None else summary,
        shown,
        plan=plan.to_json() if with_plan else None,
        root=None if getattr(plan, "root", None) is None else str(plan.root),  # type: ignore[attr-defined]
    )


def render_plan(view: PlanView, fmt: Format, *, result: dict[str, Any] | None = None, one_line: bool = False) -> None:
    """Show ``view`` in ``fmt``; json on one line with ``one_line`` (a log file gets one line per run)."""
    rows = actions_json(tuple(view.actions))
    if fmt is Format.json:
        doc: dict[str, Any] = {"operation": view.operation, "summary": view.summary, "actions": rows}
        doc.update((name, d.rows) for name, d in view.details.items())
        if view.plan is not None:
            doc["plan"] = view.plan
        if result is not None:
            doc["result"] = result
        indent, seps = (None, (",", ":")) if one_line else (2, None)
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=indent, separators=seps, default=str) + "\n")
        return
    if fmt in (Format.ndjson, Format.csv):
        render_rows(rows, fmt, columns=PLAN_ACTION)
        return
    render_mapping({k: _text(v) for k, v in view.summary.items()}, fmt, title=f"{view.operation} plan")
    if rows and view.root is not None:
        rows = [{**r, "path": shown_path(r["path"], view.root, absolute=False)} for r in rows]
    if rows:
        cols = PLAN_ACTION_TABLE if fmt is Format.table else PLAN_ACTION
        render_rows(rows, fmt, columns=cols, title="planned actions")
    for name, d in view.details.items():
        if d.rows:
            render_rows(d.rows, fmt, columns=d.columns, title=d.title or name)


def _text(v: Any) -> Any:
    """A summary value as one cell: lists joined, mappings as compact JSON, paths as text."""
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v) or "none"
    if v is None:
        return "none"
    if isinstance(v, dict):
        return cell(v)
    return v if isinstance(v, (int, float, str, bool)) else str(v)


def show_and_apply(
    view: PlanView,
    fmt: Format,
    *,
    dry_run: bool,
    apply: Callable[[], tuple[T, dict[str, Any] | None]],
    ask: bool = False,
) -> T | None:
    """Show the plan, then (unless a dry run) call ``apply()`` -> (outcome, its JSON or None).

    table, plain, ndjson and csv show the plan before anything is changed; json prints one document
    after applying, with the outcome under ``result``. Returns the outcome (None for a dry run). With
    ``ask``, on a terminal, ``Apply?`` is asked first (no: nothing is changed, exit 0).
    """
    if dry_run or fmt is not Format.json:
        render_plan(view, fmt)
    if dry_run:
        return None
    if ask and sys.stdin.isatty() and sys.stdout.isatty() and not typer.confirm("Apply?", default=False):
        return None
    outcome, result = apply()
    if fmt is Format.json:
        render_plan(view, fmt, result=result)
    return outcome


def resume_interrupted(st: Any, operation: str, *, dry_run: bool, progress: Progress | None = None) -> Resumed | None:
    """Finish what a killed run of ``operation`` left half done in ``st`` (its journal), the same way
    for every modifying command; None when there is none. A dry run changes nothing: it resumes nothing."""
    if dry_run:
        return None
    return resume(st, operation, on_step=step_hook(), progress=progress)
