"""Bulk jobs over the commit logs of many stores: export to Parquet, per-hour statistics, find.

Each job takes a running SparkSession (see :mod:`rmqstore.spark.session`) and store patterns
(paths or globs); the stores are checked on the driver first, so a wrong path is one clear
error instead of a failed Spark task. Times are UTC whatever the session time zone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import operator
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DateType, LongType, StringType, StructField, StructType

from rmqstore.errors import InputError, UnsafePlan
from rmqstore.safety.files import fsync_dir
from rmqstore.spark.codec import Record
from rmqstore.spark.source import (
    COMMITLOG_SCHEMA,
    COMMITLOG_SOURCE,
    CONSUMEQUEUE_SCHEMA,
    CONSUMEQUEUE_SOURCE,
    CommitLogSourceReader,
    CommitLogSplit,
    StoreInfo,
    commitlog_schema,
    parse_size,
    piece_chunks,
    read_split_batches,
    register,
    resolve_stores,
    split_chunk,
)
from rmqstore.spark.stats import (
    HLL_ERROR,
    STATS_READ_COLUMNS,
    GroupKey,
    GroupStats,
    chunk_columns,
    fold_columns,
    merge_summaries,
)
from rmqstore.store import open_store
from rmqstore.store.reader import CommitLogReader

MS_PER_DAY = 86_400_000
MS_PER_HOUR = 3_600_000
EXPORT_PARTITIONS = ("topic", "date")
_TOPIC_FIELD = next(f for f in COMMITLOG_SCHEMA.fields if f.name == "topic")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How the commit logs are read (the ``rocketmq`` source's options)."""

    split_size: int | str | None = None  # bytes per partition (default 128 MiB)
    partitions_per_file: int | None = None
    verify_crc: bool = False
    broker: str | None = None  # broker version whose property parser to follow
    crc_ok: bool = False  # add the crcOk column (a CRC of every body)
    keys: tuple[str, ...] = ()  # read only records with one of these as a KEYS token or UNIQ_KEY
    cores: int | None = None  # without a split size: a multiple of this many splits of one size

    def source_options(self, roots: Sequence[str]) -> dict[str, str]:
        """The options as the ``rocketmq`` source takes them."""
        out = {"paths": json.dumps(list(roots))}
        if self.split_size is not None:
            out["splitSize"] = str(parse_size(self.split_size))
        if self.partitions_per_file is not None:
            out["partitionsPerFile"] = str(self.partitions_per_file)
        if self.verify_crc:
            out["verifyCrc"] = "true"
        if self.broker:
            out["brokerVersion"] = self.broker
        if self.crc_ok:
            out["crcOk"] = "true"
        if self.keys:
            out["keys"] = json.dumps(list(self.keys))
        if self.cores:
            out["cores"] = str(self.cores)
        return out

    def apply(self, reader: DataFrameReader) -> DataFrameReader:
        for k, v in self.source_options([]).items():
            if k != "paths":
                reader = reader.option(k, v)
        return reader


def _stores(stores: Sequence[str | Path], opts: ReadOptions) -> list[StoreInfo]:
    if not stores:
        raise InputError("no store given")
    return resolve_stores([str(s) for s in stores], broker=opts.broker)


def check_stores(stores: Sequence[str | Path], options: ReadOptions | None = None) -> list[str]:
    """The store roots ``stores`` (paths or globs) name; StoreNotFound before any Spark work."""
    return [s.root for s in _stores(stores, options or ReadOptions())]


def check_output(output: str | Path, *, overwrite: bool) -> None:
    """Refuse (UnsafePlan) to write an export over a non-empty local directory unless ``overwrite``."""
    out = str(output)
    local = Path(out) if "://" not in out else None
    if local is not None and local.exists() and not overwrite and (not local.is_dir() or _holds_files(local)):
        raise UnsafePlan(f"{out}: output exists and is not empty; choose another directory or overwrite it")


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` holds anything but the staging folder a killed export left in it."""
    root = folder.resolve()
    staging = staging_dir(root)
    left = staging.name if staging.parent == root else None
    return any(p.name != left for p in folder.iterdir())


def read_commitlog(
    spark: SparkSession,
    stores: Sequence[str | Path],
    *,
    columns: Sequence[str] | None = None,
    options: ReadOptions | None = None,
) -> DataFrame:
    """One row per commit log record of ``stores``; ``columns`` limits what is decoded and shipped."""
    opts = options or ReadOptions()
    reader = _source_reader(spark, COMMITLOG_SOURCE, _stores(stores, opts))
    if columns is not None:
        by_name = {f.name: f for f in COMMITLOG_SCHEMA.fields}
        unknown = [c for c in columns if c not in by_name]
        if unknown:
            raise InputError(f"unknown column(s): {', '.join(unknown)}")
        reader = reader.schema(StructType([by_name[c] for c in columns]))
    return opts.apply(reader).load()


def read_consumequeue(
    spark: SparkSession, stores: Sequence[str | Path], *, split_size: int | str | None = None
) -> DataFrame:
    """One row per consume queue entry of ``stores`` (fillers and entries after the end left out)."""
    reader = _source_reader(spark, CONSUMEQUEUE_SOURCE, _stores(stores, ReadOptions()))
    if split_size is not None:
        reader = reader.option("splitSize", str(parse_size(split_size)))
    return reader.schema(CONSUMEQUEUE_SCHEMA).load()


def _source_reader(spark: SparkSession, source: str, infos: list[StoreInfo]) -> DataFrameReader:
    register(spark)
    return spark.read.format(source).option("paths", json.dumps([s.root for s in infos]))


def utc_date(ms: Column) -> Column:
    """The UTC calendar date of an epoch-millisecond column, whatever the session time zone."""
    return F.date_from_unix_date(F.floor(ms / MS_PER_DAY).cast("int"))


def utc_hour_label(ms: Column) -> Column:
    """``2026-11-22T03:00Z`` for the UTC hour holding an epoch-millisecond value."""
    hour_of_day = (F.floor(ms / MS_PER_HOUR) % 24).cast("int")
    return F.concat(utc_date(ms).cast("string"), F.lit("T"), F.lpad(hour_of_day.cast("string"), 2, "0"), F.lit(":00Z"))


# ---------------------------------------------------------------------------------------------
# export


@dataclass(frozen=True, slots=True)
class ExportResult:
    output: str
    rows: int
    stores: tuple[str, ...]


def export_parquet(
    spark: SparkSession,
    stores: Sequence[str | Path],
    output: str | Path,
    *,
    overwrite: bool = False,
    options: ReadOptions | None = None,
    compression: str = "snappy",
    by_date: bool = True,
) -> ExportResult:
    """Write every record to Parquet under ``output/topic=<topic>/date=<yyyy-MM-dd>/`` (UTC store date;
    ``by_date=False``: ``output/topic=<topic>/``).

    Each task writes the record batches of its split with pyarrow, one file per task and
    directory, without the rows going through the JVM, into a staging folder beside ``output``;
    when every task has succeeded the driver renames the folder into place (``commit_export``),
    so ``output`` holds either the whole export or what it held before. ``output`` with a scheme
    (``hdfs://``) goes through Spark's own Parquet writer instead.
    """
    out = str(output)
    check_output(out, overwrite=overwrite)
    opts = options or ReadOptions()
    infos = _stores(stores, opts)
    parts = EXPORT_PARTITIONS if by_date else EXPORT_PARTITIONS[:1]
    if "://" in out:
        return _export_with_spark(spark, infos, out, overwrite, opts, compression, parts)
    target = Path(out).resolve()  # a link to a folder: the export goes where it leads
    staging = staging_dir(target)
    shutil.rmtree(staging, ignore_errors=True)  # a killed run's: only ever written by an export
    staging.mkdir(parents=True)
    try:
        reader, splits = _task_splits(spark, opts, infos, commitlog_schema(crc_ok=opts.crc_ok))
        rows = 0
        if splits:
            task = functools.partial(
                export_split, output=str(staging), schema=reader.schema, parts=parts, compression=compression
            )
            rdd = spark.sparkContext.parallelize(list(enumerate(splits)), len(splits))
            rows = sum(rdd.mapPartitions(task).collect())
        (staging / "_SUCCESS").touch()
        commit_export(staging, target, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportResult(out, rows, tuple(s.root for s in infos))


def staging_dir(target: Path) -> Path:
    """Where an export to ``target`` is written before it is renamed into place: beside it, on the same
    filesystem; inside it when it is a mount point (which no rename replaces), as Spark's own
    committer does."""
    if os.path.ismount(target):
        return target / "_temporary"
    return target.with_name(f".{target.name}.rmqstore-export")


def commit_export(staging: Path, target: Path, *, overwrite: bool) -> None:
    """Put a finished export in place: ``staging`` renamed to ``target`` (which may be an empty folder:
    the rename replaces it, and fails on one that is no longer empty). With ``overwrite`` what
    ``target`` held is moved aside first and removed once the export is in place."""
    if staging.parent == target:
        _commit_inside(staging, target, overwrite=overwrite)
        return
    old = target.with_name(f".{target.name}.rmqstore-replaced")
    if overwrite and (target.exists() or target.is_symlink()):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(staging, target)
    fsync_dir(target.parent)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old)
    elif old.exists() or old.is_symlink():
        old.unlink()


def _task_splits(
    spark: SparkSession, opts: ReadOptions, infos: list[StoreInfo], schema: StructType
) -> tuple[CommitLogSourceReader, list[CommitLogSplit]]:
    """The source's splits of ``infos`` for a job whose tasks read them directly: without a split
    size, an even cut over the session's cores (no core idle in the last round)."""
    if opts.cores is None:
        opts = replace(opts, cores=int(spark.sparkContext.defaultParallelism))
    reader = CommitLogSourceReader(opts.source_options([s.root for s in infos]), schema)
    return reader, [p for p in reader.partitions() if isinstance(p, CommitLogSplit)]


def _commit_inside(staging: Path, target: Path, *, overwrite: bool) -> None:
    """A finished export put in a mount point: what it held removed (``overwrite``), then each entry
    of ``staging`` moved up, ``_SUCCESS`` last (until it is there the export is not complete)."""
    for p in target.iterdir():
        if p == staging:
            continue
        if not overwrite:
            raise UnsafePlan(f"{target}: output exists and is not empty; choose another directory or overwrite it")
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for name in sorted(os.listdir(staging), key=lambda n: n == "_SUCCESS"):
        os.rename(staging / name, target / name)
    staging.rmdir()
    fsync_dir(target)


# Characters Spark escapes in partition directory names (ExternalCatalogUtils.escapePathName).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(0x20))


def partition_dir(name: str, value: str) -> str:
    """``name=value`` with the characters Spark escapes as ``%XX``: a topic is data, never a path."""
    if value == "":
        return f"{name}=__HIVE_DEFAULT_PARTITION__"
    return name + "=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


EXPORT_ROW_GROUP = 1 << 15  # rows a part file's row group gathers before it is written
EXPORT_BUFFER = 16 << 20  # bytes of record batches a task holds for all its files at once, at most
# Columns with a value per record: a dictionary of them is tried and dropped in every row group, at
# twice the write's cost; the others (hosts, files, queues, flags, tags, sizes) are dictionary-encoded.
_PLAIN_COLUMNS = frozenset(
    "filePos commitLogOffset queueOffset bodyCRC bornTimestamp storeTimestamp preparedTransactionOffset "
    "body msgId uniqKey keys properties".split()
)


def export_split(
    items: Iterator[tuple[int, CommitLogSplit]],
    *,
    output: str,
    schema: StructType,
    parts: tuple[str, ...],
    compression: str,
) -> Iterator[int]:
    """Write the records of splits as Parquet files under ``output`` (runs in a task); yields row counts."""
    for index, split in items:
        files = PartFiles(Path(output), index, compression)
        rows = 0
        try:
            for batch in read_split_batches(split, schema):
                for dirs, sub in partitioned(batch, parts):
                    files.add(dirs, sub)
                rows += batch.num_rows
        except BaseException:
            files.abort()
            raise
        files.close()
        yield rows


def partitioned(batch: Any, parts: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The rows of a batch per partition directory (``topic=`` and ``date=``), without the topic
    column, in commit log order."""
    import numpy as np
    import pyarrow as pa

    topic = batch.column("topic").dictionary_encode()
    codes = topic.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    labels = topic.dictionary.to_pylist()
    day = batch.column("storeTimestamp").to_numpy() // MS_PER_DAY if "date" in parts else codes * 0
    key = codes * (1 << 32) + day
    data = batch.drop_columns(["topic"])
    uniq, inverse = np.unique(key, return_inverse=True)
    for j, k in enumerate(uniq.tolist()):
        dirs = [partition_dir("topic", labels[k >> 32])]
        if "date" in parts:
            date = dt.date(1970, 1, 1) + dt.timedelta(days=int(k & 0xFFFFFFFF) - (1 << 32 if k & (1 << 31) else 0))
            dirs.append(f"date={date.isoformat()}")
        yield (
            tuple(dirs),
            data.filter(pa.array(inverse == j)) if len(uniq) > 1 else data,
        )  # a filter: cheaper than a take of maps


class PartFiles:
    """A task's Parquet files, one per partition directory: batches gathered into row groups of
    ``EXPORT_ROW_GROUP`` rows, the largest written early when they hold ``EXPORT_BUFFER`` bytes;
    each file is written under a temporary name and renamed when complete."""

    def __init__(self, root: Path, index: int, compression: str) -> None:
        self.root, self.index, self.compression = root, index, compression
        self.files: dict[tuple[str, ...], tuple[Any, Path, Path]] = {}
        self.pending: dict[tuple[str, ...], list[Any]] = {}
        self.held = 0

    def add(self, dirs: tuple[str, ...], batch: Any) -> None:
        group = self.pending.setdefault(dirs, [])
        group.append(batch)
        self.held += batch.nbytes
        if sum(b.num_rows for b in group) >= EXPORT_ROW_GROUP:
            self._flush(dirs)
        while self.held > EXPORT_BUFFER and self.pending:
            self._flush(max(self.pending, key=lambda d: sum(b.nbytes for b in self.pending[d])))

    def _flush(self, dirs: tuple[str, ...]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches = self.pending.pop(dirs)
        self.held -= sum(b.nbytes for b in batches)
        f = self.files.get(dirs)
        if f is None:
            d = self.root.joinpath(*dirs)
            d.mkdir(parents=True, exist_ok=True)
            final = d / f"part-{self.index:05d}.{self.compression}.parquet"
            tmp = d / f".part-{self.index:05d}.{os.getpid()}.tmp"
            schema = batches[0].schema
            dictionary = [n for n in schema.names if n not in _PLAIN_COLUMNS]
            writer = pq.ParquetWriter(tmp, schema, compression=self.compression, use_dictionary=dictionary)
            f = self.files[dirs] = (writer, tmp, final)
        f[0].write_table(pa.Table.from_batches(batches), row_group_size=EXPORT_ROW_GROUP * 2)

    def close(self) -> None:
        for dirs in list(self.pending):
            self._flush(dirs)
        for w, tmp, final in self.files.values():
            w.close()
            os.replace(tmp, final)

    def abort(self) -> None:
        for w, tmp, _ in self.files.values():
            w.close()
            tmp.unlink(missing_ok=True)


def _export_with_spark(
    spark: SparkSession,
    infos: list[StoreInfo],
    out: str,
    overwrite: bool,
    opts: ReadOptions,
    compression: str,
    parts: tuple[str, ...],
) -> ExportResult:
    df = read_commitlog(spark, [s.root for s in infos], options=opts)
    df = df.withColumn("date", utc_date(F.col("storeTimestamp")))
    if "date" not in parts:
        df = df.drop("date")
    (
        df.sortWithinPartitions(*parts, "commitLogOffset")
        .write.mode("overwrite" if overwrite else "errorifexists")
        .option("compression", compression)
        .partitionBy(*parts)
        .parquet(out)
    )
    rows = read_export(spark, out).count()  # from the Parquet footers, not a second scan of the stores
    return ExportResult(out, rows, tuple(s.root for s in infos))


def read_export(spark: SparkSession, path: str | Path) -> DataFrame:
    """An export read back with the source's column names, types and order (``date`` last when present)."""
    probe = spark.read.parquet(str(path))
    names = set(probe.columns)
    fields = [f for f in COMMITLOG_SCHEMA.fields if f.name in names]
    has_date = "date" in names
    schema = StructType([*(f for f in fields if f.name != "topic"), _TOPIC_FIELD])
    if has_date:
        schema = StructType([*schema.fields, StructField("date", DateType(), False)])
    df = spark.read.schema(schema).parquet(str(path))
    return df.select(*(f.name for f in fields), *(["date"] if has_date else []))


# ---------------------------------------------------------------------------------------------
# stats


STATS_COLUMNS = (
    "store",
    "topic",
    "queueId",
    "hour",
    "hourStartMs",
    "messages",
    "bytes",
    "firstStoreTimestamp",
    "lastStoreTimestamp",
    "distinctKeys",
    "distinctKeysExact",
)
_STATS_SCHEMA = StructType(
    [
        *(next(f for f in COMMITLOG_SCHEMA.fields if f.name == name) for name in STATS_COLUMNS[:3]),
        StructField("hour", StringType(), False),
        StructField("hourStartMs", LongType(), False),
        StructField("messages", LongType(), False),
        StructField("bytes", LongType(), False),
        StructField("firstStoreTimestamp", LongType(), False),
        StructField("lastStoreTimestamp", LongType(), False),
        StructField("distinctKeys", LongType(), False),
        StructField("distinctKeysExact", BooleanType(), False),
    ]
)


def stats(
    spark: SparkSession,
    stores: Sequence[str | Path],
    *,
    options: ReadOptions | None = None,
    exact_distinct: bool = False,
) -> DataFrame:
    """:func:`stats_rows` as a DataFrame (``STATS_COLUMNS``)."""
    rows = stats_rows(spark, stores, options=options, exact_distinct=exact_distinct)
    return spark.createDataFrame([tuple(r.values()) for r in rows], _STATS_SCHEMA)


def stats_rows(
    spark: SparkSession,
    stores: Sequence[str | Path],
    *,
    options: ReadOptions | None = None,
    exact_distinct: bool = False,
) -> list[dict[str, Any]]:
    """Per store, topic, queue and UTC hour of store time: messages, bytes (sum of record sizes),
    first and last store time and the number of distinct KEYS tokens, in that order; one pass.

    The tasks sum their splits and the driver merges the sums (:mod:`rmqstore.spark.stats`); the
    distinct count of a group with more than ``SET_LIMIT`` tokens is then a HyperLogLog estimate
    (``distinctKeysExact`` false, relative standard error ``HLL_ERROR``). ``exact_distinct`` counts
    every group exactly, with Spark's aggregation (slower: every token goes through the shuffle).
    """
    if exact_distinct:
        df = _exact_stats(spark, stores, options)
        return [{**r.asDict(), "distinctKeysExact": True} for r in df.collect()]
    opts = options or ReadOptions()
    infos = _stores(stores, opts)
    schema = StructType([f for f in COMMITLOG_SCHEMA.fields if f.name in STATS_READ_COLUMNS])
    _, splits = _task_splits(spark, opts, infos, schema)
    parts: list[dict[GroupKey, GroupStats]] = []
    if splits:
        parts = spark.sparkContext.parallelize(splits, len(splits)).mapPartitions(stats_split).collect()
    rows = []
    for (store, topic, qid, hour_ms), g in sorted(merge_summaries(parts).items()):
        hour = dt.datetime.fromtimestamp(hour_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:00Z")
        values = (store, topic, qid, hour, hour_ms, g.messages, g.bytes, g.first, g.last, *g.distinct.count())
        rows.append(dict(zip(STATS_COLUMNS, values, strict=True)))
    return rows


def estimates_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """What to tell of the rows whose distinct count is an estimate (None: every count is exact)."""
    estimated = sum(not r["distinctKeysExact"] for r in rows)
    if not estimated:
        return None
    return (
        f"distinctKeys of {estimated} row(s) are estimates (HyperLogLog, {HLL_ERROR:.1%} standard error); "
        "--exact-distinct counts them exactly"
    )


def stats_split(splits: Iterator[CommitLogSplit]) -> Iterator[dict[GroupKey, GroupStats]]:
    """The summary of a task's splits (runs in the task): one small dict, whatever the row count."""
    acc: dict[GroupKey, GroupStats] = {}
    for split in splits:
        for piece in split.pieces:
            for ctx, arrs, slow in piece_chunks(piece, check_crc=split.check_crc, chunk=split_chunk(split)):
                fold_columns(acc, piece.store, chunk_columns(ctx, arrs, slow))
    for g in acc.values():
        g.distinct.fold()
    yield acc


def _exact_stats(spark: SparkSession, stores: Sequence[str | Path], options: ReadOptions | None) -> DataFrame:
    """The statistics with Spark's aggregation: every KEYS token counted exactly."""
    cols = ["store", "topic", "queueId", "storeSize", "storeTimestamp", "keys"]
    df = read_commitlog(spark, stores, columns=cols, options=options)
    hour_start = (F.floor(F.col("storeTimestamp") / MS_PER_HOUR) * MS_PER_HOUR).cast("long")
    exploded = df.select(
        "store",
        "topic",
        "queueId",
        hour_start.alias("hourStartMs"),
        "storeSize",
        "storeTimestamp",
        F.posexplode_outer("keys").alias("keyPos", "key"),
    )
    # One row per key (at least one per message): count a message and its bytes on its first row only.
    first = F.col("keyPos").isNull() | (F.col("keyPos") == 0)
    agg = exploded.groupBy("store", "topic", "queueId", "hourStartMs").agg(
        F.count(F.when(first, True)).alias("messages"),
        F.sum(F.when(first, F.col("storeSize"))).cast("long").alias("bytes"),
        F.min("storeTimestamp").alias("firstStoreTimestamp"),
        F.max("storeTimestamp").alias("lastStoreTimestamp"),
        F.countDistinct("key").alias("distinctKeys"),
    )
    agg = agg.withColumn("hour", utc_hour_label(F.col("hourStartMs")))
    return agg.select(*STATS_COLUMNS[:-1]).orderBy("store", "topic", "queueId", "hourStartMs")


# ---------------------------------------------------------------------------------------------
# find


@dataclass(frozen=True, slots=True)
class FindQuery:
    """What to look for; values of one option match any (OR), different options must all match (AND)."""

    keys: tuple[str, ...] = ()  # a KEYS token or the UNIQ_KEY
    tags: tuple[str, ...] = ()  # the TAGS value
    properties: tuple[tuple[str, str], ...] = ()  # every one must match
    body_contains: tuple[str, ...] = ()  # every one must be in the body (UTF-8 bytes)
    topics: tuple[str, ...] = ()
    since_ms: int | None = None  # store time from, inclusive
    until_ms: int | None = None  # store time up to, inclusive

    @property
    def empty(self) -> bool:
        given = (self.keys, self.tags, self.properties, self.body_contains, self.topics)
        return not any(given) and self.since_ms is None and self.until_ms is None

    def columns(self) -> list[str]:
        """The columns the condition reads (bodies only for a body search)."""
        cols = ["store", "file", "filePos", "commitLogOffset"]
        for on, names in (
            (self.keys, ["keys", "uniqKey"]),
            (self.tags, ["tags"]),
            (self.properties, ["properties"]),
            (self.body_contains, ["body"]),
            (self.topics, ["topic"]),
            (self.since_ms is not None or self.until_ms is not None, ["storeTimestamp"]),
        ):
            cols += [n for n in names if on and n not in cols]
        return cols

    def check(self) -> None:
        if self.empty:
            raise InputError("nothing to find: give a key, tag, property, body text, topic or time range")

    def condition(self) -> Column:
        conds: list[Column] = []
        if self.keys:
            either = (F.array_contains("keys", k) | (F.col("uniqKey") == F.lit(k)) for k in self.keys)
            conds.append(functools.reduce(operator.or_, either))
        if self.tags:
            conds.append(F.col("tags").isin(list(self.tags)))
        for name, value in self.properties:
            conds.append(F.col("properties").getItem(name) == F.lit(value))
        for text in self.body_contains:
            # binary -> string keeps the bytes; contains() then compares bytes
            conds.append(F.col("body").cast("string").contains(text))
        if self.topics:
            conds.append(F.col("topic").isin(list(self.topics)))
        if self.since_ms is not None:
            conds.append(F.col("storeTimestamp") >= F.lit(self.since_ms))
        if self.until_ms is not None:
            conds.append(F.col("storeTimestamp") <= F.lit(self.until_ms))
        return F.coalesce(functools.reduce(operator.and_, conds), F.lit(False))


def parse_property(text: str) -> tuple[str, str]:
    """``K=V`` -> ``("K", "V")``; raises InputError."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InputError(f"--property {text!r} is not NAME=VALUE")
    return name, value


def find(
    spark: SparkSession,
    stores: Sequence[str | Path],
    query: FindQuery,
    *,
    limit: int | None = None,
    options: ReadOptions | None = None,
) -> DataFrame:
    """Messages matching ``query`` in every store, without using the index files, in commit log order."""
    query.check()
    opts = replace(options or ReadOptions(), keys=query.keys)  # read only records holding one of the keys
    df = read_commitlog(spark, stores, columns=query.columns(), options=opts).where(query.condition())
    df = df.orderBy("store", "commitLogOffset")
    return df.limit(limit) if limit is not None else df


def find_records(
    spark: SparkSession,
    stores: Sequence[str | Path],
    query: FindQuery,
    *,
    limit: int | None = None,
    options: ReadOptions | None = None,
) -> Iterator[tuple[str, str, Record]]:
    """``(store, file, record)`` of every match, in commit log order per store.

    Spark ships only where each match is; the driver decodes the records again from the files
    with the same codec, so a match is the full record (bodies included) without moving every
    body through Spark.
    """
    opts = options or ReadOptions()
    roots = [i.root for i in _stores(stores, opts)]
    df = find(spark, roots, query, limit=limit, options=opts)
    readers: dict[str, CommitLogReader] = {}
    with contextlib.ExitStack() as stack:
        for row in df.select("store", "file", "commitLogOffset").toLocalIterator():
            reader = readers.get(row.store)
            if reader is None:
                st = stack.enter_context(open_store(row.store, broker=opts.broker))
                reader = readers[row.store] = stack.enter_context(CommitLogReader.of(st, keep=1))
            _, rec = reader.decode_at(row.commitLogOffset)
            if isinstance(rec, Record):
                yield row.store, row.file, rec
