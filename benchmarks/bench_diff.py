"""Benchmark: `diff` of two 1 GiB stores that differ only in their last 1 MB, vs ``cmp`` of the same files.

Store A is ``make_store.py --size-gib 1`` (one 1 GiB commit log file of 200-byte messages); store B
is a copy whose records in the last MiB of data were written again with other bodies of the same
length (body CRC recomputed) and later store times: the same sizes, topics and queues. ``cmp``
stops at the first differing byte, so it reads what ``diff`` must read at least.

Timed back to back, alternating, warm page cache: ``cmp A B``, the ``rmqstore diff A B -f json``
command (process start and the version detection of both stores included), the same command with
``--broker-version`` (no detection), and in this process ``open_store`` of both plus ``diff_stores``,
and ``diff_stores`` alone on stores already open (the comparison itself); best of ``--runs``. Run:
``python benchmarks/bench_diff.py [--runs 5] [--dir /tmp/rmqstore-bench/diff]`` (the stores are kept
for the next run).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rmqstore.codec.commitlog import MAGIC_V2, Blank, encode_record  # noqa: E402
from rmqstore.ops.diff import diff_stores  # noqa: E402
from rmqstore.store import open_store  # noqa: E402
from rmqstore.walk.chain import iter_commitlog  # noqa: E402

TAIL = 1 << 20


def make_pair(d: Path) -> tuple[Path, Path]:
    a, b = d / "a", d / "b"
    if not (a / "store").exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_store.py"), "--out", str(a)], check=True)
    if not (b / "store").exists():
        shutil.copytree(a, b)
        rewrite_tail(b / "store")
    return a / "store", b / "store"


def rewrite_tail(root: Path) -> None:
    """The records in the last MiB of data get other bodies of the same length and later store times."""
    with open_store(root) as st:
        segs, _ = st.commitlog_segments()
        last = segs[-1]
        recs = [(s, r) for s, r in iter_commitlog(st, from_phy=last.base_offset) if not isinstance(r, Blank)]
    end = recs[-1][1].phy_offset + recs[-1][1].total_size
    with open(last.path, "r+b") as f:
        for _seg, r in recs:
            if r.phy_offset < end - TAIL:
                continue
            f.seek(r.pos)
            f.write(
                encode_record(
                    topic=r.topic, queue_id=r.queue_id, flag=r.flag, queue_offset=r.queue_offset,
                    phy_offset=r.phy_offset, sys_flag=r.sys_flag, born_timestamp_ms=r.born_timestamp_ms,
                    born_addr=r.born_addr, born_port=r.born_port, store_timestamp_ms=r.store_timestamp_ms + 60_000,
                    store_addr=r.store_addr, store_port=r.store_port, reconsume_times=r.reconsume_times,
                    prepared_transaction_offset=r.prepared_transaction_offset, body=bytes(x ^ 0x5A for x in r.body),
                    properties=r.properties_raw.encode(), v2=r.magic == MAGIC_V2,
                )
            )  # fmt: skip


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqstore-bench/diff"))
    args = ap.parse_args()
    a, b = make_pair(args.dir)
    fa, fb = (sorted((r / "commitlog").iterdir())[-1] for r in (a, b))
    cli = [str(Path(sys.executable).parent / "rmqstore"), "diff", str(a), str(b), "-f", "json"]
    for f in (fa, fb):  # warm the page cache
        subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
    pinned = [*cli, "--broker-version", "4.4.0"]  # no version detection: what the comparison itself costs
    cmp_s, cli_s, pin_s, lib_s, cmp_only = [], [], [], [], []
    report = None
    for _ in range(args.runs):
        cmp_s.append(timed(lambda: subprocess.run(["cmp", str(fa), str(fb)], stdout=subprocess.DEVNULL)))
        cli_s.append(timed(lambda: subprocess.run(cli, stdout=subprocess.DEVNULL)))
        pin_s.append(timed(lambda: subprocess.run(pinned, stdout=subprocess.DEVNULL)))

        def lib() -> None:
            nonlocal report
            with open_store(a) as sa, open_store(b) as sb:
                report = diff_stores(sa, sb)

        lib_s.append(timed(lib))
        with open_store(a) as sa, open_store(b) as sb:  # the stores opened (and their versions detected) first
            cmp_only.append(timed(lambda: diff_stores(sa, sb)))  # noqa: B023
    assert report is not None and report.relation == "diverged", report
    size = fa.stat().st_size
    print(f"stores: 2 x {size / (1 << 30):.2f} GiB; commonEnd {report.common_end}, {report.a.records} records past it")
    print(f"cmp of the two commit log files:       {min(cmp_s):.3f} s (best of {args.runs})")
    print(f"rmqstore diff (command, JSON output):  {min(cli_s):.3f} s = {min(cli_s) / min(cmp_s):.2f}x cmp")
    print(f"rmqstore diff --broker-version 4.4.0:  {min(pin_s):.3f} s = {min(pin_s) / min(cmp_s):.2f}x cmp")
    print(f"open_store x 2 + diff_stores (library): {min(lib_s):.3f} s = {min(lib_s) / min(cmp_s):.2f}x cmp")
    print(f"diff_stores on opened stores:          {min(cmp_only):.3f} s = {min(cmp_only) / min(cmp_s):.2f}x cmp")


if __name__ == "__main__":
    main()
