"""`rmqstore offsets`: consumer progress offline, and rewriting committed offsets."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from rmqstore.errors import InputError
from rmqstore.ops import offsets as op
from rmqstore.store import offsets as store_offsets
from rmqstore.store.offsets import read_consumer_offsets
from rmqstore.timeparse import parse_duration_ms

from ._common import TIME_FORMS, Format, StorePath, err, format_time_ms, parse_time_ms, render_rows, suggest
from ._options import Changing, Reading, TopicFilterOpt, command
from ._plan import plan_view, show_and_apply


class _ShowByDefault(TyperGroup):
    """``rmqstore offsets STORE`` means ``rmqstore offsets show STORE``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            if _looks_like_command(args[0]):  # `offsets lag STORE`: a mistyped subcommand, not a store
                ctx.fail(suggest(args[0], list(self.commands)))
            args = ["show", *args]
        return super().parse_args(ctx, args)


def _looks_like_command(word: str) -> bool:
    """A bare word that names no existing path (a store is a path: `offsets STORE` shows it)."""
    return "/" not in word and word not in (".", "..") and not os.path.exists(word)


app = typer.Typer(
    name="offsets",
    cls=_ShowByDefault,
    no_args_is_help=True,
    help="Show consumer progress: `rmqstore offsets STORE` (committed offset, queue min/max, lag).\n\n"
    "Set committed offsets: `rmqstore offsets set STORE --group G --topic T ...`.",
)

GroupFilter = Annotated[str | None, typer.Option("--group", "-g", help="Only this consumer group.")]
PROGRESS_COLUMNS = [
    "group", "topic", "queueId", "consumerOffset", "minOffset", "maxOffset", "lag", "lastConsumedTimestamp",
    "lastConsumedAt",
]  # fmt: skip
SET_EXAMPLES = """Examples:
  rmqstore offsets set STORE --group G --topic T --to-latest --dry-run
  rmqstore offsets set STORE --group G --shift-by -100
  rmqstore offsets set STORE --all-groups --topic T --by-duration 1h"""
CHANGE_COLUMNS = ["group", "topic", "queueId", "before", "after", "minOffset", "maxOffset"]


@command(app, "show", Reading)
def show_command(
    store: StorePath, group: GroupFilter = None, topic: TopicFilterOpt = None, *, reading: Reading
) -> None:
    """Show every group's committed offset, the queue's min and max offsets, the lag, and when the last consumed message was stored.

    Like mqadmin consumerProgress, from config/consumerOffset.json (or its .bak) and the consume queues; lastConsumedAt is the store time of the message before the committed offset (consumerProgress's LastTime).

    This is the default subcommand: `rmqstore offsets STORE` is `rmqstore offsets show STORE`.
    """
    fmt = reading.format
    totals = store_offsets.LagTotals()
    with reading.open(store) as st:
        table = store_offsets.committed_table(st, group, topic)
        values = _progress(st, table, totals)
        if fmt is Format.ndjson:
            _write_ndjson(values, sys.stdout)
            return
        rows = (dict(zip(PROGRESS_COLUMNS, v, strict=True)) for v in values)  # streamed: one row at a time
        if fmt is Format.json:
            _write_json(rows, totals)
            return
        n = render_rows(rows, fmt, columns=PROGRESS_COLUMNS, title="consumer progress")
    if fmt in (Format.table, Format.plain) and n:
        star = [{k: "*" if v is None else v for k, v in t.items()} for t in totals.rows()]  # None = all
        render_rows(star, fmt, columns=["group", "topic", "lag"], title="lag totals", fit=True)


def _progress(st: Any, table: Any, totals: store_offsets.LagTotals) -> Iterator[tuple[Any, ...]]:
    """The values of each progress row, in ``PROGRESS_COLUMNS`` order; the lag totals as they go."""
    last = store_offsets.last_consumed_times(st, table)
    at = functools.lru_cache(maxsize=4096)(format_time_ms)  # groups share their last consumed records
    add = totals.add_lag
    for g, t, qid, c, lo, hi in store_offsets.progress_tuples(st, table):
        lag = None if c is None else hi - c
        add(g, t, lag or 0)
        ms = last.at(t, qid, c, lo, hi)
        yield g, t, qid, c, lo, hi, lag, ms, "" if ms is None else at(ms)


def _write_ndjson(values: Iterator[tuple[Any, ...]], out: Any) -> None:
    """Progress rows as NDJSON, each line what ``render_rows`` writes for it, made from a template:
    the names repeat (groups, topics, times) and are encoded once each, not once a row."""
    text = functools.lru_cache(maxsize=1 << 16)(json.JSONEncoder(ensure_ascii=False).encode)
    write = out.write
    for g, t, qid, c, lo, hi, lag, ms, when in values:
        write(
            f'{{"group":{text(g)},"topic":{text(t)},"queueId":{qid},"consumerOffset":{_num(c)},'
            f'"minOffset":{lo},"maxOffset":{hi},"lag":{_num(lag)},"lastConsumedTimestamp":{_num(ms)},'
            f'"lastConsumedAt":{text(when)}}}\n'
        )


def _num(v: int | None) -> int | str:
    return "null" if v is None else v


def _write_json(rows: Iterator[dict[str, Any]], totals: store_offsets.LagTotals) -> None:
    """``{"offsets": [...], "totals": [...]}`` as ``json.dumps(indent=2)`` lays it out, written row by row."""
    out = sys.stdout
    out.write('{\n  "offsets": [')
    # a flat row at depth 2 of indent=2, through the C encoder: its members joined by ",\n" + 6 spaces
    encode = json.JSONEncoder(separators=(",\n      ", ": ")).encode
    first = True
    for row in rows:
        out.write(("\n    {\n      " if first else ",\n    {\n      ") + encode(row)[1:-1] + "\n    }")
        first = False
    out.write("]" if first else "\n  ]")
    tail = json.dumps({"totals": totals.rows()}, indent=2)
    out.write(",\n" + tail[2:] + "\n")


GroupOpt = Annotated[str | None, typer.Option("--group", "-g", help="Consumer group.", show_default=False)]
AllGroupsOpt = Annotated[
    bool, typer.Option("--all-groups", help="Every group with committed offsets (on --topic, if given).")
]
TopicOpt = Annotated[
    str | None,
    typer.Option(
        "--topic", "-t", help="Topic (default: every topic the group(s) committed offsets on).", show_default=False
    ),
]
QueueOpt = Annotated[int | None, typer.Option("--queue", help="Queue id (default: every queue).")]
OffsetOpt = Annotated[int | None, typer.Option("--offset", help="New committed offset (needs --queue).")]
ToEarliestOpt = Annotated[bool, typer.Option("--to-earliest", help="Set to the queue's min offset.")]
ToLatestOpt = Annotated[bool, typer.Option("--to-latest", help="Set to the queue's max offset.")]
ToTimeOpt = Annotated[
    str | None,
    typer.Option(
        "--to-time",
        help=f"Set to the broker's offset for this time, as mqadmin resetOffsetByTime ({TIME_FORMS}).",
    ),
]
ShiftByOpt = Annotated[
    int | None,
    typer.Option("--shift-by", help="Move the committed offset by N (negative: back), kept inside [min, max]."),
]
ByDurationOpt = Annotated[
    str | None,
    typer.Option("--by-duration", help="Set to the offset for now minus this duration (1h30m, 2d, PT1H)."),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Allow offsets outside the queue's [min, max].")]


@command(app, "set", Changing, epilog=SET_EXAMPLES)
def set_command(
    store: StorePath,
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    topic: TopicOpt = None,
    queue: QueueOpt = None,
    offset: OffsetOpt = None,
    to_earliest: ToEarliestOpt = False,
    to_latest: ToLatestOpt = False,
    to_time: ToTimeOpt = None,
    shift_by: ShiftByOpt = None,
    by_duration: ByDurationOpt = None,
    force: ForceOpt = False,
    *,
    changing: Changing,
) -> None:
    """Rewrite committed offsets in config/consumerOffset.json, showing the plan first.

    Scope: --group G, or --all-groups; --topic T (default: every topic the group(s) committed on); --queue Q (default: every queue).

    Written in the broker's exact fastjson form, with the .bak rotation of the given broker version.

    Refused while a broker holds the store's lock, and for offsets outside the queue's [min, max] unless --force.

    --dry-run prints the before/after table and changes nothing.
    """
    fmt, dry_run = changing.format, changing.dry_run
    chosen = [
        offset is not None,
        to_earliest,
        to_latest,
        to_time is not None,
        shift_by is not None,
        by_duration is not None,
    ]
    if sum(chosen) != 1:
        raise InputError(
            "give exactly one of --offset, --to-earliest, --to-latest, --to-time, --shift-by, --by-duration"
        )
    if (group is None) == (not all_groups):
        raise InputError("give --group G or --all-groups")
    mode = ("offset", "earliest", "latest", "time", "shift", "time")[chosen.index(True)]
    time_ms = parse_time_ms(to_time) if to_time is not None else None
    if by_duration is not None:
        time_ms = int(time.time() * 1000) - parse_duration_ms(by_duration)
    with changing.open(store, "offsets") as st:
        pairs = _pairs(st, group, topic)
        plan = op.plan_reset_offsets(
            st,
            pairs=pairs,
            mode=mode,
            queue_id=queue,
            offset=offset,
            time_ms=time_ms,
            shift_by=shift_by,
            force=force,
            broker_version=st.config.broker,
        )
        view = plan_view(plan, {"changes": (CHANGE_COLUMNS, None)})
        written = show_and_apply(
            view, fmt, dry_run=dry_run, apply=lambda: (op.apply_reset_offsets(st, plan) or True, {"written": True}),
            ask=changing.ask,
        )  # fmt: skip
    if dry_run:
        err.print(f"dry run: {len(plan.changes)} offset(s) planned, nothing written")
    elif written:
        kept = " (the previous file is kept as its .bak)" if plan.source_raw is not None else ""
        err.print(f"wrote {len(plan.changes)} offset(s) to {plan.path}{kept}", markup=False)


def _pairs(st: Any, group: str | None, topic: str | None) -> list[tuple[str, str]]:
    """(topic, group) pairs in scope: committed ones, or the one given (a new group or topic)."""
    _, table = read_consumer_offsets(st)
    pairs = [(t, g) for t, g in table if (group is None or g == group) and (topic is None or t == topic)]
    if group is not None and topic is not None and (topic, group) not in pairs:
        pairs.append((topic, group))
    if not pairs:
        who = f"group {group!r}" if group is not None else "any group"
        raise InputError(f"{who} has no committed offset{' on topic ' + repr(topic) if topic else ''}: give --topic")
    return sorted(set(pairs), key=lambda p: (p[1], p[0]))
