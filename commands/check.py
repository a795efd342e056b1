"""`rmqstore check`: a full consistency check of a store, like fsck."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from rmqstore.errors import ProblemsFound, RmqstoreError, StoreLocked
from rmqstore.ops.check import PER_KIND_LIMIT, CheckReport, check_store
from rmqstore.ops.check.lostqueues import with_lost_queues
from rmqstore.problems import IN_USE, INFO, Problem, absolute_path, shown_path, shutdown_word
from rmqstore.safety import journal

from . import _stores as stores
from ._common import Format, QuietOpt, progress_bar, render_mapping, render_rows
from ._options import Reading, StoresArg, command

app = typer.Typer()

COLUMNS = ["severity", "path", "pos", "phyOffset", "what"]


@command(app, "check", Reading)
def check_command(
    store: StoresArg,
    quick: Annotated[
        bool, typer.Option("--quick", help="Only what the broker concludes at start (recovery, truncation).")
    ] = False,
    max_per_kind: Annotated[
        int,
        typer.Option("--max-per-kind", min=0, help="List at most N problems of one kind (0: all); all are counted."),
    ] = PER_KIND_LIMIT,
    quiet: QuietOpt = False,
    *,
    reading: Reading,
) -> None:
    """Check every file of a store for consistency and report all problems found.

    Commit log records (magic, size, CRC, stored offset), file names, sizes and continuity.

    Consume queue entries against their records, index entries against their records' keys.

    Checkpoint, abort, lock and config/*.json; --quick: only what the broker concludes at start.

    With abort present, a consume queue directory that is missing is a warning: the broker's abnormal recovery would re-create it only from the checkpoint's file on (run redispatch first).

    Several stores (or globs): one summary row per store, exit status the worst of them.

    Result: clean (info findings allowed), warnings, errors, or in use (a running broker holds the lock and nothing else was found). Exit status 0 when clean, 3 with errors or warnings (an unclean shutdown is a warning), 4 when in use.
    """
    fmt = reading.format
    targets = stores.expand(store)
    if len(targets) > 1:
        _check_many(targets, quick, reading, max_per_kind, quiet)
        return
    report = _check_one(targets[0], quick, reading, max_per_kind, quiet)
    machine = fmt in (Format.json, Format.ndjson, Format.csv)

    def shown(path: object) -> str:
        return shown_path(str(path), report.store, absolute=machine)

    rows = [{**p.to_json(), "path": shown(p.path)} for p in report.problems]
    pending = journal.pending(report.store)
    rows += [
        {"severity": "error", "path": shown(p.path), "pos": None, "phyOffset": None, "what": _pending_what(p)}
        for p in pending
    ]
    if fmt is Format.json:
        sys.stdout.write(json.dumps({"summary": report.summary(), "problems": rows}, indent=2) + "\n")
    elif fmt is Format.ndjson:
        render_rows(rows, fmt, columns=COLUMNS)
        sys.stdout.write(json.dumps({"summary": report.summary()}) + "\n")
    elif fmt is Format.csv:
        render_rows(rows, fmt, columns=COLUMNS)
    else:
        summary = report.summary()
        recovery = summary.pop("recovery", None) or {}
        render_mapping({**summary, **{f"recovery.{k}": v for k, v in recovery.items()}}, fmt, title="summary")
        if rows:
            render_rows(rows, fmt, columns=COLUMNS, title="problems")
    verdict = report.verdict
    if verdict.exit_code() == ProblemsFound.exit_code:
        raise ProblemsFound(report.one_line())
    if pending:
        raise ProblemsFound(_pending_what(pending[0]))
    if verdict.result == IN_USE:
        raise StoreLocked(f"{report.store}: {_in_use(report)}")


def _check_one(path: Path, quick: bool, reading: Reading, limit: int, quiet: bool) -> CheckReport:
    stores.refuse_parent_of_store(path)
    with reading.open(path) as st:
        segs, _ = st.commitlog_segments()
        with progress_bar(sum(s.size for s in segs), f"checking {path}", quiet=quiet) as advance:
            report = check_store(st, quick=quick, progress=advance, limit=limit)
        return with_lost_queues(st, report)


SUMMARY_COLUMNS = [
    "store", "result", "shutdown", "errors", "warnings", "infos", "records", "queues", "first problem",
]  # fmt: skip


def _check_many(paths: list[Path], quick: bool, reading: Reading, limit: int, quiet: bool) -> None:
    """One row per store; exit with the worst code (3 when a store has errors or warnings)."""
    fmt, rows, worst = reading.format, [], 0
    for path in paths:
        try:
            report = _check_one(path, quick, reading, limit, quiet)
        except RmqstoreError as e:
            rows.append({"store": str(path), "result": f"exit {e.exit_code}", "first problem": str(e)})
            worst = max(worst, e.exit_code)
            continue
        first = next((p for p in report.problems if p.severity != INFO), None)
        verdict = report.verdict
        rows.append(
            {
                "store": absolute_path(path) if fmt in (Format.json, Format.ndjson, Format.csv) else str(path),
                "result": verdict.result,
                "shutdown": shutdown_word(verdict.clean_shutdown),
                "errors": verdict.errors,
                "warnings": verdict.warnings,
                "infos": verdict.infos,
                "records": report.counts.get("records"),
                "queues": report.counts.get("queues"),
                "first problem": "" if first is None else _first_problem(first, report.store, fmt),
                **({"summary": report.summary()} if fmt in (Format.json, Format.ndjson) else {}),
            }
        )
        worst = max(worst, verdict.exit_code())
    render_rows(rows, fmt, columns=None if fmt in (Format.json, Format.ndjson) else SUMMARY_COLUMNS, title="stores")
    if worst:
        raise typer.Exit(worst)


def _first_problem(p: Problem, root: Path, fmt: Format) -> str:
    machine = fmt in (Format.json, Format.ndjson, Format.csv)
    return str(replace(p, path=shown_path(p.path, root, absolute=machine)))


def _in_use(report: CheckReport) -> str:
    return f"in use by a running broker (pid {report.lock_holder_pid}); nothing wrong was found in the files as read"


def _pending_what(p: journal.PendingJournal) -> str:
    blocked = f"; it stopped at step {p.failed_step}: {p.error}" if p.failed_step else ""
    return f"an interrupted `rmqstore {p.operation}` is pending (steps done: {len(p.steps_done)}){blocked}"
