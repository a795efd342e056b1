"""Benchmark: `recover` of 1 GiB of commit log with ``abort`` present and CRC checking on, vs ``cat``.

The store is generated under /tmp: ~1,000,000 records with 200-byte bodies, one key and a
UNIQ_KEY each (379 bytes a record, ~379 MB), written with ``commitlog.encode_record`` into a
1 GiB commit log file; no consume queue, no index, no checkpoint, ``abort`` present. That is
the worst case of abnormal recovery: every record is checked (body CRC) and re-dispatched.

Anchor measured on this kind of store: the real 4.4.0 engine recovers and re-dispatches it in
about 3.9 s. Run: ``python benchmarks/bench_recover.py [--records N] [--runs R] [--keep]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rmqstore.codec.commitlog import encode_properties, encode_record
from rmqstore.ops import recover as rec
from rmqstore.store import open_store

FILE_SIZE = 1 << 30
ENGINE_ANCHOR_S = 3.9
ENGINE_IDLE_S = 3.4  # the engine on an idle machine of this kind; the target is at most half of it


def generate(root: Path, n: int) -> int:
    """Write ``n`` records into 1 GiB commit log files; returns the bytes of records written."""
    cl = root / "commitlog"
    cl.mkdir(parents=True)
    body = bytes(range(200))
    born, store = bytes([192, 168, 0, 10]), bytes([192, 168, 0, 2])
    hosts = {"born_addr": born, "born_port": 50000, "store_addr": store, "store_port": 10911}
    qoff = [0] * 8
    phy = 0
    out = None
    chunks: list[bytes] = []
    for i in range(n):
        q = i % 8
        props = encode_properties(
            [
                ("KEYS", f"key-{i:07d}"),
                ("UNIQ_KEY", f"C0A8000A1F9018B4AAC2{i:012X}"),
                ("TAGS", "TagA"),
                ("WAIT", "true"),
            ]
        )
        ts = 1_700_000_000_000 + i // 100
        rec_bytes = encode_record(
            topic="TopicTest",
            queue_id=q,
            queue_offset=qoff[q],
            phy_offset=phy,
            born_timestamp_ms=ts,
            store_timestamp_ms=ts,
            body=body,
            properties=props,
            **hosts,
        )
        if out is None or phy % FILE_SIZE + len(rec_bytes) + 8 > FILE_SIZE:
            if out is not None:
                raise SystemExit("more records than fit in one file: this benchmark writes a single 1 GiB file")
            out = open(cl / f"{phy - phy % FILE_SIZE:020d}", "wb")  # noqa: SIM115
            out.truncate(FILE_SIZE)
        qoff[q] += 1
        chunks.append(rec_bytes)
        phy += len(rec_bytes)
        if len(chunks) >= 20000:
            out.write(b"".join(chunks))
            chunks.clear()
    assert out is not None
    out.write(b"".join(chunks))
    out.close()
    return phy


def reset(root: Path) -> None:
    """Back to the crashed state: no consume queue, no index, no checkpoint, abort present."""
    for d in ("consumequeue", "index", ".rmqstore"):
        shutil.rmtree(root / d, ignore_errors=True)
    (root / "checkpoint").unlink(missing_ok=True)
    (root / "abort").touch()
    q = root.parent / f"{root.name}.quarantine"
    shutil.rmtree(q, ignore_errors=True)


def run_recover(root: Path) -> tuple[float, float, rec.RecoverPlan, rec.RecoverResult]:
    t0 = time.perf_counter()
    with open_store(root, writable=True) as st:
        plan = rec.plan_recover(st, now_ms=int(time.time() * 1000))
        t1 = time.perf_counter()
        result = rec.apply_recover(st, plan)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, plan, result


def time_cat(path: Path, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-recover-", dir="/tmp"))
    root = tmp / "store"
    try:
        t = time.perf_counter()
        size = generate(root, args.records)
        print(
            f"generated {args.records} records, {size / 1e6:.0f} MB in a 1 GiB file ({time.perf_counter() - t:.1f} s)"
        )
        clfile = root / "commitlog" / f"{0:020d}"
        cat_s = time_cat(clfile, args.runs)
        plans, applies, totals = [], [], []
        for _ in range(args.runs):
            reset(root)
            p_s, a_s, plan, result = run_recover(root)
            plans.append(p_s)
            applies.append(a_s)
            totals.append(p_s + a_s)
        d = result.dispatch or {}
        assert plan.path == "abnormal" and plan.process_offset == size, (plan.path, plan.process_offset)
        assert d.get("records") == args.records and d.get("cqEntries") == args.records, d
        best = min(totals)
        print(f"records re-dispatched: {d['records']}, CQ entries {d['cqEntries']}, index entries {d['indexEntries']}")
        print(f"cat of the 1 GiB commit log file:     {cat_s:.2f} s")
        print(
            f"recover (abort, CRC on), best of {args.runs}: {best:.2f} s "
            f"(plan/check {plans[totals.index(best)]:.2f} s + apply/re-dispatch {applies[totals.index(best)]:.2f} s); "
            f"median {statistics.median(totals):.2f} s"
        )
        print(f"ratio recover / cat:                  {best / cat_s:.1f}x")
        print(f"throughput: {size / best / 1e6:.0f} MB/s, {args.records / best / 1e6:.2f} M records/s")
        print(f"4.4.0 engine anchor: {ENGINE_ANCHOR_S} s -> ratio ours / engine {best / ENGINE_ANCHOR_S:.2f}")
        print(
            f"vs the engine idle ({ENGINE_IDLE_S} s): {best / ENGINE_IDLE_S:.2f} (target <= 0.50; figures under load "
            "are high: compare the ratio to cat)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {root}", file=sys.stderr)


if __name__ == "__main__":
    main()
