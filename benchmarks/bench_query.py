"""Benchmark ``rmqstore query``: key lookups on a full default-size index file, and ``--scan``.

Builds in a temporary directory (deleted at the end):

* one full index file of the broker's default size (5,000,000 slots, 20,000,000 entries,
  420,000,040 bytes) holding 19,999,999 entries: random key hashes plus 1,000 real keys
  ``BenchTopic#order-<i>`` stored 4 times each, chains linked as ``putKey`` links them
  (computed with numpy, written through ``np.memmap``);
* 200 more index files (sparse, header only) whose time ranges lie outside the query window,
  100 older and 100 newer than the full file;
* a 256 MiB commit log for the scan figure.

Reports, per key lookup: warm (pages cached) and first-run (the file's pages dropped from the
page cache with ``posix_fadvise(DONTNEED)`` before each lookup; checked with ``fincore`` when
available), with and without the 200 files outside the window, for the raw
``IndexFile.select_phy_offsets`` and for the whole multi-file walk (``IndexSet.lookup``) with a
fresh ``IndexSet`` per lookup (what one CLI run does) and a shared one. Ratios are to
``cat FILE > /dev/null`` of the same index file. Run: ``python benchmarks/bench_query.py``.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rmqstore.codec.commitlog import encode_properties, encode_record
from rmqstore.codec.indexfile import (
    DEFAULT_ENTRIES,
    DEFAULT_SLOTS,
    ENTRY_DTYPE,
    HEADER,
    HEADER_SIZE,
    IndexFile,
    file_size,
)
from rmqstore.codec.javahash import index_key_hash
from rmqstore.ops import query as op
from rmqstore.store import open_store

T0 = 1_700_000_000_000  # begin timestamp of the full file
SPAN_S = 2_000  # the full file covers 2,000 s
REAL_KEYS = 1_000
COPIES = 4
EXTRA_FILES = 100  # on each side of the full file
SCAN_SIZE = 256 << 20


def build_full_index(path: Path, rng: np.random.Generator) -> dict[str, list[int]]:
    """Write a full default-size index file; returns each real key's phy offsets."""
    n = DEFAULT_ENTRIES - 1  # entry numbers 1 .. 19,999,999
    hashes = rng.integers(0, 2**31 - 1, size=n, dtype=np.int64).astype(np.int32)
    keys = [f"BenchTopic#order-{i}" for i in range(REAL_KEYS)]
    real = np.array([index_key_hash(k) for k in keys], dtype=np.int32)
    clash = np.isin(hashes, real)
    while clash.any():  # keep the random keys off the real keys' hashes: no false positives here
        hashes[clash] = rng.integers(0, 2**31 - 1, size=int(clash.sum()), dtype=np.int64).astype(np.int32)
        clash = np.isin(hashes, real)
    where: dict[str, list[int]] = {}
    slots_for_real = rng.choice(n, size=REAL_KEYS * COPIES, replace=False)
    for j, k in enumerate(keys):
        pos = np.sort(slots_for_real[j * COPIES : (j + 1) * COPIES])
        hashes[pos] = index_key_hash(k)
        where[k] = [int(p + 1) * 256 for p in pos]  # phy offset of entry number p+1
    number = np.arange(1, n + 1, dtype=np.int64)
    slot = hashes.astype(np.int64) % DEFAULT_SLOTS
    order = np.argsort(slot, kind="stable")  # by slot, then by entry number
    s_sorted = slot[order]
    same = np.empty(n, dtype=bool)
    same[0] = False
    same[1:] = s_sorted[1:] == s_sorted[:-1]
    prev = np.zeros(n, dtype=np.int32)
    prev_sorted = np.where(same, np.concatenate(([0], number[order][:-1])), 0)
    prev[order] = prev_sorted
    last_in_slot = np.ones(n, dtype=bool)
    last_in_slot[:-1] = s_sorted[1:] != s_sorted[:-1]
    slot_values = np.zeros(DEFAULT_SLOTS, dtype=np.int32)
    slot_values[s_sorted[last_in_slot]] = number[order][last_in_slot]

    size = file_size(DEFAULT_SLOTS, DEFAULT_ENTRIES)
    mm = np.memmap(path, dtype=np.uint8, mode="w+", shape=(size,))
    end_ts = T0 + (n - 1) * SPAN_S * 1000 // n
    mm[:HEADER_SIZE] = np.frombuffer(
        HEADER.pack(T0, end_ts, 256, n * 256, int(last_in_slot.sum()), DEFAULT_ENTRIES), dtype=np.uint8
    )
    slots_view = np.ndarray((DEFAULT_SLOTS,), dtype=">i4", buffer=mm, offset=HEADER_SIZE)
    slots_view[:] = slot_values
    entries = np.ndarray((DEFAULT_ENTRIES,), dtype=ENTRY_DTYPE, buffer=mm, offset=HEADER_SIZE + DEFAULT_SLOTS * 4)
    entries["key_hash"][1:] = hashes
    entries["phy_offset"][1:] = number * 256
    entries["time_diff"][1:] = ((number - 1) * SPAN_S // n).astype(np.int32)
    entries["prev"][1:] = prev
    mm.flush()
    del mm, slots_view, entries
    return where


def write_header_only(path: Path, begin_ms: int, end_ms: int) -> None:
    size = file_size(DEFAULT_SLOTS, DEFAULT_ENTRIES)
    with open(path, "wb") as fh:
        fh.truncate(size)  # sparse: only the header is written
        fh.write(HEADER.pack(begin_ms, end_ms, 0, 0, 1, 2))


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: Path) -> str:
    if not shutil.which("fincore"):
        return "?"
    out = subprocess.run(["fincore", "-n", "-o", "RES", str(path)], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def cat_seconds(path: Path) -> float:
    t = time.perf_counter()
    subprocess.run(f"cat '{path}' > /dev/null", shell=True, check=True)
    return time.perf_counter() - t


def us(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e6:8.1f} us, p99 {np.percentile(values, 99) * 1e6:8.1f} us"


def bench_lookups(root: Path, full: Path, where: dict[str, list[int]], label: str) -> dict[str, float]:
    keys = list(where)
    rng = random.Random(7)
    window = (T0, T0 + SPAN_S * 1000)
    out: dict[str, float] = {}
    with open_store(root) as st:
        # raw selectPhyOffset on one mapped file
        with open(full, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        f = IndexFile(m, slots=DEFAULT_SLOTS, entries=DEFAULT_ENTRIES)
        for k in keys:  # warm up
            f.select_phy_offsets(k, max_num=64, begin_ms=0, end_ms=op.JAVA_LONG_MAX)
        warm = []
        for k in rng.sample(keys, 500):
            t = time.perf_counter()
            got = f.select_phy_offsets(k, max_num=64, begin_ms=0, end_ms=op.JAVA_LONG_MAX)
            warm.append(time.perf_counter() - t)
            assert sorted(got) == where[k], k
        print(f"  [{label}] raw select_phy_offsets, warm:            {us(warm)}")
        out["raw_warm"] = statistics.median(warm)

        shared = op.IndexSet(st)
        warm_set, fresh_set = [], []
        for k in rng.sample(keys, 500):
            t = time.perf_counter()
            found: list[int] = []
            shared.lookup(k, max_num=64, begin_ms=window[0], end_ms=window[1], found=found)
            warm_set.append(time.perf_counter() - t)
            assert sorted(found) == where[k]
            t = time.perf_counter()
            with op.IndexSet(st) as fresh:
                found = []
                fresh.lookup(k, max_num=64, begin_ms=window[0], end_ms=window[1], found=found)
            fresh_set.append(time.perf_counter() - t)
        shared.close()
        print(f"  [{label}] IndexSet.lookup, shared set, warm:       {us(warm_set)}")
        print(f"  [{label}] IndexSet.lookup, fresh set (CLI), warm:  {us(fresh_set)}")
        out["set_warm"] = statistics.median(warm_set)
        out["fresh_warm"] = statistics.median(fresh_set)

        m.close()  # a page mapped by a live process cannot be dropped from the cache
        cold = []
        res = []
        for k in rng.sample(keys, 30):
            drop_cache(full)
            res.append(resident(full))
            t = time.perf_counter()
            with op.IndexSet(st) as fresh:
                found = []
                fresh.lookup(k, max_num=64, begin_ms=window[0], end_ms=window[1], found=found)
            cold.append(time.perf_counter() - t)
            assert sorted(found) == where[k]
        print(f"  [{label}] IndexSet.lookup, first run (cold pages): {us(cold)}  (resident before: {res[0]})")
        out["cold"] = statistics.median(cold)
    return out


def build_commitlog(path: Path) -> tuple[str, int, int]:
    """A 256 MiB commit log file of ~1 KiB records; the key is in one record per 4 MiB block."""
    block = bytearray()
    starts = []
    n = 0
    while len(block) < (4 << 20) - 2048:
        props = encode_properties({"KEYS": f"k-{n} other-{n % 97}", "UNIQ_KEY": f"{n:032X}", "TAGS": "TagA"})
        starts.append(len(block))
        block += encode_record(
            topic="ScanTopic",
            queue_id=n % 8,
            queue_offset=n,
            phy_offset=len(block),
            born_timestamp_ms=T0,
            born_addr=b"\x7f\x00\x00\x01",
            born_port=1,
            store_timestamp_ms=T0 + n,
            store_addr=b"\x7f\x00\x00\x01",
            store_port=10911,
            body=os.urandom(900),
            properties=props,
        )
        n += 1
    copies = SCAN_SIZE // len(block) - 1
    with open(path, "wb") as fh:
        fh.truncate(SCAN_SIZE)
        for c in range(copies):
            base = c * len(block)
            for p in starts:  # PHYSICALOFFSET (byte 28) of every record
                struct.pack_into(">q", block, p + 28, base + p)
            fh.write(block)
    return "k-123", copies, copies * len(starts)


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="rmqstore-bench-query-", dir="/tmp"))
    try:
        root = base / "store"
        (root / "index").mkdir(parents=True)
        rng = np.random.default_rng(42)
        full = root / "index" / "20240601000000000"
        t = time.perf_counter()
        where = build_full_index(full, rng)
        print(f"built {full.stat().st_size:,} byte index file (19,999,999 entries) in {time.perf_counter() - t:.1f} s")
        print(f"cat of the index file: {cat_seconds(full):.3f} s cold-ish, {cat_seconds(full):.3f} s warm")
        cat_warm = cat_seconds(full)

        print("lookups, 1 index file:")
        one = bench_lookups(root, full, where, "1 file")

        for i in range(EXTRA_FILES):  # older files end before the window begins
            b = T0 - (EXTRA_FILES - i) * 10_000_000
            write_header_only(root / "index" / f"2023{i:013d}", b, b + 5_000_000)
        for i in range(EXTRA_FILES):  # newer files begin after the window ends
            b = T0 + SPAN_S * 1000 + (i + 1) * 10_000_000
            write_header_only(root / "index" / f"2025{i:013d}", b, b + 5_000_000)
        print(f"lookups, 1 + {2 * EXTRA_FILES} index files ({EXTRA_FILES} older, {EXTRA_FILES} newer than the window):")
        many = bench_lookups(root, full, where, f"{1 + 2 * EXTRA_FILES} files")

        print("summary (median per key lookup):")
        for k, what in (
            ("raw_warm", "raw select_phy_offsets, warm"),
            ("set_warm", "multi-file walk, shared IndexSet, warm"),
            ("fresh_warm", "multi-file walk, fresh IndexSet, warm"),
            ("cold", "multi-file walk, fresh IndexSet, first run"),
        ):
            print(
                f"  {what:45s} {one[k] * 1e3:7.3f} ms (1 file)  {many[k] * 1e3:7.3f} ms ({1 + 2 * EXTRA_FILES} files)"
                f"  = {one[k] / cat_warm:.2e} x cat of the file"
            )

        # --scan throughput on a 256 MiB commit log
        for p in (root / "index").iterdir():
            p.unlink()
        (root / "commitlog").mkdir()
        log = root / "commitlog" / "00000000000000000000"
        key, copies, records = build_commitlog(log)
        (base / "broker.conf").write_text(f"storePathRootDir=store\nmapedFileSizeCommitLog={SCAN_SIZE}\n")
        cat_log = min(cat_seconds(log) for _ in range(3))
        with open_store(root) as st, op.Searcher(st) as s:
            s.key("ScanTopic", key, scan=True)  # warm the page cache
            times = []
            for _ in range(3):
                t = time.perf_counter()
                r = s.key("ScanTopic", key, scan=True)
                times.append(time.perf_counter() - t)
            drop_cache(log)
            t = time.perf_counter()
            s.key("ScanTopic", key, scan=True)
            cold = time.perf_counter() - t
        assert len(r.hits) == min(copies, 64)
        best = min(times)
        print(
            f"--scan of a {SCAN_SIZE >> 20} MiB commit log ({records:,} records): warm {best:.3f} s "
            f"({SCAN_SIZE / best / 2**30:.2f} GiB/s), cold {cold:.3f} s; cat warm {cat_log:.3f} s "
            f"-> {best / cat_log:.1f} x cat"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
