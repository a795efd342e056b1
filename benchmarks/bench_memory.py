#!/usr/bin/env python3
"""Peak resident memory of a full commit log scan (and of ``rmqstore info``) on a ~1 GiB file.

Writes one 1 GiB commit log file of 200-byte records with ``encode_record`` (ending with a BLANK
record, as a full broker file does) under /tmp, or takes an existing store, then runs in separate
processes:

* ``cat FILE > /dev/null``: the reference for reading the same bytes;
* a full scan through ``rmqstore.store.iter_commitlog`` (every record decoded);
* ``rmqstore.info.store_info`` (walks the same file to find the end of the data).

Each Python run reports its peak RSS (``ru_maxrss``); the scan must stay under 200 MB. The data
written is deleted afterwards unless --keep is given.

Two more stores check that scans stop at the end of the data, whatever the file holds (each
command must stay under 300 MB):

* ``mostly-zero``: a 1 GiB commit log file holding 53 MB of records, then zeros (a hole, as a
  broker leaves a preallocated file);
* ``sparse``: a stray 2 GiB sparse file (no data at all) where a commit log file is expected;

on which ``rmqstore dump commitlog --count`` and ``rmqstore check`` run as separate processes.

Usage: python3 benchmarks/bench_memory.py [--store DIR] [--size-mib 1024] [--keep] [--only-empty-space]
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
sys.path.insert(0, str(REPO))

from rmqstore.codec.commitlog import encode_blank, encode_properties, encode_record  # noqa: E402

LIMIT_MB = 200
RECORD_SIZE = 200
CHUNK = 64 << 20

SCAN = """
import json, resource, sys, time
from rmqstore.store import iter_commitlog, open_store
t = time.perf_counter()
n = size = 0
with open_store(sys.argv[1]) as st:
    for _, rec in iter_commitlog(st):
        n += 1
        size += rec.total_size
print(json.dumps({"records": n, "bytes": size, "seconds": time.perf_counter() - t,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

# The same scan through walk_segment over our own mapping, releasing the pages behind the cursor
# (madvise MADV_DONTNEED every 16 MiB): the change iter_commitlog needs to stay small on big files.
SCAN_RELEASE = """
import json, mmap, resource, sys, time
from rmqstore.store import open_store, walk_segment
t = time.perf_counter()
n = size = 0
with open_store(sys.argv[1]) as st:
    for seg in st.commitlog_segments()[0]:
        with open(seg.path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        released = 0
        for rec in walk_segment(m, seg):
            n += 1
            size += rec.total_size
            end = rec.pos + rec.total_size
            if end - released >= 1 << 24:
                done = end - end % mmap.PAGESIZE
                m.madvise(mmap.MADV_DONTNEED, released, done - released)
                released = done
        m.close()
print(json.dumps({"records": n, "bytes": size, "seconds": time.perf_counter() - t,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

INFO = """
import json, resource, sys, time
from rmqstore.info import store_info
from rmqstore.store import open_store
t = time.perf_counter()
with open_store(sys.argv[1]) as st:
    info = store_info(st)
print(json.dumps({"maxPhyOffset": info.commitlog.max_phy_offset, "seconds": time.perf_counter() - t,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

BASELINE = """
import json, resource
print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def write_commitlog(path: Path, file_size: int) -> int:
    """A full commit log file of RECORD_SIZE-byte records and a closing BLANK; returns the record count."""
    props = encode_properties({"TAGS": "TagA", "KEYS": "k", "UNIQ_KEY": "7F0000010B2E18B4AAC27FB5A8E50000"})
    fixed = dict(
        topic="BenchTopic",
        born_addr=bytes([127, 0, 0, 1]),
        born_port=40000,
        store_addr=bytes([127, 0, 0, 1]),
        store_port=10911,
        properties=props,
    )
    body_len = RECORD_SIZE - len(
        encode_record(queue_id=0, queue_offset=0, phy_offset=0, born_timestamp_ms=0, store_timestamp_ms=0, **fixed)
    )
    count = 0
    pos = 0
    base_ts = 1_700_000_000_000
    with open(path, "wb") as f:
        buf = bytearray()
        while pos + RECORD_SIZE + 8 <= file_size:
            buf += encode_record(
                queue_id=count % 4,
                queue_offset=count // 4,
                phy_offset=pos,
                born_timestamp_ms=base_ts + count,
                store_timestamp_ms=base_ts + count,
                body=(count % 251).to_bytes(1, "big") * body_len,
                **fixed,
            )
            count += 1
            pos += RECORD_SIZE
            if len(buf) >= CHUNK:
                f.write(buf)
                buf.clear()
        buf += encode_blank(file_size - pos)
        f.write(buf)
        f.truncate(file_size)  # the rest of a full file after its BLANK header
    return count


EMPTY_SPACE_LIMIT_MB = 300


def make_empty_space_stores(root: Path) -> dict[str, Path]:
    """The ``mostly-zero`` and ``sparse`` stores under ``root``."""
    mostly = root / "mostly-zero" / "store" / "commitlog"
    mostly.mkdir(parents=True)
    f = mostly / "00000000000000000000"
    n = write_commitlog(f, 53 << 20)
    with open(f, "r+b") as fh:
        fh.seek(n * RECORD_SIZE)
        fh.write(bytes(8))  # no BLANK: the records simply end, zeros follow
        fh.truncate(1 << 30)
    sparse = root / "sparse" / "store" / "commitlog"
    sparse.mkdir(parents=True)
    with open(sparse / "00000000000000000000", "wb") as fh:
        fh.truncate(2 << 30)
    return {"mostly-zero": mostly.parent, "sparse": sparse.parent}


def run_cli(args: list[str]) -> tuple[float, float, int]:
    """Run ``rmqstore ARGS``; returns (seconds, peak RSS in MB, exit code) of that process alone."""
    exe = Path(sys.executable).with_name("rmqstore")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from rmqstore.cli import main; main()"]
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_maxrss / 1024, proc.returncode


def empty_space_cases(root: Path) -> bool:
    ok = True
    for name, store in make_empty_space_stores(root).items():
        for args in (["dump", "commitlog", str(store), "--count"], ["check", str(store)]):
            secs, rss, code = run_cli(args)
            ok &= rss < EMPTY_SPACE_LIMIT_MB
            print(f"{name}: rmqstore {args[0]}{' --count' if '--count' in args else ''}: peak RSS {rss:.0f} MB, "
                  f"{secs:.2f} s, exit {code}")  # fmt: skip
    print(("OK" if ok else "FAIL") + f": limit {EMPTY_SPACE_LIMIT_MB} MB on empty space")
    return ok


def run_python(code: str, store: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="scan this store instead of generating one")
    ap.add_argument("--size-mib", type=int, default=1024, help="size of the generated commit log file")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--only-empty-space", action="store_true", help="run only the mostly-zero and sparse cases")
    args = ap.parse_args()
    space = Path(tempfile.mkdtemp(prefix="rmqstore-bench-space-", dir="/tmp"))
    try:
        space_ok = empty_space_cases(space)
    finally:
        shutil.rmtree(space, ignore_errors=True)
    if args.only_empty_space:
        return 0 if space_ok else 1

    tmp = None
    if args.store:
        store = args.store
    else:
        tmp = Path(tempfile.mkdtemp(prefix="rmqstore-bench-", dir="/tmp"))
        store = tmp / "store"
        (store / "commitlog").mkdir(parents=True)
        t = time.perf_counter()
        n = write_commitlog(store / "commitlog" / "00000000000000000000", args.size_mib << 20)
        print(f"wrote {n} records ({args.size_mib} MiB) in {time.perf_counter() - t:.1f} s under {tmp}")
    try:
        files = sorted((store / "commitlog").iterdir())
        total = sum(f.stat().st_size for f in files)
        cat = " ".join(f"'{f}'" for f in files)
        subprocess.run(f"cat {cat} > /dev/null", shell=True, check=True)  # warm the page cache for both
        t = time.perf_counter()
        subprocess.run(f"cat {cat} > /dev/null", shell=True, check=True)
        cat_s = time.perf_counter() - t
        base = run_python(BASELINE, store)
        scan = run_python(SCAN, store)
        scan_release = run_python(SCAN_RELEASE, store)
        info = run_python(INFO, store)
        mib = total / (1 << 20)
        print(f"commit log: {mib:.0f} MiB in {len(files)} file(s)")
        print(f"cat > /dev/null: {cat_s:.2f} s ({mib / cat_s:.0f} MiB/s)")
        print(f"python + rmqstore import baseline: peak RSS {base['maxrss_kb'] / 1024:.1f} MB")
        print(
            f"full scan (iter_commitlog): {scan['records']} records in {scan['seconds']:.1f} s "
            f"({mib / scan['seconds']:.0f} MiB/s, {scan['seconds'] / cat_s:.0f}x cat), "
            f"peak RSS {scan['maxrss_kb'] / 1024:.1f} MB"
        )
        print(
            f"full scan (walk_segment, pages released behind the cursor): {scan_release['records']} records in "
            f"{scan_release['seconds']:.1f} s, peak RSS {scan_release['maxrss_kb'] / 1024:.1f} MB"
        )
        print(
            f"store_info: max phy offset {info['maxPhyOffset']} in {info['seconds']:.2f} s "
            f"({info['seconds'] / cat_s:.1f}x cat), peak RSS {info['maxrss_kb'] / 1024:.1f} MB"
        )
        ok = space_ok and scan["maxrss_kb"] / 1024 < LIMIT_MB and info["maxrss_kb"] / 1024 < LIMIT_MB
        print(("OK" if ok else "FAIL") + f": limit {LIMIT_MB} MB")
        return 0 if ok else 1
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
