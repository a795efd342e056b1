"""Benchmark the Spark pipeline against the local engine on one store, in one run.

Usage: python benchmarks/bench_spark.py [STORE] [--master local[2]] [--key KEY] [--keep]

Without STORE the 1 GiB store of 200-byte messages of ``benchmarks/make_store.py`` is used
(generated under /tmp/rmqstore-bench/1g-200b when missing). With the files in the page cache
(a first ``cat`` warms it), it prints:

* ``cat FILES > /dev/null``, the bytes (every other time is also shown as a multiple of it);
* the one-core local dump: ``rmqstore dump commitlog --format ndjson --jobs 1`` (the command line);
* the columnar decoder alone on one core: the dispatch decoder (``columnar.scan_columns``) and the
  Spark reader's batches with every column (what one task runs), in this process;
* Spark: the session start, then, after a warm-up job (the same count once), ``count()`` of
  the full schema and ``groupBy("topic").count()``;
* ``spark stats`` (summed in the tasks) and ``spark stats --exact-distinct`` against the one-core
  ``dump --count`` (wall and per core);
* ``spark export`` (Parquet by topic and date) against pyarrow writing the same rows, already in
  memory, to the same layout;
* ``spark find --key`` against ``dump --key``, both as command lines (JVM start included) and
  the find job alone in the running session.

Rows/s and ratios; the machine's core count and load average are printed with the figures.
"""

from __future__ import annotations

import argparse
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

DEFAULT_STORE = Path("/tmp/rmqstore-bench/1g-200b")
RMQSTORE = [sys.executable, "-c", "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_cli(*args: str) -> int:
    """Run ``rmqstore ARGS``; the number of messages in its ndjson output."""
    p = subprocess.run([*RMQSTORE, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
    lines = p.stdout.count(b"\n")
    return lines - p.stdout.count(b'{"kind":')  # BLANK, end-of-data and damage lines


class Report:
    def __init__(self, size: int, t_cat: float) -> None:
        self.size, self.t_cat = size, t_cat
        self.figures: dict[str, float] = {}
        print(f"{'':58} {'wall s':>7} {'rows/s':>11} {'x cat':>6}")
        self.line("cat > /dev/null", t_cat, None)

    def line(self, label: str, t: float, rows: int | None) -> None:
        rate = f"{rows / t:11,.0f}" if rows else f"{'':11}"
        if rows:
            self.figures[label] = rows / t
        print(f"{label:58} {t:7.2f} {rate} {t / self.t_cat:6.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", nargs="?", type=Path, help="directory holding store/ (default: the 1 GiB bench store)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--key", default="k-0001234567", help="the key to find (default: one message of the bench store)")
    args = ap.parse_args()
    base = args.store or DEFAULT_STORE
    store = base / "store" if (base / "store").is_dir() else base
    if not (store / "commitlog").is_dir():
        subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "make_store.py"), "--out", str(base), "--size-gib", "1"]
            + ["--msg-size", "200"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        store = base / "store"
    files = sorted(str(p) for p in (store / "commitlog").iterdir() if p.name.isdigit())
    size = sum(os.path.getsize(f) for f in files)
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    t_cat, _ = timed(lambda: subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True))
    print(f"store {store}: {len(files)} file(s), {size / 1e6:.0f} MB; Spark master {args.master}")
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report = Report(size, t_cat)

    t_reader, records = timed(lambda: reader_rows(store))
    t, rows = timed(lambda: run_cli("dump", "commitlog", str(store), "--format", "ndjson", "--jobs", "1"))
    check(rows, records, "dump")  # type: ignore[arg-type]
    report.line("local dump --format ndjson --jobs 1 (1 core)", t, records)  # type: ignore[arg-type]
    report.line("columnar dispatch decoder (scan_columns, 1 core)", *timed(lambda: scan_columns(store)))
    report.line("Spark reader alone, every column (1 core)", t_reader, records)  # type: ignore[arg-type]
    spark_figures(store, args, report, records)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    f = report.figures
    dump = f["local dump --format ndjson --jobs 1 (1 core)"]
    print(f"ratios: Spark count / one-core dump = {f['Spark count(), full schema'] / dump:.2f}x (target >= 2); ")
    print(f"        reader alone = {f['Spark reader alone, every column (1 core)']:,.0f} rows/s (target >= 400k)")


def check(got: object, want: int, what: str) -> None:
    if got != want:
        raise SystemExit(f"{what}: {got} rows, expected {want}")


def scan_columns(store: Path) -> tuple[int, int]:
    from rmqstore.store import open_store
    from rmqstore.store.files import map_file
    from rmqstore.walk import columns as columnar

    with open_store(store) as st:
        segs, _ = st.commitlog_segments()
        n = 0
        for seg in segs:
            with map_file(seg.path) as buf:
                batches, _ = columnar.scan_columns(buf, seg, st.config)
                n += sum(len(b) for b in batches)
    return n  # type: ignore[return-value]


def reader_rows(store: Path) -> int:
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmqstore.spark.source import commitlog_schema, plan_commitlog, read_piece_batches, resolve_stores

    schema = to_arrow_schema(commitlog_schema(), timezone="UTC")
    return sum(
        b.num_rows
        for group in plan_commitlog(resolve_stores([str(store)]))
        for piece in group
        for b in read_piece_batches(piece, schema)
    )


def spark_figures(store: Path, args: argparse.Namespace, report: Report, records: int) -> None:
    from rmqstore.spark import jobs
    from rmqstore.spark.session import get_session

    t, spark = timed(lambda: get_session(args.master, conf={"spark.ui.showConsoleProgress": "false"}))
    report.line("Spark session start", t, None)
    # warm-up: the same count once (starts the Python workers, compiles the JVM's Arrow-to-row path)
    t, _ = timed(lambda: jobs.read_commitlog(spark, [store]).count())  # type: ignore[attr-defined]
    report.line("Spark warm-up job (the same full-schema count)", t, None)

    def df():  # type: ignore[no-untyped-def]
        return jobs.read_commitlog(spark, [store])

    t, n = timed(lambda: df().count())
    check(n, records, "count")
    report.line("Spark count(), full schema", t, n)  # type: ignore[arg-type]
    t, groups = timed(lambda: df().groupBy("topic").count().collect())
    check(sum(r["count"] for r in groups), records, "groupBy")  # type: ignore[attr-defined]
    report.line('Spark groupBy("topic").count()', t, records)

    stats_figures(store, spark, report, records)

    work = Path(tempfile.mkdtemp(prefix="rmqstore-bench-export-"))
    try:
        t, res = timed(lambda: jobs.export_parquet(spark, [store], work / "spark"))
        check(res.rows, records, "export")  # type: ignore[attr-defined]
        report.line("spark export (Parquet by topic/date)", t, records)
        t_direct = direct_write(store, work / "direct", records)
        report.line("pyarrow write_to_dataset of the same rows (in memory)", t_direct, records)
        print(f"ratio: spark export / direct pyarrow write = {t / t_direct:.2f}x (target <= 2)")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    q = jobs.FindQuery(keys=(args.key,))
    t, found = timed(lambda: list(jobs.find_records(spark, [store], q)))
    report.line(f"Spark find --key {args.key}, job in the session", t, None)
    spark.stop()
    t_find, n_find = timed(lambda: run_cli("spark", "find", str(store), "--key", args.key, "--master", args.master,
                                          "--format", "ndjson", "-q"))  # fmt: skip
    report.line("rmqstore spark find --key (command line)", t_find, None)
    t_dump, n_dump = timed(lambda: run_cli("dump", "commitlog", str(store), "--key", args.key, "--format", "ndjson"))
    report.line("rmqstore dump commitlog --key (command line)", t_dump, None)
    print(f"find: {len(found)} / {n_find} / {n_dump} message(s); spark find / dump --key = {t_find / t_dump:.2f}x")


def stats_figures(store: Path, spark: object, report: Report, records: int) -> None:
    """``spark stats`` (summed in the tasks) and ``--exact-distinct`` (Spark's aggregation) in the
    running session, against the one-core ``dump --count`` of the same store (the command line)."""
    from rmqstore.spark import jobs

    t_count, _ = timed(lambda: run_cli("dump", "commitlog", str(store), "--count", "--jobs", "1", "-f", "ndjson"))
    report.line("local dump --count --jobs 1 (1 core, command line)", t_count, records)
    t_stats, rows = timed(lambda: jobs.stats_rows(spark, [store]))  # type: ignore[arg-type]
    check(sum(r["messages"] for r in rows), records, "stats")  # type: ignore[attr-defined]
    report.line("spark stats (per-task sums, distinct keys estimated)", t_stats, records)
    t_exact, rows = timed(lambda: jobs.stats_rows(spark, [store], exact_distinct=True))  # type: ignore[arg-type]
    check(sum(r["messages"] for r in rows), records, "stats --exact-distinct")  # type: ignore[attr-defined]
    report.line("spark stats --exact-distinct (Spark aggregation)", t_exact, records)
    cores = int(spark.sparkContext.defaultParallelism)  # type: ignore[attr-defined]
    print(
        f"ratio: spark stats / dump --count = {t_stats / t_count:.2f}x wall, {t_stats * cores / t_count:.2f}x per core "
        f"({cores} cores; target <= 1 per core); --exact-distinct / dump --count = {t_exact / t_count:.2f}x wall"
    )


def direct_write(store: Path, out: Path, records: int) -> float:
    """pyarrow writing the rows (read beforehand, not timed) partitioned by topic and date."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmqstore.spark.source import commitlog_schema, plan_commitlog, read_piece_batches, resolve_stores

    schema = to_arrow_schema(commitlog_schema(), timezone="UTC")
    batches = [
        b
        for group in plan_commitlog(resolve_stores([str(store)]))
        for piece in group
        for b in read_piece_batches(piece, schema)
    ]
    table = pa.Table.from_batches(batches)
    days = pc.divide(table.column("storeTimestamp"), 86_400_000).cast(pa.int32()).cast(pa.date32())
    table = table.append_column("date", days)
    check(table.num_rows, records, "direct")
    t0 = time.perf_counter()
    ds.write_dataset(
        table,
        out,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("topic", pa.string()), ("date", pa.date32())]), flavor="hive"),
        existing_data_behavior="overwrite_or_ignore",
        max_rows_per_group=1 << 20,
    )
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
