"""Benchmark version detection alone: ``store.detect.detect`` on opened stores.

Every command pays it while it opens a store (the evidence is gathered even with ``--broker-version``,
to warn when it rules the given family out). For each store the best of --runs is printed, in ms,
each run the first detection of a fresh process (the code cold, the pages warm); with ``--compare
PYTHON`` (the previous build's interpreter) that build is measured the same way, alternating, and the
ratio of the two is printed.

    python benchmarks/bench_detect.py STORE... [--runs 7] [--compare /work/venvs/base2/bin/python]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def detect_ms(store: str) -> float:
    """One detection of ``store`` in a fresh process, in ms (the store opened outside the timing, numpy
    loaded as every command but a key query has it by then)."""
    import numpy  # noqa: F401

    from rmqstore.store import commitlog_framing, detect, resolve_config

    cfg = resolve_config(Path(store), None, None)
    framing = commitlog_framing(cfg)
    t = time.perf_counter()
    detect.detect(cfg, framing)
    return (time.perf_counter() - t) * 1000


def measure(python: str, store: str) -> float:
    code = "import bench_detect as b; "
    code += f"print(b.detect_ms({store!r}))"
    # run beside this script, never in a checkout: ``-c`` would import the rmqstore found in the current folder
    here = Path(__file__).parent
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, cwd=here).stdout
    return float(out.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--compare", help="the previous build's python, measured back to back")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    builds = {"this": sys.executable} | ({"previous": args.compare} if args.compare else {})
    out = {}
    for store in (str(Path(s).resolve()) for s in args.stores):
        times: dict[str, list[float]] = {b: [] for b in builds}
        for i in range(args.runs):
            order = list(builds.items()) if i % 2 == 0 else list(reversed(builds.items()))
            for name, python in order:
                times[name].append(measure(python, store))
        out[store] = {name: min(ts) for name, ts in times.items()}
    if args.json:
        print(json.dumps(out))
        return
    for store, best in out.items():
        line = f"{store}: this {best['this']:.1f} ms"
        if "previous" in best:
            line += f", previous {best['previous']:.1f} ms, this / previous {best['this'] / best['previous']:.3f}x"
        print(line)


if __name__ == "__main__":
    main()
