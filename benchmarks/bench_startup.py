"""Benchmark the start of a one-shot call: ``rmqstore --help``, ``info``, ``query key`` and ``dump
commitlog --count`` on the small fixture store, against a bare interpreter start (``python -c pass``).

Each command runs ``--runs`` times (default 15, after one warm-up run); the report gives the
median wall time and its ratio to the median of the bare start. The target is at most 8x.
Run: ``python benchmarks/bench_startup.py [--runs N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "fixtures" / "stores" / "small" / "store"
TARGET_RATIO = 8.0


def rmqstore_argv() -> list[str]:
    exe = Path(sys.executable).parent / "rmqstore"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("rmqstore")
    return [found] if found else [sys.executable, "-m", "rmqstore.cli"]


CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "rmqstore --help": [*rmqstore_argv(), "--help"],
    "rmqstore --version": [*rmqstore_argv(), "--version"],
    "rmqstore info (small)": [*rmqstore_argv(), "info", str(SMALL), "-f", "plain"],
    "rmqstore query key (small)": [*rmqstore_argv(), "query", "key", str(SMALL), "TopicA", "order-0", "-f", "plain"],
    "rmqstore dump --count (small)": [*rmqstore_argv(), "dump", "commitlog", str(SMALL), "--count", "-f", "ndjson"],
}


def time_once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=REPO)
    return time.perf_counter() - t0


def measure(runs: int) -> dict[str, float]:
    medians = {}
    for name, argv in CASES.items():
        time_once(argv)  # warm the page cache and the .pyc files
        medians[name] = statistics.median(time_once(argv) for _ in range(runs))
    return medians


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args()
    medians = measure(args.runs)
    bare = medians["python -c pass"]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load1": load, "medians_s": medians, "ratios": {k: v / bare for k, v in medians.items()}}))
        return
    print(f"runs per command: {args.runs}, load average (1 min): {load:.2f}")
    print(f"{'command':<30}{'median ms':>10}{'x bare':>9}")
    for name, t in medians.items():
        flag = "" if t / bare <= TARGET_RATIO else f"  (over {TARGET_RATIO:g}x)"
        print(f"{name:<30}{t * 1000:>10.1f}{t / bare:>9.2f}{flag}")


if __name__ == "__main__":
    main()
