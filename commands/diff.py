"""`rmqstore diff`: where two replicas of a store diverged, and the truncate that cuts one back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.ops.diff import diff_stores
from rmqstore.store import open_store

from ._common import BrokerVersionOpt, StorePath, default_format, err
from ._fields import DIFF_DAMAGED, DIFF_QUEUE, DIFF_SIDE
from ._options import FmtOpt, command
from ._render import Format, render_mapping, render_rows

app = typer.Typer()

ConfigAOpt = Annotated[
    Path | None, typer.Option("--broker-config-a", help="broker.conf of STORE_A (default: found beside it).")
]
ConfigBOpt = Annotated[
    Path | None, typer.Option("--broker-config-b", help="broker.conf of STORE_B (default: found beside it).")
]
EXAMPLES = """Examples:
  rmqstore diff /data/new-master/store /data/old-master/store
  rmqstore diff A B -f json | jq .queues"""


@command(app, "diff", epilog=EXAMPLES)
def diff_command(
    store_a: StorePath,
    store_b: StorePath,
    broker_config_a: ConfigAOpt = None,
    broker_config_b: ConfigBOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    fmt: FmtOpt = None,
) -> None:
    """Compare the commit logs of two replicas record by record and say where they diverged.

    relation is identical, a-behind (A's commit log is a prefix of B's: replication lag), b-behind or
    diverged; commonEnd is the commit log offset where the longest run of identical records ends. Past
    it: what each side holds alone (records, bytes, time span, topics), and per queue the queue offset
    where the common messages end with the messages only in A and only in B. For a diverged pair the
    rmqstore truncate command that cuts the old master back. Both stores are only read (a running
    broker may hold either). On DLedger stores entries are compared (header and record) and commonEnd
    is an entry's start. Exit 0 when identical or one side is only behind, 3 when diverged.
    """
    out = default_format(fmt)
    version = None if broker_version == "auto" else broker_version
    with (
        open_store(store_a, broker_config=broker_config_a, broker=version) as st_a,
        open_store(store_b, broker_config=broker_config_b, broker=version) as st_b,
    ):
        report = diff_stores(st_a, st_b, config_a=broker_config_a, config_b=broker_config_b)
    _render(report.to_json(), out)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _render(doc: dict[str, Any], fmt: Format) -> None:
    if fmt is Format.json:
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
        return
    if fmt in (Format.ndjson, Format.csv):
        render_rows(doc["queues"], fmt, columns=DIFF_QUEUE)
        return
    summary = {
        "relation": doc["relation"],
        "commonEnd": doc["commonEnd"],
        "commonEndBlank": doc["commonEndBlank"] if doc["commonEndBlank"] is not None else "none",
        "cutSide": doc["cutSide"] or "none",
        "truncateCommand": doc["truncateCommand"] or "none",
    }
    render_mapping(summary, fmt, title="diff")
    sides = [{"side": s.upper()} | {k: v for k, v in doc[s].items()} for s in ("a", "b")]
    for row in sides:
        row["topics"] = ", ".join(row["topics"])
    render_rows(sides, fmt, columns=DIFF_SIDE, title="each side past commonEnd", fit=True)
    if doc["queues"]:
        render_rows(doc["queues"], fmt, columns=DIFF_QUEUE, title="queues", fit=True)
    if doc["damaged"]:
        render_rows(doc["damaged"], fmt, columns=DIFF_DAMAGED, title="damaged records", fit=True)
    for note in doc["notes"]:
        err.print(f"note: {note}")
