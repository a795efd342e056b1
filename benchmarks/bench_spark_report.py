#!/usr/bin/env python3
"""Time and peak RSS of ``rmqstore spark report`` against ``rmqstore report`` of the same store, back to back.

Both run as separate processes (best of --runs each, alternating, so both see the same load) after
``cat`` of the commit log has warmed the page cache; ``cat`` is timed too, and both JSON outputs
are compared (they must hold the same figures). Spark's time includes its JVM start. Peak RSS is
the largest process of each run (the Spark JVM for ``spark report``). The store comes from
``benchmarks/make_store.py``; a store of 128 MiB files gives Spark one task per file (default
/tmp/rmqstore-bench/1g-200b-128m, generated when missing).

Usage: python3 benchmarks/bench_spark_report.py [--store DIR] [--runs 2] [--master local[2]] [--check none]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_report import REPO, RMQ, rss_of, timed

FILE_SIZE = 128 << 20


def _figures(path: Path) -> object:
    """A report's JSON without the file system's used ratios (they move while the benchmark runs)."""

    def strip(doc: object) -> object:
        if isinstance(doc, dict):
            return {k: strip(v) for k, v in doc.items() if not k.endswith("DiskUsedRatio")}
        return [strip(v) for v in doc] if isinstance(doc, list) else doc

    return strip(json.loads(path.read_text()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("/tmp/rmqstore-bench/1g-200b-128m"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--check", default="none")
    args = ap.parse_args()
    store = args.store / "store"
    if not store.is_dir():
        make = [sys.executable, str(REPO / "benchmarks/make_store.py"), "--out", str(args.store)]
        subprocess.run([*make, "--file-size", str(FILE_SIZE)], check=True)
    files = sorted((store / "commitlog").iterdir())
    cat = ["sh", "-c", "cat " + " ".join(str(f) for f in files) + " > /dev/null"]
    out = Path(tempfile.mkdtemp())
    common = [str(store), "-q", "--check", args.check, "--now", "2026-01-01T00:00:00Z", "-f", "json"]
    local = [*RMQ, "report", *common, "-o", str(out / "local.json")]
    spark = [*RMQ, "spark", "report", *common, "--master", args.master, "-o", str(out / "spark.json")]
    subprocess.run(cat, check=True)
    times: dict[str, list[float]] = {"cat": [], "report": [], "spark report": []}
    for _ in range(args.runs):
        for name, argv in (("cat", cat), ("report", local), ("spark report", spark)):
            times[name].append(timed(argv))
    same = _figures(out / "local.json") == _figures(out / "spark.json")
    best = {k: min(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                "store": str(store),
                "commitLogFiles": len(files),
                "commitLogBytes": sum(f.stat().st_size for f in files),
                "master": args.master,
                "cores": os.cpu_count(),
                "load": os.getloadavg(),
                "seconds": best,
                "peakRssMB": {"report": rss_of(local), "spark report": rss_of(spark)},
                "sparkReportOverReport": best["spark report"] / best["report"],
                "sparkReportOverCat": best["spark report"] / best["cat"],
                "sameFigures": same,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
