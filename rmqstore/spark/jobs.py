"""Bulk jobs over the commit logs of many stores: export to Parquet, per-hour statistics, find.

Each job takes a running SparkSession (see :mod:`rmqstore.spark.session`) and store patterns
(paths or globs); the stores are checked on the driver first, so a wrong path is one clear
error instead of a failed Spark task. Times are UTC whatever the session time zone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StructField, StructType

from ..commitlog import Record, decode_record
from ..errors import InputError, UnsafePlan
from ..store import map_file
from .source import (
    COMMITLOG_SCHEMA,
    COMMITLOG_SOURCE,
    CONSUMEQUEUE_SCHEMA,
    CONSUMEQUEUE_SOURCE,
    StoreInfo,
    parse_size,
    register,
    resolve_stores,
)

MS_PER_DAY = 86_400_000
MS_PER_HOUR = 3_600_000
EXPORT_PARTITIONS = ("topic", "date")
EXPORT_SCHEMA = StructType([*COMMITLOG_SCHEMA.fields, StructField("date", DateType(), False)])


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How the commit logs are read (the ``rocketmq`` source's options)."""

    split_size: int | str | None = None  # bytes per partition (default 128 MiB)
    partitions_per_file: int | None = None
    verify_crc: bool = False
    broker: str | None = None  # broker version whose property parser to follow

    def apply(self, reader: DataFrameReader) -> DataFrameReader:
        r = reader
        if self.split_size is not None:
            r = r.option("splitSize", str(parse_size(self.split_size)))
        if self.partitions_per_file is not None:
            r = r.option("partitionsPerFile", str(self.partitions_per_file))
        if self.verify_crc:
            r = r.option("verifyCrc", "true")
        if self.broker:
            r = r.option("brokerVersion", self.broker)
        return r


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
    if local is not None and local.exists() and not overwrite and (not local.is_dir() or any(local.iterdir())):
        raise UnsafePlan(f"{out}: output exists and is not empty; choose another directory or overwrite it")


def read_commitlog(
    spark: SparkSession,
    stores: Sequence[str | Path],
    *,
    columns: Sequence[str] | None = None,
    options: ReadOptions | None = None,
) -> DataFrame:
    """One row per commit log record of ``stores``; ``columns`` limits what is decoded and shipped."""
    opts = options or ReadOptions()
    infos = _stores(stores, opts)
    register(spark)
    reader = spark.read.format(COMMITLOG_SOURCE).option("paths", json.dumps([s.root for s in infos]))
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
    infos = _stores(stores, ReadOptions())
    register(spark)
    reader = spark.read.format(CONSUMEQUEUE_SOURCE).option("paths", json.dumps([s.root for s in infos]))
    if split_size is not None:
        reader = reader.option("splitSize", str(parse_size(split_size)))
    return reader.schema(CONSUMEQUEUE_SCHEMA).load()


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
) -> ExportResult:
    """Write every record to Parquet under ``output/topic=<topic>/date=<yyyy-MM-dd>/`` (UTC store date)."""
    out = str(output)
    check_output(out, overwrite=overwrite)
    opts = options or ReadOptions()
    infos = _stores(stores, opts)
    df = read_commitlog(spark, [s.root for s in infos], options=opts)
    df = df.withColumn("date", utc_date(F.col("storeTimestamp")))
    # Sorting inside each task writes each topic/date directory with one file per task.
    (
        df.sortWithinPartitions(*EXPORT_PARTITIONS, "commitLogOffset")
        .write.mode("overwrite" if overwrite else "errorifexists")
        .option("compression", compression)
        .partitionBy(*EXPORT_PARTITIONS)
        .parquet(out)
    )
    rows = read_export(spark, out).count()  # from the Parquet footers, not a second scan of the stores
    return ExportResult(out, rows, tuple(s.root for s in infos))


def read_export(spark: SparkSession, path: str | Path) -> DataFrame:
    """An export read back with the source's column names, types and order (``date`` last)."""
    df = spark.read.schema(EXPORT_SCHEMA).parquet(str(path))
    return df.select(*EXPORT_SCHEMA.fieldNames())


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
)


def stats(spark: SparkSession, stores: Sequence[str | Path], *, options: ReadOptions | None = None) -> DataFrame:
    """Per store, topic, queue and UTC hour of store time: messages, bytes (sum of record sizes),
    first and last store time and the number of distinct KEYS tokens; one pass over the data."""
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
    return agg.select(*STATS_COLUMNS).orderBy("store", "topic", "queueId", "hourStartMs")


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

    @property
    def empty(self) -> bool:
        return not (self.keys or self.tags or self.properties or self.body_contains or self.topics)

    def check(self) -> None:
        if self.empty:
            raise InputError("nothing to find: give a key, tag, property, body text or topic")

    def condition(self) -> Column:
        conds: list[Column] = []
        if self.keys:
            c = None
            for k in self.keys:
                one = F.array_contains("keys", k) | (F.col("uniqKey") == F.lit(k))
                c = one if c is None else (c | one)
            conds.append(c)  # type: ignore[arg-type]
        if self.tags:
            conds.append(F.col("tags").isin(list(self.tags)))
        for name, value in self.properties:
            conds.append(F.col("properties").getItem(name) == F.lit(value))
        for text in self.body_contains:
            # binary -> string keeps the bytes; contains() then compares bytes
            conds.append(F.col("body").cast("string").contains(text))
        if self.topics:
            conds.append(F.col("topic").isin(list(self.topics)))
        out = conds[0]
        for c in conds[1:]:
            out = out & c
        return F.coalesce(out, F.lit(False))


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
    df = read_commitlog(spark, stores, options=options).where(query.condition())
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
    brokers = {i.root: i.broker for i in _stores(stores, opts)}
    df = find(spark, list(brokers), query, limit=limit, options=opts)
    open_file: tuple[str, contextlib.ExitStack, Any] | None = None
    try:
        for row in df.select("store", "file", "filePos", "commitLogOffset").toLocalIterator():
            if open_file is None or open_file[0] != row.file:
                if open_file is not None:
                    open_file[1].close()
                stack = contextlib.ExitStack()
                open_file = (row.file, stack, stack.enter_context(map_file(Path(row.file))))
            base = row.commitLogOffset - row.filePos
            rec = decode_record(open_file[2], row.filePos, path=row.file, file_from=base, broker=brokers[row.store])
            if isinstance(rec, Record):
                yield row.store, row.file, rec
    finally:
        if open_file is not None:
            open_file[1].close()
