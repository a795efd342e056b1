"""`rmqstore report`: one self-contained HTML page (or the JSON figures behind it) for one or more stores."""

from __future__ import annotations

import enum
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.errors import RmqstoreError
from rmqstore.ops.check import check_store
from rmqstore.ops.check.lostqueues import with_lost_queues
from rmqstore.ops.report import StoreReport, Verdict, gather_report, summary_rows
from rmqstore.safety.files import atomic_write
from rmqstore.store import open_store

from . import _stores as stores
from ._common import BrokerConfigOpt, BrokerVersionOpt, QuietOpt, parse_time_ms, progress_bar
from ._options import StoresArg, command
from ._report_page import render_page

app = typer.Typer()
FIRST_PROBLEMS = 10  # problems of check listed on the page


class ReportFormat(enum.StrEnum):
    html = "html"
    json = "json"


class CheckMode(enum.StrEnum):
    quick = "quick"
    full = "full"
    none = "none"


OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write the page (or JSON) to this file; default: standard output.")
]
ReportFormatOpt = Annotated[
    ReportFormat, typer.Option("--format", "-f", help="html: the page; json: the figures behind it.")
]
CheckOpt = Annotated[
    CheckMode,
    typer.Option(
        "--check", help="The verdict of check on the page: quick (what the broker concludes at start), full, none."
    ),
]
NowOpt = Annotated[
    str | None,
    typer.Option("--now", help="Evaluate expiry at this time instead of now (the forms of expire --now)."),
]


def verdict_of(st: Any, quick: bool, progress: Any = None) -> Verdict:
    """What ``check`` (and its lost-queue forecast) says of an opened store, for the page."""
    found = with_lost_queues(st, check_store(st, quick=quick, progress=progress))
    return Verdict(
        quick,
        dict(found.found),
        tuple(p.to_json() for p in found.problems[:FIRST_PROBLEMS]),
        None if found.recovery is None else found.recovery.to_json(),
    )


def report_one(
    path: Path, broker_config: Path | None, broker_version: str, check: CheckMode, now_ms: int, quiet: bool
) -> StoreReport:
    stores.refuse_parent_of_store(path)
    with open_store(path, broker_config=broker_config, broker=broker_version) as st:
        segs, _ = st.commitlog_segments()
        with progress_bar(sum(s.size for s in segs), f"reading {path}", quiet=quiet) as advance:
            report = gather_report(st, now_ms=now_ms, progress=advance)
        if check is not CheckMode.none:
            report = report.with_verdict(verdict_of(st, check is CheckMode.quick))
        return report


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


@command(
    app,
    "report",
    epilog="rmqstore report /var/lib/rocketmq/store -o report.html\n"
    "rmqstore report '/data/broker-*/store' -o cluster.html\n"
    "rmqstore report /var/lib/rocketmq/store -f json | jq '.stores[0].expiry.freedBytes'",
)
def report_command(
    store: StoresArg,
    output: OutputOpt = None,
    fmt: ReportFormatOpt = ReportFormat.html,
    check: CheckOpt = CheckMode.quick,
    now: NowOpt = None,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """One HTML page with a store's state, disk, traffic, consumers and expiry, as charts with their numbers.

    Reads only. The commit log is walked once (every record counted per topic, queue, time and file);
    queue ranges are those of info, consumer lag that of offsets, and expiry what expire --dry-run
    --now plans at the next deleteWhen hour. The page needs no network: no script, style or font
    comes from elsewhere. Several stores (or globs): a summary across them, then a section per store;
    a store that cannot be read is named on the page and the exit status is the worst of them.
    """
    now_ms = parse_time_ms(now) if now is not None else int(time.time() * 1000)
    targets = stores.expand(store)
    reports, errors, worst = [], [], 0
    for path in targets:
        try:
            reports.append(report_one(path, broker_config, broker_version, check, now_ms, quiet))
        except RmqstoreError as e:
            if len(targets) == 1:
                raise
            errors.append({"store": str(path), "error": str(e), "exitCode": e.exit_code})
            worst = max(worst, e.exit_code)
    if not reports:
        raise typer.Exit(worst)
    write_output(render(reports, errors, fmt, now_ms), output)
    if worst:
        raise typer.Exit(worst)
