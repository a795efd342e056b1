"""Shared fixtures: the real 4.4.0 stores (read from ../shared, never copied into the repo)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=150)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RMQSTORE_SHARED", REPO.parent / "shared"))
REAL_STORES = SHARED / "real-stores"
REAL_WORLD = SHARED / "real-world"
REAL_CASES = ("clean-2topics", "crash-midwrite", "delay-tx-retry")
FIXTURES = REPO / "fixtures" / "stores"


def _need_shared() -> None:
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")


@pytest.fixture(params=REAL_CASES)
def real_case(request: pytest.FixtureRequest) -> str:
    _need_shared()
    return request.param


def load_truth(case: str) -> dict:
    _need_shared()
    return json.loads((REAL_STORES / case / "truth.json").read_text())


def load_rebuild(case: str) -> dict:
    _need_shared()
    return json.loads((REAL_STORES / case / "rebuild.json").read_text())


def load_spec(case: str) -> dict:
    _need_shared()
    return json.loads((REAL_STORES / case / "spec.json").read_text())


def copy_real_store(case: str, dest: Path) -> Path:
    """A private writable copy of a real store (with its broker.conf beside it); returns the store root."""
    _need_shared()
    src = REAL_STORES / case
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "store", dest / "store", copy_function=shutil.copy2)
    shutil.copy2(src / "broker.conf", dest / "broker.conf")
    for p in (dest / "store").rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (dest / "store").chmod(0o755)
    return dest / "store"


@pytest.fixture
def real_store_copy(real_case: str, tmp_path: Path) -> tuple[str, Path]:
    return real_case, copy_real_store(real_case, tmp_path)
