"""Benchmark: what the terminal view costs. ``info`` and ``check`` drawn as one fitted screen
(``-f table`` with ``COLUMNS=80 LINES=40``, as at a terminal) against the same commands of another
build (``--other``: the rmqstore script of the build before, e.g. /work/venvs/base0/bin/rmqstore),
and against plain output (the pipe's view, unchanged).

Timed back to back, alternating the sides, best of ``--runs``; the store is one a test would use
(``--store``, default the bundled fixtures/stores/crashed-torn-tail/store) or any real store. Run:
``python benchmarks/bench_terminal.py --other /path/to/old/bin/rmqstore [--runs 7] [--store STORE]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", required=True, help="the rmqstore script of the build to compare with")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--store", default=str(REPO / "fixtures" / "stores" / "crashed-torn-tail" / "store"))
    args = ap.parse_args()
    ours = shutil.which("rmqstore") or "rmqstore"
    screen = {**os.environ, "COLUMNS": "80", "LINES": "40"}
    cases = {
        "info table": (["info", args.store, "-f", "table"], screen),
        "info plain": (["info", args.store, "-f", "plain"], dict(os.environ)),
        "check table": (["check", args.store, "-f", "table"], screen),
    }
    print(f"{'case':<12} {'this build':>11} {'other':>9} {'ratio':>7}")
    for name, (argv, env) in cases.items():
        best = {"ours": float("inf"), "other": float("inf")}
        for _ in range(args.runs):
            best["ours"] = min(best["ours"], timed([ours, *argv], env))
            best["other"] = min(best["other"], timed([args.other, *argv], env))
        print(f"{name:<12} {best['ours']:>10.3f}s {best['other']:>8.3f}s {best['ours'] / best['other']:>6.2f}x")


if __name__ == "__main__":
    main()
