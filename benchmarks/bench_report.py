#!/usr/bin/env python3
"""Time and peak RSS of ``rmqstore report`` on a ~1 GiB store, against ``dump commitlog --count`` of the same store.

Both run as separate processes back to back (best of --runs each, alternating, so both see the same
load), after ``cat`` of the commit log has warmed the page cache; ``cat`` is timed too. Peak RSS is
the child's ``ru_maxrss``. The store comes from ``benchmarks/make_store.py`` (--store DIR holding
``store/``, default: /tmp/rmqstore-bench/1g-200b, generated when missing).

Usage: python3 benchmarks/bench_report.py [--store DIR] [--runs 3] [--check quick|none]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RMQ = [sys.executable, "-m", "rmqstore.cli"]


def timed(argv: list[str]) -> float:
    """Wall seconds of one child process."""
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - t


def rss_of(argv: list[str]) -> float:
    """Peak RSS (MB) of one run measured on its own (a fresh parent, so no earlier child counts)."""
    code = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True, text=True, cwd=REPO)
    return int(out.stdout.split()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/rmqstore-bench/1g-200b"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--check", default="quick")
    args = ap.parse_args()
    store = args.store / "store"
    if not store.is_dir():
        subprocess.run([sys.executable, str(REPO / "benchmarks/make_store.py"), "--out", str(args.store)], check=True)
    files = sorted((store / "commitlog").iterdir())
    cat = ["sh", "-c", "cat " + " ".join(str(f) for f in files) + " > /dev/null"]
    count = [*RMQ, "dump", "commitlog", str(store), "--count"]
    report = [*RMQ, "report", str(store), "-o", os.devnull, "-q", "--check", args.check]
    subprocess.run(cat, check=True)
    times: dict[str, list[float]] = {"cat": [], "dump --count": [], "report": []}
    for _ in range(args.runs):
        for name, argv in (("cat", cat), ("dump --count", count), ("report", report)):
            times[name].append(timed(argv))
    best = {k: min(v) for k, v in times.items()}
    out = {
        "store": str(store),
        "commitLogBytes": sum(f.stat().st_size for f in files),
        "load": os.getloadavg(),
        "seconds": best,
        "peakRssMB": {"dump --count": rss_of(count), "report": rss_of(report)},
        "reportOverDumpCount": best["report"] / best["dump --count"],
        "reportOverCat": best["report"] / best["cat"],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
