"""Benchmark `rmqstore dump commitlog`: count-only and ndjson scans against `cat` on the same bytes.

Usage: python benchmarks/bench_dump.py [STORE_DIR] [--runs N]

Without STORE_DIR a store with one 1 GiB commit log file of 200-byte records (BLANK at the end)
is generated under /tmp (kept for later runs). Every figure is the best of N runs of the real
command line, stdout to /dev/null, with the files already in the page cache (a first `cat` warms
it): records/s, MB/s and the time relative to `cat FILE... > /dev/null`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rmqstore.codec.commitlog import encode_blank, encode_properties, encode_record
from rmqstore.store.layout import file_name

GIB = 1 << 30
RECORD_SIZE = 200
DEFAULT_STORE = Path(tempfile.gettempdir()) / "rmqstore-bench-200b"


def generate_store(root: Path, *, file_size: int = GIB, record_size: int = RECORD_SIZE) -> int:
    """One full commit log file of ``record_size``-byte records; returns the record count."""
    topic = "BenchTopic"
    queues = 4
    born_ms = 1_700_000_000_000
    uniq = "C0A8000A1F9018B4AAC22A3B"

    def props(n: int) -> bytes:
        return encode_properties(
            {"KEYS": f"k-{n % 100000:05d}", "TAGS": "TagA", "UNIQ_KEY": f"{uniq}{n:08X}", "WAIT": "true"}
        )

    fixed = 91 + len(topic) + len(props(0))
    body = b"b" * (record_size - fixed)
    # One encoded record per queue as a template; per record only the fields that change are patched.
    templates = [
        bytearray(
            encode_record(
                topic=topic, queue_id=q, queue_offset=0, phy_offset=0, born_timestamp_ms=born_ms,
                born_addr=bytes([192, 168, 0, 10]), born_port=40000, store_timestamp_ms=born_ms,
                store_addr=bytes([192, 168, 0, 200]), store_port=10911, body=body, properties=props(0),
            )
        )
        for q in range(queues)
    ]  # fmt: skip
    assert len(templates[0]) == record_size
    props_at = record_size - len(props(0))
    key_at = props_at + len(b"KEYS\x01k-")
    uniq_at = record_size - len(b"XXXXXXXX\x02WAIT\x01true\x02")
    root.mkdir(parents=True, exist_ok=True)
    (root / "commitlog").mkdir(exist_ok=True)
    count = (file_size - 8) // record_size
    buf = bytearray(file_size)
    qoff = struct.Struct(">q")
    for n in range(count):
        t = templates[n % queues]
        pos = n * record_size
        qoff.pack_into(t, 20, n // queues)
        qoff.pack_into(t, 28, pos)
        qoff.pack_into(t, 40, born_ms + n)
        qoff.pack_into(t, 56, born_ms + n + 1)
        t[key_at : key_at + 5] = b"%05d" % (n % 100000)
        t[uniq_at : uniq_at + 8] = b"%08X" % n
        buf[pos : pos + record_size] = t
    end = count * record_size
    buf[end : end + 8] = encode_blank(file_size - end)
    tmp = root / "commitlog" / ".partial"
    tmp.write_bytes(buf)
    tmp.rename(root / "commitlog" / file_name(0))
    (root / "checkpoint").write_bytes(bytes(4096))
    (root / "bench.json").write_text(json.dumps({"records": count, "recordSize": record_size}))
    return count


def _best(cmd: list[str], runs: int) -> tuple[float, float]:
    """Best wall time and the CPU time (user + sys, all processes) of that run."""
    best = (float("inf"), 0.0)
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        with open(os.devnull, "wb") as out:
            subprocess.run(cmd, stdout=out, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, (wall, cpu))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", nargs="?", type=Path, help="store root (default: generate one under /tmp)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    store = args.store
    if store is None:
        store = DEFAULT_STORE
        if not (store / "bench.json").exists():
            shutil.rmtree(store, ignore_errors=True)
            t0 = time.perf_counter()
            n = generate_store(store)
            print(f"generated {store}: {n} records in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    files = sorted(str(p) for p in (store / "commitlog").iterdir() if p.name.isdigit())
    size = sum(os.path.getsize(f) for f in files)
    rmq = ["rmqstore"] if shutil.which("rmqstore") else [sys.executable, "-c", "from rmqstore.cli import main; main()"]
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    out = subprocess.run(
        [*rmq, "dump", "commitlog", str(store), "--count", "--format", "json", "--quiet"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    records = next(r["count"] for r in json.loads(out.stdout) if r["kind"] == "message")
    t_cat, _ = _best(["cat", *files], args.runs)
    load = os.getloadavg()[0]
    print(f"store {store}: {len(files)} file(s), {size / 1e6:.0f} MB, {records} records ({size / records:.0f} B each)")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} (other processes slow the wall times)")
    print(f"{'scan':26} {'wall s':>7} {'records/s':>11} {'MB/s':>6} {'x cat':>6} {'cpu s':>7} {'records/cpu-s':>14}")
    print(f"{'cat > /dev/null':26} {t_cat:7.3f} {'':>11} {size / t_cat / 1e6:6.0f} {1:6.1f}")
    scans = {
        "count-only (--count)": ["--count", "--format", "json"],
        "ndjson (automatic jobs)": ["--format", "ndjson"],
        "ndjson --jobs 1": ["--format", "ndjson", "--jobs", "1"],
        "ndjson --jobs 2": ["--format", "ndjson", "--jobs", "2"],
    }
    for label, opts in scans.items():
        t, cpu = _best([*rmq, "dump", "commitlog", str(store), *opts, "--quiet"], args.runs)
        print(
            f"{label:26} {t:7.3f} {records / t:11,.0f} {size / t / 1e6:6.0f} {t / t_cat:6.1f} {cpu:7.2f} "
            f"{records / cpu:14,.0f}"
        )


if __name__ == "__main__":
    main()
