"""Benchmark every output format of `rmqstore dump commitlog`: peak RSS, time to the first row, rows/s, ratio to `cat`.

Usage: python benchmarks/bench_formats.py [--store DIR] [--size-gib 1] [--runs N] [--formats ndjson,csv,...]
       [--rmqstore PATH] [--compare PATH] [--bytes N] [--jobs N]

Without --store a store of --size-gib GiB is made with benchmarks/make_store.py under /tmp (and
deleted at the end unless --keep). Each format runs the real command line with stdout read from a
pipe by this process (time to the first byte, then drained), its peak resident set size taken
from the child's rusage; Parquet writes a file (-o) and has no first row. `cat` of the same commit
log files to the same kind of pipe is the reference: ratio = the command's time / cat's time, best
of N for both, run back to back. --bytes N dumps the records before commit log offset N only
(--to-offset N) and compares with `head -c N` of the first file: the same bytes either way.
Each run also gives the child's CPU seconds (user + system), which a loaded machine disturbs less
than wall time, and the CPU microseconds a row. --compare PATH runs the same commands with another build's rmqstore, alternating
with this one run by run (best of N each), and prints its figures and the ratios of this build's
CPU seconds and wall time to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMATS = ("table", "plain", "json", "ndjson", "csv", "parquet")
READ = 1 << 20


def run_piped(argv: list[str]) -> dict[str, float]:
    """Run ``argv`` with stdout into a pipe read here: seconds to the first byte and to the end, bytes, peak RSS (MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = None
    total = 0
    lines = 0
    while chunk := proc.stdout.read1(READ):
        if first is None:
            first = time.perf_counter() - start
        total += len(chunk)
        lines += chunk.count(b"\n")
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 3):
        raise SystemExit(f"{argv} exited {os.waitstatus_to_exitcode(status)}")
    return {
        "seconds": elapsed,
        "cpuSeconds": usage.ru_utime + usage.ru_stime,
        "firstRowSeconds": first if first is not None else elapsed,
        "bytes": total,
        "lines": lines,
        "peakRssMB": usage.ru_maxrss / 1024,
    }


def commitlog_files(store: Path) -> list[str]:
    return sorted(str(p) for p in (store / "commitlog").iterdir() if p.name.isdigit())


def best(runs: int, fn) -> dict[str, float]:  # type: ignore[no-untyped-def]
    out = [fn() for _ in range(runs)]
    return min(out, key=lambda r: r["seconds"])


def dump_argv(rmqstore: str, store: Path, fmt: str, args: argparse.Namespace, out: Path | None) -> list[str]:
    cmd = [rmqstore, "dump", "commitlog", str(store), "-f", fmt]
    if args.bytes is not None:
        cmd += ["--to-offset", str(args.bytes)]
    if args.jobs is not None and fmt in ("ndjson", "json"):
        cmd += ["--jobs", str(args.jobs)]
    return cmd + (["-o", str(out)] if out is not None else [])


def measure(args: argparse.Namespace, store: Path, files: list[str], fmt: str) -> dict[str, float | None]:
    """One format: this build (and the --compare build, alternating), best of --runs, and cat of the same bytes."""
    out = Path(tempfile.mkdtemp(prefix="rmqstore-bench-parquet-")) / "dump.parquet" if fmt == "parquet" else None
    builds = [args.rmqstore] + ([args.compare] if args.compare else [])
    ref = ["cat", *files] if args.bytes is None else ["head", "-c", str(args.bytes), files[0]]
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in builds}
    cats = []
    try:
        for _ in range(args.runs):
            cats.append(run_piped(ref))
            for b in builds:
                got = run_piped(dump_argv(b, store, fmt, args, out))
                if out is not None:
                    got["bytes"] = out.stat().st_size
                runs[b].append(got)
    finally:
        if out is not None:
            shutil.rmtree(out.parent)
    cat = min(cats, key=lambda r: r["seconds"])
    mine = min(runs[args.rmqstore], key=lambda r: r["seconds"])
    mine["cpuSeconds"] = min(r["cpuSeconds"] for r in runs[args.rmqstore])
    rows = mine["lines"] if fmt in ("ndjson", "json", "csv", "plain") else None
    result: dict[str, float | None] = {
        **mine,
        "catSeconds": cat["seconds"],
        "ratioToCat": mine["seconds"] / cat["seconds"],
        "cpuRatioToCatWall": mine["cpuSeconds"] / cat["seconds"],
        "rowsPerSecond": (rows / mine["seconds"]) if rows else None,
        "cpuMicrosPerRow": (mine["cpuSeconds"] * 1e6 / rows) if rows else None,
    }
    if args.compare:
        other = min(runs[args.compare], key=lambda r: r["seconds"])
        other_cpu = min(r["cpuSeconds"] for r in runs[args.compare])
        result.update(
            compareSeconds=other["seconds"],
            compareCpuSeconds=other_cpu,
            comparePeakRssMB=other["peakRssMB"],
            compareRatioToCat=other["seconds"] / cat["seconds"],
            compareCpuRatioToCatWall=other_cpu / cat["seconds"],
            compareCpuMicrosPerRow=(other_cpu * 1e6 / rows) if rows else None,
            cpuRatioToCompare=mine["cpuSeconds"] / other_cpu,
            wallRatioToCompare=mine["seconds"] / other["seconds"],
        )
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--rmqstore", default=str(Path(sys.executable).with_name("rmqstore")))
    ap.add_argument("--bytes", type=int, help="only the records before this commit log offset (first file)")
    ap.add_argument("--compare", help="another build's rmqstore, run alternately with this one")
    ap.add_argument("--jobs", type=int, help="--jobs of dump (ndjson and json)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    args = ap.parse_args(argv)
    made = None
    store = args.store
    if store is None:
        made = Path(tempfile.mkdtemp(prefix="rmqstore-bench-formats-"))
        store = made / "store"
        subprocess.run(
            [sys.executable, str(HERE / "make_store.py"), "--out", str(store), "--size-gib", str(args.size_gib)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    try:
        files = commitlog_files(store)
        size = sum(os.path.getsize(f) for f in files)
        run_piped(["cat", *files])  # the page cache holds the files from here on
        results: dict[str, dict[str, float]] = {}
        for fmt in args.formats.split(","):
            results[fmt] = measure(args, store, files, fmt)
            print(json.dumps({"format": fmt, **results[fmt]}), flush=True)
        print(json.dumps({"store": str(store), "commitlogBytes": size, "results": results}, indent=2))
    finally:
        if made is not None and not args.keep:
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
