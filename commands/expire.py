"""`rmqstore expire`: delete expired commit log, consume queue and index files as the broker does."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore import expire as op
from rmqstore.timeparse import format_time_ms

from ._common import (
    BrokerConfigOpt,
    BrokerVersionOpt,
    DryRunOpt,
    Format,
    FormatOpt,
    StorePath,
    default_format,
    err,
    escape,
    parse_time_ms,
    render_rows,
    reports_errors,
    step_hook,
)

app = typer.Typer()

# The crontab line shown in the help (and so in the man page); tests run exactly this command.
CRONTAB_EXAMPLE = (
    "*/10 4 * * * rmqstore expire /data/rocketmq/store --broker-config /opt/rocketmq/conf/broker.conf "
    "--format json >> /var/log/rmqstore-expire.log 2>&1"
)

_HELP = """Delete expired commit log, consume queue and index files, as the broker's clean task does.

One run is one pass of the broker's CleanCommitLogService and CleanConsumeQueueService.
Commit log files are deleted when it is a deleteWhen hour, when the disk is above
diskMaxUsedSpaceRatio, or with --force (what mqadmin deleteExpiredCommitLog does): a file goes
when its mtime is fileReservedTime hours old (any file when the disk is above the forced-clean
level and cleanFileForciblyEnable is on), oldest first, never the newest file, stopping at the
first file kept and after deleteFileBatchMax files. Then go every consume queue file whose last
entry is below the new commit log min offset and every index file whose endPhyOffset is below
it, never a queue's or the index's last file.

Settings come from broker.conf (--broker-config), read as the --broker-version reads it; the
options override it. Disk usage is measured on the file systems of the commit log and consume
queue directories. A store a running broker holds is refused: the broker cleans it itself.

Output: one line per file deleted (plain, ndjson; table and csv at the end) or one JSON object
per run (json), and nothing at all when there is nothing to do, unless -v.
"""

_EXIT_STATUS = "\n".join(f"  {code:<4d}{what}" for code, what in op.EXIT_CODES.items())
_EPILOG = f"""Run it from cron inside a deleteWhen hour (local time). Each run deletes at most
deleteFileBatchMax commit log files, so run it several times within the hour if more files
expire per day. cron's PATH is /usr/bin:/bin: give rmqstore's full path or set PATH.

  {CRONTAB_EXAMPLE}

What the 04:30 run would do tonight, changing nothing:

  rmqstore expire /data/rocketmq/store --now 2026-11-23T04:30 --dry-run -v

Exit status:
{_EXIT_STATUS}
"""


def _emit_line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _verb(dry_run: bool, quarantine: Path | None) -> str:
    if dry_run:
        return "would delete"
    return "moved" if quarantine else "deleted"


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _action_row(a: op.FileAction, verb: str, at_ms: int) -> dict[str, Any]:
    return {"time": format_time_ms(at_ms), "action": verb, **a.to_json()}


def _action_line(a: op.FileAction, verb: str, at_ms: int) -> str:
    return f"{format_time_ms(at_ms)} {verb} {a.rel_path} ({a.size} bytes, mtime {format_time_ms(a.mtime_ms)}): {a.why}"


@app.command("expire", help=_HELP, epilog=_EPILOG)
@reports_errors
def expire_command(
    store: StorePath,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    file_reserved_time: Annotated[
        int | None,
        typer.Option("--file-reserved-time", min=0, help="fileReservedTime: hours to keep a file. Broker default 72."),
    ] = None,
    delete_when: Annotated[
        str | None,
        typer.Option("--delete-when", help="deleteWhen: local hours to clean, ';'-separated. Broker default 04."),
    ] = None,
    disk_max_used_space_ratio: Annotated[
        int | None,
        typer.Option(
            "--disk-max-used-space-ratio", help="diskMaxUsedSpaceRatio, percent, clamped to 10..95. Broker default 75."
        ),
    ] = None,
    disk_space_clean_forcibly_ratio: Annotated[
        float | None,
        typer.Option(
            "--disk-space-clean-forcibly-ratio",
            help="Forced-clean level (JVM property rocketmq.broker.diskSpaceCleanForciblyRatio; 5.x key). Broker default 0.85.",
        ),
    ] = None,
    disk_space_warning_level_ratio: Annotated[
        float | None,
        typer.Option(
            "--disk-space-warning-level-ratio",
            help="Disk-full level (JVM property rocketmq.broker.diskSpaceWarningLevelRatio; 5.x key). Broker default 0.90.",
        ),
    ] = None,
    clean_file_forcibly: Annotated[
        bool | None,
        typer.Option(
            "--clean-file-forcibly/--no-clean-file-forcibly",
            help="cleanFileForciblyEnable: above the forced-clean level delete files whatever their age. Broker default on.",
        ),
    ] = None,
    delete_file_batch_max: Annotated[
        int | None,
        typer.Option(
            "--delete-file-batch-max",
            min=1,
            help="deleteFileBatchMax: commit log files per run. Broker default 10 (a 4.x broker ignores the key).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Manual mode (mqadmin deleteExpiredCommitLog): clean at any hour.")
    ] = False,
    now: Annotated[
        str | None, typer.Option("--now", help="Evaluate at this time instead of now (epoch ms or ISO-8601).")
    ] = None,
    disk_used_ratio: Annotated[
        float | None,
        typer.Option(
            "--disk-used-ratio",
            min=0.0,
            max=1.0,
            help="Use this used-space ratio for the disks instead of measuring them (what-if, tests).",
        ),
    ] = None,
    quarantine: Annotated[
        Path | None,
        typer.Option(
            "--quarantine", help="Move the files to DIR/expire-<time>/ (with manifest.json) instead of deleting."
        ),
    ] = None,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,  # type: ignore[assignment]
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also say why when there is nothing to do.")] = False,
) -> None:
    fmt = default_format(fmt)
    now_ms = parse_time_ms(now) if now is not None else _wall_ms()
    with op.open_for_expire(store, broker_config=broker_config, broker=broker_version, dry_run=dry_run) as st:
        settings = op.expire_settings(
            st.config,
            file_reserved_time_h=file_reserved_time,
            delete_when=delete_when,
            disk_max_used_space_ratio=disk_max_used_space_ratio,
            clean_file_forcibly_enable=clean_file_forcibly,
            delete_file_batch_max=delete_file_batch_max,
            disk_space_warning_level_ratio=disk_space_warning_level_ratio,
            disk_space_clean_forcibly_ratio=disk_space_clean_forcibly_ratio,
        )
        disk = (lambda _p: disk_used_ratio) if disk_used_ratio is not None else op.measured_disk_usage(settings.broker)
        if not dry_run:
            finished = op.finish_pending(st.root, on_step=step_hook())
            if finished is not None:
                err.print(escape(f"finished an interrupted expire run: {len(finished.done)} file(s) removed"))
        plan = op.plan_expire(st, now_ms=now_ms, settings=settings, force=force, disk_usage=disk)
        for w in plan.warnings:
            err.print(f"[yellow]warning:[/] {escape(w)}")
        if verbose:
            err.print(escape(f"{st.root}: {op.describe(plan)}"))
            for n in plan.notes:
                err.print(escape(f"note: {n}"))
        verb = _verb(dry_run, quarantine)

        rows: list[dict[str, Any]] = []

        def on_action(a: op.FileAction) -> None:  # one log line per file, as it goes
            at_ms = now_ms if dry_run else _wall_ms()
            rows.append(_action_row(a, verb, at_ms))
            if fmt is Format.plain:
                _emit_line(_action_line(a, verb, at_ms))
            elif fmt is Format.ndjson:
                _emit_line(json.dumps(rows[-1], ensure_ascii=False, separators=(",", ":")))

        if dry_run:
            done = plan.actions
            for a in done:
                on_action(a)
            result = None
        else:
            result = op.apply_expire(
                plan, quarantine=quarantine, config=st.config, on_action=on_action, on_step=step_hook()
            )
            done = result.done
        ratio_after, over = op.over_forced_ratio(plan, st.config, disk)
    code = op.exit_code(plan, over_forced=over)
    if fmt is Format.json and (done or verbose or over):
        doc = plan.to_json()
        doc.update(
            dryRun=dry_run,
            done=rows,
            quarantine=str(result.quarantine_dir) if result and result.quarantine_dir else None,
            diskUsedRatioAfter=round(ratio_after, 4),
            overForcedRatio=over,
            exitCode=code,
        )
        _emit_line(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
    elif fmt in (Format.table, Format.csv) and done:
        render_rows(
            rows, fmt, columns=["action", "kind", "path", "size", "mtime", "reason"], title=str(plan.store_root)
        )
    if result is not None and result.quarantine_dir is not None:
        err.print(escape(f"moved {len(done)} file(s) to {result.quarantine_dir} (see manifest.json there)"))
    if over:
        err.print(
            "[bold yellow]warning:[/] "
            + escape(
                f"commit log disk {op.percent(ratio_after)} used after the run, above the forced-clean level "
                f"{op.percent(plan.settings.disk_space_clean_forcibly_ratio)}"
            )
        )
    if code:
        raise typer.Exit(code)
