"""Benchmark: how the commands scale with the store, 250 k to 16 M messages of 200-byte bodies.

For each size a store is written under --workdir (``make_store.generate``: 128 MiB commit log files
by default, consume queues, index, checkpoint, as after a clean shutdown), and every command is run
from the command line, the process start included:

* ``recover``: a copy of the store with ``abort`` (holding a pid, as 5.x writes it) and no consume
  queue, index or checkpoint: full recovery from the first file, every record checked (CRC) and
  re-dispatched; ``--broker-version`` given (default 5.2.0) and, with --auto, detected;
* ``redispatch --output``: every consume queue and index file built beside the store;
* ``check``, ``dump commitlog --count -f ndjson``, ``dump commitlog -f ndjson -j 1`` (``ndjson``: every
  record formatted, on one core), ``query key`` (one key of the middle message),
  ``expire --dry-run``.

Printed per command and size: wall time (best of --runs), CPU (user + system of the command and its
worker processes), the peak resident memory of the largest process and the peak proportional set size
of all of them together (shared pages counted once),
nanoseconds per message and the ratio to ``cat`` of the same commit log bytes. With --compare BIN
(e.g. the previous build's ``rmqstore``) both are run back to back, alternating, and the ratio of the
two is printed. Stores are deleted at the end unless --keep. Check ``df -h`` first: 16 M messages are
about 6 GB of commit log, twice during recover.

    python benchmarks/bench_scaling.py [--sizes 250k,1m,4m,16m] [--commands recover,redispatch,...]
        [--runs 3] [--compare /work/venvs/base0/bin/rmqstore] [--auto] [--workdir /tmp] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = {"250k": 250_000, "1m": 1_000_000, "4m": 4_000_000, "16m": 16_000_000}
COMMANDS = ("recover", "redispatch", "check", "dump", "ndjson", "query", "expire")
FILE_SIZE = 128 << 20
TOPIC0 = "BenchTopic00"


@dataclass
class Run:
    wall: float
    cpu: float
    max_rss: int  # bytes, the largest process
    tree_rss: int  # bytes, all processes of the command at once (sampled, proportional set size)
    code: int


def _tree_pss(pid: int) -> int:
    """Proportional resident bytes of ``pid`` and its descendants now (pages shared by the forked
    workers counted once, not once per process)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError, StopIteration):
            continue
    return total


def run(argv: list[str]) -> Run:
    """Run ``argv`` to the end: wall time, CPU of it and its children, peak resident memory."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_pss(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 3, 9):  # check may find problems (3), expire may have work (9)
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{err}")
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, peak[0], proc.returncode)


def cat_seconds(files: list[Path], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def write_store(workdir: Path, n: int, file_size: int) -> Path:
    """A store of ``n`` messages as a clean shutdown leaves it; returns its directory (broker.conf beside).
    Written by a child process, so that the commands' peak memory is not the writer's (fork keeps it)."""
    out = workdir / f"scaling-{n}"
    if not (out / "store" / "checkpoint").exists():
        shutil.rmtree(out, ignore_errors=True)
        code = (
            "import pathlib, sys, make_store\n"
            f"rs = make_store.Layout({len(TOPIC0)}, 200, {TOPIC0!r}).size\n"
            f"make_store.generate(pathlib.Path(sys.argv[1]), size_bytes={n} * rs, msg_size=200, topics=4, queues=8, "
            f"file_size={file_size}, progress=False)\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "benchmarks"), str(REPO)])}
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def crashed_copy(src: Path, dest: Path) -> Path:
    """``src`` as after a crash with nothing but the commit log: abort (a 5.x pid), no queues, index, checkpoint."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copy2(src / "broker.conf", dest / "broker.conf")
    (dest / "store").mkdir()
    shutil.copytree(src / "store" / "commitlog", dest / "store" / "commitlog")
    shutil.copytree(src / "store" / "config", dest / "store" / "config")
    (dest / "store" / "abort").write_text("4242")
    os.sync()  # the copy's dirty pages are not the recovery's to write
    return dest / "store"


def command_argv(name: str, rmq: str, store: Path, n: int, version: str, scratch: Path) -> list[str]:
    """The command line of ``name`` on ``store`` (a crashed copy for recover)."""
    ver = ["--broker-version", version]
    if name == "recover":
        return [rmq, "recover", str(store), "-q", "--no-quarantine", *ver]
    if name == "redispatch":
        return [rmq, "redispatch", str(store), "--output", str(scratch), "-q", *ver]
    if name == "check":
        return [rmq, "check", str(store), "-q", "-f", "json", *ver]
    if name == "dump":
        return [rmq, "dump", "commitlog", str(store), "--count", "-f", "ndjson", *ver]
    if name == "ndjson":  # every record formatted, on one core
        return [rmq, "dump", "commitlog", str(store), "-f", "ndjson", "-j", "1", *ver]
    if name == "query":
        m = n // 2
        return [rmq, "query", "key", str(store), f"BenchTopic{m % 4:02d}", f"k-{m:010d}", "-f", "json", *ver]
    if name == "expire":
        return [rmq, "expire", str(store), "--dry-run", "-f", "json", *ver]
    raise ValueError(name)


def measure(name: str, rmq: str, base: Path, n: int, version: str) -> Run:
    """One run of ``name``, its store prepared outside the timing."""
    scratch = base.parent / f"{base.name}-redispatch-out"  # beside the store: the store folder may be shared
    shutil.rmtree(scratch, ignore_errors=True)
    store = crashed_copy(base, base.parent / f"{base.name}-crashed") if name == "recover" else base / "store"
    try:
        return run(command_argv(name, rmq, store, n, version, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if name == "recover":
            shutil.rmtree(store.parent, ignore_errors=True)


def best(runs: list[Run]) -> Run:
    top = min(runs, key=lambda r: r.wall)
    return Run(top.wall, min(r.cpu for r in runs), max(r.max_rss for r in runs), max(r.tree_rss for r in runs), 0)


def row(label: str, r: Run, n: int, cat: float) -> str:
    mb = 1 << 20
    return (
        f"{label:<28} {r.wall:8.2f} {r.cpu:8.2f} {r.max_rss / mb:8.0f} {r.tree_rss / mb:8.0f} "
        f"{r.wall * 1e9 / n:8.0f} {r.cpu * 1e9 / n:8.0f} {r.wall / cat:7.1f}x"
    )


def bench_size(args: argparse.Namespace, n: int) -> None:
    base = write_store(args.workdir, n, args.file_size)
    files = sorted((base / "store" / "commitlog").iterdir())
    cat = cat_seconds(files, 3)
    data = sum(f.stat().st_size for f in files)
    print(f"\n{n:,} messages, {len(files)} commit log files ({data / 1e9:.2f} GB), cat {cat:.2f} s")
    print(
        f"{'command':<28} {'wall s':>8} {'cpu s':>8} {'rss MB':>8} {'tree PSS':>8} {'ns/msg':>8} {'cpu ns':>8} {'/cat':>8}"
    )
    bins = [("", args.rmqstore)] + ([("previous ", args.compare)] if args.compare else [])
    versions = [args.broker_version] + (["auto"] if args.auto else [])
    for name in args.commands:
        for version in versions if name == "recover" else [args.broker_version]:
            runs: dict[str, list[Run]] = {label: [] for label, _ in bins}
            for _ in range(args.runs):  # alternating, back to back
                for label, rmq in bins:
                    runs[label].append(measure(name, rmq, base, n, version))
            tops = {label: best(rs) for label, rs in runs.items()}
            for label, r in tops.items():
                print(row(f"{label}{name} {version if name == 'recover' else ''}".strip(), r, n, cat))
            if args.compare:
                new, old = tops[""], tops["previous "]
                print(f"{'':<28} new / previous: wall {new.wall / old.wall:.2f}x, cpu {new.cpu / old.cpu:.2f}x")
            sys.stdout.flush()
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250k", help=f"comma-separated, of {', '.join(SIZES)} (default 250k)")
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--runs", type=int, default=3, help="runs per command (best wall time kept)")
    ap.add_argument("--rmqstore", default=str(Path(sys.executable).with_name("rmqstore")))
    ap.add_argument("--compare", help="another rmqstore executable to run back to back (the previous build)")
    ap.add_argument("--broker-version", default="5.2.0")
    ap.add_argument("--auto", action="store_true", help="also recover with --broker-version auto")
    ap.add_argument("--file-size", type=int, default=FILE_SIZE, help="commit log file size (default 128 MiB)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true", help="keep the stores (reused by the next run)")
    args = ap.parse_args()
    args.commands = [c for c in args.commands.split(",") if c]
    if unknown := set(args.commands) - set(COMMANDS):
        ap.error(f"unknown commands: {', '.join(sorted(unknown))}")
    for size in args.sizes.split(","):
        if size not in SIZES:
            ap.error(f"unknown size {size!r}: {', '.join(SIZES)}")
        bench_size(args, SIZES[size])


if __name__ == "__main__":
    main()
