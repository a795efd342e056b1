"""The README's test command passes in a clone without ../shared: the real-store tests skip, none fail.

The clone is a copy of the tracked files in a temporary folder with no ``shared/`` beside it; the
whole default suite runs there (Spark's own tests aside: they need a JVM, not ../shared, and skip
or run the same in either checkout), stopping at the first failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow

IN_CLONE = "RMQSTORE_IN_FRESH_CLONE"  # set in the clone's run: this test does not run itself again


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.decode().split("\0") if f]


def test_suite_skips_the_real_store_tests_without_shared(tmp_path):
    if os.environ.get(IN_CLONE):
        pytest.skip("already in the fresh clone")
    clone = tmp_path / "checkout"
    for rel in tracked_files():
        src = REPO / rel
        if src.is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / rel)
    assert not (tmp_path / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("RMQSTORE_SHARED", "PYTEST_ADDOPTS")}
    env[IN_CLONE] = "1"
    argv = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfEs", "-m", "not spark and not spark_cluster"]
    proc = subprocess.run([sys.executable, *argv], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert proc.returncode == 0, "\n".join(failed) + "\n" + proc.stdout[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    assert "skipped" in summary and "passed" in summary, summary
    assert "real stores not found" in proc.stdout or "real stores not present" in proc.stdout
