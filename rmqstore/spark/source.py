"""PySpark Python data sources over store files: commit log records (§3) and consume queue entries (§4.1).

``spark.read.format("rocketmq").load("/data/broker-*/store")`` gives one row per commit log
record, decoded by :func:`rmqstore.commitlog.decode_record`; ``rocketmq_consumequeue`` gives one
row per consume queue entry. Options (both sources):

* ``path`` / ``load(...)``: store roots; a comma list and shell globs are accepted.
* ``splitSize``: bytes of a commit log file per partition (``128m``, ``1g``, plain bytes; default
  128 MiB, so a 1 GiB file is read by 8 tasks); ``partitionsPerFile`` instead splits every
  file into that many equal ranges. For consume queues: bytes of queue files per partition.
* ``verifyCrc`` (``true``/``false``, default false): a record whose body CRC does not match is
  treated as damage (as recovery with checkCRCOnRecover does) instead of being returned with
  ``crcOk = false``.
* ``brokerVersion``: whose property parser to follow (default: the store's broker.conf, else 4.4.0).
* ``batchSize``: rows per Arrow record batch (default 8192).

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

import gc
import glob
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
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

from ..commitlog import (
    MAGIC_V1,
    MAGIC_V2,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    Record,
    body_crc,
    decode_record,
    host_str,
)
from ..consumequeue import ENTRY_SIZE, FILLER_SIZE, entries_array, valid_prefix
from ..errors import CorruptData, InputError, StoreNotFound
from ..layout import list_segments
from ..store import map_file, open_store

COMMITLOG_SOURCE = "rocketmq"
CONSUMEQUEUE_SOURCE = "rocketmq_consumequeue"
DEFAULT_SPLIT_SIZE = 128 << 20
DEFAULT_BATCH_SIZE = 8192
# Magic codes as they appear on disk (big-endian), to find record candidates with a byte search.
_MAGIC_BYTES = (MAGIC_V1.to_bytes(4, "big", signed=True), MAGIC_V2.to_bytes(4, "big", signed=True))

COMMITLOG_SCHEMA = StructType(
    [
        StructField("store", StringType(), False),
        StructField("brokerName", StringType(), True),
        StructField("file", StringType(), False),
        StructField("filePos", LongType(), False),
        StructField("commitLogOffset", LongType(), False),
        StructField("storeSize", IntegerType(), False),
        StructField("magicCode", IntegerType(), False),
        StructField("bodyCRC", IntegerType(), False),
        StructField("queueId", IntegerType(), False),
        StructField("flag", IntegerType(), False),
        StructField("queueOffset", LongType(), False),
        StructField("sysFlag", IntegerType(), False),
        StructField("bornTimestamp", LongType(), False),
        StructField("bornHost", StringType(), False),
        StructField("storeTimestamp", LongType(), False),
        StructField("storeHost", StringType(), False),
        StructField("reconsumeTimes", IntegerType(), False),
        StructField("preparedTransactionOffset", LongType(), False),
        StructField("bodyLength", IntegerType(), False),
        StructField("topic", StringType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("uniqKey", StringType(), True),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("body", BinaryType(), False),
        StructField("msgId", StringType(), False),
        StructField("crcOk", BooleanType(), False),
    ]
)

CONSUMEQUEUE_SCHEMA = StructType(
    [
        StructField("store", StringType(), False),
        StructField("brokerName", StringType(), True),
        StructField("topic", StringType(), False),
        StructField("queueId", IntegerType(), False),
        StructField("queueOffset", LongType(), False),
        StructField("commitLogOffset", LongType(), False),
        StructField("size", IntegerType(), False),
        StructField("tagsCode", LongType(), False),
        StructField("file", StringType(), False),
    ]
)


# ---------------------------------------------------------------------------------------------
# Options and stores (run on the driver and in Spark's planner process)


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a reader needs of one store, small enough to travel with every partition."""

    root: str
    broker_name: str | None  # brokerName from broker.conf; None when not configured
    broker: str  # broker version whose parsing rules apply
    commitlog: tuple[tuple[str, int, int], ...]  # (path, base offset, size) of every non-empty file


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
            files = tuple((str(s.path), s.base_offset, s.size) for s in segs if s.size > 0)
            name = cfg.broker_name if "brokerName" in cfg.explicit else None
            stores.append(StoreInfo(str(root), name, cfg.broker, files))
    return stores


# ---------------------------------------------------------------------------------------------
# Commit log splits


class CommitLogSplit(InputPartition):
    """Records starting in ``[start, end)`` of one commit log file."""

    def __init__(
        self,
        store: str,
        broker_name: str | None,
        path: str,
        base: int,
        start: int,
        end: int,
        broker: str,
        check_crc: bool,
        batch_size: int,
    ) -> None:
        super().__init__((path, start, end))
        self.store = store
        self.broker_name = broker_name
        self.path = path
        self.base = base
        self.start = start
        self.end = end
        self.broker = broker
        self.check_crc = check_crc
        self.batch_size = batch_size


def plan_splits(size: int, *, split_size: int | None = None, per_file: int | None = None) -> list[tuple[int, int]]:
    """Byte ranges covering ``[0, size)``: ``per_file`` equal parts, else ranges of ``split_size``."""
    if size <= 0:
        return []
    if per_file:
        step = max(1, math.ceil(size / per_file))
    else:
        step = split_size or DEFAULT_SPLIT_SIZE
    return [(s, min(size, s + step)) for s in range(0, size, step)]


def resync(buf: Any, start: int, end: int, valid: Callable[[int], bool]) -> int | None:
    """The first position ``p`` in ``[start, end)`` with the V1 or V2 magic at ``p + 4`` and ``valid(p)``."""
    hi = end + 7  # the magic of a record starting at end - 1 ends at end + 7
    lo = start + 4
    nxt = [buf.find(m, lo, hi) for m in _MAGIC_BYTES]
    while True:
        live = [i for i in nxt if i >= 0]
        if not live:
            return None
        idx = min(live)
        p = idx - 4
        if p >= end:
            return None
        if valid(p):
            return p
        for k, m in enumerate(_MAGIC_BYTES):
            if nxt[k] == idx:
                nxt[k] = buf.find(m, idx + 1, hi)


def iter_split_records(
    buf: Any,
    *,
    path: str,
    base: int,
    start: int,
    end: int,
    check_crc: bool = False,
    broker: str = "4.4.0",
) -> Iterator[Record]:
    """Valid records that start in ``[start, end)`` of one file (see the module docstring)."""
    size = len(buf)
    end = min(end, size)

    def record_at(p: int) -> Record | None:
        try:
            rec = decode_record(buf, p, path=path, file_from=base, check_crc=check_crc, broker=broker)
        except CorruptData:
            return None
        return rec if isinstance(rec, Record) and rec.phy_offset == base + p else None

    def first_from(p: int) -> Record | None:
        found: list[Record] = []

        def valid(q: int) -> bool:
            rec = record_at(q)
            if rec is not None:
                found.append(rec)
            return rec is not None

        return found[-1] if resync(buf, p, end, valid) is not None else None

    rec = first_from(start)
    while rec is not None:
        yield rec
        nxt = rec.pos + rec.total_size
        if nxt >= end or nxt + 8 > size:
            return  # a record starting at ``end`` or later belongs to the next split
        rec = record_at(nxt) or first_from(nxt + 1)


def _keys_list(props: dict[str, str]) -> list[str]:
    raw = props.get(PROP_KEYS)
    return [k for k in raw.split(" ") if k] if raw else []


# How each column is taken from a record ``r`` (``p``: its parsed properties, ``s``: the split).
_COLUMN_EXPR = {
    "store": "s.store",
    "brokerName": "s.broker_name",
    "file": "s.path",
    "filePos": "r.pos",
    "commitLogOffset": "r.phy_offset",
    "storeSize": "r.total_size",
    "magicCode": "r.magic",
    "bodyCRC": "r.body_crc",
    "queueId": "r.queue_id",
    "flag": "r.flag",
    "queueOffset": "r.queue_offset",
    "sysFlag": "r.sys_flag",
    "bornTimestamp": "r.born_timestamp_ms",
    "bornHost": "host(r.born_addr, r.born_port)",
    "storeTimestamp": "r.store_timestamp_ms",
    "storeHost": "host(r.store_addr, r.store_port)",
    "reconsumeTimes": "r.reconsume_times",
    "preparedTransactionOffset": "r.prepared_transaction_offset",
    "bodyLength": "len(r.body)",
    "topic": "r.topic",
    "tags": "p.get(TAGS)",
    "keys": "keys(p)",
    "uniqKey": "p.get(UNIQ_KEY)",
    "properties": "list(p.items())",
    "body": "r.body",
    "msgId": "r.msg_id",
    "crcOk": "crc(r.body) == r.body_crc",
}
_NEEDS_PROPS = frozenset({"tags", "keys", "uniqKey", "properties"})


def row_function(names: Sequence[str]) -> Callable[[Record, Any, CommitLogSplit], tuple[Any, ...]]:
    """One compiled function giving the tuple of the columns ``names`` for a record.

    A single expression per record instead of a call per column keeps the row cost near the
    decoder's; only the columns asked for are computed (properties are parsed only if needed).
    """
    hosts: dict[tuple[bytes, int], str] = {}

    def host(addr: bytes, port: int) -> str:
        text = hosts.get((addr, port))
        if text is None:
            text = hosts[(addr, port)] = host_str(addr, port)
        return text

    body = ", ".join(_COLUMN_EXPR[n] for n in names)
    env = {"host": host, "keys": _keys_list, "crc": body_crc, "TAGS": PROP_TAGS, "UNIQ_KEY": PROP_UNIQ_KEY}
    return eval(f"lambda r, p, s: ({body},)", env)  # type: ignore[no-any-return]  # from the constants above only


def read_split_batches(split: CommitLogSplit, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the records of one split, with the columns of ``schema``."""
    names = schema.fieldNames()
    unknown = [n for n in names if n not in COMMITLOG_SCHEMA.fieldNames()]
    if unknown:
        raise InputError(f"unknown column(s) {unknown} for the {COMMITLOG_SOURCE} source")
    pa_schema = to_arrow_schema(schema, timezone="UTC")
    row = row_function(names)
    need_props = bool(_NEEDS_PROPS.intersection(names))
    rows: list[tuple[Any, ...]] = []

    def flush() -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True))
        rows.clear()
        arrays = [pa.array(c, type=f.type) for c, f in zip(columns, pa_schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=pa_schema)

    # Rows hold no reference cycles; the cyclic collector would only rescan them (a third of the time).
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        with map_file(Path(split.path)) as buf:
            for rec in iter_split_records(
                buf,
                path=split.path,
                base=split.base,
                start=split.start,
                end=split.end,
                check_crc=split.check_crc,
                broker=split.broker,
            ):
                rows.append(row(rec, rec.properties if need_props else None, split))
                if len(rows) == split.batch_size:
                    yield flush()
        if rows:
            yield flush()
    finally:
        if gc_was_on:
            gc.enable()


def _options(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


class CommitLogReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _options(options)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        split_size = parse_size(o["splitsize"]) if o.get("splitsize") else None
        per_file = int(o["partitionsperfile"]) if o.get("partitionsperfile") else None
        if per_file is not None and per_file <= 0:
            raise InputError(f"partitionsPerFile must be positive, got {per_file}")
        check_crc = _bool(o.get("verifycrc"))
        batch = int(o.get("batchsize") or DEFAULT_BATCH_SIZE)
        stores = resolve_stores(option_paths(o), broker=o.get("brokerversion"))
        parts: list[InputPartition] = []
        for st in stores:
            for path, base, size in st.commitlog:
                for start, end in plan_splits(size, split_size=split_size, per_file=per_file):
                    parts.append(
                        CommitLogSplit(st.root, st.broker_name, path, base, start, end, st.broker, check_crc, batch)
                    )
        return parts or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CommitLogSplit):
            return iter(())
        return read_split_batches(partition, self.schema)


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: one row per commit log record of the given stores."""

    @classmethod
    def name(cls) -> str:
        return COMMITLOG_SOURCE

    def schema(self) -> StructType:
        return COMMITLOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitLogReader(self.options, schema)


# ---------------------------------------------------------------------------------------------
# Consume queues


class QueueFiles(InputPartition):
    """Some consume queue files, read whole: ``(store, brokerName, topic, queueId, path, base)``."""

    def __init__(self, files: list[tuple[str, str | None, str, int, str, int]]) -> None:
        super().__init__(len(files))
        self.files = files


def read_queue_batches(part: QueueFiles, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The valid entries (up to the first zero/invalid one, fillers left out) of each file."""
    pa_schema = to_arrow_schema(schema, timezone="UTC")
    for store, broker_name, topic, qid, path, base in part.files:
        with open(path, "rb") as f:
            data = f.read()  # a queue file is small (6 MB by default)
        arr = entries_array(data)
        n = valid_prefix(arr)
        arr = arr[:n]
        keep = ~((arr["phy_offset"] == 0) & (arr["size"] == FILLER_SIZE) & (arr["tags_code"] == 0))
        idx = np.flatnonzero(keep)
        if not idx.size:
            continue
        m = len(idx)
        columns = {
            "store": pa.array([store] * m, pa.string()),
            "brokerName": pa.array([broker_name] * m, pa.string()),
            "topic": pa.array([topic] * m, pa.string()),
            "queueId": pa.array(np.full(m, qid, dtype=np.int32)),
            "queueOffset": pa.array(base // ENTRY_SIZE + idx.astype(np.int64)),
            "commitLogOffset": pa.array(arr["phy_offset"][idx].astype(np.int64)),
            "size": pa.array(arr["size"][idx].astype(np.int32)),
            "tagsCode": pa.array(arr["tags_code"][idx].astype(np.int64)),
            "file": pa.array([path] * m, pa.string()),
        }
        arrays = [columns[f.name].cast(f.type) for f in pa_schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=pa_schema)


class ConsumeQueueReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = _options(options)
        self.schema = schema
        unknown = [n for n in schema.fieldNames() if n not in CONSUMEQUEUE_SCHEMA.fieldNames()]
        if unknown:
            raise InputError(f"unknown column(s) {unknown} for the {CONSUMEQUEUE_SOURCE} source")

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        target = parse_size(o["splitsize"]) if o.get("splitsize") else 64 << 20
        parts: list[InputPartition] = []
        group: list[tuple[str, str | None, str, int, str, int]] = []
        group_bytes = 0
        for info in resolve_stores(option_paths(o), broker=o.get("brokerversion")):
            with open_store(info.root) as st:
                for topic, qid, qdir in st.queues():
                    segs, _ = list_segments(qdir, None)
                    for seg in segs:
                        if seg.size == 0:
                            continue
                        group.append((info.root, info.broker_name, topic, qid, str(seg.path), seg.base_offset))
                        group_bytes += seg.size
                        if group_bytes >= target:
                            parts.append(QueueFiles(group))
                            group, group_bytes = [], 0
        if group:
            parts.append(QueueFiles(group))
        return parts or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QueueFiles):
            return iter(())
        return read_queue_batches(partition, self.schema)


class ConsumeQueueDataSource(DataSource):
    """``format("rocketmq_consumequeue")``: one row per consume queue entry of the given stores."""

    @classmethod
    def name(cls) -> str:
        return CONSUMEQUEUE_SOURCE

    def schema(self) -> StructType:
        return CONSUMEQUEUE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return ConsumeQueueReader(self.options, schema)


def register(spark: Any) -> None:
    """Make ``rocketmq`` and ``rocketmq_consumequeue`` known to ``spark.read.format``."""
    spark.dataSource.register(RocketMQDataSource)
    spark.dataSource.register(ConsumeQueueDataSource)
