#!/usr/bin/env python3
"""``rmqstore check`` against the previous build and against ``cat`` of the same bytes.

    python3 benchmarks/bench_check.py STORE_DIR [STORE_DIR...] [--base /work/venvs/base0/bin/rmqstore]
                                      [--repeat 3] [--hostile-offsets 100000]

Each STORE_DIR holds ``store/`` (and ``broker.conf``), e.g. made by ``benchmarks/make_store.py``.
For each store, this build's ``check`` and the base build's run back to back, alternating, best of
``--repeat``; each run's wall time, CPU time (user + sys) and peak RSS come from ``wait4`` of that
process alone. ``cat`` of the commit log, consume queue and index files is the reference for reading
the same bytes. Both reports must be byte-identical (JSON), else the benchmark fails.

``--hostile-offsets N`` also times check on a copy of the first store's small files with a
consumerOffset.json of N groups on topics that have no queue (two queues each).
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

REPO = Path(__file__).resolve().parents[1]
NEW = str(Path(sys.executable).with_name("rmqstore"))


def run(argv: list[str], out: Path | None = None) -> tuple[float, float, int]:
    """(wall s, cpu s, peak RSS MB) of one process."""
    t = time.perf_counter()
    with open(out or os.devnull, "wb") as fh:
        p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.DEVNULL)
        _, _, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t, ru.ru_utime + ru.ru_stime, ru.ru_maxrss // 1024


def files_of(store: Path) -> list[str]:
    return [
        str(p) for d in ("commitlog", "consumequeue", "index") for p in sorted((store / d).rglob("*")) if p.is_file()
    ]


def records(report: Path) -> int:
    return int(json.loads(report.read_text())["summary"]["records"])


def bench_store(root: Path, base: str, repeat: int, tmp: Path) -> dict:
    store = root / "store"
    cat = ["sh", "-c", 'cat "$@" > /dev/null', "cat", *files_of(store)]
    sides = {
        "new": [NEW, "check", str(store), "-q", "-f", "json"],
        "base": [base, "check", str(store), "-q", "-f", "json"],
    }
    best: dict[str, tuple[float, float, int]] = {}
    for i in range(repeat):
        for name in ("new", "base") if i % 2 == 0 else ("base", "new"):
            got = run(sides[name], tmp / f"{name}.json")
            best[name] = min(best.get(name, got), got)
        got = run(cat)
        best["cat"] = min(best.get("cat", got), got)
    if (tmp / "new.json").read_bytes() != (tmp / "base.json").read_bytes():
        raise SystemExit(f"{store}: the two builds' reports differ")
    n = records(tmp / "new.json")
    row = {"store": str(store), "records": n}
    for name, (wall, cpu, rss) in best.items():
        row[name] = {"s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mb": rss, "ns_per_msg": round(wall / n * 1e9)}
    row["new/base"] = round(best["new"][0] / best["base"][0], 2)
    row["new/cat"] = round(best["new"][0] / best["cat"][0], 2)
    return row


def bench_offsets(root: Path, base: str, n: int, tmp: Path) -> dict:
    store = tmp / "offsets" / "store"
    for d in ("commitlog", "consumequeue", "index"):
        (store / d).mkdir(parents=True)
    first = sorted((root / "store" / "commitlog").iterdir())[0]
    os.link(first, store / "commitlog" / first.name)  # one file of records: the offsets are what is timed
    shutil.copy(root / "store" / "checkpoint", store / "checkpoint")
    (store / "config").mkdir()
    items = ",\n".join(f'\t\t"Missing{i}@G{i % 7}":{{0:{i + 1},1:{i + 2}}}' for i in range(n))
    (store / "config" / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n' + items + "\n\t}\n}")
    row: dict = {"committedOffsets": 2 * n}
    for name, exe in (("new", NEW), ("base", base)):
        wall, cpu, rss = run([exe, "check", str(store), "-q", "-f", "json", "-c", str(root / "broker.conf")])
        row[name] = {"s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mb": rss}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--base", default="/work/venvs/base0/bin/rmqstore")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hostile-offsets", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as t:
        tmp = Path(t)
        for root in args.stores:
            print(json.dumps(bench_store(root, args.base, args.repeat, tmp)), flush=True)
        if args.hostile_offsets:
            print(json.dumps(bench_offsets(args.stores[0], args.base, args.hostile_offsets, tmp)), flush=True)


if __name__ == "__main__":
    main()
