"""Benchmark `rmqstore write`: messages/s appending 200-byte messages to a fresh store.

    python benchmarks/bench_write.py [--count 1000000] [--body 200] [--out DIR] [--ndjson 200000] [--keep]
    python benchmarks/bench_write.py --base /work/venvs/base0/bin/rmqstore [--ndjson 200000] [--rounds 3]

For each input and mode (dispatch on/off, flush sync/async) a fresh store with production file
sizes (1 GiB commit log files, default consume queue and index sizes) is created under DIR (default
/tmp/rmqstore-bench/write) and ``rmqstore.write.write_messages`` appends COUNT messages: 4 topics x
8 queues, TAGS, one key each, generated UNIQ_KEYs. Two inputs: a list of ``Message`` objects, and a
``MessageBatch`` (the same messages column by column, what the NDJSON reader gives the command).
The input is built before the clock starts (reported separately). Then the command line reads the
same kind of messages from an NDJSON file.

Every figure is printed with its ratio to reading the same commit log bytes with
``cat FILE > /dev/null`` (``head -c BYTES`` on the written part; page cache warm). Flush ``sync``
makes every byte durable before returning, so it is also compared with the machine's own durable
write of as many bytes (``dd if=/dev/zero bs=4M conv=fsync``). The reference point from the issue:
the 4.4.0 engine (asynchronous flush, its default) writes 1,000,000 such messages with dispatch in
about 7 s (about 140 k msg/s) on this machine. A Python loop baseline is printed too: the machine
may be shared, and it shows how loaded it was during the run. The stores are deleted unless --keep.

With ``--base CMD`` it only compares the command line with another build's (CMD) on engine-shaped
NDJSON (every message with TAGS, KEYS, a UNIQ_KEY, WAIT and user properties; then also with born
time and host, store host and flag; then plain lines with no property), back to back, alternating,
best of ``--rounds`` in wall and in CPU time (user + sys, worker processes included), with each
side's peak RSS (largest process) and peak PSS of all its processes together: the ratios are the
base's time over this build's. ``--inputs producer`` runs the engine-shaped input only.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scaling  # noqa: E402

from rmqstore.ops.write import Message, MessageBatch, UniqKeySource, write_messages  # noqa: E402

TOPICS, QUEUES = 4, 8


def build_messages(count: int, body_size: int) -> list[Message]:
    body = b"b" * body_size
    names = [f"BenchTopic{t:02d}" for t in range(TOPICS)]
    return [
        Message(topic=names[i % TOPICS], queue_id=(i // TOPICS) % QUEUES, body=body, tags="TagA", keys=f"k-{i:010d}")
        for i in range(count)
    ]


def durable_write_seconds(out: Path, nbytes: int) -> float:
    """Best of 3: ``dd`` writing ``nbytes`` of zeros to a new file and fsyncing it."""
    target = out / "dd-fsync"
    best = float("inf")
    for _ in range(3):
        target.unlink(missing_ok=True)
        count = max(1, -(-nbytes // (4 << 20)))
        t = time.perf_counter()
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=4M", f"count={count}", "conv=fsync"],
            capture_output=True,
            check=True,
        )
        best = min(best, time.perf_counter() - t)
    target.unlink(missing_ok=True)
    return best


def cat_seconds(files: list[Path], nbytes: int) -> float:
    """Best of 3: reading the first ``nbytes`` bytes of ``files`` in order to /dev/null."""
    best = float("inf")
    for _ in range(3):
        left = nbytes
        t = time.perf_counter()
        for f in files:
            if left <= 0:
                break
            n = min(left, f.stat().st_size)
            with open("/dev/null", "wb") as null:
                subprocess.run(["head", "-c", str(n), str(f)], stdout=null, check=True)
            left -= n
        best = min(best, time.perf_counter() - t)
    return best


def python_baseline_us() -> float:
    """Microseconds for 1000 dict lookups: about 25-30 on an idle machine of this kind."""
    return min(timeit.repeat("for i in range(1000): d.get(i)", "d={}", number=200, repeat=5)) / 200 * 1e6


def run_mode(out: Path, msgs: list[Message] | MessageBatch, *, dispatch: bool, flush: str) -> dict:
    root = out / f"store-{'dispatch' if dispatch else 'nodispatch'}-{flush}"
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    res = write_messages(
        root,
        msgs,
        create=True,
        dispatch=dispatch,
        flush=flush,
        topic_queue_nums=QUEUES,
        uniq_keys=UniqKeySource(seed=1),
    )
    secs = time.perf_counter() - t
    nbytes = res.plan.bytes_written
    files = sorted((root / "commitlog").iterdir())
    cat = cat_seconds(files, nbytes)
    kind = "batch" if isinstance(msgs, MessageBatch) else "Message"
    return {
        "mode": f"{kind:<7} dispatch={'on' if dispatch else 'off'} flush={flush}",
        "messages": len(msgs),
        "seconds": round(secs, 2),
        "msgPerSec": round(len(msgs) / secs),
        "MBPerSec": round(nbytes / secs / 1e6, 1),
        "commitLogBytes": nbytes,
        "catSeconds": round(cat, 3),
        "ratioToCat": round(secs / cat, 1),
        "store": str(root),
    }


def run_cli(out: Path, count: int, body_size: int) -> dict:
    src = out / "messages.ndjson"
    body = "b" * body_size
    with open(src, "w") as f:
        for i in range(count):
            m = {"topic": f"BenchTopic{i % TOPICS:02d}", "queueId": (i // TOPICS) % QUEUES, "tags": "TagA"}
            m.update(keys=f"k-{i:010d}", body=body)
            f.write(json.dumps(m) + "\n")
    root = out / "store-cli"
    shutil.rmtree(root, ignore_errors=True)
    cmd = ["rmqstore", "write", str(root), str(src), "--create", "--topic-queue-nums", str(QUEUES), "-f", "json"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    secs = time.perf_counter() - t
    nbytes = json.loads(proc.stdout)["summary"]["bytes"]
    cat = cat_seconds(sorted((root / "commitlog").iterdir()), nbytes)
    return {
        "mode": "CLI, NDJSON file, dispatch=on flush=sync (process start and JSON parsing included)",
        "messages": count,
        "seconds": round(secs, 2),
        "msgPerSec": round(count / secs),
        "MBPerSec": round(nbytes / secs / 1e6, 1),
        "commitLogBytes": nbytes,
        "catSeconds": round(cat, 3),
        "ratioToCat": round(secs / cat, 1),
        "store": str(root),
    }


def engine_shaped_lines(count: int, body_size: int, *, harness: bool, start: int = 0) -> list[str]:
    """What producers hand the broker: TAGS, KEYS, a UNIQ_KEY, WAIT and two user properties
    (``harness``: also the born time and host, store host and flag, as the engine harness gives them)."""
    body = "b" * body_size
    out = []
    for i in range(start, start + count):
        m: dict[str, object] = {"topic": f"BenchTopic{i % TOPICS:02d}", "tags": "TagA", "keys": f"k-{i:010d}"}
        m |= {"uniqKey": f"C0A8000A1F9018B4AAC22A3B{i:08X}", "wait": True}
        m["properties"] = {"traceId": f"t{i:08d}", "region": "cn-north"}
        if harness:
            m |= {"queueId": (i // TOPICS) % QUEUES, "bornTimestamp": 1_700_000_000_000 + i}
            m |= {"bornHost": f"192.168.0.{i % 200 + 1}:40000", "storeHost": "192.168.0.200:10911", "flag": i % 3}
        m["body"] = body
        out.append(json.dumps(m, separators=(",", ":")))
    return out


def plain_lines(count: int, body_size: int, start: int = 0) -> list[str]:
    """Messages with topic, queue, TAGS, KEYS and body only (no UNIQ_KEY, WAIT or user property)."""
    body = "b" * body_size
    return [
        json.dumps(
            {"topic": f"BenchTopic{i % TOPICS:02d}", "queueId": (i // TOPICS) % QUEUES, "tags": "TagA"}
            | {"keys": f"k-{i:010d}", "body": body}
        )
        for i in range(start, start + count)
    ]


def timed(cmd: list[str]) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + sys, its worker processes included), the peak RSS of its
    largest process and the peak proportional set size of all its processes together (bytes)."""
    r = bench_scaling.run(cmd)
    return r.wall, r.cpu, r.max_rss, r.tree_rss


INPUTS = ("producer", "harness", "plain")
_SLICE = 50_000  # input lines made at a time


def vs_base(out: Path, count: int, body_size: int, base: str, rounds: int, this: str, kinds: list[str]) -> list[dict]:
    """``rmqstore write`` of engine-shaped NDJSON (and plain lines) with this build (``this``) and
    with ``base`` (another build's command), back to back, alternating which goes first; the best
    wall and CPU time of ``rounds`` of each, the peak RSS of the largest process and the peak PSS of
    all processes together (the command and its workers)."""
    results = []
    inputs: dict[str, Callable[[int, int], list[str]]] = {
        "producer": lambda n, at: engine_shaped_lines(n, body_size, harness=False, start=at),
        "harness": lambda n, at: engine_shaped_lines(n, body_size, harness=True, start=at),
        "plain": lambda n, at: plain_lines(n, body_size, start=at),
    }
    for kind in kinds:
        src = out / f"input-{kind}.ndjson"
        # a slice at a time: a command forked from a big process reports that process's size as
        # its own peak RSS (the kernel keeps the high-water mark of the memory exec replaced)
        with open(src, "w") as f:
            for at in range(0, count, _SLICE):
                f.write("\n".join(inputs[kind](min(_SLICE, count - at), at)) + "\n")
        best = {side: [float("inf"), float("inf"), 0, 0] for side in ("base", "this")}
        for r in range(rounds):
            for side in ("base", "this") if r % 2 == 0 else ("this", "base"):
                root = out / f"store-{side}"
                shutil.rmtree(root, ignore_errors=True)
                cli = base if side == "base" else this
                cmd = [cli, "write", str(root), str(src), "--create", "--topic-queue-nums", str(QUEUES), "-f", "json"]
                wall, cpu, rss, pss = timed(cmd)
                b = best[side]
                b[0], b[1], b[2], b[3] = min(b[0], wall), min(b[1], cpu), max(b[2], rss), max(b[3], pss)
                shutil.rmtree(root, ignore_errors=True)
        results.append(_compared(kind, count, base, best))
        src.unlink()
    return results


def _compared(kind: str, count: int, base: str, best: dict[str, list[float]]) -> dict:
    (bw, bc, brss, bpss), (tw, tc, trss, tpss) = best["base"], best["this"]
    r = {
        "mode": f"CLI, {kind} NDJSON, vs {base}",
        "messages": count,
        "baseSeconds": round(bw, 2),
        "baseCpuSeconds": round(bc, 2),
        "basePeakRssMB": round(brss / 2**20),
        "basePeakPssAllMB": round(bpss / 2**20),
        "seconds": round(tw, 2),
        "cpuSeconds": round(tc, 2),
        "peakRssMB": round(trss / 2**20),
        "peakPssAllMB": round(tpss / 2**20),
        "msgPerSec": round(count / tw),
        "baseMsgPerSec": round(count / bw),
        "msgPerCpuSec": round(count / tc),
        "speedupOverBase": round(bw / tw, 2),
        "cpuSpeedupOverBase": round(bc / tc, 2),
    }
    print(
        f"{r['mode']}\n{'':<8} {count:>9,} msgs  base {bw:.2f} s (CPU {bc:.2f} s, {r['basePeakRssMB']} MB, all "
        f"{r['basePeakPssAllMB']} MB)  this {tw:.2f} s (CPU {tc:.2f} s, {r['peakRssMB']} MB, all "
        f"{r['peakPssAllMB']} MB)  x{r['speedupOverBase']} the base's rate, x{r['cpuSpeedupOverBase']} in CPU",
        flush=True,
    )
    return r


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("/tmp/rmqstore-bench/write"))
    ap.add_argument("--ndjson", type=int, default=200_000, help="messages for the command-line run (0: skip)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--base", help="another build's rmqstore command: compare engine-shaped writes with it only")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the --base comparison (best of)")
    ap.add_argument("--this", help="this build's rmqstore command (default: the one beside this Python)")
    ap.add_argument("--inputs", default=",".join(INPUTS), help=f"inputs of the --base comparison ({', '.join(INPUTS)})")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.base:
        try:
            this = args.this or str(Path(sys.executable).with_name("rmqstore"))
            kinds = [k for k in args.inputs.split(",") if k]
            if not set(kinds) <= set(INPUTS):
                ap.error(f"--inputs: one or more of {', '.join(INPUTS)}")
            result = vs_base(args.out, args.ndjson, args.body, args.base, args.rounds, this, kinds)
            print(json.dumps(result, indent=2))
        finally:
            if not args.keep:
                shutil.rmtree(args.out, ignore_errors=True)
        return
    base = python_baseline_us()
    t = time.perf_counter()
    gc.disable()  # a million live objects: building them under the cyclic collector takes 3x longer
    msgs = build_messages(args.count, args.body)
    gc.enable()
    build = time.perf_counter() - t
    t = time.perf_counter()
    batch = MessageBatch.from_messages(msgs)
    build_batch = time.perf_counter() - t
    print(f"python baseline: {base:.1f} us per 1000 dict lookups (idle machine: about 25-30)")
    print(f"built {len(msgs):,} Message objects in {build:.2f} s, their batch in {build_batch:.2f} s (not counted)")
    results = []
    try:
        for given in (msgs, batch):
            for dispatch, flush in ((True, "sync"), (True, "async"), (False, "sync"), (False, "async")):
                r = run_mode(args.out, given, dispatch=dispatch, flush=flush)
                if flush == "sync":
                    r["ddFsyncSeconds"] = round(durable_write_seconds(args.out, r["commitLogBytes"]), 3)
                    r["ratioToDdFsync"] = round(r["seconds"] / r["ddFsyncSeconds"], 2)
                results.append(r)
                dd = f"  dd+fsync {r['ddFsyncSeconds']:.2f} s x{r['ratioToDdFsync']}" if flush == "sync" else ""
                print(
                    f"{r['mode']:<36} {r['messages']:>9,} msgs {r['seconds']:>6.2f} s {r['msgPerSec']:>9,} msg/s "
                    f"{r['MBPerSec']:>6.1f} MB/s  cat {r['catSeconds']:.3f} s x{r['ratioToCat']}{dd}",
                    flush=True,
                )
                if not args.keep:
                    shutil.rmtree(r["store"], ignore_errors=True)
        if args.ndjson:
            r = run_cli(args.out, args.ndjson, args.body)
            results.append(r)
            print(
                f"{r['mode']}\n{'':<28} {r['messages']:>9,} msgs {r['seconds']:>7.2f} s {r['msgPerSec']:>9,} msg/s "
                f"{r['MBPerSec']:>7.1f} MB/s  cat {r['catSeconds']:.3f} s  x{r['ratioToCat']}",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)
    print(f"python baseline after: {python_baseline_us():.1f} us")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
