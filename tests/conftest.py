"""Shared fixtures: the real 4.4.0 stores (read from ../shared, never copied into the repo)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=150)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
# Spark drivers started by tests write no class archive into the home folder (tests/spark/test_classcache.py
# turns it on in a folder of its own)
os.environ.setdefault("RMQSTORE_SPARK_CLASS_CACHE", "off")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RMQSTORE_SHARED", REPO.parent / "shared"))
REAL_STORES = SHARED / "real-stores"
REAL_WORLD = SHARED / "real-world"
REAL_CASES = ("clean-2topics", "crash-midwrite", "delay-tx-retry")
# the same tests over the stores of the real 4.9.4 and 5.2.0 engines: "<version>/<case>"
REAL_STORE_SETS = {"4.9.4": SHARED / "real-stores-4.9.4", "5.2.0": SHARED / "real-stores-5.2.0"}
NEWER_CASES = tuple(f"4.9.4/{c}" for c in ("clean-2topics", "crash-midwrite", "delay-tx-retry")) + tuple(
    f"5.2.0/{c}"
    for c in ("clean-5x-mixed", "crash-5x-midwrite", "long-topic-v2", "crc-property", "lmq-multi-dispatch", "batch-cq")
)
# stores in DLedger commit log mode (no commitlog/: the records are in DLedger entries)
DLEDGER_CASES = ("4.9.4/dledger-clean", "5.2.0/dledger-5x-clean")
ALL_REAL_CASES = REAL_CASES + NEWER_CASES + DLEDGER_CASES
# pairs of 4.9.4 stores after a failover: <pair>/a/store (the promoted slave), <pair>/b/store (the old master)
REPLICAS = SHARED / "replicas-4.9.4"
REPLICA_PAIRS = ("replica-diverged-midfile", "replica-slave-behind")
FIXTURES = REPO / "fixtures" / "stores"
# the index file header fields truth.json lists for every index file
INDEX_HEADER_FIELDS = (
    "name", "beginTimestamp", "endTimestamp", "beginPhyOffset", "endPhyOffset", "hashSlotCount", "indexCount", "writeFull",
)  # fmt: skip


def hold_lock(root: Path, *argv: str) -> subprocess.Popen:
    """A process that holds ``root``'s lock as a running broker does (``argv`` is its command line)."""

    code = textwrap.dedent(
        f"""
        import fcntl, os, time
        fd = os.open({str(root / "lock")!r}, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("locked", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def small_record(**fields) -> bytes:
    """A minimal IPv4 commit log record; ``fields`` override any ``encode_record`` argument."""
    from rmqstore.codec.commitlog import encode_record

    lo = bytes([10, 0, 0, 1])
    base = dict(
        topic="T",
        queue_id=0,
        queue_offset=0,
        phy_offset=0,
        born_timestamp_ms=1,
        born_addr=lo,
        born_port=1,
        store_timestamp_ms=2,
        store_addr=lo,
        store_port=2,
    )
    return encode_record(**{**base, **fields})


def case_dir(case: str) -> Path:
    """The folder of a real-store case: ``clean-2topics`` (4.4.0) or ``5.2.0/batch-cq``."""
    if "/" in case:
        version, name = case.split("/", 1)
        return REAL_STORE_SETS[version] / name
    return REAL_STORES / case


def is_crash(case: str) -> bool:
    """A case whose process died mid-write (abort present, consume queues behind)."""
    return case.rsplit("/", 1)[-1].startswith("crash-")


def _need_shared(case: str | None = None) -> None:
    where = REAL_STORES if case is None else case_dir(case)
    if not where.is_dir():
        pytest.skip(f"real stores not found at {where}")


@pytest.fixture(params=REAL_CASES)
def real_case(request: pytest.FixtureRequest) -> str:
    _need_shared()
    return request.param


@pytest.fixture(params=ALL_REAL_CASES)
def any_real_case(request: pytest.FixtureRequest) -> str:
    """Every real-store case: 4.4.0, 4.9.4 and 5.2.0 engines."""
    _need_shared(request.param)
    return request.param


def load_truth(case: str) -> dict:
    _need_shared(case)
    return json.loads((case_dir(case) / "truth.json").read_text())


def load_rebuild(case: str) -> dict:
    _need_shared(case)
    return json.loads((case_dir(case) / "rebuild.json").read_text())


def load_spec(case: str) -> dict:
    _need_shared(case)
    return json.loads((case_dir(case) / "spec.json").read_text())


def copy_real_store(case: str, dest: Path) -> Path:
    """A private writable copy of a real store (with its broker.conf beside it); returns the store root."""
    _need_shared(case)
    src = case_dir(case)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "store", dest / "store", copy_function=shutil.copy2)
    shutil.copy2(src / "broker.conf", dest / "broker.conf")
    for p in (dest / "store").rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (dest / "store").chmod(0o755)
    return dest / "store"


def load_replica_expect(pair: str) -> dict:
    if not (REPLICAS / pair).is_dir():
        pytest.skip(f"replica pairs not found at {REPLICAS / pair}")
    return json.loads((REPLICAS / pair / "expect.json").read_text())


def copy_replica(pair: str, side: str, dest: Path) -> Path:
    """A private writable copy of one side (``a`` or ``b``) of a replica pair, its broker.conf beside it."""
    src = REPLICAS / pair
    if not src.is_dir():
        pytest.skip(f"replica pairs not found at {src}")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / side / "store", dest / "store", copy_function=shutil.copy2)
    shutil.copy2(src / "broker.conf", dest / "broker.conf")
    for p in (dest / "store").rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (dest / "store").chmod(0o755)
    return dest / "store"


def crash_batch_store(tmp: Path) -> Path:
    """The 5.2.0 batch-cq store as if the process died before its last batch units reached the disk."""
    root = copy_real_store("5.2.0/batch-cq", tmp)
    for qdir in (root / "batchconsumequeue" / "TopicBatchCQ").iterdir():
        last = sorted(qdir.iterdir())[-1]
        data = bytearray(last.read_bytes())
        used = next((i for i in range(0, len(data) - 45, 46) if not any(data[i : i + 46])), len(data) // 46 * 46)
        data[max(0, used - 2 * 46) : used] = bytes(min(used, 2 * 46))  # the last two units
        last.write_bytes(bytes(data))
    (root / "abort").write_text("4242")
    return root


@pytest.fixture
def real_store_copy(real_case: str, tmp_path: Path) -> tuple[str, Path]:
    return real_case, copy_real_store(real_case, tmp_path)


@pytest.fixture
def any_real_store_copy(any_real_case: str, tmp_path: Path) -> tuple[str, Path]:
    return any_real_case, copy_real_store(any_real_case, tmp_path)


def data_files(root: Path) -> dict[str, str]:
    """The files a broker reads: everything but rmqstore's scratch directory and the lock."""
    out = {}
    index_no = 0
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and rel.parts[0] != ".rmqstore" and rel.as_posix() != "lock":
            name = rel.as_posix()
            if rel.parts[0] == "index":  # named by the wall clock of the run that created it
                name, index_no = f"index/#{index_no}", index_no + 1
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_with_hook(step: str, count: int, record: Path | None, argv: list[str]) -> subprocess.CompletedProcess:
    code = [sys.executable, str(REPO / "tests" / "killrun.py"), step, str(count), str(record or "-"), *argv]
    return subprocess.run(code, cwd=REPO, capture_output=True, text=True, timeout=120)


def kill_at_every_step(tmp: Path, prepare, argv, state, rerun_codes: set[int], finished: str) -> list[str]:
    """Run ``argv(prepare(dir), quarantine)`` once recording its steps, then once per step killed (SIGKILL) there
    and run again in this process: each ends in the uninterrupted run's ``state(root)``. Returns the steps."""
    from collections import Counter

    from typer.testing import CliRunner

    from rmqstore.cli import app

    ref = prepare(tmp / "ref")
    steps_file = tmp / "steps.txt"
    p = run_with_hook("-", 1, steps_file, argv(ref, tmp / "q-ref"))
    assert p.returncode in rerun_codes - {8}, p.stderr
    steps = steps_file.read_text().split()
    assert steps and steps[-1] == finished, steps
    want = state(ref)
    seen: Counter[str] = Counter()
    for i, step in enumerate(steps):
        seen[step] += 1
        root = prepare(tmp / f"run{i}")
        q = tmp / f"q{i}"
        killed = run_with_hook(step, seen[step], None, argv(root, q))
        assert killed.returncode == -9, (step, killed.returncode, killed.stderr)
        again = CliRunner().invoke(app, argv(root, q))
        assert again.exit_code in rerun_codes, (step, again.output)
        assert "internal error" not in again.output
        assert state(root) == want, f"killed at {step} (#{seen[step]}), then re-run"
    return steps


# -- DLedger stores crashed and damaged on purpose (copies of the real DLedger stores) -------------

DLEDGER_CASES = ("4.9.4/dledger-clean", "5.2.0/dledger-5x-clean")


def dledger_case(version: str) -> str:
    return next(c for c in DLEDGER_CASES if c.startswith(version))


def dledger_torn_tail(tmp: Path, version: str = "4.9.4") -> tuple[Path, dict]:
    """A DLedger store whose last entry was cut short by a crash: its header written, its record half
    zeros. Returns the store root and the last entry (as truth.json lists it)."""
    case = dledger_case(version)
    root = copy_real_store(case, tmp)
    last = load_truth(case)["dledger"]["entries"][-1]
    data = root / "dledger-n0" / "data"
    seg = max(p for p in data.iterdir())
    buf = bytearray(seg.read_bytes())
    at = last["pos"] - int(seg.name)
    buf[at + 48 + 80 : at + last["size"]] = bytes(last["size"] - 48 - 80)
    seg.write_bytes(bytes(buf))
    return root, last


def dledger_crashed(tmp: Path, version: str = "5.2.0") -> Path:
    """A DLedger store that died mid-write: torn last entry, a consume queue directory never written,
    ``abort`` left behind."""
    root, _ = dledger_torn_tail(tmp, version)
    shutil.rmtree(root / "consumequeue" / "TopicA")
    # as each engine leaves it: 5.x writes its process id into abort, 4.x leaves it empty
    (root / "abort").write_text("4242" if version.startswith("5.") else "")
    return root


def killed_leaves_no_worker(proc: subprocess.Popen) -> bool:
    """Kill ``proc`` (it printed its worker pids on its first line) with SIGKILL; True once none of its
    workers is left running (within 20 s)."""
    assert proc.stdout is not None
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert workers and all(_alive(p) for p in workers)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in workers)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie is gone, waiting for init to reap it
    except OSError:
        return False
