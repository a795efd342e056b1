"""`rmqstore expire`: delete expired commit log, consume queue and index files as the broker does."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.ops import expire as op
from rmqstore.walk import expiry

from ._common import Format, StorePath, err, escape, format_time_ms, parse_time_ms, render_rows, step_hook
from ._options import Changing, command
from ._plan import PlanView, at_terminal, confirmed, plan_view, render_plan, resume_interrupted

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

On a DLedger store (enableDLegerCommitLog) the data files follow the DLedger member's own clean
service: it runs in a deleteWhen hour or when a disk is above diskMaxUsedSpaceRatio (never for
--force, which the broker's manual deletion does not pass on), keeps a data file fileReservedTime
+ 1 hours (any age above DLedger's forced-clean level 0.85 with cleanFileForciblyEnable), never the
last one, at most 10 per run, and drops the DLedger index files before the new first entry. A
migrated store's old commitlog/ files go first, by the broker's rules; while any is left DLedger
deletes nothing younger than 10 years. The member's checkpoint is left as it is.

Settings come from broker.conf (--broker-config), read as the --broker-version reads it; the
options override it. Disk usage is measured on the file systems of the commit log and consume
queue directories. A store a running broker holds is refused: the broker cleans it itself.

Output: one line per file deleted (plain, ndjson; table and csv at the end) or one JSON object
per run (json), and nothing at all when there is nothing to do, unless -v.
"""


def _exit_status_lines() -> str:
    codes = dict(op.EXIT_CODES)
    codes[op.EXIT_NOTHING_TO_DO] = "success: files deleted or nothing to do"
    codes[op.EXIT_DELETED] = (
        "with --detailed-exitcode only: " + codes[op.EXIT_DELETED] + " (0 then means nothing to do)"
    )
    return "\n".join(f"  {code:<4d}{what}" for code, what in codes.items())


_EXIT_STATUS = _exit_status_lines()
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


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _action_row(a: expiry.FileAction, verb: str, at_ms: int) -> dict[str, Any]:
    return {"time": format_time_ms(at_ms), "action": verb, **a.shown()}


def _action_line(a: expiry.FileAction, verb: str, at_ms: int) -> str:
    return f"{format_time_ms(at_ms)} {verb} {a.rel_path} ({a.size} bytes, mtime {format_time_ms(a.mtime_ms)}): {a.why}"


FileReservedTimeOpt = Annotated[
    int | None,
    typer.Option("--file-reserved-time", min=0, help="fileReservedTime: hours to keep a file. Broker default 72."),
]
DeleteWhenOpt = Annotated[
    str | None,
    typer.Option("--delete-when", help="deleteWhen: local hours to clean, ';'-separated. Broker default 04."),
]
DiskMaxUsedSpaceRatioOpt = Annotated[
    int | None,
    typer.Option(
        "--disk-max-used-space-ratio", help="diskMaxUsedSpaceRatio, percent, clamped to 10..95. Broker default 75."
    ),
]
DiskSpaceCleanForciblyRatioOpt = Annotated[
    float | None,
    typer.Option(
        "--disk-space-clean-forcibly-ratio",
        help="Forced-clean level (JVM property rocketmq.broker.diskSpaceCleanForciblyRatio; 5.x key). Broker default 0.85.",
    ),
]
DiskSpaceWarningLevelRatioOpt = Annotated[
    float | None,
    typer.Option(
        "--disk-space-warning-level-ratio",
        help="Disk-full level (JVM property rocketmq.broker.diskSpaceWarningLevelRatio; 5.x key). Broker default 0.90.",
    ),
]
CleanFileForciblyOpt = Annotated[
    bool | None,
    typer.Option(
        "--clean-file-forcibly/--no-clean-file-forcibly",
        help="cleanFileForciblyEnable: above the forced-clean level delete files whatever their age. Broker default on.",
    ),
]
DeleteFileBatchMaxOpt = Annotated[
    int | None,
    typer.Option(
        "--delete-file-batch-max",
        min=1,
        help="deleteFileBatchMax: commit log files per run. Broker default 10 (a 4.x broker ignores the key).",
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Manual mode (mqadmin deleteExpiredCommitLog): clean at any hour.")
]
NowOpt = Annotated[
    str | None,
    typer.Option(
        "--now",
        help="Evaluate at this time instead of now (epoch s or ms (by magnitude), now, -1h, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS).",
    ),
]
DiskUsedRatioOpt = Annotated[
    float | None,
    typer.Option(
        "--disk-used-ratio",
        min=0.0,
        max=1.0,
        help="Use this used-space ratio for the disks instead of measuring them (what-if, tests).",
    ),
]
QuarantineOpt = Annotated[
    Path | None,
    typer.Option("--quarantine", help="Move the files to DIR/expire-<time>/ (with manifest.json) instead of deleting."),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Also say why when there is nothing to do.")]
DetailedExitcodeOpt = Annotated[
    bool,
    typer.Option(
        "--detailed-exitcode",
        help="Exit 9 when files were deleted (a dry run: would be), 0 when there was nothing to do. "
        "Without it a successful run exits 0 either way, as cron and job schedulers expect.",
    ),
]


@command(app, "expire", Changing, help=_HELP, epilog=_EPILOG)
def expire_command(
    store: StorePath,
    file_reserved_time: FileReservedTimeOpt = None,
    delete_when: DeleteWhenOpt = None,
    disk_max_used_space_ratio: DiskMaxUsedSpaceRatioOpt = None,
    disk_space_clean_forcibly_ratio: DiskSpaceCleanForciblyRatioOpt = None,
    disk_space_warning_level_ratio: DiskSpaceWarningLevelRatioOpt = None,
    clean_file_forcibly: CleanFileForciblyOpt = None,
    delete_file_batch_max: DeleteFileBatchMaxOpt = None,
    force: ForceOpt = False,
    now: NowOpt = None,
    disk_used_ratio: DiskUsedRatioOpt = None,
    quarantine: QuarantineOpt = None,
    verbose: VerboseOpt = False,
    detailed_exitcode: DetailedExitcodeOpt = False,
    *,
    changing: Changing,
) -> None:
    fmt, dry_run = changing.format, changing.dry_run
    now_ms = parse_time_ms(now) if now is not None else _wall_ms()
    with op.open_for_expire(
        store, broker_config=changing.broker_config, broker=changing.broker_version, dry_run=dry_run
    ) as st:
        settings = expiry.expire_settings(
            st.config,
            file_reserved_time_h=file_reserved_time,
            delete_when=delete_when,
            disk_max_used_space_ratio=disk_max_used_space_ratio,
            clean_file_forcibly_enable=clean_file_forcibly,
            delete_file_batch_max=delete_file_batch_max,
            disk_space_warning_level_ratio=disk_space_warning_level_ratio,
            disk_space_clean_forcibly_ratio=disk_space_clean_forcibly_ratio,
        )
        disk = (
            (lambda _p: disk_used_ratio) if disk_used_ratio is not None else expiry.measured_disk_usage(settings.broker)
        )
        resumed = resume_interrupted(st, "expire", dry_run=dry_run)
        if resumed is not None:
            err.print(escape(resumed.message))
        measured = disk_used_ratio is None  # measured: each clean service computes the ratio its own way
        plan = expiry.plan_expire(
            st,
            now_ms=now_ms,
            settings=settings,
            force=force,
            disk_usage=None if measured else disk,
            quarantine=quarantine,
        )
        _notes(plan, st.root, verbose)
        if dry_run:
            ratio, over = op.over_forced_ratio(plan, st.config, disk)
            code = op.exit_code(plan, over_forced=over, detailed=detailed_exitcode)
            if plan.actions or verbose or over:
                render_plan(_view(plan, ratio, over, code), fmt, one_line=True)
        elif plan.actions and changing.ask and at_terminal() and not _confirmed(plan, st, disk, fmt):
            return
        else:
            code, ratio, over = _run(plan, st, disk, fmt, verbose=verbose, detailed=detailed_exitcode)
    if over:
        err.warning(
            f"commit log disk {expiry.percent(ratio)} used after the run, above the forced-clean level "
            f"{expiry.percent(expiry.forced_clean_level(plan))}"
        )
    if code:
        raise typer.Exit(code)


def _confirmed(plan: expiry.ExpirePlan, st: Any, disk: Any, fmt: Format) -> bool:
    """At a terminal: the plan as a dry run shows it, then ``Apply?``."""
    ratio, over = op.over_forced_ratio(plan, st.config, disk)
    render_plan(_view(plan, ratio, over, op.exit_code(plan, over_forced=over, detailed=False)), fmt)
    return confirmed()


def _notes(plan: expiry.ExpirePlan, root: Path, verbose: bool) -> None:
    for w in plan.warnings:
        err.warning(w)
    if verbose:
        err.print(f"{root}: {expiry.describe(plan)}")
        for n in plan.notes:
            err.print(f"note: {n}")


def _view(plan: expiry.ExpirePlan, ratio: float, over: bool, code: int) -> PlanView:
    """The files to delete and the facts the actions do not carry: the new min offset, the disk, the exit status."""
    kinds = {k: sum(a.kind == k for a in plan.actions) for k in ("commitlog", "dledger-index", "consumequeue", "index")}
    summary = {
        "store": str(plan.store_root),
        "now": format_time_ms(plan.now_ms),
        "minPhyOffset": plan.min_phy_offset,
        "newMinPhyOffset": plan.new_min_phy_offset,
        "commitLogStop": plan.commitlog_stop,
        "files": kinds,
        "freedBytes": plan.freed_size,
        "quarantine": f"{plan.quarantine}/expire-<time>/" if plan.quarantine else "none: the files are deleted",
        "diskUsedRatio": round(ratio, 4),
        "overForcedRatio": over,
        "dryRun": True,
        "exitCode": code,
    }
    return plan_view(plan, {}, summary=summary)


def _run(
    plan: expiry.ExpirePlan, st: Any, disk: Any, fmt: Format, *, verbose: bool, detailed: bool
) -> tuple[int, float, bool]:
    """Apply the plan with one log line per file as it goes (the cron log); returns (exit code, disk ratio, over)."""
    verb = "moved" if plan.quarantine else "deleted"
    rows: list[dict[str, Any]] = []

    def on_action(a: expiry.FileAction) -> None:
        at_ms = _wall_ms()
        rows.append(_action_row(a, verb, at_ms))
        if fmt is Format.plain:
            _emit_line(escape(_action_line(a, verb, at_ms)))  # file names are data: one line each
        elif fmt is Format.ndjson:
            _emit_line(json.dumps(rows[-1], ensure_ascii=False, separators=(",", ":")))

    result = op.apply_expire(plan, config=st.config, on_action=on_action, on_step=step_hook())
    ratio, over = op.over_forced_ratio(plan, st.config, disk)
    code = op.exit_code(plan, over_forced=over, detailed=detailed)
    if fmt is Format.json and (result.done or verbose or over):
        doc = plan.summary()
        doc.update(
            dryRun=False,
            done=rows,
            quarantine=str(result.quarantine_dir) if result.quarantine_dir else None,
            diskUsedRatioAfter=round(ratio, 4),
            overForcedRatio=over,
            exitCode=code,
        )
        _emit_line(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
    elif fmt in (Format.table, Format.csv) and result.done:
        render_rows(
            rows, fmt, columns=["action", "kind", "path", "size", "mtime", "reason"], title=str(plan.store_root)
        )
    if result.quarantine_dir is not None:
        err.print(f"moved {len(result.done)} file(s) to {result.quarantine_dir} (see manifest.json there)")
    return code, ratio, over
