"""Benchmark: rebuild consume queues and index files of a large store with the local engine.

Generates (or takes) a store, removes its consume queues and index files, and times
``rmqstore.dispatch.rebuild.build`` into a scratch directory, against ``cat`` of the same commit log
bytes. Anchor (issue): the real 4.4.0 engine rebuilds 1,000,000 messages of 200-byte bodies
(379 MB, one key + UNIQ_KEY each) in about 3.9 s on this kind of machine, about 250 k msg/s.

    python3 benchmarks/bench_redispatch.py [--store DIR] [--messages 1000000] [--msg-size 200]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from rmqstore.dispatch import rebuild as redispatch  # noqa: E402
from rmqstore.store import open_store  # noqa: E402


def cat_seconds(files: list[Path], end: int) -> float:
    t = time.perf_counter()
    subprocess.run(f"cat {' '.join(str(f) for f in files)} > /dev/null", shell=True, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="an existing store root (its consume queues and index are not touched)")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--msg-size", type=int, default=200, help="body bytes")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = None
    if args.store is None:
        import make_store

        tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-"))
        # one key + UNIQ_KEY per message; record size = body + fixed overhead
        probe = make_store.Layout(len("BenchTopic00"), args.msg_size, "BenchTopic00").size
        make_store.generate(
            tmp, size_bytes=args.messages * probe, msg_size=args.msg_size, topics=4, queues=8, progress=False
        )
        root = tmp / "store"
    else:
        root = args.store
    try:
        with open_store(root) as st:
            segs, _ = st.commitlog_segments()
            best = None
            for _ in range(args.repeat):
                build = Path(tempfile.mkdtemp(prefix="rmqstore-build-"))
                t = time.perf_counter()
                stats, end, _reason = redispatch.build(st, build)
                dt = time.perf_counter() - t
                shutil.rmtree(build)
                best = dt if best is None else min(best, dt)
            data = end - segs[0].base_offset
            cat = min(cat_seconds([s.path for s in segs], end) for _ in range(3))
        n = stats.records
        print(f"records {n}, commit log bytes {data}, index entries {stats.index_entries}")
        print(
            f"redispatch (local engine, best of {args.repeat}): {best:.2f} s, {n / best:,.0f} msg/s, "
            f"{data / best / 1e6:,.0f} MB/s"
        )
        print(f"cat of the commit log files: {cat:.2f} s; redispatch / cat = {best / cat:.1f}x")
        if args.store is None and args.msg_size == 200:  # the anchor is for 200-byte messages only
            print(f"vs the 4.4.0 engine anchor (3.9 s for 1,000,000 x 200 B): {3.9 / best * n / 1_000_000:.2f}x")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
