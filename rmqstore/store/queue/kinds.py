"""Which consume queue store a store's ``consumequeue/`` is: files, or the 5.x RocksDB database."""

from __future__ import annotations

from pathlib import Path

from rmqstore.store.layout import StoreConfig
from rmqstore.store.queue.consumequeue import FileConsumeQueues
from rmqstore.store.queue.interface import ConsumeQueueStore
from rmqstore.store.queue.rocksdb import is_database
from rmqstore.store.queue.rocksdbconsumequeue import ROCKSDB_STORE_TYPE, RocksDBConsumeQueues


def keeps_rocksdb(cfg: StoreConfig) -> bool:
    """``storeType=defaultRocksDB`` in broker.conf, or (without it) a database found in ``consumequeue/``."""
    if "storeType" in cfg.explicit:
        return cfg.store_type.lower() == ROCKSDB_STORE_TYPE.lower()
    return is_database(cfg.consumequeue_dir)


def consume_queue_store(cfg: StoreConfig, root: Path, *, writable: bool = False) -> ConsumeQueueStore:
    """The consume queues of ``root`` (the store, or a build directory beside it) in the store's layout;
    ``writable`` opens a RocksDB database for writing (a rebuild)."""
    if keeps_rocksdb(cfg):
        return RocksDBConsumeQueues(cfg, Path(root), writable)
    return FileConsumeQueues(cfg, Path(root))
