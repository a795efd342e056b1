"""`rmqstore offsets`: consumer progress offline, and rewriting committed offsets."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from rmqstore import offsets as op
from rmqstore.errors import InputError
from rmqstore.store import open_store

from ._common import (
    BrokerConfigOpt,
    BrokerVersionOpt,
    DryRunOpt,
    Format,
    StorePath,
    default_format,
    parse_time_ms,
    render_rows,
    reports_errors,
)


class _ShowByDefault(TyperGroup):
    """``rmqstore offsets STORE`` means ``rmqstore offsets show STORE``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="offsets",
    cls=_ShowByDefault,
    no_args_is_help=True,
    help="Show consumer progress: `rmqstore offsets STORE` (committed offset, queue min/max, lag).\n\n"
    "Set committed offsets: `rmqstore offsets set STORE --group G --topic T ...`.",
)

FmtOpt = Annotated[Format | None, typer.Option("--format", "-f", help="Output format.")]
GroupFilter = Annotated[str | None, typer.Option("--group", "-g", help="Only this consumer group.")]
TopicFilter = Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")]
PROGRESS_COLUMNS = ["group", "topic", "queueId", "consumerOffset", "minOffset", "maxOffset", "lag"]
CHANGE_COLUMNS = ["group", "topic", "queueId", "before", "after", "minOffset", "maxOffset"]


@app.command("show")
@reports_errors
def show_command(
    store: StorePath,
    group: GroupFilter = None,
    topic: TopicFilter = None,
    broker_config: BrokerConfigOpt = None,
    fmt: FmtOpt = None,
) -> None:
    """Show every group's committed offset, the queue's min and max offsets and the lag.

    Like mqadmin consumerProgress, from config/consumerOffset.json (or its .bak) and the consume queues.

    This is the default subcommand: `rmqstore offsets STORE` is `rmqstore offsets show STORE`.
    """
    fmt = default_format(fmt)
    with open_store(store, broker_config=broker_config) as st:
        rows = op.consumer_progress(st, group=group, topic=topic)
    data = [r.to_json() for r in rows]
    totals = op.progress_totals(rows)
    if fmt is Format.json:
        sys.stdout.write(json.dumps({"offsets": data, "totals": totals}, indent=2) + "\n")
        return
    render_rows(data, fmt, columns=PROGRESS_COLUMNS, title="consumer progress")
    if fmt in (Format.table, Format.plain) and data:
        star = [{k: "*" if v is None else v for k, v in t.items()} for t in totals]  # None = all
        render_rows(star, fmt, columns=["group", "topic", "lag"], title="lag totals")


@app.command("set")
@reports_errors
def set_command(
    store: StorePath,
    group: Annotated[str, typer.Option("--group", "-g", help="Consumer group.", show_default=False)],
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic.", show_default=False)],
    queue: Annotated[int | None, typer.Option("--queue", help="Queue id (default: every queue).")] = None,
    offset: Annotated[int | None, typer.Option("--offset", help="New committed offset (needs --queue).")] = None,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Set to the queue's min offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Set to the queue's max offset.")] = False,
    to_time: Annotated[
        str | None,
        typer.Option(
            "--to-time",
            help="Set to the broker's offset for this time, as mqadmin resetOffsetByTime (ms, ISO-8601, "
            "yyyy-MM-dd#HH:mm:ss:SSS).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow offsets outside the queue's [min, max].")] = False,
    dry_run: DryRunOpt = False,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = "auto",
    fmt: FmtOpt = None,
) -> None:
    """Rewrite a group's committed offsets in config/consumerOffset.json.

    Written in the broker's exact fastjson form, with the .bak rotation of the given broker version.

    Refused while a broker holds the store's lock, and for offsets outside the queue's min..max unless --force.

    --dry-run prints the before/after table and changes nothing.
    """
    fmt = default_format(fmt)
    chosen = [offset is not None, to_earliest, to_latest, to_time is not None]
    if sum(chosen) != 1:
        raise InputError("give exactly one of --offset, --to-earliest, --to-latest, --to-time")
    mode = ("offset", "earliest", "latest", "time")[chosen.index(True)]
    time_ms = parse_time_ms(to_time) if to_time is not None else None
    with open_store(store, broker_config=broker_config, writable=not dry_run, broker=broker_version) as st:
        plan = op.plan_set_offsets(
            st,
            group=group,
            topic=topic,
            mode=mode,
            queue_id=queue,
            offset=offset,
            time_ms=time_ms,
            force=force,
            broker_version=st.config.broker,
        )
        render_rows([c.to_json() for c in plan.changes], fmt, columns=CHANGE_COLUMNS, title=str(plan.path))
        if not dry_run:
            op.apply_set_offsets(st, plan)
