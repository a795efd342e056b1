"""`rmqstore write`: append messages to a store without a broker."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from rmqstore import write as op
from rmqstore.errors import InputError

from ._common import (
    BrokerConfigOpt,
    Command,
    DryRunOpt,
    Format,
    default_format,
    err,
    parse_time_ms,
    render_mapping,
    render_rows,
    reports_errors,
    step_hook,
)
from ._plan import Detail, PlanView, render_plan

app = typer.Typer()

_ROWS_SHOWN = 20  # table/plain: one row per message up to this many, else a summary
_JSON_ROWS = 1000  # json: per-message results up to this many
_COLUMNS = ["topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "storeTimestamp", "msgId", "uniqKey"]


class Flush(str, enum.Enum):
    sync = "sync"
    async_ = "async"


def _messages(
    source: str | None,
    topic: str | None,
    queue: int | None,
    tags: str | None,
    keys: str | None,
    body: str | None,
    body_file: Path | None,
    props: list[str],
    delay_level: int,
    flag: int,
) -> list[op.Message] | op.MessageBatch:
    if source is not None:
        if topic or queue is not None or tags or keys or body is not None or body_file or props or delay_level or flag:
            raise InputError("give either an NDJSON input or --topic and the message options, not both")
        if source == "-":
            return op.read_ndjson(sys.stdin.buffer, source="<stdin>")
        path = Path(source)
        try:
            with open(path, "rb") as f:
                return op.read_ndjson(f, source=str(path))
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if not topic:
        raise InputError("nothing to write: give --topic (one message) or an NDJSON file / - for stdin")
    if body is not None and body_file is not None:
        raise InputError("give --body or --body-file, not both")
    data = b""
    if body_file is not None:
        try:
            data = body_file.read_bytes()
        except OSError as e:
            raise InputError(f"{body_file}: cannot read: {e.strerror}") from None
    elif body is not None:
        data = body.encode("utf-8")
    pairs = []
    for p in props:
        k, sep, v = p.partition("=")
        if not sep:
            raise InputError(f"--property {p!r} is not NAME=VALUE")
        pairs.append((k, v))
    return [
        op.Message(
            topic=topic,
            body=data,
            queue_id=queue,
            tags=tags,
            keys=keys,
            properties=tuple(pairs),
            flag=flag,
            delay_level=delay_level,
            origin="message",
        )
    ]


@app.command("write", cls=Command)
@reports_errors
def write_command(
    store: Annotated[Path, typer.Argument(help="Store root directory (storePathRootDir).", show_default=False)],
    source: Annotated[
        str | None, typer.Argument(metavar="[INPUT]", help="NDJSON file, one message per line; - reads stdin.")
    ] = None,
    input_file: Annotated[str | None, typer.Option("--input", "-i", help="Same as INPUT.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Topic of the one message to write.")] = None,
    queue: Annotated[
        int | None, typer.Option("--queue", min=0, help="Queue id (default: round-robin over writeQueueNums).")
    ] = None,
    tags: Annotated[str | None, typer.Option("--tags", help="TAGS of the message.")] = None,
    keys: Annotated[str | None, typer.Option("--keys", help="KEYS, separated by spaces (each is indexed).")] = None,
    body: Annotated[str | None, typer.Option("--body", help="Body as UTF-8 text.")] = None,
    body_file: Annotated[Path | None, typer.Option("--body-file", help="Body bytes from a file.")] = None,
    prop: Annotated[
        list[str] | None, typer.Option("--property", "-p", help="User property NAME=VALUE; repeat.")
    ] = None,
    delay_level: Annotated[int, typer.Option("--delay-level", min=0, help="Delay level (1-based; 0: none).")] = 0,
    flag: Annotated[int, typer.Option("--flag", help="User flag.")] = 0,
    broker_config: BrokerConfigOpt = None,
    broker_version: Annotated[
        str | None,
        typer.Option(
            "--broker-version",
            help="Broker version whose append path to follow (default auto: decided from the store).",
        ),
    ] = None,
    no_dispatch: Annotated[
        bool, typer.Option("--no-dispatch", help="Leave consume queues and index to `redispatch` (creates abort).")
    ] = False,
    flush: Annotated[Flush, typer.Option("--flush", help="sync: fsync before reporting success.")] = Flush.sync,
    create: Annotated[bool, typer.Option("--create", help="Create STORE if it does not exist.")] = False,
    store_host: Annotated[
        str | None, typer.Option("--store-host", help="ip:port stored as the store host (default: the last record's).")
    ] = None,
    born_host: Annotated[str | None, typer.Option("--born-host", help="ip:port of the producer.")] = None,
    allow_system_topic: Annotated[
        bool,
        typer.Option("--allow-system-topic", help="Allow topics producers may not send to (SCHEDULE_TOPIC_XXXX...)."),
    ] = False,
    max_topic_length: Annotated[int, typer.Option("--max-topic-length", min=1, help="Topic length limit.")] = 127,
    topic_queue_nums: Annotated[
        int, typer.Option("--topic-queue-nums", min=1, help="Queues of an auto-created topic (producer default 4).")
    ] = 4,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Fixed clock (epoch s or ms (by magnitude), now, -1h, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS) for reproducible stores.",
        ),
    ] = None,
    uniq_key_seed: Annotated[
        int | None, typer.Option("--uniq-key-seed", help="Fixed pid/class-loader part of generated UNIQ_KEYs.")
    ] = None,
    quarantine: Annotated[
        Path | None, typer.Option("--quarantine", help="Where zeroed stale bytes are copied (default beside STORE).")
    ] = None,
    no_quarantine: Annotated[bool, typer.Option("--no-quarantine", help="Do not keep a copy of zeroed bytes.")] = False,
    again: Annotated[
        bool,
        typer.Option("--again", help="Write the input even if the last write wrote the same input (a second copy)."),
    ] = False,
    dry_run: DryRunOpt = False,
    fmt: Annotated[Format | None, typer.Option("--format", "-f", help="Output format.")] = None,
) -> None:
    """Append messages to a store as the broker would, with consume queue and index entries.

    One message from --topic and its options, or many from an NDJSON file (or - for stdin), one
    object per line with RocketMQ's field names (topic, queueId, tags, keys, body or bodyBase64,
    properties, bornTimestamp, bornHost, storeHost, storeTimestamp, flag, sysFlag or
    transactionType, delayTimeLevel, reconsumeTimes, preparedTransactionOffset, uniqKey, wait, raw).
    The batch is all or nothing: a bad line or any failure leaves the store unchanged.
    """
    if source is not None and input_file is not None:
        raise InputError("give the NDJSON input once (INPUT or --input)")
    msgs = _messages(
        source if source is not None else input_file,
        topic,
        queue,
        tags,
        keys,
        body,
        body_file,
        prop or [],
        delay_level,
        flag,
    )
    clock = None
    if now is not None:
        fixed = parse_time_ms(now)
        clock = lambda: fixed  # noqa: E731
    result = op.write_messages(
        store,
        msgs,
        broker_config=broker_config,
        broker=broker_version,
        create=create,
        flush=flush.value,
        dispatch=not no_dispatch,
        clock=clock,
        store_host=store_host,
        born_host=born_host,
        allow_system_topic=allow_system_topic,
        max_topic_length=max_topic_length,
        topic_queue_nums=topic_queue_nums,
        uniq_keys=op.UniqKeySource(seed=uniq_key_seed) if uniq_key_seed is not None else None,
        quarantine=quarantine,
        use_quarantine=not no_quarantine,
        dry_run=dry_run,
        again=again,
        on_step=step_hook(),
    )
    _report(result, default_format(fmt))


def _report(result: op.WriteResult, fmt: Format) -> None:
    if result.rolled_back is not None:
        done = (
            "finished an interrupted write that had committed"
            if result.rolled_back.committed
            else "rolled back an interrupted write first"
        )
        err.print(f"note: {done} ({result.rolled_back.journal})")
    if result.quarantine is not None:
        err.print(f"note: stale bytes after the end of the commit log copied to {str(result.quarantine)}")
    if result.abort_created:
        err.print("note: created abort: the broker re-dispatches on its next start (or run `rmqstore redispatch`)")
    if result.dry_run:
        err.print("dry run: nothing was written")
        render_plan(_view(result, fmt), fmt)
        return
    records = result.plan.records
    n = len(records)
    summary = result.summary()
    if fmt in (Format.ndjson, Format.csv):
        render_rows((r.to_json() for r in records), fmt, columns=_COLUMNS)
        return
    if fmt is Format.json:
        doc = {"summary": summary}
        if n <= _JSON_ROWS:
            doc["messages"] = [r.to_json() for r in records]
        render_mapping(doc, fmt)
        return
    if n <= _ROWS_SHOWN:
        render_rows(
            (r.to_json() for r in records), fmt, columns=_COLUMNS, title="written" if not result.dry_run else "plan"
        )
    if n > _ROWS_SHOWN or fmt is Format.table:
        render_mapping(summary, fmt, title="summary")


def _view(result: op.WriteResult, fmt: Format) -> PlanView:
    """The append: the bytes zeroed and appended, the summary, and the messages as they would be stored."""
    shown = _JSON_ROWS if fmt is Format.json else _ROWS_SHOWN
    messages = [r.to_json() for _, r in zip(range(shown), result.plan.records, strict=False)]
    details = {"messages": Detail(messages, _COLUMNS, "messages")}
    return PlanView("write", op.planned_actions(result.plan), result.summary(), details)
