"""Commit log records and consume queue entries as one Parquet file, with pyarrow alone (no Spark, no Java).

The columns and types are the Spark sources' (``rmqstore.walk.arrow.COMMITLOG_COLUMNS`` and
``CONSUMEQUEUE_COLUMNS``, the schema ``spark export`` writes, with ``topic`` kept as a column rather
than a directory). Batches are built column-wise from the mapped files and each is written as a row
group as soon as it is made, so memory stays at a few batches whatever the store's size. Like the
Spark export, the file holds the valid records only: damaged ranges are skipped (``dump`` in the
other formats and ``check`` name them). The file is written beside its final name and renamed into
place once complete and synced: a killed run leaves no half file under that name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rmqstore.errors import MissingExtra

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
except ImportError:
    raise MissingExtra(
        "--format parquet needs pyarrow; install the parquet extra: pip install 'rmqstore[parquet]'"
    ) from None

from rmqstore.safety.files import fsync_dir, fsync_file
from rmqstore.store import Store
from rmqstore.store.files import PAGE, map_file, release_pages
from rmqstore.store.layout import Segment
from rmqstore.walk.arrow import (
    COMMITLOG_COLUMNS,
    CONSUMEQUEUE_COLUMNS,
    RowFilter,
    arrow_schema,
    file_context,
    queue_file_batch,
    range_batches,
)

COMPRESSION = "snappy"  # Spark's default for Parquet
# Bytes of a commit log file walked at once, and records per batch (one row group each): the mapped
# window's pages, a batch's arrays and the writer's pages of one row group are what the export holds,
# well under 300 MB whatever the store's size.
WINDOW = 16 << 20
ROW_GROUP = 8192


def commitlog_schema(*, crc_ok: bool = False) -> pa.Schema:
    """The commit log columns of the Spark export: ``crcOk`` only when asked for."""
    return arrow_schema(COMMITLOG_COLUMNS, without=() if crc_ok else ("crcOk",))


QUEUE_SCHEMA = arrow_schema(CONSUMEQUEUE_COLUMNS)


class ParquetResult(NamedTuple):
    """A file written: where, how many rows, in how many row groups (one per batch)."""

    path: Path
    rows: int
    row_groups: int


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records go to the file (``dump commitlog``'s filters); None selects all."""

    topic: str | None = None
    queue_id: int | None = None
    key: str | None = None  # a KEYS token or the UNIQ_KEY
    tags: tuple[str, ...] | None = None  # any of these TAGS values
    since_ms: int | None = None  # store time, inclusive
    until_ms: int | None = None  # store time, inclusive
    from_phy: int | None = None
    to_phy: int | None = None  # exclusive
    limit: int | None = None

    @property
    def rows(self) -> RowFilter:
        """The filter the batch builder applies to header fields and keys before cutting bodies."""
        return RowFilter(
            topics=None if self.topic is None else frozenset([self.topic]),
            queue_ids=None if self.queue_id is None else frozenset([self.queue_id]),
            store_ts=(self.since_ms, self.until_ms),
            offsets=(self.from_phy, None if self.to_phy is None else self.to_phy - 1),
            keys=None if self.key is None else frozenset([self.key]),
        )


def _broker_name(st: Store) -> str | None:
    return st.config.broker_name if "brokerName" in st.config.explicit else None


def _segment_batches(
    st: Store, seg: Segment, schema: pa.Schema, sel: Selection, rows: RowFilter
) -> Iterator[pa.RecordBatch]:
    """The batches of the records of one commit log file inside the selection's range."""
    start = 0 if sel.from_phy is None else max(0, sel.from_phy - seg.base_offset)
    end = seg.size if sel.to_phy is None else min(seg.size, sel.to_phy - seg.base_offset)
    if start >= end:
        return
    with map_file(seg.path) as buf:
        if not len(buf):
            return
        ctx = file_context(
            str(st.root), _broker_name(st), str(seg.path), seg.base_offset, st.config.broker, buf, seg.framing
        )
        try:
            # A window at a time, as Spark splits a file (each record read in the window where it
            # starts): the walk never holds more than a window's pages, released once written.
            for lo in range(start, end, WINDOW):
                yield from range_batches(ctx, lo, min(lo + WINDOW, end), schema, flt=rows, chunk=ROW_GROUP)
                release_pages(buf, lo - lo % PAGE, min(lo + WINDOW, end))
        finally:
            del ctx  # release the views so the map can close


def commitlog_batches(st: Store, schema: pa.Schema, sel: Selection) -> Iterator[pa.RecordBatch]:
    """Record batches of a store's commit log records, in commit log order, filtered and limited."""
    segs, _ = st.commitlog_segments()
    left, rows = sel.limit, sel.rows
    tags = None if sel.tags is None else pa.array(sel.tags, pa.string())
    for seg in segs:
        if sel.to_phy is not None and seg.base_offset >= sel.to_phy:
            return
        for batch in _segment_batches(st, seg, schema, sel, rows):
            if tags is not None:
                batch = batch.filter(pc.fill_null(pc.is_in(batch.column("tags"), value_set=tags), False))
            if left is not None:
                batch = batch.slice(0, left)
                left -= batch.num_rows
            if batch.num_rows:
                yield batch
            if left == 0:
                return


def queue_batches(st: Store, topic: str, queue_id: int, schema: pa.Schema = QUEUE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Record batches of one consume queue's entries, a file at a time."""
    queue = st.consume_queues.queue(topic, queue_id)
    segs, _ = queue.files()
    for seg in segs:
        batch = queue_file_batch(str(st.root), _broker_name(st), queue, seg, schema)
        if batch is not None:
            yield batch


def write_parquet(
    output: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch], *, compression: str = COMPRESSION
) -> ParquetResult:
    """Write ``batches`` to ``output``, one row group each as they come; renamed into place when complete."""
    output = Path(output)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    rows = groups = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression=compression) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
                groups += 1
        fsync_file(tmp)
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(output.parent)
    return ParquetResult(output, rows, groups)
