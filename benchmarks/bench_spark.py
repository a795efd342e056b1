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

``--scaling`` instead measures ``spark stats`` and ``spark export`` at production sizes against the
previous build, on the stores of ``bench_scaling.py`` (written under --workdir when missing, reused
with --keep):

    python benchmarks/bench_spark.py --scaling --workdir /tmp/bench30 --sizes 1m,4m --runs 3 \
        --compare /work/venvs/base1/bin/rmqstore

For each size, back to back and alternating with the previous build, best of --runs: the command
lines (JVM start included: wall, CPU of every process of the command, the JVM and the Python workers
included, and the peak proportional set size of them all), ``dump commitlog --count -j 1`` and
``dump commitlog -f parquet -o FILE`` (pyarrow writing the same rows, one job); then the jobs alone
in a running session (JVM start excluded: one session per build, with the light driver the commands
start for these jobs, a warm-up stats job first). The ratios printed are the goal's: stats / dump
--count (wall, and per core: wall x cores / dump wall) and export / the pyarrow write.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

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
    if "--scaling" in sys.argv:
        sys.argv.remove("--scaling")
        scaling_main()
        return
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


# ---------------------------------------------------------------------------------------------
# --scaling: the commands at 1 M and 4 M messages against the previous build

_CLK = os.sysconf("SC_CLK_TCK")
# The jobs alone, in one running session of the build whose Python runs it: prints JSON lines.
_SESSION_JOBS = """
import json, shutil, sys, time
from rmqstore.spark import jobs
from rmqstore.spark.session import get_session
store, out, runs, master = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t = time.perf_counter()
conf = {"spark.ui.showConsoleProgress": "false"}
try:  # the driver the commands start for these two jobs (a build without it: the full one)
    spark = get_session(master, conf=conf, silent_jvm=True, light_driver=True)
except TypeError:
    spark = get_session(master, conf=conf, silent_jvm=True)
print(json.dumps({"session": time.perf_counter() - t}), flush=True)
jobs.stats_rows(spark, [store])  # warm-up: Python workers started, modules imported
for _ in range(runs):
    t = time.perf_counter()
    rows = jobs.stats_rows(spark, [store])
    stats = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    res = jobs.export_parquet(spark, [store], out)
    print(json.dumps({"stats": stats, "export": time.perf_counter() - t, "messages": sum(r["messages"] for r in rows),
                      "rows": res.rows, "groups": len(rows)}), flush=True)
shutil.rmtree(out, ignore_errors=True)
spark.stop()
"""


def _proc_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def run_tree(argv: list[str]) -> tuple[float, float, int]:
    """Wall, CPU and peak proportional set size of ``argv`` and every process under it, sampled every
    50 ms (a JVM that its parent never waits for is not in the parent's rusage)."""
    from bench_scaling import _tree_pss

    t = time.perf_counter()
    # from the temp directory: Spark's Python workers put their working directory first on sys.path,
    # so from a checkout they would import its rmqstore instead of the build's own
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
    cpu: dict[int, float] = {}
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for p in _proc_tree(proc.pid):
                c = _cpu_seconds(p)
                if c is not None:
                    cpu[p] = max(cpu.get(p, 0.0), c)
            peak[0] = max(peak[0], _tree_pss(proc.pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{err.decode(errors='replace')[-2000:]}")
    return wall, sum(cpu.values()), peak[0]


def scaling_commands(rmq: str, store: Path, out: Path, master: str) -> dict[str, list[str]]:
    return {
        "spark stats": [rmq, "spark", "stats", str(store), "--master", master, "-q", "-f", "csv"],
        "spark export": [rmq, "spark", "export", str(store), "-o", str(out), "--master", master, "-q", "-f", "json"],
        "dump --count -j 1": [rmq, "dump", "commitlog", str(store), "--count", "-j", "1", "-f", "ndjson"],
        "dump -f parquet -o": [rmq, "dump", "commitlog", str(store), "-f", "parquet", "-o", str(out / "all.parquet")],
    }


def session_jobs(python: str, store: Path, out: Path, runs: int, master: str) -> dict[str, float]:
    """Best stats and export job times of one session of the build that ``python`` runs."""
    p = subprocess.run([python, "-c", _SESSION_JOBS, str(store), str(out), str(runs), master],
                       capture_output=True, text=True, cwd=tempfile.gettempdir())  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"session jobs ({python}): exit {p.returncode}\n{p.stderr[-2000:]}")
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    best = {k: min(line[k] for line in lines[1:]) for k in ("stats", "export")}
    return {"session": lines[0]["session"], **best, "messages": lines[1]["messages"], "rows": lines[1]["rows"]}


def scaling_size(args: argparse.Namespace, n: int) -> None:
    from bench_scaling import cat_seconds, write_store

    base = write_store(args.workdir, n, 128 << 20)
    store = base / "store"
    files = sorted((store / "commitlog").iterdir())
    cat = cat_seconds(files, 3)
    out = Path(tempfile.mkdtemp(prefix="rmqstore-bench-spark-"))
    builds = [("new", args.rmqstore)] + ([("previous", args.compare)] if args.compare else [])
    print(f"\n{n:,} messages, {len(files)} commit log files, cat {cat:.2f} s; load {os.getloadavg()[0]:.1f}")
    print(f"{'command':<34} {'wall s':>8} {'cpu s':>8} {'PSS MB':>8} {'/cat':>7}")
    best: dict[tuple[str, str], tuple[float, float, int]] = {}
    try:
        for name in scaling_commands("", store, out, args.master):
            for _ in range(args.runs):
                for label, rmq in builds:
                    shutil.rmtree(out, ignore_errors=True)
                    out.mkdir()
                    r = run_tree(scaling_commands(rmq, store, out, args.master)[name])
                    old = best.get((label, name))
                    best[label, name] = r if old is None else (min(old[0], r[0]), min(old[1], r[1]), max(old[2], r[2]))
            for label, _ in builds:
                w, c, pss = best[label, name]
                print(f"{label + ' ' + name:<34} {w:8.2f} {c:8.2f} {pss / 2**20:8.0f} {w / cat:6.1f}x", flush=True)
        shutil.rmtree(out, ignore_errors=True)
        jobs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in builds}
        for _ in range(max(1, args.runs // 2)):
            for label, rmq in builds:
                jobs[label].append(session_jobs(str(Path(rmq).with_name("python")), store, out, 2, args.master))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    cores = int(args.master[6:-1]) if args.master.startswith("local[") and args.master[6:-1].isdigit() else 2
    for label, _ in builds:
        j = {k: min(x[k] for x in jobs[label]) for k in ("session", "stats", "export")}
        count = jobs[label][0]
        dump_w, parquet_w = best["new", "dump --count -j 1"][0], best["new", "dump -f parquet -o"][0]
        cli_stats, cli_export = best[label, "spark stats"][0], best[label, "spark export"][0]
        print(
            f"{label}: session start {j['session']:.2f} s; jobs alone: stats {j['stats']:.2f} s, export {j['export']:.2f} s "
            f"({count['messages']:,.0f} messages, {count['rows']:,.0f} rows exported)\n"
            f"  stats / dump --count: job {j['stats'] / dump_w:.2f}x wall ({j['stats'] * cores / dump_w:.2f}x per core), "
            f"command line {cli_stats / dump_w:.2f}x; export / pyarrow write: job {j['export'] / parquet_w:.2f}x, "
            f"command line {cli_export / parquet_w:.2f}x"
        )


def scaling_main() -> None:
    from bench_scaling import SIZES

    ap = argparse.ArgumentParser(description="spark stats and export at production sizes, against a previous build")
    ap.add_argument("--sizes", default="1m", help=f"comma-separated, of {', '.join(SIZES)} (default 1m)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rmqstore", default=str(Path(sys.executable).with_name("rmqstore")))
    ap.add_argument("--compare", help="the previous build's rmqstore (its python beside it runs its jobs)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for size in args.sizes.split(","):
        scaling_size(args, SIZES[size])


if __name__ == "__main__":
    main()
