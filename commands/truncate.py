"""`rmqstore truncate`: cut a store back at a commit log offset or time, planned first, losing nothing."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from rmqstore.ops import truncate as op

from ._common import TIME_FORMS, QuietOpt, StorePath, err, parse_time_ms, step_hook
from ._options import Changing, Keeping, command
from ._plan import PlanView, plan_view, render_plan, resume_interrupted, show_and_apply

app = typer.Typer()

ToOffsetOpt = Annotated[
    int | None, typer.Option("--to-offset", help="Commit log offset to cut at: a record boundary (diff's commonEnd).")
]
ToTimeOpt = Annotated[
    str | None, typer.Option("--to-time", help=f"Cut at the first record stored at or after this time ({TIME_FORMS}).")
]
EXAMPLES = """Examples:
  rmqstore diff /data/new-master/store /data/old-master/store
  rmqstore truncate /data/old-master/store --to-offset 76189 --dry-run
  rmqstore truncate STORE --to-time 2026-11-23T04:30:00Z"""
_LOST_COLUMNS = ["file", "commitLogOffset", "topic", "queueId", "queueOffset", "keys", "msgId", "storeTimestamp"]


@command(app, "truncate", Changing, Keeping, epilog=EXAMPLES)
def truncate_command(
    store: StorePath,
    to_offset: ToOffsetOpt = None,
    to_time: ToTimeOpt = None,
    quiet: QuietOpt = False,
    *,
    changing: Changing,
    keeping: Keeping,
) -> None:
    """Cut a store back at a commit log offset or time, with its consume queues, index and checkpoint.

    --to-offset must be a record boundary (refused with the nearest ones, exit 2); --to-time cuts at the
    first record stored at or after the time. The commit log tail is zeroed and the files after it
    deleted; consume queue, batch consume queue and LMQ units and index entries at or past the cut are
    removed (each index header's endPhyOffset and end time back on the last kept entry); the checkpoint
    keeps no timestamp after the last kept record. Every removed byte is first saved in a quarantine
    folder with a manifest.json saying how to put it back; a killed run finishes when run again. On a
    DLedger store the cut is at an entry boundary, and the DLedger index units and the member checkpoint
    (endIndex, committedIndex) are cut to match.
    """
    time_ms = parse_time_ms(to_time) if to_time is not None else None
    with changing.open(store, "truncate") as st:
        plan = op.pending_plan(st.root)
        resuming = plan is not None
        if plan is not None:
            err.print("an interrupted truncate is pending: resuming its journal (options of this run are ignored)")
        else:
            now_ms = int(time.time() * 1000)
            plan = op.plan_truncate(
                st,
                now_ms=now_ms,
                to_offset=to_offset,
                to_time_ms=time_ms,
                quarantine=keeping.quarantine,
                use_quarantine=keeping.keep,
            )
        for note in plan.notes:
            err.print(f"note: {note}")
        view = _view(plan)
        if plan.is_empty:
            render_plan(view, changing.format)
            if not quiet:
                err.print(f"nothing to do: the commit log ends at {plan.data_end}")
            return

        def apply() -> tuple[op.TruncateResult, dict[str, Any]]:
            if resuming:
                resumed = resume_interrupted(st, "truncate", dry_run=False)
                assert resumed is not None
                result: op.TruncateResult = resumed.outcome
            else:
                result = op.apply_truncate(st, plan, on_step=step_hook())
            return result, result.to_json()

        result = show_and_apply(view, changing.format, dry_run=changing.dry_run, apply=apply, ask=changing.ask)
        if result is not None and not quiet:
            where = f"; removed bytes are in {result.quarantine_dir}" if result.quarantine_dir else ""
            err.print(f"truncated: the commit log ends at {plan.to_offset}{where}")


def _view(plan: op.TruncatePlan) -> PlanView:
    return plan_view(plan, {"recordsRemoved": (_LOST_COLUMNS, "records removed")}, with_plan=True)
