"""The Spark engine of ``rmqstore redispatch`` (store-format.md §9): decode in parallel, write on the driver.

The local engine (:func:`rmqstore.dispatch.rebuild.build`) walks each commit log file by TOTALSIZE
(the framing's chain of the file), cuts the record positions into chunks of
``columnar.BATCH`` records, decodes every chunk into dispatch columns and hands them, in order,
to :meth:`rmqstore.dispatch.Dispatcher.dispatch_columns`; the first chunk holding an invalid
record ends the walk there. This engine does exactly the same, except that the chunks are
decoded by Spark tasks: the driver makes the cheap header walk, each task re-walks its own
chunk (between two positions the driver found) and decodes it with the local engine's chunk
decoder, and the driver feeds the results in commit log order to the same Dispatcher. The
files written are therefore byte for byte those of ``--engine local``.

Tasks read the commit log files by path: on a cluster the store must be on a filesystem every
executor mounts at the same path.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.dispatch.dispatcher import Dispatcher, DispatchStats
from rmqstore.dispatch.engines import ENGINES, BuildScope
from rmqstore.errors import CorruptData
from rmqstore.spark import codec as columnar  # the columnar decoder, through the package's one import of the codecs
from rmqstore.spark.session import spark_session
from rmqstore.store import Store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment, StoreConfig


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """``count`` consecutive records of one file: the first at ``first``, the next one after them at ``after``."""

    path: str
    base: int
    size: int  # the file's length: records are read up to it, as the local engine reads them
    first: int  # frame positions
    after: int
    count: int
    framing: Framing = PLAIN


@dataclass(frozen=True, slots=True)
class ChunkStop:
    """Where and why a walk ended (``rmqstore.walk.requests.ScanStop`` with its error as text, to cross to a Spark task)."""

    pos: int
    reason: str  # "blank" | "end" | "invalid"
    error: str | None = None

    @property
    def text(self) -> str:
        """The stop reason as the local engine words it."""
        return f"invalid record: {self.error}" if self.reason == "invalid" and self.error else self.reason


@dataclass(frozen=True, slots=True)
class FileChunks:
    """The driver's walk of one file: the chunks to decode and where the walk stopped."""

    seg: Segment
    chunks: tuple[ChunkTask, ...]
    stop: ChunkStop


def _stop(s: Any) -> ChunkStop:
    return ChunkStop(s.pos, s.reason, None if s.error is None else str(s.error))


def decode_chunk(task: ChunkTask, cfg: StoreConfig) -> tuple[columnar.Columns | None, ChunkStop | None]:
    """The dispatch columns of one chunk, and the stop if an invalid record ends it (runs in a task)."""
    seg = Segment(Path(task.path), task.base, task.size, task.framing)
    with map_file(seg.path) as buf:
        if len(buf) < task.size:
            raise CorruptData(f"file shrank to {len(buf)} bytes while re-dispatching", path=seg.path, pos=len(buf))
        positions, _, _ = task.framing.chain(buf, task.first, task.after)
        if len(positions) != task.count:
            raise CorruptData("file changed while re-dispatching", path=seg.path, pos=task.first)
        u8 = np.frombuffer(buf, dtype=np.uint8, count=task.size)
        try:
            cols, bad = columnar.decode_columns(buf, u8, positions, seg, cfg, task.size)
        finally:
            del u8  # release the view so the map can close
    return cols, None if bad is None else _stop(bad)


def walk_files(
    segs: list[Segment], cfg: StoreConfig, from_phy: int, batch: int = columnar.BATCH
) -> Iterator[FileChunks]:
    """The files the dispatcher walk reaches from ``from_phy``, as ``columnar.iter_columns`` walks them."""
    for seg in segs:
        if seg.base_offset + seg.size <= from_phy:
            continue
        start = max(0, from_phy - seg.base_offset)
        with map_file(seg.path) as buf:
            size = len(buf)
            positions, stop_pos, reason = seg.framing.chain(buf, start, size)
            error = None
            if reason == "invalid":
                try:
                    columnar.decode_record(buf, stop_pos, path=str(seg.path), file_from=seg.base_offset, end=size)
                    error = str(CorruptData("invalid record", path=seg.path, pos=stop_pos))
                except CorruptData as e:
                    error = str(e)
        n = len(positions)
        chunks = tuple(
            ChunkTask(
                str(seg.path),
                seg.base_offset,
                size,
                int(seg.framing.frame_of(positions[i])),
                int(seg.framing.frame_of(positions[i + batch])) if i + batch < n else stop_pos,
                min(batch, n - i),
                seg.framing,
            )
            for i in range(0, n, batch)
        )
        yield FileChunks(seg, chunks, ChunkStop(stop_pos, reason, error))
        if reason != "blank":
            return


def _decoded(
    spark: SparkSession, walks: Iterator[FileChunks], cfg: StoreConfig
) -> Iterator[tuple[FileChunks, list[tuple[columnar.Columns | None, ChunkStop | None]]]]:
    """Each walked file with the decoded chunks, in order; the next wave is decoded while the
    driver writes the current one."""
    sc = spark.sparkContext
    wave_chunks = max(2, 2 * sc.defaultParallelism)

    def run(it: Iterator[ChunkTask]) -> list[tuple[columnar.Columns | None, ChunkStop | None]]:
        return [decode_chunk(t, cfg) for t in it]

    def next_wave() -> tuple[list[FileChunks], concurrent.futures.Future[Any] | None] | None:
        files: list[FileChunks] = []
        tasks: list[ChunkTask] = []
        for w in walks:
            files.append(w)
            tasks += w.chunks
            if len(tasks) >= wave_chunks:
                break
        if not files:
            return None
        if not tasks:
            return files, None
        rdd = sc.parallelize(tasks, len(tasks))
        return files, pool.submit(lambda: rdd.mapPartitions(run).collect())

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        current = next_wave()
        while current is not None:
            files, future = current
            results = future.result() if future is not None else []
            current = next_wave()  # walk on and start decoding the next files now
            k = 0
            for w in files:
                yield w, results[k : k + len(w.chunks)]
                k += len(w.chunks)


def spark_redispatch(
    st: Store,
    build_root: Path,
    scope: BuildScope | None = None,
    *,
    master: str | None = None,
    batch: int = columnar.BATCH,
) -> tuple[DispatchStats, int, str]:
    """Dispatch the commit log into the files under ``build_root``; returns (stats, end phy, stop reason).

    ``batch`` is the number of records per Spark task; the default is the local engine's chunk
    size, so even the Dispatcher's batches are the same.
    """
    cfg, scope = st.config, scope or BuildScope()
    segs, _ = st.commitlog_segments()
    start = scope.from_phy if scope.from_phy is not None else (segs[0].base_offset if segs else 0)
    topics = set(scope.topics) if scope.topics else None
    d = Dispatcher(cfg, root=build_root, consume_queue=scope.consume_queue, index=scope.index, topics=topics)
    end, reason = start, "end"
    try:
        with spark_session(master, conf={"spark.ui.showConsoleProgress": "false"}) as spark:
            decoded = _decoded(spark, walk_files(segs, cfg, start, batch), cfg)
            try:
                for walk, results in decoded:
                    stop = walk.stop
                    for cols, bad in results:
                        if cols is not None and len(cols):
                            d.dispatch_columns(cols)
                        if bad is not None:
                            stop = bad  # an invalid record inside the chunk ends the walk here
                            break
                    end, reason = walk.seg.base_offset + stop.pos, stop.text
                    if stop.reason != "blank":
                        break
            finally:
                decoded.close()  # waits for a wave still running, starts no other
    finally:
        stats = d.close(sync=True)
    return stats, end, reason


ENGINES["spark"] = spark_redispatch  # the library never imports this package itself
