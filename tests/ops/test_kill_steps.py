"""Each modifying command killed (SIGKILL) at every journal step, then run again, ends byte-identical
to a run that was never interrupted.

The kill comes from the step callback the command hands to the library (``tests/killrun.py`` injects
one that kills the process at a chosen step), not from timing luck.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    copy_real_store,
    copy_replica,
    crash_batch_store,
    data_files,
    dledger_case,
    dledger_crashed,
    kill_at_every_step,
)
from typer.testing import CliRunner

runner = CliRunner()
NOW_MS = 1_795_400_000_000
AT_04 = int(dt.datetime(2030, 1, 15, 4, 30).timestamp() * 1000)  # inside expire's default deleteWhen hour


def prepare_write(tmp: Path) -> Path:
    return copy_real_store("clean-2topics", tmp)


def prepare_recover(tmp: Path) -> Path:
    return copy_real_store("crash-midwrite", tmp)


def prepare_redispatch(tmp: Path) -> Path:
    root = copy_real_store("clean-2topics", tmp)
    for f in (root / "consumequeue" / "TopicA" / "1").iterdir():
        f.unlink()  # a queue to rebuild
    return root


def prepare_expire(tmp: Path) -> Path:
    root = copy_real_store("clean-2topics", tmp)
    files = sorted((root / "commitlog").iterdir())
    for i, f in enumerate(files):
        ms = AT_04 - (100 if i < 2 else 1) * 3_600_000
        os.utime(f, ns=(ms * 1_000_000, ms * 1_000_000))
    return root


def prepare_expire_dledger(tmp: Path) -> Path:
    root = copy_real_store(dledger_case("5.2.0"), tmp)
    for f in sorted((root / "dledger-n0" / "data").iterdir())[:3]:  # data, DLedger index, queue and index files go
        ms = AT_04 - 100 * 3_600_000
        os.utime(f, ns=(ms * 1_000_000, ms * 1_000_000))
    return root


def argv_write(root: Path, q: Path) -> list[str]:
    return ["write", str(root), "--topic", "TopicA", "--body", "hello", "--keys", "k1", "--now", str(NOW_MS),
            "--uniq-key-seed", "7", "--quarantine", str(q)]  # fmt: skip


def argv_recover(root: Path, q: Path) -> list[str]:
    return ["recover", str(root), "-q", "--quarantine", str(q)]


def argv_recover_dledger(root: Path, q: Path) -> list[str]:
    return [*argv_recover(root, q), "--broker-version", "5.2.0"]  # the queues left do not tell the version


def argv_redispatch(root: Path, q: Path) -> list[str]:
    return ["redispatch", str(root), "-q", "--quarantine", str(q)]


def argv_expire(root: Path, q: Path) -> list[str]:
    return ["expire", str(root), "--now", str(AT_04), "--disk-used-ratio", "0.1", "--quarantine", str(q)]


def prepare_truncate(tmp: Path) -> Path:
    return copy_replica("replica-diverged-midfile", "b", tmp)


def argv_truncate(root: Path, q: Path) -> list[str]:
    return ["truncate", str(root), "--to-offset", "76189", "-q", "--quarantine", str(q)]


def prepare_truncate_dledger(tmp: Path) -> Path:
    return copy_real_store("5.2.0/dledger-5x-clean", tmp)


def argv_truncate_dledger(root: Path, q: Path) -> list[str]:
    return ["truncate", str(root), "--to-offset", "120399", "-q", "--quarantine", str(q)]


def prepare_write_lmq(tmp: Path) -> Path:
    return copy_real_store("5.2.0/lmq-multi-dispatch", tmp)


def argv_write_lmq(root: Path, q: Path) -> list[str]:
    return ["write", str(root), "--topic", "TopicLmqParent", "--body", "hello", "--keys", "k1",
            "--property", "INNER_MULTI_DISPATCH=%LMQ%room-1,%LMQ%room-3", "--now", str(NOW_MS),
            "--uniq-key-seed", "7", "--quarantine", str(q)]  # fmt: skip


def prepare_recover_lmq(tmp: Path) -> Path:
    root = copy_real_store("5.2.0/lmq-multi-dispatch", tmp)
    for f in (root / "consumequeue" / "%LMQ%room-1" / "0").iterdir():
        f.unlink()  # crashed before its %LMQ% queue reached the disk
    (root / "abort").write_text("4242")
    return root


CASES: dict[str, tuple[Callable[[Path], Path], Callable[[Path, Path], list[str]], set[int]]] = {
    # command: (make the store, its command line, exit codes a finishing re-run may give)
    "write": (prepare_write, argv_write, {0, 8}),  # 8: the same input is already in the store
    "recover": (prepare_recover, argv_recover, {0}),
    "redispatch": (prepare_redispatch, argv_redispatch, {0}),
    "expire": (prepare_expire, argv_expire, {0, 9}),  # 9: expire deleted files
    "truncate": (prepare_truncate, argv_truncate, {0}),
    # 5.2.0 stores: %LMQ% queues and batch consume queues are rolled back with the rest
    "write-lmq": (prepare_write_lmq, argv_write_lmq, {0, 8}),
    "recover-lmq": (prepare_recover_lmq, argv_recover, {0}),
    "recover-bcq": (crash_batch_store, argv_recover, {0}),
    # a DLedger store: the torn entry, the member's index and checkpoint, the queue rebuilt
    "recover-dledger": (dledger_crashed, argv_recover_dledger, {0}),
    "truncate-dledger": (prepare_truncate_dledger, argv_truncate_dledger, {0}),
    "expire-dledger": (prepare_expire_dledger, argv_expire, {0, 9}),
}


@pytest.mark.parametrize("command", list(CASES))
def test_killed_at_every_step_then_rerun_is_byte_identical(tmp_path: Path, command: str) -> None:
    prepare, argv, rerun_codes = CASES[command]
    finished = f"{command.split('-')[0]}:finished"
    kill_at_every_step(tmp_path, prepare, argv, data_files, rerun_codes, finished)
    for root in tmp_path.glob("run*/store"):
        assert not any((root / ".rmqstore").glob("*journal*")), root
