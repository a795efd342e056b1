"""Benchmark: what checking every store file before opening it (and reserving space before mapped
writes) costs, and what skipping the holes of sparse files saves.

Times, back to back and alternating, best of N, this checkout's command line against another build's
(``--other``, by default the previous build's console script) and ``cat`` of the same commit log bytes:

* ``dump commitlog --count`` and ``redispatch --dry-run`` (which builds every consume queue and index
  file in a temporary folder, through the reserved, mapped writers) on a generated store;
* ``dump commitlog --count`` on a single 1 TB sparse commit log holding 1000 bytes at 1 GiB, and
  ``dump timer`` on a 1 TB sparse timer wheel with three used slots (the other build is stopped after
  ``--limit`` seconds: its figure is then a lower bound).

    python3 benchmarks/bench_hostile_files.py [--size-gib 0.25] [--repeat 3] [--other PATH] [--limit 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = [sys.executable, "-c", "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"]


def timed(argv: list[str], limit: float) -> tuple[float, bool, int]:
    """Seconds, whether it finished within ``limit``, and the peak memory of the run in MiB."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    while True:
        pid, _, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = 0  # reaped here
            return time.perf_counter() - t, True, usage.ru_maxrss // 1024
        if time.perf_counter() - t > limit:
            p.kill()
            _, _, usage = os.wait4(p.pid, 0)
            p.returncode = -9
            return time.perf_counter() - t, False, usage.ru_maxrss // 1024
        time.sleep(0.02)


def best_of(sides: dict[str, list[str]], repeat: int, limit: float) -> dict[str, tuple[float, bool, int]]:
    best: dict[str, tuple[float, bool, int]] = {}
    for _ in range(repeat):
        for name, argv in sides.items():  # alternating: the same load for both sides
            got = timed(argv, limit)
            if name not in best or got[0] < best[name][0]:
                best[name] = got
    return best


def sparse_stores(tmp: Path) -> tuple[Path, Path]:
    log = tmp / "sparse" / "commitlog"
    log.mkdir(parents=True)
    with open(log / ("0" * 20), "wb") as f:
        f.truncate(1 << 40)
        f.seek(1 << 30)
        f.write(os.urandom(1000))
    wheel_store = tmp / "wheel"
    (wheel_store / "commitlog").mkdir(parents=True)
    (wheel_store / "checkpoint").write_bytes(bytes(4096))
    with open(wheel_store / "timerwheel", "wb") as f:
        f.truncate(1 << 40)
        for i in (5, 7, (1 << 40) // 32 - 3):
            f.seek(i * 32)
            f.write((1700000000000 + i).to_bytes(8, "big") + bytes(20) + b"\0\0\0\1")
    return log.parent, wheel_store


def report(title: str, best: dict[str, tuple[float, bool, int]]) -> None:
    ours = best["ours"][0]
    for name, (s, done, mib) in best.items():
        ratio = s / ours if ours else float("nan")
        bound = "" if done else " (stopped: at least)"
        print(f"{title:34s} {name:6s} {s:8.3f} s{bound}  peak {mib:5d} MiB  {ratio:6.2f}x ours")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=0.25)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--other", default=str(REPO.parent / ".." / "venvs" / "base0" / "bin" / "rmqstore"))
    ap.add_argument("--limit", type=float, default=60.0)
    args = ap.parse_args()
    other = [str(Path(args.other).resolve())]
    tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-hostile-"))
    try:
        out = tmp / "gen"
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_store.py"), "--out", str(out),
                        "--size-gib", str(args.size_gib), "--file-size", str(64 << 20)], check=True, cwd=REPO)  # fmt: skip
        store = out / "store"
        files = sorted((store / "commitlog").iterdir())
        cat = ["sh", "-c", "cat " + " ".join(map(str, files)) + " > /dev/null"]
        for title, cmd in (("dump commitlog --count", ["dump", "commitlog", str(store), "--count"]),
                           ("redispatch --dry-run", ["redispatch", str(store), "-q", "--dry-run"])):  # fmt: skip
            report(title, best_of({"ours": OURS + cmd, "other": other + cmd, "cat": cat}, args.repeat, 600))
        sparse, wheel = sparse_stores(tmp)
        for title, cmd in (("1 TB sparse: dump commitlog --count", ["dump", "commitlog", str(sparse), "--count"]),
                           ("1 TB sparse: dump timer", ["dump", "timer", str(wheel)])):  # fmt: skip
            report(title, best_of({"ours": OURS + cmd, "other": other + cmd}, 1, args.limit))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
