"""PySpark Python data sources over store files: commit log records (§3) and consume queue entries (§4.1).

``spark.read.format("rocketmq").load("/data/broker-*/store")`` gives one row per commit log
record, decoded column-wise by :mod:`rmqstore.walk.arrow` (equal to the record codec's
``decode_record``); ``rocketmq_consumequeue`` gives one row per consume queue entry. Options:

* ``path`` / ``load(...)``: store roots; a comma list and shell globs are accepted.
* ``splitSize``: bytes of commit log per partition (``128m``, ``1g``, plain bytes; default
  128 MiB, so a 1 GiB file is read by 8 tasks); smaller files and file ends are packed into one
  partition up to that size, each counting ``openCost`` bytes (default 4m) more.
  ``partitionsPerFile`` instead splits every file into that many equal ranges, one per task.
  For consume queues: bytes of queue files per partition.
* ``cores``: the cores the job runs on; without ``splitSize`` and ``partitionsPerFile`` the commit
  logs are cut into a multiple of that many splits of one size (at most about 128 MiB each).
* ``verifyCrc`` (``true``/``false``, default false): a record whose body CRC does not match is
  treated as damage (as recovery with checkCRCOnRecover does).
* ``crcOk`` (default false): add the ``crcOk`` column (the body CRC checked) to the default
  schema; a schema given with ``.schema(...)`` that names it gets it too.
* ``keys``: a JSON list; only records with one of them as a KEYS token or UNIQ_KEY are read.
* ``brokerVersion``: whose property parser to follow (default: the store's broker.conf, else 4.4.0).
* ``batchSize``: rows per Arrow record batch (default 32768).

Filters on ``topic``, ``queueId`` (equality, IN), ``storeTimestamp`` and ``commitLogOffset``
(comparisons) are pushed down: rows are dropped from the header fields before bodies and
properties are cut, and a commit log offset range leaves whole files and ranges unread.
Only the columns of the schema are built (``read_commitlog(columns=...)`` gives a narrow one).

Splits: a partition is ``(file, [start, end))``. Its reader looks from ``start`` for the first
position ``p`` where a record decodes and its stored PHYSICALOFFSET equals file start + ``p``
(a record can hold any bytes in its body, but not its own position), then walks record by record
and returns every record that *starts* in ``[p, end)``, reading past ``end`` to finish the last
one. A record belongs to the one split where it starts, so none is lost or read twice at a
boundary.

Damage: where a record does not decode (bad magic, zeros, a size that does not fit, a wrong
PHYSICALOFFSET, with ``verifyCrc`` a bad CRC) the walk looks for the next valid record in the
same way and goes on; after a BLANK (end-of-file padding, §3.4) too. So the rows are every valid
record of every file, whatever the split sizes, where the broker's recovery would stop at the
first invalid one. On an undamaged store both are the same records.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from rmqstore.codec.arrays import RecordArrays
from rmqstore.codec.commitlog import Record
from rmqstore.codec.framing import PLAIN, Framing
from rmqstore.errors import InputError, StoreNotFound
from rmqstore.store import open_store
from rmqstore.store.files import map_file
from rmqstore.store.layout import Segment
from rmqstore.store.queue.interface import ConsumeQueue
from rmqstore.walk.arrow import (
    CHUNK,
    COLUMNS,
    COMMITLOG_COLUMNS,
    CONSUMEQUEUE_COLUMNS,
    RowFilter,
    SplitContext,
    column_types,
    file_context,
    queue_file_batch,
    range_batches,
    valid_chunks,
)

COMMITLOG_SOURCE = "rocketmq"
CONSUMEQUEUE_SOURCE = "rocketmq_consumequeue"
DEFAULT_SPLIT_SIZE = 128 << 20
DEFAULT_BATCH_SIZE = 1 << 15  # rows per Arrow batch (at most)
DEFAULT_OPEN_COST = 4 << 20  # what opening a file counts in split packing (as spark.sql.files.openCostInBytes)
# Magic codes as they appear on disk (big-endian), to find record candidates with a byte search.

_TYPES = {
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "bool": BooleanType(),
    "binary": BinaryType(),
    "strings": ArrayType(StringType(), False),
    "map": MapType(StringType(), StringType(), False),
}


def _schema(columns: str) -> StructType:
    """A Spark schema from ``name type`` lines (``rmqstore.walk.arrow.column_types``)."""
    return StructType([StructField(n, _TYPES[t], null) for n, t, null in column_types(columns)])


COMMITLOG_SCHEMA = _schema(COMMITLOG_COLUMNS)


def commitlog_schema(*, crc_ok: bool = False) -> StructType:
    """The source's default columns: ``crcOk`` (a CRC of every body) only when asked for."""
    return COMMITLOG_SCHEMA if crc_ok else StructType([f for f in COMMITLOG_SCHEMA.fields if f.name != "crcOk"])


CONSUMEQUEUE_SCHEMA = _schema(CONSUMEQUEUE_COLUMNS)


# ---------------------------------------------------------------------------------------------
# Options and stores (run on the driver and in Spark's planner process)


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a reader needs of one store, small enough to travel with every partition."""

    root: str
    broker_name: str | None  # brokerName from broker.conf; None when not configured
    broker: str  # broker version whose parsing rules apply
    commitlog: tuple[tuple[str, int, int, Framing], ...]  # (path, base offset, size, framing) of every non-empty file


def parse_size(text: str | int) -> int:
    """``"128m"`` -> 134217728; plain numbers are bytes. Raises InputError."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)i?b?\s*", str(text).lower())
        if not m:
            raise InputError(f"size {text!r} is not a byte count like 4096, 64m or 1g")
        value = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2)]
    if value <= 0:
        raise InputError(f"size {text!r} must be positive")
    return value


def _bool(value: str | None, default: bool = False) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise InputError(f"{value!r} is not true or false")


def option_paths(options: Mapping[str, str]) -> list[str]:
    """Store patterns from ``path`` (comma list) and ``paths`` (what ``load([...])`` passes, JSON)."""
    out: list[str] = []
    raw = options.get("paths")
    if raw:
        try:
            items = json.loads(raw)
        except ValueError:
            items = [raw]
        out += [str(item) for item in (items if isinstance(items, list) else [items]) if str(item).strip()]
    if options.get("path"):
        out += [p for p in str(options["path"]).split(",") if p.strip()]
    if not out:
        raise InputError("no store given: pass store directories with load(...) or the path option")
    return [p.strip() for p in out]


def resolve_stores(patterns: Sequence[str], *, broker: str | None = None) -> list[StoreInfo]:
    """Every store matched by ``patterns`` (paths or globs), in the order given, each once.

    Raises StoreNotFound for a pattern matching nothing or a directory that is not a store.
    """
    roots: list[Path] = []
    for pat in patterns:
        if glob.has_magic(pat):
            found = sorted(glob.glob(os.path.expanduser(pat)))
            if not found:
                raise StoreNotFound(f"{pat}: no store matches")
            roots += [Path(f) for f in found]
        else:
            roots.append(Path(os.path.expanduser(pat)))
    seen: set[str] = set()
    stores = []
    for root in roots:
        key = str(root.resolve())
        if key in seen:
            continue
        seen.add(key)
        with open_store(root, broker=broker) as st:
            cfg = st.config
            segs, _ = st.commitlog_segments()
            files = tuple((str(s.path), s.base_offset, s.size, s.framing) for s in segs if s.size > 0)
            name = cfg.broker_name if "brokerName" in cfg.explicit else None
            stores.append(StoreInfo(str(root), name, cfg.broker, files))
    return stores


# ---------------------------------------------------------------------------------------------
# Commit log splits


class CommitLogSplit(InputPartition):
    """Records starting in byte ranges of commit log files: one piece per range, read in order.

    A large file gives one piece per ``splitSize`` bytes; small files (and the last pieces of
    files) are packed into one split up to ``splitSize``, each counting ``openCost`` bytes more.
    """

    def __init__(self, pieces: tuple[Piece, ...], check_crc: bool, batch_size: int, flt: RowFilter) -> None:
        super().__init__(tuple((p.path, p.start, p.end) for p in pieces))
        self.pieces = pieces
        self.check_crc = check_crc
        self.batch_size = batch_size
        self.filter = flt


@dataclass(frozen=True, slots=True)
class Piece:
    """``[start, end)`` of one commit log file of a store."""

    store: str
    broker_name: str | None
    path: str
    base: int
    start: int
    end: int
    broker: str
    framing: Framing = PLAIN


def plan_splits(size: int, *, split_size: int | None = None, per_file: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges covering ``[0, size)``: ``per_file`` equal parts, else ranges of ``split_size``."""
    if size <= 0:
        return []
    if per_file:
        step = max(1, math.ceil(size / per_file))
    else:
        step = split_size or DEFAULT_SPLIT_SIZE
    return [(s, min(size, s + step)) for s in range(0, size, step)]


def pack_pieces(pieces: Sequence[Piece], split_size: int, open_cost: int) -> list[tuple[Piece, ...]]:
    """Consecutive pieces grouped into splits of at most ``split_size`` bytes (a piece counts its
    length plus ``open_cost``), as Spark's file sources pack small files; a piece is never cut."""
    out: list[tuple[Piece, ...]] = []
    group: list[Piece] = []
    used = 0
    for p in pieces:
        cost = p.end - p.start + open_cost
        if group and used + cost > split_size:
            out.append(tuple(group))
            group, used = [], 0
        group.append(p)
        used += cost
    if group:
        out.append(tuple(group))
    return out


def plan_commitlog(
    stores: Sequence[StoreInfo],
    *,
    split_size: int | None = None,
    per_file: int | None = None,
    open_cost: int = DEFAULT_OPEN_COST,
    offsets: tuple[int | None, int | None] = (None, None),
) -> list[tuple[Piece, ...]]:
    """The splits of the commit logs of ``stores``; pieces outside the ``offsets`` range are left out
    (a valid record's stored offset is its file's base plus its position)."""
    lo, hi = offsets
    pieces = []
    for st in stores:
        for path, base, size, framing in st.commitlog:
            for start, end in plan_splits(size, split_size=split_size, per_file=per_file):
                if (hi is not None and base + start > hi) or (lo is not None and base + end <= lo):
                    continue
                pieces.append(Piece(st.root, st.broker_name, path, base, start, end, st.broker, framing))
    if per_file:
        return [(p,) for p in pieces]
    return pack_pieces(pieces, split_size or DEFAULT_SPLIT_SIZE, open_cost)


def plan_even(
    stores: Sequence[StoreInfo], cores: int, *, offsets: tuple[int | None, int | None] = (None, None)
) -> list[tuple[Piece, ...]]:
    """The commit logs of ``stores`` cut into a multiple of ``cores`` splits of one size (each at most
    about ``DEFAULT_SPLIT_SIZE``), cuts falling inside files or between them: on ``cores`` cores
    every round of tasks ends together (3 files on 2 cores are 4 tasks, not 3 in two rounds)."""
    files = [(st, f) for st in stores for f in st.commitlog]
    total = sum(f[2] for _, f in files)
    if total <= 0:
        return []
    tasks = cores * math.ceil(total / (cores * DEFAULT_SPLIT_SIZE))
    step = math.ceil(total / tasks)
    lo, hi = offsets
    out: list[tuple[Piece, ...]] = []
    group: list[Piece] = []
    before = 0  # bytes of the files before this one
    for st, (path, base, size, framing) in files:
        start = 0
        while start < size:
            cut = ((before + start) // step + 1) * step - before
            end = min(size, cut)
            if not ((hi is not None and base + start > hi) or (lo is not None and base + end <= lo)):
                group.append(Piece(st.root, st.broker_name, path, base, start, end, st.broker, framing))
            if end == cut and group:
                out.append(tuple(group))
                group = []
            start = end
        before += size
    if group:
        out.append(tuple(group))
    return out


def read_piece_batches(
    piece: Piece, schema: pa.Schema, *, check_crc: bool = False, flt: RowFilter | None = None, chunk: int = CHUNK
) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the valid records starting in one piece, with the columns of ``schema``."""
    with map_file(Path(piece.path)) as buf:
        if len(buf):
            yield from buffer_batches(buf, piece, schema, check_crc=check_crc, flt=flt, chunk=chunk)


def piece_chunks(
    piece: Piece, *, check_crc: bool = False, chunk: int = CHUNK
) -> Iterator[tuple[SplitContext, RecordArrays, dict[int, Record]]]:
    """The checked chunks of the valid records starting in one piece (``walk.arrow.valid_chunks``:
    the chunk's arrays and its slow rows' Records), each with its file's context: for a job that
    reads columns without building record batches."""
    with map_file(Path(piece.path)) as buf:
        if len(buf):
            ctx = file_context(piece.store, piece.broker_name, piece.path, piece.base, piece.broker, buf, piece.framing)
            for arrs, slow in valid_chunks(ctx, piece.start, piece.end, check_crc=check_crc, chunk=chunk):
                yield ctx, arrs, slow


def split_chunk(split: CommitLogSplit) -> int:
    """Records decoded at once in a split's tasks (its batch size, within bounds)."""
    return max(1024, min(split.batch_size, 1 << 20))


def buffer_batches(buf: Any, piece: Piece, schema: pa.Schema, **options: Any) -> Iterator[pa.RecordBatch]:
    """``read_piece_batches`` over the file's bytes ``buf`` (mapped or in memory); ``options`` as
    ``rmqstore.walk.arrow.range_batches`` takes them (check_crc, flt, chunk, row_fn)."""
    ctx = file_context(piece.store, piece.broker_name, piece.path, piece.base, piece.broker, buf, piece.framing)
    try:
        yield from range_batches(ctx, piece.start, piece.end, schema, **options)
    finally:
        del ctx  # release the views so the map can close


def read_split_batches(split: CommitLogSplit, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the records of one split, with the columns of ``schema``."""
    names = schema.fieldNames()
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise InputError(f"unknown column(s) {unknown} for the {COMMITLOG_SOURCE} source")
    pa_schema = to_arrow_schema(schema, timezone="UTC")
    chunk = split_chunk(split)
    for piece in split.pieces:
        yield from read_piece_batches(piece, pa_schema, check_crc=split.check_crc, flt=split.filter, chunk=chunk)


def _options(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def _tighten(bounds: tuple[int | None, int | None], f: Filter) -> tuple[int | None, int | None]:
    """Inclusive bounds narrowed by one comparison filter."""
    lo, hi = bounds
    v = f.value  # type: ignore[attr-defined]
    if isinstance(f, EqualTo):
        lo, hi = v if lo is None else max(lo, v), v if hi is None else min(hi, v)
    elif isinstance(f, GreaterThan):
        lo = v + 1 if lo is None else max(lo, v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        lo = v if lo is None else max(lo, v)
    elif isinstance(f, LessThan):
        hi = v - 1 if hi is None else min(hi, v - 1)
    elif isinstance(f, LessThanOrEqual):
        hi = v if hi is None else min(hi, v)
    return lo, hi


def _values(f: Filter) -> frozenset[Any] | None:
    if isinstance(f, EqualTo):
        return frozenset([f.value])
    if isinstance(f, In):
        return frozenset(v for v in f.value if v is not None)
    return None


def push_filters(flt: RowFilter, filters: Sequence[Filter]) -> RowFilter:
    """``flt`` narrowed by the filters the reader can apply itself (topic, queueId, storeTimestamp,
    commitLogOffset); any other filter is left to Spark."""
    ranged = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
    topics, qids, ts, offs = flt.topics, flt.queue_ids, flt.store_ts, flt.offsets
    for f in filters:
        col = f.attribute if hasattr(f, "attribute") else ()
        if col in (("topic",), ("queueId",)):
            vals = _values(f)
            if vals is not None and col == ("topic",) and all(isinstance(v, str) for v in vals):
                topics = vals if topics is None else topics & vals
            elif vals is not None and col == ("queueId",) and all(isinstance(v, int) for v in vals):
                qids = vals if qids is None else qids & vals
        elif col in (("storeTimestamp",), ("commitLogOffset",)) and isinstance(f, ranged):
            if isinstance(f.value, int) and not isinstance(f.value, bool):  # type: ignore[attr-defined]
                if col == ("storeTimestamp",):
                    ts = _tighten(ts, f)
                else:
                    offs = _tighten(offs, f)
    return replace(flt, topics=topics, queue_ids=qids, store_ts=ts, offsets=offs)


def option_filter(o: Mapping[str, str]) -> RowFilter:
    """The ``keys`` option (a JSON list): only records with one of them as a KEYS token or UNIQ_KEY."""
    raw = o.get("keys")
    if not raw:
        return RowFilter()
    try:
        keys = json.loads(raw)
    except ValueError:
        keys = [k for k in str(raw).split(",") if k]
    if not isinstance(keys, list):
        keys = [keys]
    return RowFilter(keys=frozenset(str(k) for k in keys))


class _PlannedReader(DataSourceReader):
    """Reads the partitions its ``plan()`` makes; an empty plan is one placeholder that reads nothing."""

    schema: StructType

    def plan(self) -> list[InputPartition]:
        raise NotImplementedError

    def partitions(self) -> Sequence[InputPartition]:
        return self.plan() or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, CommitLogSplit):
            return read_split_batches(partition, self.schema)
        if isinstance(partition, QueueFiles):
            return read_queue_batches(partition, self.schema)
        return iter(())


class CommitLogSourceReader(_PlannedReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _options(options)
        self.schema = schema
        self.filter = option_filter(self.options)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802  # PySpark's name
        """Apply topic, queue id, time and offset conditions while reading (before bodies are cut,
        and to leave out whole files by offset); Spark still checks every filter on the rows."""
        self.filter = push_filters(self.filter, filters)
        return filters

    def plan(self) -> list[InputPartition]:
        o = self.options
        split_size = parse_size(o["splitsize"]) if o.get("splitsize") else None
        open_cost = parse_size(o["opencost"]) if o.get("opencost") else DEFAULT_OPEN_COST
        per_file = int(o["partitionsperfile"]) if o.get("partitionsperfile") else None
        if per_file is not None and per_file <= 0:
            raise InputError(f"partitionsPerFile must be positive, got {per_file}")
        check_crc = _bool(o.get("verifycrc"))
        batch = int(o.get("batchsize") or DEFAULT_BATCH_SIZE)
        stores = resolve_stores(option_paths(o), broker=o.get("brokerversion"))
        cores = int(o["cores"]) if o.get("cores") else None
        if cores and split_size is None and per_file is None:
            groups = plan_even(stores, cores, offsets=self.filter.offsets)
        else:
            groups = plan_commitlog(
                stores, split_size=split_size, per_file=per_file, open_cost=open_cost, offsets=self.filter.offsets
            )
        return [CommitLogSplit(g, check_crc, batch, self.filter) for g in groups]


class _StoreSource(DataSource):
    """A source over store directories: its ``format`` name and its reader."""

    short_name: ClassVar[str]
    reader_type: ClassVar[Callable[[Mapping[str, str], StructType], DataSourceReader]]

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def reader(self, schema: StructType) -> DataSourceReader:
        return self.reader_type(self.options, schema)


class RocketMQDataSource(_StoreSource):
    """``format("rocketmq")``: one row per commit log record of the given stores."""

    short_name = COMMITLOG_SOURCE
    reader_type = CommitLogSourceReader

    def schema(self) -> StructType:
        return commitlog_schema(crc_ok=_bool(_options(self.options).get("crcok")))


# ---------------------------------------------------------------------------------------------
# Consume queues


class QueueFiles(InputPartition):
    """Some consume queue files, read whole: ``(store, brokerName, queue, file)``."""

    def __init__(self, files: list[tuple[str, str | None, ConsumeQueue, Segment]]) -> None:
        super().__init__(len(files))
        self.files = files


def read_queue_batches(part: QueueFiles, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The valid entries (up to the first zero/invalid one, fillers left out) of each file."""
    pa_schema = to_arrow_schema(schema, timezone="UTC")
    for store, broker_name, queue, seg in part.files:
        batch = queue_file_batch(store, broker_name, queue, seg, pa_schema)
        if batch is not None:
            yield batch


class ConsumeQueueReader(_PlannedReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _options(options)
        self.schema = schema
        unknown = [n for n in schema.fieldNames() if n not in CONSUMEQUEUE_SCHEMA.fieldNames()]
        if unknown:
            raise InputError(f"unknown column(s) {unknown} for the {CONSUMEQUEUE_SOURCE} source")

    def plan(self) -> list[InputPartition]:
        o = self.options
        target = parse_size(o["splitsize"]) if o.get("splitsize") else 64 << 20
        parts: list[InputPartition] = []
        group: list[tuple[str, str | None, ConsumeQueue, Segment]] = []
        group_bytes = 0
        for info in resolve_stores(option_paths(o), broker=o.get("brokerversion")):
            with open_store(info.root) as st:
                for queue in st.consume_queues.queues():
                    for seg in queue.files()[0]:
                        if seg.size == 0:
                            continue
                        group.append((info.root, info.broker_name, queue, seg))
                        group_bytes += seg.size
                        if group_bytes >= target:
                            parts.append(QueueFiles(group))
                            group, group_bytes = [], 0
        if group:
            parts.append(QueueFiles(group))
        return parts


class ConsumeQueueDataSource(_StoreSource):
    """``format("rocketmq_consumequeue")``: one row per consume queue entry of the given stores."""

    short_name = CONSUMEQUEUE_SOURCE
    reader_type = ConsumeQueueReader

    def schema(self) -> StructType:
        return CONSUMEQUEUE_SCHEMA


def register(spark: Any) -> None:
    """Make ``rocketmq`` and ``rocketmq_consumequeue`` known to ``spark.read.format``."""
    # the commit log reader takes pushed-down filters; PySpark refuses such a reader unless this is on
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(RocketMQDataSource)
    spark.dataSource.register(ConsumeQueueDataSource)
