"""The 5.2.0 RocksDB consume queue store for the tests: a private copy, its database decoded as truth.json and
rebuild.json list it, and damage done to it through rocksdict (skipped cleanly without the store or rocksdict)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_real_store, load_rebuild, load_truth

from rmqstore.codec import rocksdbcq as codec
from rmqstore.store.layout import StoreConfig
from rmqstore.store.queue.rocksdbconsumequeue import RocksDBConsumeQueues

CASE = "5.2.0/rocksdb-cq-clean"


def need_rocksdict() -> Any:
    return pytest.importorskip("rocksdict", reason="the rocksdb extra (rocksdict) is not installed")


def rocksdb_store(tmp: Path) -> Path:
    need_rocksdict()
    return copy_real_store(CASE, tmp)


def truth() -> dict:
    return load_truth(CASE)


def engine_rows() -> dict:
    """The database as the engine left it (truth.json beforeOpen), without the raw value lengths."""
    db = truth()["beforeOpen"]["rocksdb"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "valueLength"} for r in rows]  # noqa: E731
    return {
        "cq": strip(db["cq"]),
        "offsets": strip(db["offsets"]),
        "maxPhyOffsetCheckpoint": db["maxPhyOffsetCheckpoint"],
    }


def rebuilt_rows() -> dict:
    """The database the engine rebuilds from the commit log (rebuild.json)."""
    return load_rebuild(CASE)["rocksdb"]


def decoded(root: Path) -> dict:
    """Every unit, max/min row and the checkpoint row of ``root``'s database, in truth.json's shape."""
    qs = RocksDBConsumeQueues(StoreConfig(store_root=root), root)
    try:
        cq = []
        for q in qs.queues():
            p = codec.queue_prefix(q.topic, q.queue_id)
            for k, v in qs.database().scan(p, p[:-1] + b"\x02"):
                key = codec.decode_unit_key(k)
                phy, size, tags, ts = codec.decode_unit(v)
                cq.append({"topic": key.topic, "queueId": key.queue_id, "queueOffset": key.queue_offset,
                           "commitLogOffset": phy, "size": size, "tagsCode": tags, "storeTimestamp": ts})  # fmt: skip
        offsets = [
            {
                "topic": r.topic,
                "kind": r.kind,
                "queueId": r.queue_id,
                "commitLogOffset": r.phy_offset,
                "queueOffset": r.queue_offset,
            }  # fmt: skip
            for r in qs.offset_rows()
            if r.topic != codec.CHECKPOINT_TOPIC
        ]
        return {"cq": cq, "offsets": offsets, "maxPhyOffsetCheckpoint": qs.checkpoint()}
    finally:
        qs.close()


def open_rw(root: Path) -> Any:
    rd = need_rocksdict()
    o = rd.Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    return rd.Rdict(str(root / "consumequeue"), o, column_families={"offset": rd.Options(raw_mode=True)})


def close_rw(db: Any, root: Path) -> None:
    db.flush()
    db.close()
    (root / "consumequeue" / "rocksdict-config.json").unlink(missing_ok=True)


def remove_units(root: Path, topic: str, qid: int, offsets: range, *, max_row: bool = False) -> None:
    db = open_rw(root)
    for o in offsets:
        db.delete(codec.unit_key(topic, qid, o))
    if max_row:
        db.get_column_family("offset").delete(codec.offset_key(topic, qid, codec.MAX))
    close_rw(db, root)


def add_unit_past_end(root: Path, topic: str, qid: int, qoff: int, phy: int) -> None:
    db = open_rw(root)
    db.put(codec.unit_key(topic, qid, qoff), codec.encode_unit(phy, 200, 1, 1))
    db.get_column_family("offset").put(codec.offset_key(topic, qid, codec.MAX), codec.encode_offset(phy, qoff))
    db.get_column_family("offset").put(codec.CHECKPOINT_KEY, codec.encode_checkpoint(phy + 200))
    close_rw(db, root)


def empty_database(root: Path) -> None:
    """A crash with the write-ahead log off: the database exists and holds nothing."""
    shutil.rmtree(root / "consumequeue")
    close_rw(open_rw(root), root)


def tree_digest(d: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``d``: its bytes' hash and modification time."""
    return {
        p.relative_to(d).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }
