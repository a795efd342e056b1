"""The RocksDB database of a 5.x ``storeType=defaultRocksDB`` store: opening it read-only or writable.

rocksdict (the ``rocksdb`` extra) is imported here only, when a database is opened, so commands that never
read one start without it. A read-only open goes through a private folder of links to the database's files:
RocksDB's read-only mode takes no LOCK, and rocksdict's own settings file lands in that folder, so the
store's directory is never written. A writable open (a rebuild beside the store) uses the column families
and options the 5.2.0 engine gives them, and writes without a write-ahead log, as the engine does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rmqstore.codec.rocksdbcq import COLUMN_FAMILIES, DEFAULT_CF, OFFSET_CF
from rmqstore.errors import CorruptData, MissingExtra, from_os_error

EXTRA = "rocksdb"
ROCKSDICT_CONFIG = "rocksdict-config.json"  # rocksdict's settings file, never part of the engine's database
_NOT_LINKED = {"LOCK", ROCKSDICT_CONFIG}
_BATCH_ROWS = 100_000  # a write batch is written once it holds this many rows


def is_database(directory: Path) -> bool:
    """A RocksDB database lives here (its CURRENT file or table files)."""
    try:
        return (directory / "CURRENT").is_file() or any(directory.glob("*.sst"))
    except OSError:
        return False


def rocksdict_module() -> Any:
    try:
        import rocksdict
    except ImportError:
        raise MissingExtra(
            "the consume queues are a RocksDB database (storeType=defaultRocksDB); reading it needs the "
            f"'{EXTRA}' extra: pip install 'rmqstore[{EXTRA}]'"
        ) from None
    return rocksdict


def _cf_options(rd: Any, name: str) -> Any:
    """The engine's column family options (RocksDBOptionsFactory): default is LZ4 with ZSTD at the bottom and
    universal compaction, offset is uncompressed with level compaction; both bloom 16, format 5, bytewise keys."""
    o = rd.Options(raw_mode=True)
    table = rd.BlockBasedOptions()
    table.set_format_version(5)
    table.set_bloom_filter(16, False)
    o.set_block_based_table_factory(table)
    if name == DEFAULT_CF:
        o.set_compression_type(rd.DBCompressionType.lz4())
        o.set_bottommost_compression_type(rd.DBCompressionType.zstd())
        o.set_compaction_style(rd.DBCompactionStyle.universal())
    else:
        o.set_compression_type(rd.DBCompressionType.none())
        o.set_compaction_style(rd.DBCompactionStyle.level())
    return o


class Database:
    """An opened consume queue database; ``close`` releases it (and removes the read-only link folder)."""

    def __init__(self, path: Path, db: Any, shadow: Path | None, rd: Any) -> None:
        self.path = path
        self._db = db
        self._shadow = shadow
        self._rd = rd
        self.offset_cf = db.get_column_family(OFFSET_CF)
        self._wo: Any = None
        self._batch: Any = None
        self._rows = 0

    @classmethod
    def open_read(cls, path: Path) -> Database:
        rd = rocksdict_module()
        shadow = Path(tempfile.mkdtemp(prefix="rmqstore-rocksdb-"))
        try:
            for name in os.listdir(path):
                if name not in _NOT_LINKED:
                    os.symlink(path.absolute() / name, shadow / name)
            families = rd.Rdict.list_cf(str(shadow))
            if OFFSET_CF not in families:
                raise CorruptData(f"column families {families}, expected {list(COLUMN_FAMILIES)}", path=path, pos=0)
            cfs = {n: rd.Options(raw_mode=True) for n in families if n != DEFAULT_CF}
            db = rd.Rdict(str(shadow), rd.Options(raw_mode=True), column_families=cfs,
                          access_type=rd.AccessType.read_only(False))  # fmt: skip
        except OSError as e:
            shutil.rmtree(shadow, ignore_errors=True)
            raise from_os_error(e, path, doing="read the consume queue database") from None
        except Exception as e:
            shutil.rmtree(shadow, ignore_errors=True)
            if isinstance(e, CorruptData):
                raise
            raise CorruptData(f"RocksDB cannot open the database: {e}", path=path, pos=0) from None
        return cls(path, db, shadow, rd)

    @classmethod
    def open_write(cls, path: Path) -> Database:
        """Create (or continue) a database with the engine's column families and options."""
        rd = rocksdict_module()
        path.mkdir(parents=True, exist_ok=True)
        opts = _cf_options(rd, DEFAULT_CF)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_atomic_flush(True)
        db = rd.Rdict(str(path), opts, column_families={OFFSET_CF: _cf_options(rd, OFFSET_CF)})
        out = cls(path, db, None, rd)
        out._wo = rd.WriteOptions()
        out._wo.disable_wal = True
        return out

    # -- reading -------------------------------------------------------------------------------
    def get(self, key: bytes, *, offset: bool = False) -> bytes | None:
        return (self.offset_cf if offset else self._db).get(key)

    def scan(self, lo: bytes, hi: bytes | None, *, offset: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Rows with ``lo <= key < hi`` in key order (bounds are checked here: rocksdict's read options
        would encode them as its own typed keys)."""
        for k, v in (self.offset_cf if offset else self._db).items(from_key=lo):
            if hi is not None and k >= hi:
                return
            yield k, v

    def last_before(self, hi: bytes, lo: bytes) -> tuple[bytes, bytes] | None:
        """The row with the greatest key in ``[lo, hi)``."""
        it = self._db.iter()
        it.seek_for_prev(hi)
        while it.valid() and it.key() >= hi:
            it.prev()
        return (it.key(), it.value()) if it.valid() and it.key() >= lo else None

    # -- writing -------------------------------------------------------------------------------
    def _open_batch(self) -> Any:
        if self._batch is None:
            self._batch = self._rd.WriteBatch(raw_mode=True)
            self._rows = 0
        return self._batch

    def put(self, key: bytes, value: bytes, *, offset: bool = False) -> None:
        if offset:
            self._open_batch().put(key, value, self._db.get_column_family_handle(OFFSET_CF))
        else:
            self._open_batch().put(key, value)
        self._rows += 1
        if self._rows >= _BATCH_ROWS:
            self.write()

    def put_many(self, keys: list[bytes], values: list[bytes]) -> None:
        """Rows of column family ``default``, in one loop (the dispatch of many units)."""
        put = self._open_batch().put
        for k, v in zip(keys, values, strict=True):
            put(k, v)
        self._rows += len(keys)
        if self._rows >= _BATCH_ROWS:
            self.write()

    def write(self) -> None:
        if self._batch is not None and not self._batch.is_empty():
            self._db.write(self._batch, self._wo)
        self._batch = None

    def close(self, sync: bool = True) -> None:
        if self._db is None:
            return
        if self._wo is not None:
            self.write()
            if sync:
                self._db.flush()  # the rows reach table files: nothing is left only in memory
        self._db.close()
        self._db = None
        if self._shadow is not None:
            shutil.rmtree(self._shadow, ignore_errors=True)
        else:
            with_config = self.path / ROCKSDICT_CONFIG
            with_config.unlink(missing_ok=True)
