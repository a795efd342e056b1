"""Benchmark: the RocksDB consume queue against the file consume queue of the same records, back to back.

Generates a store of 1,000,000 x 200-byte messages in one topic of 4 queues (250,000 units each), then:

- ``redispatch`` of the consume queues (no index) with the local engine into consume queue files and into a
  RocksDB database (``storeType=defaultRocksDB``), alternating, best of --repeat each;
- ``rmqstore dump consumequeue STORE TOPIC 0 --format ndjson > /dev/null`` (the real command line, process
  start included) of one queue of 250,000 units, on the store as it is and on its ``convert --cq rocksdb``
  copy, alternating, best of --repeat each;

and prints each figure with its ratio RocksDB / files, and ``cat`` of the commit log for scale.

    python3 benchmarks/bench_rocksdb.py [--messages 1000000] [--msg-size 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from rmqstore.dispatch import rebuild as redispatch  # noqa: E402
from rmqstore.ops.convert import cq as convert  # noqa: E402
from rmqstore.store import Store, open_store  # noqa: E402
from rmqstore.store.queue.rocksdbconsumequeue import ROCKSDB_STORE_TYPE  # noqa: E402

TOPIC = "BenchTopic00"


def as_rocksdb(st: Store) -> Store:
    """The same store, its consume queues taken as a RocksDB database (where a rebuild writes them)."""
    cfg = st.config
    return Store(replace(cfg, store_type=ROCKSDB_STORE_TYPE, explicit=cfg.explicit | {"storeType"}))


def time_build(st: Store) -> tuple[float, int]:
    build = Path(tempfile.mkdtemp(prefix="rmqstore-build-"))
    try:
        t = time.perf_counter()
        stats, _end, _reason = redispatch.build(st, build, index=False)
        return time.perf_counter() - t, stats.cq_entries
    finally:
        shutil.rmtree(build)


def time_dump(root: Path) -> float:
    cmd = [sys.executable, "-m", "rmqstore.cli", "dump", "consumequeue", str(root), TOPIC, "0", "--format", "ndjson"]
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, cwd=REPO)
    return time.perf_counter() - t


def cat_seconds(files: list[Path]) -> float:
    t = time.perf_counter()
    subprocess.run(f"cat {' '.join(str(f) for f in files)} > /dev/null", shell=True, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--msg-size", type=int, default=200, help="body bytes")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import make_store

    tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-rocksdb-"))
    try:
        probe = make_store.Layout(len(TOPIC), args.msg_size, TOPIC).size
        make_store.generate(tmp, size_bytes=args.messages * probe, msg_size=args.msg_size, topics=1, queues=4,
                            progress=False)  # fmt: skip
        root = tmp / "store"
        converted = tmp / "rocksdb-store"
        with open_store(root) as st:
            segs, _ = st.commitlog_segments()
            convert.apply_convert_cq(convert.plan_convert_cq(st, "rocksdb", converted), st)
            cat = min(cat_seconds([s.path for s in segs]) for _ in range(3))
            files_s = rocks_s = float("inf")
            units = 0
            for _ in range(args.repeat):  # alternating: both see the same machine load
                dt, units = time_build(st)
                files_s = min(files_s, dt)
                dt, _ = time_build(as_rocksdb(st))
                rocks_s = min(rocks_s, dt)
        dump_files = dump_rocks = float("inf")
        for _ in range(args.repeat):
            dump_files = min(dump_files, time_dump(root))
            dump_rocks = min(dump_rocks, time_dump(converted))
        print(f"{args.messages:,} x {args.msg_size} B in 4 queues of {TOPIC}; {units:,} units; cat of the commit log "
              f"{cat:.2f} s")  # fmt: skip
        print(f"redispatch --only consumequeue, best of {args.repeat}: files {files_s:.2f} s "
              f"({units / files_s:,.0f} units/s, {files_s / cat:.1f}x cat), RocksDB {rocks_s:.2f} s "
              f"({units / rocks_s:,.0f} units/s, {rocks_s / cat:.1f}x cat); RocksDB / files = {rocks_s / files_s:.2f}")  # fmt: skip
        print(f"dump consumequeue {TOPIC} 0 --format ndjson ({units // 4:,} units), best of {args.repeat}: files "
              f"{dump_files:.2f} s, RocksDB {dump_rocks:.2f} s; RocksDB / files = {dump_rocks / dump_files:.2f}")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
