"""The records of many stores' commit logs counted on Spark for ``rmqstore spark report``.

Each task runs the report's own walk (``walk.traffic.walk_traffic``: the lenient walk as the broker
reads, folded into counters per topic, queue, time bucket and file) over whole commit log files,
and the counters of one store's files are merged by ``reduceByKey`` (``Traffic.merge``), first
within each task, then across them. Only the counters travel, never the records. A file is never
cut between tasks: the walk as the broker reads begins at a file's first byte, so the figures are
those of ``rmqstore report`` byte for byte, damaged files included. Small files are packed into
one task up to the split size, as the ``rocketmq`` source packs them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from rmqstore.spark.source import DEFAULT_OPEN_COST, DEFAULT_SPLIT_SIZE, Piece, pack_pieces
from rmqstore.store.layout import Segment
from rmqstore.walk.traffic import Traffic, walk_traffic


@dataclass(frozen=True, slots=True)
class StoreFiles:
    """One store's commit log files as the driver listed them, and whose reading rules apply."""

    root: str
    broker: str
    segments: tuple[Segment, ...]


def plan_tasks(stores: Sequence[StoreFiles], split_size: int | None = None) -> list[tuple[Piece, ...]]:
    """Whole files grouped into tasks of about ``split_size`` bytes (a file alone when larger)."""
    pieces = [
        Piece(s.root, None, str(seg.path), seg.base_offset, 0, seg.size, s.broker, seg.framing)
        for s in stores
        for seg in s.segments
    ]
    return pack_pieces(pieces, split_size or DEFAULT_SPLIT_SIZE, DEFAULT_OPEN_COST)


def count_task(tasks: Iterator[tuple[Piece, ...]]) -> Iterator[tuple[str, Traffic]]:
    """The counters of each store's files in a task's groups (runs in a task)."""
    for group in tasks:
        for root, pieces in itertools.groupby(group, key=lambda p: p.store):
            files = list(pieces)
            segs = [Segment(Path(p.path), p.base, p.end, p.framing) for p in files]
            yield root, walk_traffic(segs, files[0].broker)


def _merged(a: Traffic, b: Traffic) -> Traffic:
    return a.merge(b)


def count_traffic(
    spark: SparkSession, stores: Sequence[StoreFiles], *, split_size: int | None = None
) -> dict[str, Traffic]:
    """Per store root, the counters ``rmqstore report`` gets from its walk of every commit log file."""
    tasks = plan_tasks(stores, split_size)
    counted: dict[str, Traffic] = {}
    if tasks:
        rdd = spark.sparkContext.parallelize(tasks, len(tasks))
        counted = rdd.mapPartitions(count_task).reduceByKey(_merged).collectAsMap()
    return {s.root: counted.get(s.root) or Traffic() for s in stores}
