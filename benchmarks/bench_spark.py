"""Benchmark the Spark reader (the ``rocketmq`` data source) against the local codec scan.

Usage: python benchmarks/bench_spark.py [STORE] [--master local[*]] [--runs N] [--keep]

Without STORE a store with 1 GiB of commit log (200-byte bodies) is generated with
``benchmarks/make_store.py`` in a temporary directory and deleted afterwards (``--keep`` keeps it).
Figures, with the files in the page cache (a first ``cat`` warms it):

* ``cat FILE > /dev/null``: the bytes;
* local codec: ``rmqstore.store.iter_commitlog`` (``decode_record`` of every record, one core);
* reader, no Spark: what one Spark task runs (walk, decode, full rows, Arrow batches) for a
  whole file, in this process;
* Spark ``count()`` and a full-row action (``write.format("noop")``) with 1, 2 and 4 partitions
  per commit log file, and a read of only the 6 columns ``stats`` reads.

rows/s of each, and the time relative to ``cat`` and to the local codec. The machine's core
count and load average are printed: other processes slow every wall time.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rmqstore.commitlog import Record  # noqa: E402
from rmqstore.store import iter_commitlog, open_store  # noqa: E402

STATS_COLUMNS = ["store", "topic", "queueId", "storeSize", "storeTimestamp", "keys"]


def best(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    """Best wall time of ``runs`` calls, and what the call returned (a row count)."""
    t_best, n = float("inf"), 0
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best, n


def local_scan(store: Path) -> int:
    with open_store(store) as st:
        return sum(1 for _, rec in iter_commitlog(st) if isinstance(rec, Record))


def reader_in_process(store: Path) -> int:
    from rmqstore.spark.source import COMMITLOG_SCHEMA, CommitLogSplit, read_split_batches, resolve_stores

    rows = 0
    for info in resolve_stores([str(store)]):
        for path, base, size in info.commitlog:
            split = CommitLogSplit(info.root, info.broker_name, path, base, 0, size, info.broker, False, 8192)
            rows += sum(b.num_rows for b in read_split_batches(split, COMMITLOG_SCHEMA))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", nargs="?", type=Path, help="store root (default: generate 1 GiB under a temp dir)")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--runs", type=int, default=1, help="runs per figure (the best is shown)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    ap.add_argument(
        "--redispatch", action="store_true", help="also time redispatch --engine local vs spark (same bytes checked)"
    )
    args = ap.parse_args()
    tmp = None
    store = args.store
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-spark-"))
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "make_store.py"), "--out", str(tmp)]
            + ["--size-gib", "1", "--msg-size", "200"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        store = tmp / "store"
        print(f"generated {store} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    try:
        run(store, args)
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


class Report:
    """Prints one line per figure, relative to ``cat`` and to the local codec."""

    def __init__(self, size: int, records: int, t_cat: float, t_local: float) -> None:
        self.size, self.records, self.t_cat, self.t_local = size, records, t_cat, t_local
        print(f"{'scan':54} {'wall s':>7} {'rows/s':>10} {'MB/s':>6} {'x cat':>6} {'x local':>8}")
        print(f"{'cat > /dev/null':54} {t_cat:7.2f} {'':>10} {size / t_cat / 1e6:6.0f} {1:6.1f}")

    def line(self, label: str, t: float, n: int) -> None:
        if n != self.records:
            raise SystemExit(f"{label}: {n} rows, expected {self.records}")
        print(
            f"{label:54} {t:7.2f} {n / t:10,.0f} {self.size / t / 1e6:6.0f} {t / self.t_cat:6.1f} "
            f"{t / self.t_local:8.2f}"
        )


def run(store: Path, args: argparse.Namespace) -> None:
    files = sorted(str(p) for p in (store / "commitlog").iterdir() if p.name.isdigit())
    size = sum(os.path.getsize(f) for f in files)
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    t_cat, _ = best(lambda: subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True) and 0, args.runs)
    t_local, records = best(lambda: local_scan(store), args.runs)
    print(f"store {store}: {len(files)} file(s), {size / 1e6:.0f} MB, {records} records ({size / records:.0f} B each)")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; Spark master {args.master}")
    report = Report(size, records, t_cat, t_local)
    report.line("local codec (iter_commitlog, 1 core)", t_local, records)
    report.line("reader without Spark (1 task, full rows)", *best(lambda: reader_in_process(store), args.runs))
    work = Path(tempfile.mkdtemp(prefix="rmqstore-bench-redispatch-"))
    try:
        if args.redispatch:  # before Spark starts: the local engine forks its decoding processes
            redispatch(store, work / "local", "local", t_cat)
        spark_figures(store, args, report)
        if args.redispatch:
            redispatch(store, work / "spark", "spark", t_cat)
            print(f"redispatch: local and spark files identical: {same_files(work / 'local', work / 'spark')}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spark_figures(store: Path, args: argparse.Namespace, report: Report) -> None:
    from rmqstore.spark import jobs
    from rmqstore.spark.session import get_session

    t0 = time.perf_counter()
    spark = get_session(args.master, conf={"spark.ui.showConsoleProgress": "false"})
    spark.range(4).count()
    print(f"{'(Spark session start)':54} {time.perf_counter() - t0:7.2f}")
    for per_file in (1, 2, 4):
        opts = jobs.ReadOptions(partitions_per_file=per_file)

        def count(opts: jobs.ReadOptions = opts) -> int:
            return int(jobs.read_commitlog(spark, [store], options=opts).count())

        def noop(opts: jobs.ReadOptions = opts) -> int:
            df = jobs.read_commitlog(spark, [store], options=opts)
            df.write.format("noop").mode("overwrite").save()
            return report.records  # noop returns nothing; count() above checks the rows

        report.line(f"Spark count(), {per_file} partition(s)/file", *best(count, args.runs))
        report.line(f"Spark noop write (full rows), {per_file} partition(s)/file", *best(noop, args.runs))

    def pruned() -> int:
        opts = jobs.ReadOptions(partitions_per_file=4)
        return int(jobs.read_commitlog(spark, [store], columns=STATS_COLUMNS, options=opts).count())

    report.line("Spark count(), stats' 6 columns, 4/file", *best(pruned, args.runs))


def redispatch(store: Path, out: Path, engine: str, t_cat: float) -> None:
    """Rebuild consume queues and index of ``store`` into ``out`` with one engine, timed."""
    from rmqstore.redispatch import build

    out.mkdir()
    with open_store(store) as st:
        t0 = time.perf_counter()
        stats, _, _ = build(st, out, engine=engine)
        t = time.perf_counter() - t0
    label = f"redispatch --engine {engine} (records/s)"
    print(f"{label:54} {t:7.2f} {stats.records / t:10,.0f} {'':6} {t / t_cat:6.1f}")


def same_files(a: Path, b: Path) -> bool:
    """Consume queue files by path and index files in order (their names are creation times)."""
    cq = sorted(p.relative_to(a) for p in (a / "consumequeue").rglob("*") if p.is_file())
    cq_b = sorted(p.relative_to(b) for p in (b / "consumequeue").rglob("*") if p.is_file())
    ia, ib = sorted((a / "index").iterdir()), sorted((b / "index").iterdir())
    return (
        cq == cq_b
        and len(ia) == len(ib)
        and all(filecmp.cmp(a / p, b / p, shallow=False) for p in cq)
        and all(filecmp.cmp(x, y, shallow=False) for x, y in zip(ia, ib, strict=True))
    )


if __name__ == "__main__":
    main()
