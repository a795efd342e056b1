"""`rmqstore check`: a full consistency check of a store, like fsck."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from rmqstore.check import PER_KIND_LIMIT, check_store
from rmqstore.errors import ProblemsFound
from rmqstore.safety import PendingJournal, pending_journals
from rmqstore.store import open_store

from ._common import (
    BrokerConfigOpt,
    BrokerVersionOpt,
    Format,
    QuietOpt,
    StorePath,
    default_format,
    progress_bar,
    render_mapping,
    render_rows,
    reports_errors,
)

app = typer.Typer()

COLUMNS = ["severity", "path", "pos", "phyOffset", "what"]


@app.command("check")
@reports_errors
def check_command(
    store: StorePath,
    quick: Annotated[
        bool, typer.Option("--quick", help="Only what the broker concludes at start (recovery, truncation).")
    ] = False,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    fmt: Annotated[Format | None, typer.Option("--format", "-f", help="Output format.")] = None,
    max_per_kind: Annotated[
        int,
        typer.Option("--max-per-kind", min=0, help="List at most N problems of one kind (0: all); all are counted."),
    ] = PER_KIND_LIMIT,
    quiet: QuietOpt = False,
) -> None:
    """Check every file of a store for consistency and report all problems found.

    Commit log records (magic, size, CRC, stored offset), file names, sizes and continuity.

    Consume queue entries against their records, index entries against their records' keys.

    Checkpoint, abort, lock and config/*.json; --quick: only what the broker concludes at start.

    Exit status 0 when clean (info findings allowed), 3 when errors or warnings were found.
    """
    fmt = default_format(fmt)
    with open_store(store, broker_config=broker_config, broker=broker_version) as st:
        segs, _ = st.commitlog_segments()
        with progress_bar(sum(s.size for s in segs), "checking commit log", quiet=quiet) as advance:
            report = check_store(st, quick=quick, progress=advance, limit=max_per_kind)
    root = str(report.store)

    def rel(path: str) -> str:
        return "." if path == root else path[len(root) + 1 :] if path.startswith(root + "/") else path

    rows = [{**p.to_json(), "path": rel(str(p.path))} for p in report.problems]
    pending = pending_journals(report.store)
    rows += [
        {"severity": "error", "path": rel(str(p.path)), "pos": None, "phyOffset": None, "what": _pending_what(p)}
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
    if not report.clean:
        raise ProblemsFound(report.one_line())
    if pending:
        raise ProblemsFound(_pending_what(pending[0]))


def _pending_what(p: PendingJournal) -> str:
    blocked = f"; it stopped at step {p.failed_step}: {p.error}" if p.failed_step else ""
    return f"an interrupted `rmqstore {p.operation}` is pending (steps done: {len(p.steps_done)}){blocked}"
