"""`rmqstore spark`: bulk jobs over the stores of a whole cluster on Apache Spark (extra `spark`)."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from rmqstore.codec.rows import message_row

from . import _console
from . import _fields as fields
from ._common import (
    Format,
    QuietOpt,
    default_format,
    err,
    format_time_ms,
    local_time,
    render_mapping,
    render_rows,
    time_range,
)
from ._options import Changing, FmtOpt, Keeping, Reporting, command

app = typer.Typer(
    name="spark",
    help="Bulk jobs on Apache Spark over many stores: export to Parquet, statistics, find, redispatch, report. "
    "Needs the spark extra of rmqstore (pyspark, pyarrow) and Java 17+.",
    no_args_is_help=True,
)

StoresArg = Annotated[
    list[str],
    typer.Argument(help="Store root directories; globs (quoted) and comma lists are accepted.", show_default=False),
]
MasterOpt = Annotated[
    str,
    typer.Option(
        "--master",
        help="Spark master URL: local[*] runs embedded; spark://HOST:7077, yarn or k8s://https://HOST:PORT "
        "for a cluster (rmqstore is shipped to the executors; they need numpy and pyarrow).",
    ),
]
ConfOpt = Annotated[
    list[str] | None,
    typer.Option("--conf", help="A Spark setting KEY=VALUE (repeatable), e.g. spark.executor.memory=4g."),
]
ExecutorPythonOpt = Annotated[
    str | None,
    typer.Option("--executor-python", help="Python interpreter of the executors (default: python3 on the workers)."),
]
MaxFailuresOpt = Annotated[
    int | None,
    typer.Option(
        "--task-max-failures", min=1, help="Attempts per Spark task before the job fails (default 1 on a cluster)."
    ),
]
SplitSizeOpt = Annotated[
    str | None,
    typer.Option("--split-size", help="Commit log bytes per Spark task, e.g. 64m (default 128m)."),
]
VerifyCrcOpt = Annotated[
    bool, typer.Option("--verify-crc", help="Treat a record whose body CRC does not match as damaged (skip it).")
]
DEFAULT_MASTER = "local[*]"


def _stores(stores: list[str]) -> list[str]:
    return [p.strip() for item in stores for p in item.split(",") if p.strip()]


def _conf(quiet: bool, conf: list[str] | None = None, max_failures: int | None = None) -> dict[str, str]:
    out = {"spark.ui.showConsoleProgress": "false" if quiet else "true"}
    for item in conf or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            from rmqstore.errors import InputError

            raise InputError(f"--conf {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    if max_failures is not None:
        out["spark.task.maxFailures"] = str(max_failures)
    return out


@dataclass(frozen=True)
class Spark:
    """Where and how Spark runs: every Spark command takes these options."""

    master: MasterOpt = DEFAULT_MASTER
    conf: ConfOpt = None
    executor_python: ExecutorPythonOpt = None
    task_max_failures: MaxFailuresOpt = None

    def session(self, quiet: bool, stores: list[str], *, light: bool = False) -> Any:
        """The job's session; ``light``: the job's rows stay in the Python tasks (a lighter driver JVM)."""
        from rmqstore.spark.session import spark_session

        conf = _conf(quiet, self.conf, self.task_max_failures)
        return spark_session(
            self.master,
            conf=conf,
            executor_python=self.executor_python,
            stores=stores,
            silent_jvm=quiet or _console.quiet(),
            light_driver=light,
            archive_notice=None if quiet or _console.quiet() else _archive_notice,
        )


def _archive_notice(folder: Path) -> None:
    err.note(
        f"this first run also writes the Spark driver's class archive into {folder} (once, about 100 MB): "
        "later runs start faster; RMQSTORE_SPARK_CLASS_CACHE=off turns it off"
    )


@command(app, "export", Spark, epilog="Example: rmqstore spark export '/data/broker-*/store' --output /data/export")
def export_command(
    stores: StoresArg,
    spark: Spark,
    output: Annotated[Path, typer.Option("--output", "-o", help="Parquet output directory.", show_default=False)],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output directory.")] = False,
    split_size: SplitSizeOpt = None,
    verify_crc: VerifyCrcOpt = False,
    broker_version: Annotated[
        str | None,
        typer.Option("--broker-version", help="Property parsing of this broker version (default: each store's)."),
    ] = None,
    crc_ok: Annotated[bool, typer.Option("--crc-ok", help="Add the crcOk column (checks every body's CRC).")] = False,
    no_date: Annotated[bool, typer.Option("--no-date", help="Partition by topic only, not by UTC date.")] = False,
    fmt: FmtOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Export every commit log record to Parquet, partitioned by topic and UTC store date.

    One row per record with every header field, topic, tags, keys, properties, body and msgId
    (the columns of the rocketmq data source; crcOk with --crc-ok), under
    OUTPUT/topic=<topic>/date=<yyyy-MM-dd>/ (topic only with --no-date). The executors write
    the files with pyarrow straight from the record batches into a staging folder beside OUTPUT,
    renamed to OUTPUT once every task has succeeded (a failed job leaves OUTPUT as it was);
    OUTPUT must be a directory they all see (a shared filesystem) on a cluster.
    """
    from rmqstore.spark import jobs

    opts = jobs.ReadOptions(split_size=split_size, verify_crc=verify_crc, broker=broker_version, crc_ok=crc_ok)
    roots = jobs.check_stores(_stores(stores), opts)  # bad input is reported before Spark starts
    jobs.check_output(output, overwrite=overwrite)
    with spark.session(quiet, roots, light="://" not in str(output)) as session:
        res = jobs.export_parquet(session, roots, output, overwrite=overwrite, options=opts, by_date=not no_date)
    err.print(f"exported {res.rows} records of {len(res.stores)} store(s) to {res.output}")
    render_mapping({"output": res.output, "rows": res.rows, "stores": list(res.stores)}, default_format(fmt))


_STATS_TABLE = [
    "store", "topic", "queueId", "hour", "messages", "bytes", "firstStoreTime", "lastStoreTime", "distinctKeys",
]  # fmt: skip


ExactDistinctOpt = Annotated[
    bool,
    typer.Option(
        "--exact-distinct", help="Count distinct keys exactly (Spark's aggregation; slower) instead of estimating."
    ),
]


@command(app, "stats", Spark, epilog="Example: rmqstore spark stats '/data/broker-*/store' --format csv > stats.csv")
def stats_command(
    stores: StoresArg,
    spark: Spark,
    split_size: SplitSizeOpt = None,
    exact_distinct: ExactDistinctOpt = False,
    fmt: FmtOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Count messages per store, topic, queue and UTC hour: messages, bytes, first/last store time, distinct keys.

    bytes is the sum of the records' sizes on disk (TOTALSIZE); distinct keys counts the KEYS
    tokens: exactly up to 2048 per row, a HyperLogLog estimate above (about 1.6% standard error;
    distinctKeysExact says which) unless --exact-distinct. Times are epoch milliseconds in json,
    ndjson and csv.
    """
    from rmqstore.spark import jobs

    fmt = default_format(fmt)
    opts = jobs.ReadOptions(split_size)
    roots = jobs.check_stores(_stores(stores), opts)
    with spark.session(quiet, roots, light=not exact_distinct) as session:
        rows = jobs.stats_rows(session, roots, options=opts, exact_distinct=exact_distinct)
    note = jobs.estimates_note(rows)
    if note:
        err.print(f"note: {note}")
    if fmt in (Format.table, Format.plain):
        for r in rows:
            r["firstStoreTime"] = format_time_ms(r["firstStoreTimestamp"])
            r["lastStoreTime"] = format_time_ms(r["lastStoreTimestamp"])
            if not r["distinctKeysExact"]:
                r["distinctKeys"] = f"~{r['distinctKeys']}"
        render_rows(rows, fmt, columns=_STATS_TABLE, title="messages per queue and hour")
    else:
        render_rows(rows, fmt, columns=list(jobs.STATS_COLUMNS))


@command(
    app,
    "report",
    Spark,
    Reporting,
    epilog="rmqstore spark report '/data/broker-*/store' -o cluster.html\n"
    "rmqstore spark report /data/broker-a/store --master spark://spark-master:7077 -f json -o figures.json",
)
def report_command(
    stores: StoresArg,
    split_size: Annotated[
        str | None,
        typer.Option("--split-size", help="Commit log bytes per Spark task, whole files, e.g. 1g (default 128m)."),
    ] = None,
    quiet: QuietOpt = False,
    *,
    spark: Spark,
    reporting: Reporting,
) -> None:
    """The page of rmqstore report (or its JSON figures), the records counted on Spark.

    Spark tasks walk the commit log files as report does (whole files, small ones packed up to
    --split-size) and count the records per topic, queue, time and file; only the counters come
    back, merged per store. The rest is read on the driver by report's own code: info's ranges,
    the disk listing, consumer lag, the expiry plan and check's verdict. The figures, page and
    exit status are those of rmqstore report for the same stores. The stores must be visible to
    every executor under the same path.
    """
    from rmqstore.spark.report import count_traffic
    from rmqstore.spark.source import parse_size

    from . import _stores as store_paths
    from . import report as local

    size = None if split_size is None else parse_size(split_size)  # a bad size before Spark starts
    now_ms = local.now_of(reporting)
    targets = store_paths.expand([Path(p) for p in _stores(stores)])
    several = len(targets) > 1
    listed, errors = local.each_store(targets, functools.partial(_store_files, reporting=reporting), several=several)
    counted: dict[str, Any] = {}
    if listed:  # no Spark for a list of stores none of which reads
        with spark.session(quiet, [f.root for f in listed]) as session:
            counted = count_traffic(session, listed, split_size=size)
    reports, failed = local.each_store(
        [Path(f.root) for f in listed],
        lambda path: local.report_one(path, reporting, now_ms, quiet, traffic=counted[str(path)]),
        several=several,
    )
    local.finish(reports, errors + failed, reporting, now_ms)


def _store_files(path: Path, *, reporting: Reporting) -> Any:
    """A store's commit log files, listed on the driver as report lists them."""
    from rmqstore.spark.report import StoreFiles
    from rmqstore.store import open_store

    from . import _stores as store_paths

    store_paths.refuse_parent_of_store(path)
    with open_store(path, broker_config=reporting.broker_config, broker=reporting.broker_version) as st:
        segs, _ = st.commitlog_segments()
        return StoreFiles(str(path), st.config.broker, tuple(segs))


class BodyMode(str, enum.Enum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


_FIND_TEXT = ["store", *fields.QUERY_TABLE]
_FIND = ["store", *fields.QUERY]


def _find_row(store: str, rec: Any, body: str) -> dict[str, Any]:
    """A message found: its store, then the fields of ``dump commitlog`` (crcOk: every body is checked)."""
    return {"store": store, **message_row(rec, body=body, verify_crc=True, local_time=local_time())}


@command(
    app, "find", Spark, epilog="Example: rmqstore spark find '/data/broker-*/store' --key order-42 --format ndjson"
)
def find_command(
    stores: StoresArg,
    spark: Spark,
    key: Annotated[
        list[str] | None, typer.Option("--key", "-k", help="A KEYS token or UNIQ_KEY (repeatable: any).")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="The TAGS value (repeatable: any).")] = None,
    prop: Annotated[
        list[str] | None, typer.Option("--property", "-p", help="NAME=VALUE of a property (repeatable: all).")
    ] = None,
    body_contains: Annotated[
        list[str] | None, typer.Option("--body-contains", help="Text the body holds, as UTF-8 (repeatable: all).")
    ] = None,
    topic: Annotated[list[str] | None, typer.Option("--topic", "-t", help="Only these topics (repeatable).")] = None,
    since: Annotated[
        str | None, typer.Option(help="Store time from (epoch ms, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Store time up to, inclusive (same forms as --since).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many messages.")] = None,
    body: Annotated[
        BodyMode | None, typer.Option(help="How to show bodies (default: text in tables, base64 otherwise).")
    ] = None,
    split_size: SplitSizeOpt = None,
    fmt: FmtOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Find messages by key, tag, property or body text across stores, without the index files.

    Every commit log file of every store is walked; keys, topics and the time range are checked
    on the record headers and property bytes before bodies are read. Different options must all
    match, the values of one repeated --key, --tag or --topic any. Rows are those of rmqstore dump
    commitlog (RocketMQ field names in json/ndjson/csv) with the store they came from.
    """
    from rmqstore.spark import jobs

    fmt = default_format(fmt)
    window = time_range(since, until, "--since/--until")
    query = jobs.FindQuery(
        keys=tuple(key or ()),
        tags=tuple(tag or ()),
        properties=tuple(jobs.parse_property(p) for p in prop or ()),
        body_contains=tuple(body_contains or ()),
        topics=tuple(topic or ()),
        since_ms=window[0],
        until_ms=window[1],
    )
    query.check()
    opts = jobs.ReadOptions(split_size)
    roots = jobs.check_stores(_stores(stores), opts)
    body_mode = body.value if body else ("text" if fmt in (Format.table, Format.plain) else "base64")
    with spark.session(quiet, roots) as session:
        found = jobs.find_records(session, roots, query, limit=limit, options=opts)
        n = render_rows(
            (_find_row(store, rec, body_mode) for store, _, rec in found),
            fmt,
            columns=_FIND_TEXT if fmt is Format.table else None if fmt in (Format.json, Format.ndjson) else _FIND,
            title="messages found",
        )
    err.print(f"{n} message(s) found")


@command(
    app, "redispatch", Spark, Changing, Keeping, epilog="Example: rmqstore spark redispatch STORE --output /tmp/rebuild"
)
def redispatch_command(
    store: Annotated[Path, typer.Argument(help="Store root directory.", show_default=False)],
    output: Annotated[Path | None, typer.Option("--output", help="Build into this directory and swap nothing.")] = None,
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Only these topics' consume queues.")] = None,
    quiet: QuietOpt = False,
    *,
    spark: Spark,
    changing: Changing,
    keeping: Keeping,
) -> None:
    """Rebuild consume queues and index files with Spark: rmqstore redispatch --engine spark.

    Records are scanned in parallel and written on the driver by the same dispatcher as the
    local engine, so the files are byte for byte the same. With --output the rebuild goes to
    that directory and the store is not changed; otherwise it is swapped in as rmqstore
    redispatch does (quarantine, journal, exit 4 while a broker holds the store).
    """
    import contextlib

    from .redispatch import Engine
    from .redispatch import redispatch_command as local_command

    session: Any = contextlib.nullcontext()
    if not changing.dry_run and store.is_dir():  # errors before the engine runs are local_command's
        session = spark.session(quiet, [str(store)])
    with session:
        local_command(
            store,
            topic=topic,
            output=output,
            engine=Engine.spark,
            master=spark.master,
            quiet=quiet,
            changing=changing,
            keeping=keeping,
        )
