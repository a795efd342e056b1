"""`rmqstore report`: one self-contained HTML page (or the JSON figures behind it) for one or more stores."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from rmqstore.errors import RmqstoreError
from rmqstore.ops.check import check_store
from rmqstore.ops.check.lostqueues import with_lost_queues
from rmqstore.ops.report import StoreReport, Verdict, gather_report, summary_rows
from rmqstore.safety.files import atomic_write
from rmqstore.store import open_store
from rmqstore.walk.traffic import Traffic

from . import _stores as stores
from ._common import QuietOpt, parse_time_ms, progress_bar
from ._options import CheckMode, ReportFormat, Reporting, StoresArg, command
from ._report_page import render_page

app = typer.Typer()
FIRST_PROBLEMS = 10  # problems of check listed on the page
T = TypeVar("T")


def verdict_of(st: Any, quick: bool, progress: Any = None) -> Verdict:
    """What ``check`` (and its lost-queue forecast) says of an opened store, for the page."""
    found = with_lost_queues(st, check_store(st, quick=quick, progress=progress))
    return Verdict(
        quick,
        dict(found.found),
        tuple(p.to_json() for p in found.problems[:FIRST_PROBLEMS]),
        None if found.recovery is None else found.recovery.to_json(),
    )


def now_of(reporting: Reporting) -> int:
    return parse_time_ms(reporting.now) if reporting.now is not None else int(time.time() * 1000)


def report_one(
    path: Path, reporting: Reporting, now_ms: int, quiet: bool, traffic: Traffic | None = None
) -> StoreReport:
    """One store's figures and verdict; ``traffic``: its records already counted (else walked here)."""
    stores.refuse_parent_of_store(path)
    with open_store(path, broker_config=reporting.broker_config, broker=reporting.broker_version) as st:
        segs, _ = st.commitlog_segments()
        total = sum(s.size for s in segs) if traffic is None else 0
        with progress_bar(total, f"reading {path}", quiet=quiet) as advance:
            report = gather_report(st, now_ms=now_ms, progress=advance, traffic=traffic)
        if reporting.check is not CheckMode.none:
            report = report.with_verdict(verdict_of(st, reporting.check is CheckMode.quick))
        return report


def each_store(
    targets: list[Path], read: Callable[[Path], T], *, several: bool
) -> tuple[list[T], list[dict[str, Any]]]:
    """``read`` of each store; of several, one that cannot be read is listed with its error and exit
    code and the others go on (of one, its error is the command's)."""
    done: list[T] = []
    errors: list[dict[str, Any]] = []
    for path in targets:
        try:
            done.append(read(path))
        except RmqstoreError as e:
            if not several:
                raise
            errors.append({"store": str(path), "error": str(e), "exitCode": e.exit_code})
    return done, errors


def write_output(text: str, output: Path | None) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
    else:
        atomic_write(output, text.encode("utf-8"))


def render(reports: list[StoreReport], errors: list[dict[str, Any]], fmt: ReportFormat, now_ms: int) -> str:
    if fmt is ReportFormat.json:
        doc = {
            "generatedAt": now_ms,
            "summary": summary_rows(reports),
            "stores": [r.to_json() for r in reports],
            "errors": errors,
        }
        return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
    title = "RocketMQ store report" if len(reports) + len(errors) > 1 else f"RocketMQ store report: {reports[0].store}"
    return render_page(reports, title=title, generated_ms=now_ms, errors=errors)


def finish(reports: list[StoreReport], errors: list[dict[str, Any]], reporting: Reporting, now_ms: int) -> None:
    """Write the page (or JSON) of the stores read; the exit status is the worst of the others'."""
    worst = max((e["exitCode"] for e in errors), default=0)
    if reports:
        write_output(render(reports, errors, reporting.fmt, now_ms), reporting.output)
    if worst:
        raise typer.Exit(worst)


@command(
    app,
    "report",
    Reporting,
    epilog="rmqstore report /var/lib/rocketmq/store -o report.html\n"
    "rmqstore report '/data/broker-*/store' -o cluster.html\n"
    "rmqstore report /var/lib/rocketmq/store -f json | jq '.stores[0].expiry.freedBytes'",
)
def report_command(store: StoresArg, quiet: QuietOpt = False, *, reporting: Reporting) -> None:
    """One HTML page with a store's state, disk, traffic, consumers and expiry, as charts with their numbers.

    Reads only. The commit log is walked once (every record counted per topic, queue, time and file);
    queue ranges are those of info, consumer lag that of offsets, and expiry what expire --dry-run
    --now plans at the next deleteWhen hour. The page needs no network: no script, style or font
    comes from elsewhere. Several stores (or globs): a summary across them, then a section per store;
    a store that cannot be read is named on the page and the exit status is the worst of them.
    """
    now_ms = now_of(reporting)
    targets = stores.expand(store)
    reports, errors = each_store(
        targets, lambda path: report_one(path, reporting, now_ms, quiet), several=len(targets) > 1
    )
    finish(reports, errors, reporting, now_ms)
