"""`rmqstore dump`: every byte of a store, for people (tables) and for scripts (ndjson, json, csv)."""

from __future__ import annotations

import enum
import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.errors import InputError, ProblemsFound, UnsupportedStore, UsageError
from rmqstore.ops import dump as lib
from rmqstore.problems import ERROR, Problem
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueues

from . import _fields as fields
from . import _stores as stores
from ._common import (
    Format,
    QuietOpt,
    StorePath,
    err,
    format_time_ms,
    local_time,
    progress_bar,
    render_mapping,
    render_rows,
    require_range,
    time_range,
    write_json_array,
)
from ._options import Reading, SinceOpt, TopicFilterOpt, UntilOpt, command

app = typer.Typer(
    name="dump",
    help="Show every byte of a store: commit log records, consume queues, index files, checkpoint, config.",
    no_args_is_help=True,
)

StoresArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="STORE...",
        help="Store root(s) or globs ('/data/broker-*/store'), or one segment file of a store.",
        show_default=False,
    ),
]
_PARALLEL_MIN_BYTES = 256 << 20  # below this, starting worker processes costs more than it saves


class BodyMode(str, enum.Enum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


def _finish(problems: list[Problem], quiet: bool = False) -> None:
    """Diagnostics after the data: every problem on stderr, then exit 3 if any is an error."""
    errors = [p for p in problems if p.severity == ERROR]
    shown = 0
    for p in problems:
        if p.severity == ERROR or not quiet:
            if shown < 50:
                err.print(f"{p.severity}: {str(p)}")
            shown += 1
    if shown > 50:
        err.print(f"... and {shown - 50} more")
    if errors:
        raise ProblemsFound(f"{len(errors)} problem(s) found; the first: {errors[0]}")


def _time(ms: Any) -> str:
    return format_time_ms(ms) if isinstance(ms, int) and ms > 0 else ("" if ms is None else str(ms))


# ------------------------------------------------------------------------------------ commitlog


def _row(item: tuple[lib.Record, dict[str, Any]] | lib.Span) -> dict[str, Any]:
    """A row of ``fields.COMMITLOG`` (a message, or a blank, end of data or damaged range), in every format."""
    return item.to_json() if isinstance(item, lib.Span) else item[1]


BodyOpt = Annotated[
    BodyMode | None,
    typer.Option(help="How to show bodies, decompressed (default: text in tables, base64 otherwise)."),
]
QueueOpt = Annotated[int | None, typer.Option("--queue", help="Only this queue id.")]
KeyOpt = Annotated[str | None, typer.Option("--key", "-k", help="Only messages with this KEYS token or UNIQ_KEY.")]
TagOpt = Annotated[str | None, typer.Option("--tag", help="Only messages with this TAGS value ('A || B' for either).")]
FromOffsetOpt = Annotated[int | None, typer.Option("--from-offset", min=0, help="First commit log offset.")]
ToOffsetOpt = Annotated[int | None, typer.Option("--to-offset", min=0, help="Stop before this commit log offset.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=0, help="At most this many messages.")]
VerifyCrcOpt = Annotated[bool, typer.Option("--verify-crc", help="Check every body CRC; mismatches are flagged.")]
CountOpt = Annotated[bool, typer.Option("--count", help="Only count records, BLANKs, end-of-data and damage.")]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="With --format parquet: the Parquet file to write (needs pyarrow).", show_default=False
    ),
]
JobsOpt = Annotated[
    int, typer.Option("--jobs", "-j", min=0, help="Worker processes for large ndjson and json dumps (0: automatic).")
]


@command(
    app,
    "commitlog",
    Reading,
    epilog="Example: rmqstore dump commitlog STORE --topic TopicA --format ndjson | jq .msgId",
)
def commitlog_command(
    store: StoresArg,
    body: BodyOpt = None,
    topic: TopicFilterOpt = None,
    queue: QueueOpt = None,
    key: KeyOpt = None,
    tag: TagOpt = None,
    from_offset: FromOffsetOpt = None,
    to_offset: ToOffsetOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    limit: LimitOpt = None,
    verify_crc: VerifyCrcOpt = False,
    count: CountOpt = False,
    jobs: JobsOpt = 0,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    *,
    reading: Reading,
) -> None:
    """List every commit log record: offset, size, topic, queue, times, hosts, keys, tags, msgId, properties, body.

    STORE is a store root, several (or a glob: each row then starts with its store), or one commit
    log file (STORE/commitlog/NAME: its records only, the store found from its place).

    BLANK end-of-file records, all-zero ends of data and damaged ranges are rows of their own
    (kind, offset, size, why): after a record that does not decode the scan goes on at the next
    record whose stored PHYSICALOFFSET is its real offset, and reports the skipped bytes. With
    --format ndjson each message is one object with RocketMQ's field names; other rows carry a
    "kind" field. plain and csv show the same fields (RocketMQ's names, plus keys, tags and uniqKey from the properties); the terminal table shows the main ones. Exits 3 when damage or a CRC mismatch was found, after printing everything.
    """
    fmt = reading.format
    _check_output(fmt, output, count=count)
    tags = None if tag is None else lib.parse_tag_expression(tag)
    require_range(from_offset, to_offset, "--from-offset/--to-offset", inclusive=False)
    since_ms, until_ms = time_range(since, until, "--since/--until")
    flt = lib.MessageFilter(topic=topic, queue_id=queue, key=key, tags=tags, since_ms=since_ms, until_ms=until_ms)
    body_mode = body.value if body else ("text" if fmt in (Format.table, Format.plain) else "base64")
    targets = _commitlog_targets(store, from_offset, to_offset)
    problems: list[Problem] = []

    def scans() -> Iterator[tuple[str, lib.CommitLogScan, lib.MessageOptions]]:
        for root, lo, hi in targets:
            with reading.open(root) as st:
                segs, found = st.commitlog_segments()
                opts = lib.MessageOptions(
                    body=body_mode, verify_crc=verify_crc, broker=st.config.broker, filter=flt, local_time=local_time()
                )
                scan = lib.CommitLogScan(segs, broker=st.config.broker, from_phy=lo, to_phy=hi, problems=found)
                with progress_bar(scan.total_bytes(), f"scanning {root}", quiet=quiet) as advance:
                    scan.progress = advance
                    yield str(root), scan, opts
                problems.extend(found)

    if fmt is Format.parquet:
        assert output is not None
        _commitlog_parquet(targets, flt, reading, output, verify_crc=verify_crc, limit=limit)
        return
    if count:
        _show_counts(scans(), fmt, multi=len(targets) > 1)
    elif fmt in (Format.ndjson, Format.json) and len(targets) == 1:
        for _, scan, opts in scans():
            _write_ndjson(scan, opts, jobs, limit, array=fmt is Format.json)
    elif fmt is Format.csv and len(targets) == 1:
        for _, scan, opts in scans():
            sys.stdout.flush()
            lib.write_csv(scan, opts, sys.stdout.buffer.write, _commitlog_columns(scan, fmt), limit=limit)
            sys.stdout.buffer.flush()
    else:
        _show_messages(scans(), fmt, multi=len(targets) > 1, limit=limit)
    sys.stdout.flush()
    _finish(problems, quiet)


Scans = Iterator[tuple[str, lib.CommitLogScan, lib.MessageOptions]]


def _check_output(fmt: Format, output: Path | None, *, count: bool = False) -> None:
    """-o goes with --format parquet, which needs it (Parquet is not for a terminal or a pipe)."""
    if fmt is Format.parquet and output is None:
        raise UsageError("--format parquet writes a file: give it with -o FILE")
    if fmt is not Format.parquet and output is not None:
        raise UsageError("-o/--output is for --format parquet; other formats go to standard output")
    if fmt is Format.parquet and count:
        raise UsageError("--count prints counts; leave out --format parquet")


def _commitlog_parquet(
    targets: list[tuple[Path, int | None, int | None]],
    flt: lib.MessageFilter,
    reading: Reading,
    output: Path,
    *,
    verify_crc: bool,
    limit: int | None,
) -> None:
    """The selected records of every store into one Parquet file, with the Spark export's columns."""
    from rmqstore.ops import parquet  # pyarrow: imported only for this format

    schema = parquet.commitlog_schema(crc_ok=verify_crc)
    left = [limit]

    def batches() -> Iterator[Any]:
        for root, lo, hi in targets:
            with reading.open(root) as st:
                sel = parquet.Selection(
                    topic=flt.topic, queue_id=flt.queue_id, key=flt.key, tags=flt.tags, since_ms=flt.since_ms,
                    until_ms=flt.until_ms, from_phy=lo, to_phy=hi, limit=left[0],
                )  # fmt: skip
                for batch in parquet.commitlog_batches(st, schema, sel):
                    if left[0] is not None:
                        left[0] -= batch.num_rows
                    yield batch
            if left[0] == 0:
                return

    result = parquet.write_parquet(output, schema, batches())
    err.note(f"{result.rows} records in {result.row_groups} row group(s) written to {result.path}")


def _labelled(multi: bool) -> Any:
    """With several stores each row starts with its store."""
    return (lambda label, row: {"store": label, **row}) if multi else (lambda label, row: row)


def _show_counts(scans: Scans, fmt: Format, *, multi: bool) -> None:
    labelled = _labelled(multi)
    rows = (labelled(label, r) for label, scan, opts in scans for r in lib.count_commitlog(scan, opts).to_rows())
    render_rows(rows, fmt, columns=["store"] * multi + ["kind", "count", "bytes"], title="commit log")


def _default_workers(size: int) -> int:
    """Worker processes for an ndjson dump of ``size`` bytes: one core stays with the process that walks
    the files and writes the output, so workers only pay off with three cores or more (on two, two
    workers and the writer contend and the dump is slower than with one process)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(4, cores - 1) if cores >= 3 and size >= _PARALLEL_MIN_BYTES else 1


def _write_ndjson(
    scan: lib.CommitLogScan, opts: lib.MessageOptions, jobs: int, limit: int | None, *, array: bool = False
) -> None:
    """One store as ndjson (or, with ``array``, the same rows as one JSON array) straight from the scan,
    in worker processes for large dumps."""
    workers = jobs or _default_workers(scan.total_bytes())
    sys.stdout.flush()
    out = lib.JsonArray(sys.stdout.buffer.write) if array else None
    lib.write_ndjson(scan, opts, out or sys.stdout.buffer.write, workers=workers, limit=limit)
    if out is not None:
        out.close()
    sys.stdout.buffer.flush()


def _show_messages(scans: Scans, fmt: Format, *, multi: bool, limit: int | None) -> None:
    labelled = _labelled(multi)
    first = next(scans, None)
    if first is None:
        return
    rows = (
        labelled(label, _row(item))
        for label, scan, opts in itertools.chain([first], scans)
        for item in lib.iter_messages(scan, opts, limit=limit)
    )
    if fmt is Format.json:
        write_json_array(rows)
    else:
        cols = ["store"] * multi + _commitlog_columns(first[1], fmt)
        render_rows(rows, fmt, columns=None if fmt is Format.ndjson else cols, title="commit log")


def _commitlog_columns(scan: lib.CommitLogScan, fmt: Format) -> list[str]:
    """The columns of commit log rows in a table, plain or csv: a message's fields, then its frame's."""
    cols = fields.COMMITLOG_TABLE if fmt is Format.table else fields.COMMITLOG
    extra = list(dict.fromkeys(f for seg in scan.segs for f in seg.framing.frame_fields))
    if fmt is Format.table:
        extra = extra[:1]  # a narrow screen: the entry index only
    return list(cols) + extra


def _commitlog_targets(
    paths: list[Path], from_offset: int | None, to_offset: int | None
) -> list[tuple[Path, int | None, int | None]]:
    """(store root, from, to) per path: a store, or one commit log file (its range of the store)."""
    out = []
    for p in stores.expand(paths):
        seg = stores.segment_file(p)
        if seg is None:
            stores.refuse_parent_of_store(p)
            out.append((p, from_offset, to_offset))
        elif seg.kind != "commitlog":
            raise InputError(f"{p}: a consume queue file; use rmqstore dump consumequeue {p}")
        else:
            lo = seg.base_offset if from_offset is None else max(from_offset, seg.base_offset)
            hi = seg.base_offset + seg.size if to_offset is None else min(to_offset, seg.base_offset + seg.size)
            out.append((seg.root, lo, hi))
    return out


# -------------------------------------------------------------------------------- consumequeue

_CQ_COLUMNS = ["kind", "queueOffset", "count", "commitLogOffset", "size", "tagsCode"]
_CQ_RESOLVE_COLUMNS = [
    "storeSize", "recordTopic", "recordQueueId", "recordQueueOffset", "expectedTagsCode", "storeTime", "tags", "msgId",
]  # fmt: skip


def _cq_data_columns(resolve: bool, stamped: bool) -> list[str]:
    """The csv columns of consume queue rows; ``stamped``: the units hold their store time (RocksDB)."""
    if resolve:
        return ["kind", *_CQ_COLUMNS[1:], *[c for c in _CQ_RESOLVE_COLUMNS if c != "storeTime"], "storeTimestamp",
                "keys", "mismatch"]  # fmt: skip
    return ["kind", *_CQ_COLUMNS[1:], *(["storeTimestamp"] if stamped else []), "mismatch"]


def _cq_text_row(row: lib.CqRow) -> dict[str, Any]:
    out = {"kind": row.kind, **row.to_json()}
    if row.kind in ("entry", "filler"):
        out["count"] = ""
    if "storeTimestamp" in out:
        out["storeTime"] = _time(out["storeTimestamp"])
    out["mismatch"] = "; ".join(row.mismatch)
    return out


def _page(rows: Iterator[lib.CqRow], start: int, count: int | None) -> Iterator[lib.CqRow]:
    """The slots [start, start + count): a hole or end row overlapping the page is kept whole; the
    scan stops at the end of the page."""
    stop = None if count is None else start + count
    for row in rows:
        if stop is not None and row.queue_offset >= stop:
            return
        if row.queue_offset + row.count > start:
            yield row


def _queue_target(
    store: Path, topic: str | None, queue: int | None, from_index: int | None, count: int | None
) -> tuple[Path, str, int, int | None, int | None]:
    """Store, topic, queue and page of a consume queue dump: given, or from one consume queue file's place."""
    seg = stores.segment_file(store)
    if seg is not None:
        if seg.kind != "consumequeue" or seg.topic is None or seg.queue_id is None:
            raise InputError(f"{store}: a commit log file; use rmqstore dump commitlog {store}")
        if topic is not None:
            raise InputError("give a consume queue file, or STORE TOPIC QUEUE, not both")
        first = seg.base_offset // lib.ENTRY_SIZE
        from_index = first if from_index is None else max(from_index, first)
        end = first + seg.size // lib.ENTRY_SIZE
        count = end - from_index if count is None else min(count, end - from_index)
        return seg.root, seg.topic, seg.queue_id, from_index, count
    if topic is None or queue is None:
        raise InputError("give TOPIC and QUEUE after the store (or one consume queue file instead)")
    stores.refuse_parent_of_store(store)
    return store, topic, queue, from_index, count


@command(app, "consumequeue", Reading, epilog="Example: rmqstore dump consumequeue STORE TopicA 0 --resolve")
def consumequeue_command(
    store: Annotated[
        Path,
        typer.Argument(
            help="Store root, or one consume queue file (then TOPIC and QUEUE come from its place).", show_default=False
        ),
    ],
    topic: Annotated[
        str | None, typer.Argument(help="Topic (the consumequeue/ sub-directory name).", show_default=False)
    ] = None,
    queue: Annotated[int | None, typer.Argument(help="Queue id.", show_default=False)] = None,
    from_index: Annotated[
        int | None, typer.Option("--from-index", "-i", min=0, help="First queue offset to list (queryCq -i).")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="List at most this many slots (queryCq -c).")
    ] = None,
    resolve: Annotated[
        bool, typer.Option("--resolve", help="Join each entry to its commit log record and flag every mismatch.")
    ] = False,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    *,
    reading: Reading,
) -> None:
    """List the entries of one consume queue: queue offset, commit log offset, size, tagsCode.

    --from-index and --count page through a long queue, like mqadmin queryCq -i/-c. STORE may be
    one consume queue file (STORE/consumequeue/TOPIC/QUEUE/NAME): its slots only.

    fillPreBlank fillers are shown as such; empty slots followed by entries are a "hole" row and
    a problem. With --resolve every entry is checked against the record it points at (size,
    topic, queue, queue offset, tagsCode, PHYSICALOFFSET, past the end of the commit log). Exits 3
    when a mismatch was found, after printing everything.
    """
    fmt = reading.format
    _check_output(fmt, output)
    problems: list[Problem] = []
    store, topic, queue, from_index, count = _queue_target(store, topic, queue, from_index, count)
    with reading.open(store) as st:
        if fmt is Format.parquet:
            assert output is not None
            _queue_parquet(st, topic, queue, output, from_index, count, resolve)
            return
        batch = st.batch_queues.queue(topic, queue)
        if batch.exists():  # 5.x batchconsumequeue/: 46-byte units
            render_rows((r.to_json() for r in batch.scan()), fmt, title=f"{topic} queue {queue}")
            return
        segs, _ = st.consume_queues.queue(topic, queue).files()
        stamped = isinstance(st.consume_queues, RocksDBConsumeQueues)  # its units hold their store times
        with progress_bar(sum(s.size for s in segs), "reading the consume queue", quiet=quiet) as advance:
            rows = lib.scan_consume_queue(st, topic, queue, resolve=resolve, problems=problems, progress=advance)
            if from_index is not None or count is not None:
                rows = _page(rows, from_index or 0, count)
            if fmt in (Format.json, Format.ndjson, Format.csv):
                data: Iterator[dict[str, Any]] = (r.to_json() for r in rows)
                if fmt is Format.json:
                    write_json_array(data)
                else:
                    cols = _cq_data_columns(resolve, stamped)
                    render_rows(data, fmt, columns=cols if fmt is Format.csv else None)
            else:
                cols = (
                    _CQ_COLUMNS + (_CQ_RESOLVE_COLUMNS if resolve else ["storeTime"] if stamped else []) + ["mismatch"]
                )
                render_rows(map(_cq_text_row, rows), fmt, columns=cols, title=f"{topic} queue {queue}")
    _finish(problems, quiet)


def _queue_parquet(
    st: Any, topic: str, queue: int, output: Path, from_index: int | None, count: int | None, resolve: bool
) -> None:
    """One file consume queue's entries into a Parquet file, with the Spark source's columns."""
    from rmqstore.ops import parquet  # pyarrow: imported only for this format

    if resolve or from_index is not None or count is not None:
        raise UsageError("--format parquet writes every entry of the queue: leave out --resolve, --from-index, --count")
    if st.batch_queues.queue(topic, queue).exists() or isinstance(st.consume_queues, RocksDBConsumeQueues):
        raise UnsupportedStore("--format parquet reads file consume queues (consumequeue/) only")
    result = parquet.write_parquet(output, parquet.QUEUE_SCHEMA, parquet.queue_batches(st, topic, queue))
    err.note(f"{result.rows} entries in {result.row_groups} row group(s) written to {result.path}")


@command(
    app, "consumequeue-ext", Reading, epilog="Example: rmqstore dump consumequeue-ext STORE TopicA 0 --format json"
)
def consumequeue_ext_command(
    store: StorePath,
    topic: Annotated[str, typer.Argument(help="Topic (the consumequeue_ext/ sub-directory name).", show_default=False)],
    queue: Annotated[int, typer.Argument(help="Queue id.", show_default=False)],
    *,
    reading: Reading,
) -> None:
    """List the units of one consume queue ext queue (enableConsumeQueueExt).

    Each unit: its address (what a consume queue entry's tagsCode holds), size, tagsCode, store time
    and the filter bit map.
    """
    fmt = reading.format
    with reading.open(store) as st:
        render_rows(
            (r.to_json() for r in lib.scan_consume_queue_ext(st, topic, queue)), fmt, title=f"{topic} queue {queue}"
        )


@command(app, "timer", Reading, epilog="Example: rmqstore dump timer STORE --log --format ndjson")
def timer_command(
    store: StorePath,
    log: Annotated[bool, typer.Option("--log", help="The timerlog/ units instead of the wheel's slots.")] = False,
    *,
    reading: Reading,
) -> None:
    """List the 5.x timer store: the used slots of timerwheel, or with --log the units of timerlog/.

    Slots: time, first and last timer log position, message count. Units: position, previous position,
    magic, write time, delay, and the commit log offset and size of the message.
    """
    fmt = reading.format
    with reading.open(store) as st:
        rows = lib.timer_log_units(st) if log else lib.timer_wheel_slots(st)
        render_rows(rows, fmt, title="timerlog" if log else "timerwheel")


@command(app, "compaction", Reading)
def compaction_command(store: StorePath, *, reading: Reading) -> None:
    """Show the 5.x compaction service's position-checkpoint (the queue offsets compacted so far)."""
    fmt = reading.format
    with reading.open(store) as st:
        cf = lib.compaction_checkpoint(st)
    if fmt in (Format.json, Format.ndjson):
        render_mapping(cf.data, fmt)
    else:
        render_rows(({"key": k, "value": v} for k, v in lib.flatten(cf.data)), fmt, title=str(cf.path))


@command(app, "timercheck", Reading, epilog="Example: rmqstore dump timercheck STORE --format json")
def timercheck_command(store: StorePath, *, reading: Reading) -> None:
    """Show the 5.x timer checkpoint (config/timercheck).

    Last read time, timer log flush position, the last and the master's timer queue offsets, and the data
    version (state version, timestamp, counter).
    """
    from rmqstore.ops import timercompaction as tc

    fmt = reading.format
    with reading.open(store) as st:
        path, cp = tc.read_timer_checkpoint(st)
    row = {**cp.to_json(), "lastReadTime": format_time_ms(cp.last_read_time_ms)}
    render_rows([row], fmt, columns=fields.TIMER_CHECKPOINT, title=str(path))


CompactionTopic = Annotated[str, typer.Argument(help="Topic (the compaction queue's directory).", show_default=False)]
CompactionQueue = Annotated[int, typer.Argument(help="Queue id.", show_default=False)]


@command(app, "compaction-log", Reading, epilog="Example: rmqstore dump compaction-log STORE TopicC 0 --format ndjson")
def compaction_log_command(
    store: StorePath,
    topic: CompactionTopic,
    queue: CompactionQueue,
    body: Annotated[BodyMode | None, typer.Option(help="How to show bodies (default: text in tables).")] = None,
    *,
    reading: Reading,
) -> None:
    """List the records of one 5.x compaction log queue (compaction/compactionLog/TOPIC/QUEUE).

    Commit log records whose commitLogOffset is their position in the compaction log, and the blank that
    closes a file.
    """
    from rmqstore.ops import timercompaction as tc

    fmt = reading.format
    mode = (body or (BodyMode.text if fmt is Format.table else BodyMode.base64)).value
    with reading.open(store) as st:
        rows = tc.compaction_log_rows(st, topic, queue, body=mode)
        cols = fields.COMPACTION_LOG_TABLE if fmt is Format.table else fields.COMPACTION_LOG
        render_rows(rows, fmt, columns=None if fmt in (Format.json, Format.ndjson) else cols, title=f"{topic} {queue}")


@command(app, "compaction-cq", Reading, epilog="Example: rmqstore dump compaction-cq STORE TopicC 0 --format csv")
def compaction_cq_command(
    store: StorePath, topic: CompactionTopic, queue: CompactionQueue, *, reading: Reading
) -> None:
    """List the units of one 5.x compaction consume queue (compaction/compactionCq/TOPIC/QUEUE).

    Compaction log offset, size, tagsCode, store time and queue offset of each message, and the end unit
    that closes a file.
    """
    from rmqstore.ops import timercompaction as tc

    fmt = reading.format
    with reading.open(store) as st:
        rows = tc.compaction_cq_rows(st, topic, queue)
        render_rows(rows, fmt, columns=fields.COMPACTION_CQ, title=f"{topic} {queue}")


# ------------------------------------------------------------------------------------ dledger


@command(app, "dledger-entries", Reading, epilog="Example: rmqstore dump dledger-entries STORE --format csv")
def dledger_entries_command(store: StorePath, *, reading: Reading) -> None:
    """List the frames of a DLedger commit log: every entry header, the blanks, and damage.

    Entry index, term, position (the offset of the entry; its record starts 48 bytes later), size,
    magic, channel, the two CRC fields, body length, and whether the member checkpoint counts the
    entry as committed. A file's chain stops at the first bytes that are not an entry (a row with
    kind "invalid" and why); the next file is read on. Exit 7 on a store that is not in DLedger mode.
    """
    fmt = reading.format
    with reading.open(store) as st:
        cols = fields.DLEDGER_ENTRY_TABLE if fmt is Format.table else fields.DLEDGER_ENTRY
        render_rows(lib.dledger_entries(st), fmt, columns=list(cols), title="DLedger entries")


@command(app, "dledger-index", Reading, epilog="Example: rmqstore dump dledger-index STORE --format ndjson")
def dledger_index_command(store: StorePath, *, reading: Reading) -> None:
    """List the units of the DLedger index files: per entry index, the entry's position, size and term.

    Units are read in order up to the first unit of zeros (the index's write position). Exit 7 on a
    store that is not in DLedger mode.
    """
    with reading.open(store) as st:
        render_rows(
            lib.dledger_index_units(st), reading.format, columns=list(fields.DLEDGER_INDEX), title="DLedger index"
        )


# ------------------------------------------------------------------------------------- index

_INDEX_COLUMNS = [
    "name", "beginTime", "endTime", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount", "entryCount",
    "usedSlots", "slotFill", "fill", "writeFull",
]  # fmt: skip
_ENTRY_COLUMNS = ["file", "slot", "number", "keyHash", "phyOffset", "timeDiff", "time", "prevIndex"]


def _with_times(row: dict[str, Any]) -> dict[str, Any]:
    for src, dst in (("beginTimestamp", "beginTime"), ("endTimestamp", "endTime"), ("timestamp", "time")):
        if src in row:
            row[dst] = _time(row[src])
    return row


@command(app, "index", Reading, epilog="Example: rmqstore dump index STORE --key TopicA order-42")
def index_command(
    store: StorePath,
    key: Annotated[
        tuple[str, str] | None,
        typer.Option("--key", metavar="TOPIC KEY", help="Show the slot of TOPIC#KEY in every file and walk its chain."),
    ] = None,
    entries: Annotated[bool, typer.Option("--entries", help="List every entry of every index file.")] = False,
    quiet: QuietOpt = False,
    *,
    reading: Reading,
) -> None:
    """Show the header of every index file: time range, offset range, slot and entry counts, fill.

    STORE may be one index file (STORE/index/NAME): that file only.

    --key TOPIC KEY shows, per file, the hash slot of TOPIC#KEY and the chain of entries it heads
    (newest first; hashMatch says whether an entry's keyHash is the key's, as the broker compares
    only hashes). --entries lists every entry instead. Exits 3 when a file is damaged.
    """
    fmt = reading.format
    problems: list[Problem] = []
    only: str | None = None  # one index file given instead of the store
    seg = stores.segment_file(store)
    if seg is not None:
        if seg.kind != "index":
            raise InputError(f"{store}: not an index file; use rmqstore dump {seg.kind} {store}")
        store, only = seg.root, seg.path.name
    with reading.open(store) as st:
        if key is not None:
            rows: list[dict[str, Any]] = []
            for head, chain in lib.index_key_chains(st, key[0], key[1], problems=problems):
                if only is not None and head.file != only:
                    continue
                base = {"file": head.file, "key": head.key, "slot": head.slot, "slotValue": head.slot_value}
                if not chain:
                    rows.append({**base, "number": None})
                rows.extend({**base, **_with_times(e.to_json())} for e in chain)
            cols = [
                "file",
                "key",
                "slot",
                "slotValue",
                "number",
                "keyHash",
                "hashMatch",
                "phyOffset",
                "time",
                "prevIndex",
            ]
            render_rows(rows, fmt, columns=None if fmt in (Format.json, Format.ndjson) else cols, title="index chain")
        elif entries:
            data = (
                _with_times(e.to_json())
                for e in lib.index_entries(st, problems=problems)
                if only is None or e.file == only
            )
            if fmt is Format.json:
                write_json_array(data)
            else:
                render_rows(data, fmt, columns=None if fmt is Format.ndjson else _ENTRY_COLUMNS, title="index entries")
        else:
            summaries = [s.to_json() for s in lib.index_summaries(st, problems=problems)]
            summaries = [x for x in summaries if only is None or x["name"] == only]
            if fmt in (Format.json, Format.ndjson, Format.csv):
                render_rows(summaries, fmt)
            else:
                render_rows(map(_with_times, summaries), fmt, columns=_INDEX_COLUMNS, title="index files")
    _finish(problems, quiet)


# ------------------------------------------------------------------------- checkpoint, config


@command(app, "checkpoint", Reading)
def checkpoint_command(store: StorePath, *, reading: Reading) -> None:
    """Show the checkpoint file: the three flush timestamps and what recovery derives from them."""
    fmt = reading.format
    with reading.open(store) as st:
        cp = st.read_checkpoint()
        if cp is None:
            raise ProblemsFound(f"{st.config.checkpoint_path}: no checkpoint file")
    data: dict[str, Any] = {}
    for k, v in cp.to_json().items():
        data[k] = v
        if k.endswith("Timestamp") or k.startswith("minTimestamp"):  # each time also as ISO-8601, its own field
            data[k.removesuffix("Timestamp") + "Time"] = _time(v)
    if fmt is Format.table:  # for people: one line per field
        render_mapping(data, fmt, title="checkpoint")
    elif fmt in (Format.json, Format.ndjson):
        render_mapping(data, fmt)
    else:  # one record, one column per field
        render_rows([data], fmt, columns=list(data), title="checkpoint")


@command(app, "config", Reading, epilog="Example: rmqstore dump config STORE consumerOffset.json --format json")
def config_command(
    store: StorePath,
    name: Annotated[str | None, typer.Argument(help="Config file name, e.g. topics.json (default: list them).")] = None,
    *,
    reading: Reading,
) -> None:
    """Show a config/*.json file as the broker loads it (fastjson integer keys handled), or list them.

    A file that is missing, empty or unparsable is read from its .bak copy, as the broker does;
    that is reported on stderr and exits 3 after printing.
    """
    fmt = reading.format
    with reading.open(store) as st:
        if name is None:
            files = [{"name": c.name, "size": c.size} for c in lib.config_files(st)]
            render_rows(files, fmt, columns=["name", "size"], title=str(st.config.config_dir))
            return
        cf = lib.read_config_file(st, name)
    if fmt in (Format.json, Format.ndjson):
        render_mapping(cf.data, fmt)
    else:
        rows = [{"path": k, "value": v} for k, v in lib.flatten(cf.data)]
        render_rows(rows, fmt, columns=["path", "value"], title=f"{cf.path.name} ({cf.source})")
    if cf.source != "file":
        why = f": {cf.skipped}" if cf.skipped else ""
        note = "read from the .bak copy" if cf.source == "bak" else "empty or missing, as the broker treats it"
        raise ProblemsFound(f"{cf.path}: {note}{why}")
