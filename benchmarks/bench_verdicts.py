"""`check` and `info` with the verdict model against the previous build, back to back, and `cat` of the
same commit log bytes.

    python benchmarks/bench_verdicts.py STORE --base /path/to/previous/bin/rmqstore [--runs 3]

Runs each command of this checkout and of the previous build alternately, ``--runs`` times, and
prints the best wall time of each and their ratio (this build / previous), then each against ``cat``
of the commit log files. Exit codes are not compared (a crashed or clean store may be judged
differently now: that is the point of the change); the outputs are discarded.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(sys.executable).parent / "rmqstore"
COMMANDS = {
    "check --quick": ["check", "{store}", "--quick", "-q", "-f", "json"],
    "check": ["check", "{store}", "-q", "-f", "json"],
    "info": ["info", "{store}", "-q", "-f", "json"],
    "recover --dry-run": ["recover", "{store}", "-q", "--dry-run", "-f", "json"],
}


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", type=Path)
    ap.add_argument("--base", type=Path, required=True, help="the previous build's rmqstore script")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    logs = sorted(str(p) for p in (a.store / "commitlog").iterdir())
    cat = min(timed(["sh", "-c", 'cat "$@" > /dev/null', "cat", *logs]) for _ in range(a.runs))
    print(f"cat of the commit log: {cat:.2f} s")
    for name, args in COMMANDS.items():
        argv = [x.format(store=a.store) for x in args]
        best = {"this": float("inf"), "base": float("inf")}
        for _ in range(a.runs):  # alternating, so that load from elsewhere hits both alike
            best["this"] = min(best["this"], timed([str(HERE), *argv]))
            best["base"] = min(best["base"], timed([str(a.base), *argv]))
        ratio = best["this"] / best["base"]
        print(
            f"{name}: {best['this']:.2f} s, previous build {best['base']:.2f} s, ratio {ratio:.2f}; "
            f"{best['this'] / cat:.1f}x cat"
        )


if __name__ == "__main__":
    main()
