"""Benchmark: ``rmqstore offsets show`` on a consumer offset file of 20,000 groups x 6 topics x 4 queues
(480,000 rows, about 5 MB of fastjson text), against the previous build's same command.

The store is made with ``rmqstore write --create`` (6 topics of 4 queues, 600 messages each), then
``config/consumerOffset.json`` is written in the broker's fastjson layout (unquoted integer queue ids)
with offsets spread over each queue. Timed back to back, alternating, warm page cache, each side its
own process: wall time and peak RSS (``ru_maxrss`` of the child) of ``offsets show STORE -f ndjson``
and ``-f json`` to /dev/null; the parse of the file alone (``config.loads``, this build) against the
tolerant parser it replaces on this text; ``cat`` of the file as the floor. Best of ``--runs``. Run:
``python benchmarks/bench_offsets.py [--runs 3] [--dir /tmp/rmqstore-bench/offsets]
[--base /work/venvs/base0/bin/rmqstore] [--base-timeout 600]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rmqstore.store import config  # noqa: E402

GROUPS, TOPICS, QUEUES, MESSAGES = 20_000, 6, 4, 600
CLI = [sys.executable, "-m", "rmqstore.cli"]


def make(d: Path) -> Path:
    root = d / "store"
    if (root / "config" / "consumerOffset.json").exists():
        return root
    shutil.rmtree(d, ignore_errors=True)
    root.mkdir(parents=True)
    lines = "".join(
        json.dumps({"topic": f"Topic{i % TOPICS}", "keys": f"k{i}", "body": "x" * 100}) + "\n"
        for i in range(TOPICS * MESSAGES)
    )
    subprocess.run(
        [*CLI, "write", str(root), "-", "--create", "--now", "1795400000000"],
        input=lines.encode(),
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    rnd = random.Random(7)
    per_queue = MESSAGES // QUEUES
    items = []
    for g in range(GROUPS):
        for t in range(TOPICS):
            queues = ",".join(f"{q}:{rnd.randint(0, per_queue)}" for q in range(QUEUES))
            items.append(f'\t\t"Topic{t}@group-{g:05d}":{{{queues}\n\t\t}}')
    text = '{\n\t"offsetTable":{\n' + ",\n".join(items) + "\n\t}\n}"
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "consumerOffset.json").write_text(text)
    return root


def timed(argv: list[str], timeout: float | None = None) -> tuple[float, int]:
    """(seconds, peak RSS in MiB) of one child process writing to /dev/null."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(argv, stdout=null, stderr=subprocess.DEVNULL, check=True, cwd=REPO, timeout=timeout)
    took = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return took, (peak if peak > before else 0) // 1024  # ru_maxrss of children: the largest so far


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqstore-bench/offsets"))
    ap.add_argument("--base", default="/work/venvs/base0/bin/rmqstore")
    ap.add_argument("--base-timeout", type=float, default=600)
    a = ap.parse_args()
    root = make(a.dir)
    f = root / "config" / "consumerOffset.json"
    text = f.read_text()
    print(f"{f}: {len(text) / 1e6:.1f} MB, {GROUPS * TOPICS * QUEUES} rows", flush=True)
    best: dict[str, tuple[float, int]] = {}

    def keep(name: str, got: tuple[float, int]) -> None:
        old = best.get(name)
        best[name] = got if old is None else (min(old[0], got[0]), max(old[1], got[1]))

    base_ok = Path(a.base).exists()
    for run in range(a.runs):
        keep("cat", timed(["cat", str(f)]))
        for fmt in ("ndjson", "json"):
            keep(f"this {fmt}", timed([*CLI, "offsets", "show", str(root), "-f", fmt]))
            if base_ok and run == 0:  # minutes each: once
                try:
                    keep(f"base {fmt}", timed([a.base, "offsets", "show", str(root), "-f", fmt], a.base_timeout))
                except subprocess.TimeoutExpired:
                    best[f"base {fmt}"] = (float("inf"), 0)
        t = time.perf_counter()
        fast = config.loads(text)
        keep("parse (json path)", (time.perf_counter() - t, 0))
        if run == 0:
            t = time.perf_counter()
            slow = config._Parser(text, f).document()
            keep("parse (tolerant parser)", (time.perf_counter() - t, 0))
            assert slow == fast, "the two parsers disagree"
    for name, (secs, mib) in best.items():
        print(f"{name:26s} {secs:8.2f} s  {mib:6d} MiB  {secs / best['cat'][0]:10.0f}x cat")
    for fmt in ("ndjson", "json"):
        if f"base {fmt}" in best:
            print(f"{fmt}: previous build / this one = {best[f'base {fmt}'][0] / best[f'this {fmt}'][0]:.1f}x")
    ratio = best["parse (tolerant parser)"][0] / best["parse (json path)"][0]
    print(f"parse: tolerant parser / json path = {ratio:.1f}x")


if __name__ == "__main__":
    main()
