"""`rmqstore write`: append messages to a store without a broker."""

from __future__ import annotations

import enum
import hashlib
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.codec.topic import skipped_lines
from rmqstore.errors import InputError
from rmqstore.ops import write as op
from rmqstore.safety.journal import Resumed
from rmqstore.store import Store

from ._common import Format, err, parse_time_ms, render_mapping, render_rows, step_hook
from ._options import Changing, Keeping, command
from ._plan import PlanView, at_terminal, confirmed, plan_view, render_plan, resume_interrupted
from ._stores import refuse_parent_of_store

app = typer.Typer()
Blocks = list[op.Message] | op.MessageBatch

_ROWS_SHOWN = 20  # table/plain: one row per message up to this many, else a summary
_JSON_ROWS = 1000  # json: per-message results up to this many
_COLUMNS = ["topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "storeTimestamp", "msgId", "uniqKey"]


class Flush(str, enum.Enum):
    sync = "sync"
    async_ = "async"


def _input(source: str, stack: ExitStack, message_opts: tuple[Any, ...]) -> tuple[Iterator[Blocks], Any]:
    """The NDJSON input's messages, read a chunk at a time while the write is planned, and the hash
    its bytes are fed into as they are read (the input's digest)."""
    topic, queue, tags, keys, body, body_file, props, delay_level, flag = message_opts
    if topic or queue is not None or tags or keys or body is not None or body_file or props or delay_level or flag:
        raise InputError("give either an NDJSON input or --topic and the message options, not both")
    digest = hashlib.sha256()
    if source == "-":
        blocks = op.read_blocks(sys.stdin.buffer, digest, source="<stdin>")
        stack.callback(blocks.close)  # its worker stops with the command
        return blocks, digest
    path = Path(source)
    try:
        f = stack.enter_context(open(path, "rb"))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    blocks = op.read_blocks(f, digest, source=str(path))
    stack.callback(blocks.close)
    return _reading(blocks, path), digest


def _reading(blocks: Iterator[Blocks], path: Path) -> Iterator[Blocks]:
    try:
        yield from blocks
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None


def _messages(
    topic: str | None,
    queue: int | None,
    tags: str | None,
    keys: str | None,
    body: str | None,
    body_file: Path | None,
    props: list[str],
    delay_level: int,
    flag: int,
) -> list[op.Message]:
    """The one message the options give."""
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
    return [op.Message(topic, data, queue, tags, keys, tuple(pairs), flag, delay_level=delay_level)]


# options of write_command whose declaration takes several lines
_SourceOpt = Annotated[
    str | None, typer.Argument(metavar="[INPUT]", help="NDJSON file, one message per line; - reads stdin.")
]
_QueueOpt = Annotated[
    int | None, typer.Option("--queue", min=0, help="Queue id (default: round-robin over writeQueueNums).")
]
_PropOpt = Annotated[list[str] | None, typer.Option("--property", "-p", help="User property NAME=VALUE; repeat.")]
_NoDispatchOpt = Annotated[
    bool, typer.Option("--no-dispatch", help="Leave consume queues and index to `redispatch` (creates abort).")
]
_StoreHostOpt = Annotated[
    str | None, typer.Option("--store-host", help="ip:port stored as the store host (default: the last record's).")
]
_AllowSystemTopicOpt = Annotated[
    bool,
    typer.Option("--allow-system-topic", help="Allow topics producers may not send to (SCHEDULE_TOPIC_XXXX...)."),
]
_TopicQueueNumsOpt = Annotated[
    int, typer.Option("--topic-queue-nums", min=1, help="Queues of an auto-created topic (producer default 4).")
]
_NowOpt = Annotated[
    str | None,
    typer.Option(
        "--now",
        help="Fixed clock (epoch s or ms (by magnitude), now, -1h, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS) for reproducible stores.",
    ),
]
_UniqKeySeedOpt = Annotated[
    int | None, typer.Option("--uniq-key-seed", help="Fixed pid/class-loader part of generated UNIQ_KEYs.")
]
_AgainOpt = Annotated[
    bool,
    typer.Option("--again", help="Write the input even if the last write wrote the same input (a second copy)."),
]


@command(app, "write", Changing, Keeping)
def write_command(
    store: Annotated[Path, typer.Argument(help="Store root directory (storePathRootDir).", show_default=False)],
    source: _SourceOpt = None,
    input_file: Annotated[str | None, typer.Option("--input", "-i", help="Same as INPUT.")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Topic of the one message to write.")] = None,
    queue: _QueueOpt = None,
    tags: Annotated[str | None, typer.Option("--tags", help="TAGS of the message.")] = None,
    keys: Annotated[str | None, typer.Option("--keys", help="KEYS, separated by spaces (each is indexed).")] = None,
    body: Annotated[str | None, typer.Option("--body", help="Body as UTF-8 text.")] = None,
    body_file: Annotated[Path | None, typer.Option("--body-file", help="Body bytes from a file.")] = None,
    prop: _PropOpt = None,
    delay_level: Annotated[int, typer.Option("--delay-level", min=0, help="Delay level (1-based; 0: none).")] = 0,
    flag: Annotated[int, typer.Option("--flag", help="User flag.")] = 0,
    no_dispatch: _NoDispatchOpt = False,
    flush: Annotated[Flush, typer.Option("--flush", help="sync: fsync before reporting success.")] = Flush.sync,
    create: Annotated[bool, typer.Option("--create", help="Create STORE if it does not exist.")] = False,
    store_host: _StoreHostOpt = None,
    born_host: Annotated[str | None, typer.Option("--born-host", help="ip:port of the producer.")] = None,
    allow_system_topic: _AllowSystemTopicOpt = False,
    max_topic_length: Annotated[int, typer.Option("--max-topic-length", min=1, help="Topic length limit.")] = 127,
    topic_queue_nums: _TopicQueueNumsOpt = 4,
    now: _NowOpt = None,
    uniq_key_seed: _UniqKeySeedOpt = None,
    again: _AgainOpt = False,
    *,
    changing: Changing,
    keeping: Keeping,
) -> None:
    """Append messages to a store as the broker would, with consume queue and index entries.

    One message from --topic and its options, or many from an NDJSON file (or - for stdin), one
    object per line with RocketMQ's field names (topic, queueId, tags, keys, body or bodyBase64,
    properties, bornTimestamp, bornHost, storeHost, storeTimestamp, flag, sysFlag or
    transactionType, delayTimeLevel, reconsumeTimes, preparedTransactionOffset, uniqKey, wait, raw).
    The batch is all or nothing: a bad line or any failure leaves the store unchanged.

    The output of dump commitlog --format ndjson is accepted as it is: rows whose kind is not
    "message" (blank, end, corrupt) are skipped, the fields a write assigns itself (offsets, sizes,
    msgId, storeTime...) are ignored, and a dumped body is read in the mode (base64, hex or text)
    that its bodyCRC proves.
    """
    if source is not None and input_file is not None:
        raise InputError("give the NDJSON input once (INPUT or --input)")
    if not create:  # a new store may be made anywhere; an existing one is never the folder holding it
        refuse_parent_of_store(store)
    message_opts = (topic, queue, tags, keys, body, body_file, prop or [], delay_level, flag)
    fixed = parse_time_ms(now) if now is not None else None
    clock = (lambda: fixed) if now is not None else None
    uniq_keys = op.UniqKeySource(seed=uniq_key_seed) if uniq_key_seed is not None else None
    opts = op.WriteOptions(  # in its field order
        clock, not no_dispatch, store_host, born_host, allow_system_topic, max_topic_length, uniq_keys, topic_queue_nums
    )
    ndjson = source if source is not None else input_file
    with ExitStack() as stack:
        given = _input(ndjson, stack, message_opts) if ndjson is not None else None
        msgs = _messages(*message_opts) if given is None else []
        with op.open_for_write(
            store,
            broker_config=changing.broker_config,
            broker=changing.broker_version,
            create=create,
            dry_run=changing.dry_run,
        ) as st:
            resumed = resume_interrupted(st, "write", dry_run=changing.dry_run)
            if given is None:
                plan, digest, _ = op.prepare_write(st, msgs, opts, again=again, dry_run=changing.dry_run)
            else:
                plan, digest, _ = op.prepare_write_blocks(st, *given, opts, again=again, dry_run=changing.dry_run)
            done = _apply(st, plan, digest, flush, changing, keeping, clock, fixed)
    if done is not None:
        _notes(done[0], resumed)
        _report(*done, changing.format)


def _apply(
    st: Store,
    plan: op.WritePlan,
    digest: str,
    flush: Flush,
    changing: Changing,
    keeping: Keeping,
    clock: Callable[[], int] | None,
    fixed: int | None,
) -> tuple[op.WriteResult, PlanView] | None:
    """Show the plan, ask, apply it: the result and the plan's view (None: a dry run, or not confirmed)."""
    fmt = changing.format
    view = _view(plan, fmt)
    if changing.dry_run:
        err.print("dry run: nothing was written")
        render_plan(view, fmt)
        return None
    asking = changing.ask and at_terminal()
    if fmt in (Format.table, Format.plain) or asking:  # json: one document after the run; ndjson, csv: the rows written
        render_plan(view, fmt)
    if asking and not confirmed():
        return None
    result = op.apply_write(
        st,
        plan,
        flush=flush.value,
        quarantine=keeping.quarantine,
        use_quarantine=keeping.keep,
        index_clock=clock,
        now_ms=fixed,
        on_step=step_hook(),
        digest=digest,
    )
    return result, view


def _notes(result: op.WriteResult, resumed: Resumed | None) -> None:
    if resumed is not None:
        err.print(f"note: {resumed.message}")
    if result.quarantine is not None:
        err.print(f"note: stale bytes after the end of the commit log copied to {str(result.quarantine)}")
    if result.dispatch is not None:
        for line in skipped_lines([q.to_json() for q in result.dispatch.skipped.values()]):
            err.note(line)
    if result.abort_created:
        err.print("note: created abort: the broker re-dispatches on its next start (or run `rmqstore redispatch`)")


def _report(result: op.WriteResult, view: PlanView, fmt: Format) -> None:
    """What was written: the message rows (ndjson, csv), the plan with the result (json), the result summary."""
    if fmt in (Format.ndjson, Format.csv):
        render_rows((r.to_json() for r in result.plan.records), fmt, columns=_COLUMNS)
    elif fmt is Format.json:
        render_plan(view, fmt, result=result.summary())
    else:  # what the plan did not say already
        done = {k: v for k, v in result.summary().items() if k not in view.summary}
        render_mapping(done, fmt, title="written")


def _view(plan: op.WritePlan, fmt: Format) -> PlanView:
    """The append: the bytes zeroed and appended, the summary, and the messages as they will be stored."""
    shown = _JSON_ROWS if fmt is Format.json else _ROWS_SHOWN
    return plan_view(plan, {"messages": (_COLUMNS, "messages")}, details=plan.details(shown))
