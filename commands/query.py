"""`rmqstore query ...` and `rmqstore query-by-key`: find messages without a broker."""

from __future__ import annotations

import contextlib
import enum
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.codec.commitlog import Record
from rmqstore.errors import InputError
from rmqstore.ops import query as op
from rmqstore.safety.files import atomic_write
from rmqstore.store import lookup

from . import _fields as fields
from ._common import (
    Command,
    Format,
    QuietOpt,
    StorePath,
    default_format,
    err,
    format_time_ms,
    parse_time_ms,
    progress_bar,
    render_rows,
    time_range,
)
from ._options import Reading, command

app = typer.Typer()
query_app = typer.Typer(
    name="query",
    help="Find messages by key, unique key, message id, queue offset or time, from the store's files.",
    no_args_is_help=True,
)
app.add_typer(query_app, name="query")


class Body(str, enum.Enum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


TopicArg = Annotated[
    str, typer.Argument(help="Topic as stored (e.g. TopicA, SCHEDULE_TOPIC_XXXX).", show_default=False)
]
BeginOpt = Annotated[
    str | None,
    typer.Option(
        "--begin",
        help="Earliest store time: epoch s or ms (by magnitude), now, -1h, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS.",
    ),
]
EndOpt = Annotated[str | None, typer.Option("--end", help="Latest store time (same formats as --begin).")]
ScanOpt = Annotated[
    bool,
    typer.Option("--scan", help="Scan the whole commit log instead of using the index files (same answer, slower)."),
]
BodyOpt = Annotated[
    Body | None,
    typer.Option("--body", help="How to print bodies, decompressed (default: text in tables, base64 otherwise)."),
]
RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw",
        help="Print the broker's raw index answer instead: every commit log offset it names, in the order found, "
        "with what the check of the record made of it (match, hash collision, duplicate...).",
    ),
]


def record_row(rec: Record, body: Body) -> dict[str, Any]:
    """A record as ``dump`` shows it (RocketMQ's field names, compressed bodies decompressed), plus
    keys, uniqKey, tags and a readable store time."""
    row = rec.to_row(body=body.value)
    row["keys"] = rec.keys
    row["uniqKey"] = rec.uniq_key
    row["tags"] = rec.tags
    row["storeTime"] = format_time_ms(rec.store_timestamp_ms)
    return row


@dataclass(frozen=True)
class Shown(Reading):
    """How the store is opened and the messages found are shown: the options of every query."""

    body: BodyOpt = None

    @property
    def body_mode(self) -> Body:
        return _body(self.body, self.fmt)


@contextlib.contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A progress bar for commit log scans, shown only once a scan has run for half a second."""
    start = time.monotonic()
    with contextlib.ExitStack() as stack:
        advance: list[Callable[[int], None]] = []
        pending = [0]

        def report(n: int, total: int) -> None:
            pending[0] += n
            if not advance:
                if time.monotonic() - start < 0.5:
                    return
                advance.append(stack.enter_context(progress_bar(total, "scanning commit log", quiet=quiet)))
            advance[0](pending[0])
            pending[0] = 0

        yield report


def _notes(notices: tuple[str, ...] | list[str]) -> None:
    for n in notices:
        err.print(f"note: {n}")


def _emit(
    rows: list[dict[str, Any]], fmt: Format | None, columns: tuple[str, ...], body: Body, table: tuple[str, ...] = ()
) -> None:
    """Rows in every format with one field list: ``columns`` (the table: ``table``, a subset)."""
    f = default_format(fmt)
    shown = table if f is Format.table and table else columns
    cols = [c for c in shown if c != "body" or body is not Body.none]
    if not rows:
        if f is Format.json:
            sys.stdout.write("[]\n")
        err.print("no message found")
        return
    render_rows(rows, f, columns=None if f in (Format.json, Format.ndjson) else cols)


def _body(body: Body | None, fmt: Format | None) -> Body:
    if body is not None:
        return body
    return Body.text if default_format(fmt) in (Format.table, Format.plain) else Body.base64


def _window(begin: str | None, end: str | None) -> tuple[int, int]:
    b, e = time_range(begin or None, end or None, "--begin/--end")
    return (0 if b is None else b, op.JAVA_LONG_MAX if e is None else e)


def _render_key_result(r: op.KeyQueryResult, fmt: Format | None, body: Body | None, raw: bool) -> None:
    _notes(r.notices)
    if raw:
        why = {x.phy_offset: x.why for x in r.rejected if not x.why.startswith("duplicate")}
        hit = {h.phy_offset for h in r.hits}
        rows, shown = [], set()
        for phy in r.raw_phy_offsets:
            if phy in shown:
                verdict = "duplicate"
            else:
                verdict = "match" if phy in hit else why.get(phy, "")
            shown.add(phy)
            rows.append({"commitLogOffset": phy, "verdict": verdict})
        _emit(rows, fmt, ["commitLogOffset", "verdict"], Body.none)
        return
    if r.limited:
        err.print(
            f"note: the index answer is full ({r.max_num} entries, capped by maxMsgsNumBatch): older matches may "
            "exist; narrow --begin/--end to see them"
        )
    b = _body(body, fmt)
    _emit([record_row(h, b) for h in r.hits], fmt, fields.QUERY, b, fields.QUERY_TABLE)


def query_key_command(
    store: StorePath,
    topic: TopicArg,
    key: Annotated[str, typer.Argument(help="One message key (a token of the KEYS property).", show_default=False)],
    shown: Shown,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: Annotated[
        int, typer.Option("--max", min=1, help="Most index entries to take (the broker caps it at maxMsgsNumBatch).")
    ] = op.KEY_QUERY_MAX_NUM,
    scan: ScanOpt = False,
    raw: RawOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the messages of TOPIC whose KEYS contain KEY, as mqadmin queryMsgByKey does.

    The index files are searched exactly as the broker searches them (newest file first, time
    window, at most --max entries); each message found is then read and kept only if its topic
    and keys really match, so hash collisions never show a wrong message. Records stored after
    the index's end are scanned from the commit log. If the index is missing, disabled or
    damaged, the whole commit log is scanned instead (a note says so).

    Exit status 0 also when nothing is found: stdout is then empty ([] with --format json) and
    stderr says 'no message found'.
    """
    b, e = _window(begin, end)
    with shown.open(store) as st, _progress(quiet) as progress:
        r = op.query_key(st, topic, key, max_num=max_num, begin_ms=b, end_ms=e, scan=scan, progress=progress)
    _render_key_result(r, shown.fmt, shown.body, raw)


query_key_command = command(query_app, "key", Shown)(query_key_command)
app.command("query-by-key", cls=Command, help=query_key_command.__doc__)(query_key_command)


@command(query_app, "uniq", Shown)
def query_uniq_command(
    store: StorePath,
    topic: TopicArg,
    uniq_key: Annotated[
        str, typer.Argument(help="The UNIQ_KEY property (the msgId clients show).", show_default=False)
    ],
    shown: Shown,
    begin: BeginOpt = None,
    end: EndOpt = None,
    max_num: Annotated[
        int | None, typer.Option("--max", min=1, help="Most index entries to take (default: defaultQueryMaxNum, 32).")
    ] = None,
    all_copies: Annotated[
        bool, typer.Option("--all", help="Show every stored copy, not only the earliest one as clients do.")
    ] = False,
    scan: ScanOpt = False,
    raw: RawOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Find the message of TOPIC with this unique key (UNIQ_KEY), as clients query a msgId.

    Searched through the index like a key; only a message whose UNIQ_KEY is exactly UNIQ_KEY is
    kept, and of several copies (a producer retry stored twice) the earliest stored one, as the
    client keeps it (--all shows every copy).

    Exit status 0 also when nothing is found: stdout is then empty ([] with --format json) and
    stderr says 'no message found'.
    """
    b, e = _window(begin, end)
    with shown.open(store) as st, _progress(quiet) as progress:
        r = op.query_uniq(
            st,
            topic,
            uniq_key,
            max_num=max_num,
            begin_ms=b,
            end_ms=e,
            scan=scan,
            all_copies=all_copies,
            progress=progress,
        )
    _render_key_result(r, shown.fmt, shown.body, raw)


@command(query_app, "id", Shown)
def query_id_command(
    store: StorePath,
    msg_ids: Annotated[
        list[str], typer.Argument(help="Message ids (several, or comma-separated as the broker lists a batch).")
    ],
    shown: Shown,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="Topic(s) to look a unique key up in (default: all).")
    ] = None,
    all_copies: Annotated[bool, typer.Option("--all", help="Show every stored copy of a unique key.")] = False,
    scan: ScanOpt = False,
    body_out: Annotated[
        Path | None,
        typer.Option(
            "--body-out",
            help="Write the body of the message found (decompressed, as the consumer gets it) to this file; "
            "refused when several messages are found. - writes it to standard output.",
        ),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Find messages by id, as mqadmin queryMsgById does.

    An offset msgId (store host, port and commit log offset) is decoded and the message read at
    its offset. Any other id, or an offset msgId whose message is gone, is looked up as a unique
    key (UNIQ_KEY) in every topic, or in --topic.

    Exit status 0 also when nothing is found: stdout is then empty ([] with --format json) and
    stderr says 'no message found'.
    """
    ids = [i.strip() for arg in msg_ids for i in arg.split(",") if i.strip()]
    b = shown.body_mode
    rows: list[dict[str, Any]] = []
    hits: list[Record] = []
    with (
        shown.open(store) as st,
        op.Searcher(st) as searcher,
        _progress(quiet) as progress,
    ):
        for mid in ids:
            r = searcher.msg_id(mid, topics=topic or None, scan=scan, all_copies=all_copies, progress=progress)
            _notes(r.notices)
            if not r.hits and len(ids) > 1:
                err.print(f"note: {mid}: no message found")
            rows += [{"id": mid, "idKind": r.kind, **record_row(h, b)} for h in r.hits]
            hits += r.hits
    if body_out is not None:
        _write_body(hits, body_out)
        if str(body_out) == "-":
            return
    _emit(rows, shown.fmt, fields.QUERY_ID, b, fields.QUERY_ID_TABLE)


def _write_body(hits: list[Record], dest: Path) -> None:
    """The one message's body, decompressed, written whole or not at all (temp file + rename)."""
    if len(hits) != 1:
        raise InputError(f"--body-out needs exactly one message, {len(hits)} found (use --format json to see them)")
    data = hits[0].decompressed_body()
    if str(dest) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        if dest.is_dir():
            raise InputError(f"{dest}: is a directory; --body-out takes a file name")
        atomic_write(dest.absolute(), data)
    except OSError as e:
        raise InputError(f"{dest}: cannot write the body: {e.strerror}") from None
    err.print(f"wrote {len(data)} body bytes of {hits[0].msg_id} to {dest}")


def _queue_rows(hit: lookup.QueueHit, body: Body) -> list[dict[str, Any]]:
    _notes(hit.notices)
    return [] if hit.record is None else [record_row(hit.record, body)]


@command(query_app, "offset", Shown)
def query_offset_command(
    store: StorePath,
    topic: TopicArg,
    queue_id: Annotated[int, typer.Argument(help="Queue id.", show_default=False)],
    queue_offset: Annotated[int, typer.Argument(help="Queue offset (consume queue slot).", show_default=False)],
    shown: Shown,
) -> None:
    """Show the message at QUEUE_OFFSET of TOPIC/QUEUE_ID, read through the consume queue.

    Exit status 0 also when nothing is found: stdout is then empty ([] with --format json) and
    stderr says 'no message found' after a note saying why (offset out of range, filler entry...).
    """
    b = shown.body_mode
    with shown.open(store) as st:
        hit = lookup.query_queue_offset(st, topic, queue_id, queue_offset)
    _emit(_queue_rows(hit, b), shown.fmt, fields.QUERY, b, fields.QUERY_TABLE)


@command(query_app, "time", Shown)
def query_time_command(
    store: StorePath,
    topic: TopicArg,
    queue_id: Annotated[int, typer.Argument(help="Queue id.", show_default=False)],
    time_text: Annotated[
        str,
        typer.Argument(
            metavar="time",
            help="A time: epoch s or ms (by magnitude), now, -1h, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS.",
            show_default=False,
        ),
    ],
    shown: Shown,
    by_mtime: Annotated[
        bool,
        typer.Option(
            "--file-by-mtime",
            help="Pick the consume queue file by modification time, as the broker does (default: by the store "
            "time of each file's last message, which survives copying the store).",
        ),
    ] = False,
) -> None:
    """Find the queue offset for TIME in TOPIC/QUEUE_ID, as the broker's searchOffset does.

    A binary search on the store times of the queue's messages (getOffsetInQueueByTime): an exact
    match, else the nearer neighbour. Prints one row: the queue offset found and, when that
    offset holds a message, the message (a missing or empty queue gives offset 0, as the broker
    answers, with a note on stderr).
    """
    ts = parse_time_ms(time_text)
    b = shown.body_mode
    with shown.open(store) as st:
        hit = lookup.offset_by_time(st, topic, queue_id, ts, file_by_mtime=by_mtime)
    err.print(
        f"queue offset {hit.queue_offset} for {format_time_ms(ts)} in {topic}/{queue_id} "
        f"(queue holds [{hit.bounds.min_offset}, {hit.bounds.max_offset}))"
    )
    _notes(hit.notices)
    row = {"queueOffset": hit.queue_offset, "timestamp": ts}
    if hit.record is not None:
        row |= record_row(hit.record, b)
        row["queueOffset"] = hit.queue_offset
    _emit([row], shown.fmt, fields.QUERY_TIME, b, fields.QUERY_TIME_TABLE)
