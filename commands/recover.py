"""`rmqstore recover`: the broker's crash recovery, offline, planned first, losing nothing."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from rmqstore.codec.topic import skipped_lines
from rmqstore.ops import recover as rec

from ._common import QuietOpt, StorePath, err, progress_bar, step_hook
from ._options import Changing, Keeping, command
from ._plan import PlanView, plan_view, render_plan, resume_interrupted, show_and_apply

app = typer.Typer()


CheckCrcOpt = Annotated[
    bool | None,
    typer.Option("--check-crc/--no-check-crc", help="Verify body CRCs (default: checkCRCOnRecover, true)."),
]
RebuildIndexOpt = Annotated[bool, typer.Option("--rebuild-index", help="Rebuild every index file from the commit log.")]
RebuildCqOpt = Annotated[
    bool, typer.Option("--rebuild-consumequeue", help="Rebuild every consume queue from the commit log.")
]


def _plan(st: Any, quiet: bool, dry_run: bool, **options: Any) -> tuple[rec.RecoverPlan, bool]:
    """The pending plan of an interrupted run (resumed), else a new plan; and whether it resumes."""
    plan = rec.pending_plan(st.root)
    if plan is not None:
        err.print("an interrupted recovery is pending: resuming its journal (options of this run are ignored)")
        return plan, True
    with progress_bar(_walk_size(st), "checking commit log", quiet=quiet) as advance:
        now_ms = int(time.time() * 1000)
        # a dry run keeps no dispatch columns: nothing applies them, and nothing is written for them
        plan = rec.plan_recover_detected(st, now_ms=now_ms, progress=advance, keep_columns=not dry_run, **options)
    return plan, False


@command(app, "recover", Changing, Keeping)
def recover_command(
    store: StorePath,
    check_crc: CheckCrcOpt = None,
    rebuild_index: RebuildIndexOpt = False,
    rebuild_consumequeue: RebuildCqOpt = False,
    quiet: QuietOpt = False,
    *,
    changing: Changing,
    keeping: Keeping,
) -> None:
    """Recover a store after a crash exactly as the broker would at start, showing the plan first.

    Abort file present: abnormal recovery (start file from the checkpoint, re-dispatch of consume
    queue and index entries); absent: normal recovery. The dirty commit log tail is zeroed, files
    past it deleted, consume queues cut, the checkpoint rewritten and abort removed. Every removed
    byte range and file is first copied to a quarantine folder with a manifest.json saying how to
    put it back. A run that is killed can be run again: it resumes from its journal.
    """
    fmt = changing.format
    result = None
    with changing.open(store, "recover") as st:
        plan, resuming = _plan(
            st,
            quiet,
            changing.dry_run,
            check_crc=check_crc,
            rebuild_index=rebuild_index,
            rebuild_consume_queue=rebuild_consumequeue,
            quarantine=keeping.quarantine,
            use_quarantine=keeping.keep,
        )
        view = _view(plan)
        for note in plan.notes:
            err.print(f"note: {note}")
        if plan.is_empty:
            render_plan(view, fmt)
            if not quiet:
                err.print("nothing to do: the broker would start on this store as it is")
            return
        total = (plan.dispatch.to_phy - plan.dispatch.from_phy) if plan.dispatch else 0

        def apply() -> tuple[rec.RecoverResult, dict[str, Any]]:
            with progress_bar(total, "re-dispatching", quiet=quiet) as advance:
                if resuming:  # the journaled plan, finished as every command finishes an interrupted run
                    resumed = resume_interrupted(st, "recover", dry_run=False, progress=advance)
                    assert resumed is not None
                    result: rec.RecoverResult = resumed.outcome
                else:
                    result = rec.apply_recover(st, plan, progress=advance, on_step=step_hook())
            return result, result.to_json()

        result = show_and_apply(view, fmt, dry_run=changing.dry_run, apply=apply, ask=changing.ask)
        for stats in (result.dispatch, result.rebuild) if result is not None else ():
            for line in skipped_lines((stats or {}).get("skippedQueues", [])):
                err.note(line)
        if result is not None and not quiet:
            what = "resumed and finished" if resuming else "recovered"
            where = f"; removed bytes are in {result.quarantine_dir}" if result.quarantine_dir else ""
            err.print(f"{what}: commit log ends at {plan.process_offset}{where}")
    if result is not None and result.exit_code:
        raise typer.Exit(result.exit_code)


def _walk_size(st: Any) -> int:
    segs, _ = st.commitlog_segments()
    return sum(s.size for s in segs[-3:]) if not st.abort_exists() else sum(s.size for s in segs)


_LOST_COLUMNS = ["file", "commitLogOffset", "topic", "queueId", "queueOffset", "keys", "msgId", "torn"]
_TABLES = {"recordsRemoved": (_LOST_COLUMNS, "records removed"), "losses": (None, "what the broker's recovery loses")}


def _view(plan: rec.RecoverPlan) -> PlanView:
    """The recovery plan: its actions, the facts they do not carry (records lost, checkpoint) and the losses."""
    return plan_view(plan, _TABLES, with_plan=True)
