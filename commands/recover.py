"""`rmqstore recover`: the broker's crash recovery, offline, planned first, losing nothing."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore import recover as rec
from rmqstore.detect import plan_for_detected
from rmqstore.errors import InputError
from rmqstore.store import locked_error, open_store

from ._common import (
    BrokerConfigOpt,
    BrokerVersionOpt,
    DryRunOpt,
    Format,
    FormatOpt,
    QuietOpt,
    StorePath,
    default_format,
    err,
    progress_bar,
    render_mapping,
    render_rows,
    reports_errors,
    step_hook,
)

app = typer.Typer()


@app.command("recover")
@reports_errors
def recover_command(
    store: StorePath,
    dry_run: DryRunOpt = False,
    check_crc: Annotated[
        bool | None,
        typer.Option("--check-crc/--no-check-crc", help="Verify body CRCs (default: checkCRCOnRecover, true)."),
    ] = None,
    rebuild_index: Annotated[
        bool, typer.Option("--rebuild-index", help="Rebuild every index file from the commit log.")
    ] = False,
    rebuild_consumequeue: Annotated[
        bool, typer.Option("--rebuild-consumequeue", help="Rebuild every consume queue from the commit log.")
    ] = False,
    quarantine: Annotated[
        Path | None,
        typer.Option("--quarantine", help="Folder for removed bytes (default: STORE/../<name>.quarantine/<time>)."),
    ] = None,
    no_quarantine: Annotated[
        bool, typer.Option("--no-quarantine", help="Do not keep the removed bytes and files.")
    ] = False,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    fmt: FormatOpt = None,  # type: ignore[assignment]
    quiet: QuietOpt = False,
) -> None:
    """Recover a store after a crash exactly as the broker would at start, showing the plan first.

    Abort file present: abnormal recovery (start file from the checkpoint, re-dispatch of consume
    queue and index entries); absent: normal recovery. The dirty commit log tail is zeroed, files
    past it deleted, consume queues cut, the checkpoint rewritten and abort removed. Every removed
    byte range and file is first copied to a quarantine folder with a manifest.json saying how to
    put it back. A run that is killed can be run again: it resumes from its journal.
    """
    fmt = default_format(fmt)
    if quarantine is not None and no_quarantine:
        raise InputError("--quarantine and --no-quarantine exclude each other")
    with open_store(
        store, broker_config=broker_config, writable=not dry_run, broker=broker_version, operation="recover"
    ) as st:
        if dry_run and st.lock_holder() is not None:
            raise locked_error(st.config.lock_path, st.lock_holder())
        plan = rec.pending_plan(st.root)
        resuming = plan is not None
        if plan is None:
            with progress_bar(_walk_size(st), "checking commit log", quiet=quiet) as advance:
                now_ms = int(time.time() * 1000)
                plan = plan_for_detected(
                    st,
                    lambda s: rec.plan_recover(
                        s,
                        now_ms=now_ms,
                        check_crc=check_crc,
                        rebuild_index=rebuild_index,
                        rebuild_consume_queue=rebuild_consumequeue,
                        quarantine=quarantine,
                        use_quarantine=not no_quarantine,
                        progress=advance,
                    ),
                    "recover",
                )
        else:
            err.print("an interrupted recovery is pending: resuming its journal (options of this run are ignored)")
        if dry_run or plan.is_empty:
            _render(plan, None, fmt)
            if plan.is_empty and not quiet:
                err.print("nothing to do: the broker would start on this store as it is")
            return
        total = (plan.dispatch.to_phy - plan.dispatch.from_phy) if plan.dispatch else 0
        with progress_bar(total, "re-dispatching", quiet=quiet) as advance:
            result = rec.apply_recover(st, plan, progress=advance, on_step=step_hook())
        _render(plan, result, fmt)
        if not quiet:
            what = "resumed and finished" if resuming else "recovered"
            where = f"; removed bytes are in {result.quarantine_dir}" if result.quarantine_dir else ""
            err.print(f"{what}: commit log ends at {plan.process_offset}{where}")


def _walk_size(st: Any) -> int:
    segs, _ = st.commitlog_segments()
    return sum(s.size for s in segs[-3:]) if not st.abort_exists() else sum(s.size for s in segs)


def _render(plan: rec.RecoverPlan, result: rec.RecoverResult | None, fmt: Format) -> None:
    if fmt in (Format.json, Format.ndjson):
        out = plan.to_json()
        if result is not None:
            out = {"plan": out, "result": result.to_json()}
        sys.stdout.write(json.dumps(out, ensure_ascii=False, indent=None if fmt is Format.ndjson else 2) + "\n")
        return
    summary = {
        "path": f"{plan.path} ({plan.reason})",
        "start file": plan.start_file,
        "processOffset": plan.process_offset,
        "stop": plan.stop,
        "check CRC": plan.check_crc,
        "re-dispatch": (
            f"{plan.dispatch.records} records, phy {plan.dispatch.from_phy}..{plan.dispatch.to_phy}"
            if plan.dispatch
            else "none"
        ),
        "rebuild": ", ".join(
            n for n, on in (("consumequeue", plan.rebuild_consume_queue), ("index", plan.rebuild_index)) if on
        )
        or "none",
        "checkpoint": _cp_line(plan, result),
        "remove abort": plan.remove_abort,
        "records lost": plan.records_lost,
        "quarantine": plan.quarantine_dir or "none",
        "steps": ", ".join(plan.steps()) or "none",
    }
    render_mapping(summary, fmt, title="recovery plan")
    if plan.actions:
        rows = [
            {
                "step": a.step,
                "action": a.verb,
                "file": a.path,
                "from": a.from_pos,
                "to": a.to_pos,
                "bytes": a.size,
                "records": a.records_total,
                "entries": a.entries_total,
                "why": a.why,
            }
            for a in plan.actions
        ]
        render_rows(rows, fmt, title="removals")
    lost = [r.to_json() | {"file": a.path} for a in plan.actions for r in a.records]
    if lost:
        cols = ["file", "commitLogOffset", "topic", "queueId", "queueOffset", "keys", "msgId", "torn"]
        render_rows(lost, fmt, columns=cols, title="records removed")
    if plan.losses:
        rows = [
            {"what": x.what, "count": x.count, "repaired by": x.repaired_by, "detail": x.detail} for x in plan.losses
        ]
        render_rows(rows, fmt, title="what the broker's recovery loses")
    for note in plan.notes:
        err.print(f"note: {note}")


def _cp_line(plan: rec.RecoverPlan, result: rec.RecoverResult | None) -> str:
    after = result.checkpoint if result is not None and result.checkpoint else plan.checkpoint_after
    before = plan.checkpoint_before
    keys = ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")
    b = "missing" if before is None else "/".join(str(before[k]) for k in keys)
    a = "/".join(str(after[k]) for k in keys)
    if not plan.write_checkpoint:
        return f"unchanged ({b})"
    pending = " (index time set by the re-dispatch)" if plan.checkpoint_index_from_dispatch and result is None else ""
    return f"{b} -> {a}{pending}"
