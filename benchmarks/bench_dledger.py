"""Benchmark: the same records in a plain commit log and in a DLedger one, read back to back.

Generates a plain store (default 1,000,000 records of 200-byte bodies, 1 GiB files), converts it to
a DLedger member with ``rmqstore convert --to dledger`` (timed against ``cat`` of the same bytes),
then runs ``rmqstore recover`` of a crashed store (``abort`` present, no checkpoint, no consume
queue or index: every record checked with its CRC and dispatched again), ``rmqstore dump commitlog
--count`` and ``rmqstore redispatch --output`` on both stores, alternating plain and DLedger in the
same minutes, and prints the best time of each and the DLedger / plain ratio (target: at most 1.2x).

    python3 benchmarks/bench_dledger.py [--messages 1000000] [--msg-size 200] [--repeat 3] [--keep DIR]
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
sys.path.insert(0, str(REPO / "benchmarks"))
RMQSTORE = [sys.executable, "-m", "rmqstore.cli"]


def run(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - t


def cat(root: Path) -> float:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return run(["sh", "-c", "cat " + " ".join(str(f) for f in files) + " > /dev/null"])


def crashed(store: Path) -> None:
    """Back to the state of a broker killed before its first flush: recover has everything to do."""
    for d in ("consumequeue", "index", ".rmqstore"):
        shutil.rmtree(store / d, ignore_errors=True)
    (store / "checkpoint").unlink(missing_ok=True)
    (store / "abort").touch()


def commands(store: Path, scratch: Path) -> dict[str, list[str]]:
    return {
        # one version for both stores: generated records say too little to tell it
        "recover (crashed)": [*RMQSTORE, "recover", str(store), "-q", "--no-quarantine", "--broker-version", "4.9.4"],
        "dump commitlog --count": [*RMQSTORE, "dump", "commitlog", str(store), "--count"],
        "redispatch --output": [*RMQSTORE, "redispatch", str(store), "-q", "--output", str(scratch)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--msg-size", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the two stores in this directory")
    args = ap.parse_args()
    import make_store

    tmp = args.keep or Path(tempfile.mkdtemp(prefix="rmqstore-bench-dledger-"))
    try:
        probe = make_store.Layout(len("BenchTopic00"), args.msg_size, "BenchTopic00").size
        plain = tmp / "plain"
        if not (plain / "store").is_dir():
            make_store.generate(
                plain, size_bytes=args.messages * probe, msg_size=args.msg_size, topics=4, queues=8, progress=False
            )
        dledger = tmp / "dledger"
        if not (dledger / "store").is_dir():
            dledger.mkdir(exist_ok=True)
            t = run([*RMQSTORE, "convert", str(plain / "store"), "--to", "dledger", "-o", str(dledger / "store"),
                     "--write-broker-conf", "-q", "-f", "json"])  # fmt: skip
            c = cat(plain / "store" / "commitlog")
            print(f"convert --to dledger: {t:.2f} s; cat of the commit log {c:.2f} s; ratio {t / c:.1f}x")
        best: dict[tuple[str, str], float] = {}
        for _ in range(args.repeat):
            for kind, root in (("plain", plain / "store"), ("dledger", dledger / "store")):
                for name, argv in commands(root, tmp / f"build-{kind}").items():
                    shutil.rmtree(tmp / f"build-{kind}", ignore_errors=True)
                    if name.startswith("recover"):
                        crashed(root)
                    dt = run(argv)
                    best[(name, kind)] = min(dt, best.get((name, kind), dt))
        print(f"records {args.messages} x {args.msg_size} B body, best of {args.repeat}, alternating:")
        for name in commands(tmp, tmp):
            p, d = best[(name, "plain")], best[(name, "dledger")]
            print(f"  {name:24s} plain {p:6.2f} s   dledger {d:6.2f} s   dledger / plain = {d / p:.2f}x")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
