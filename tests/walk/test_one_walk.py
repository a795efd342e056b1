"""Recovery walks a store once for every broker family detection leaves open, and the dispatch columns
it keeps for the re-dispatch are bounded in memory (the same bytes re-dispatched from spilled columns:
``test_walk.test_kept_columns_redispatch_the_same_bytes``)."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, copy_real_store

from rmqstore.errors import UnsafePlan
from rmqstore.ops import recover as rec
from rmqstore.store import open_store
from rmqstore.store.detect import plan_for_detected
from rmqstore.walk import checked, kept, recovery
from rmqstore.walk.columns import Columns
from rmqstore.walk.kept import KeptColumns

V5 = SHARED / "real-stores-5.2.0"
_V5_CASES = [c for c in ("crash-5x-midwrite", "clean-5x-mixed", "long-topic-v2") if (V5 / c / "store").is_dir()]
NOW = 1_700_000_000_000


def _copy_v5(case: str, dest: Path) -> Path:
    shutil.copytree(V5 / case / "store", dest / "store")
    if (V5 / case / "broker.conf").exists():
        shutil.copy2(V5 / case / "broker.conf", dest / "broker.conf")
    return dest / "store"


def _counting_walk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = recovery.recovery_walk

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(recovery, "recovery_walk", counted)
    return calls


def _shape(plan: rec.RecoverPlan) -> dict:
    data = plan.to_json()
    data.pop("createdAt", None)
    return data


@pytest.mark.skipif(not _V5_CASES, reason=f"no 5.2.0 stores under {V5}")
@pytest.mark.parametrize("case", _V5_CASES)
@pytest.mark.parametrize("abort", [True, False])
def test_undecided_5x_store_is_walked_once(
    case: str, abort: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy_v5(case, tmp_path)
    if abort:
        (root / "abort").write_text("4242")
    else:
        (root / "abort").unlink(missing_ok=True)
    with open_store(root, writable=False) as st:
        det = st.config.detection
        assert det is not None and len(det.candidates) == 2 and not det.settled  # 5.0-5.3.1 or 5.3.2+
        calls = _counting_walk(monkeypatch)
        plan = _outcome(lambda: rec.plan_recover_detected(st, now_ms=NOW, use_quarantine=False))
        assert len(calls) == 1  # both families planned from the same walk
        monkeypatch.undo()
        # the plan of the families walked one by one, as before (or the same refusal when they differ)
        alone = _outcome(
            lambda: plan_for_detected(st, lambda s: rec.plan_recover(s, now_ms=NOW, use_quarantine=False), "recover")
        )
    assert plan == alone


def _outcome(make: Callable[[], rec.RecoverPlan]) -> object:
    try:
        return _shape(make())
    except UnsafePlan as e:
        return str(e)


@pytest.mark.skipif(not _V5_CASES, reason=f"no 5.2.0 stores under {V5}")
@pytest.mark.parametrize("case", _V5_CASES)
def test_each_family_gets_the_facts_of_its_own_walk(case: str, tmp_path: Path) -> None:
    """Normal recovery starts at a different file for 5.3.2+: the shared walk gives each family what its
    own walk from its own start finds."""
    root = _copy_v5(case, tmp_path)
    (root / "abort").unlink(missing_ok=True)
    with open_store(root, writable=False) as st:
        stores = [dataclasses.replace(st, config=dataclasses.replace(st.config, broker=v)) for v in ("5.2.0", "5.3.3")]
        shared = recovery.recovery_facts_for(stores)
        own = [recovery.recovery_facts(s) for s in stores]
    for a, b in zip(shared, own, strict=True):
        assert (a.start_idx, a.start_phy, a.process_offset) == (b.start_idx, b.start_phy, b.process_offset)
        assert dataclasses.asdict(a.end) == dataclasses.asdict(b.end)
        assert (a.cq_check.missing, a.cq_check.fixed, a.cq_check.examples) == (
            b.cq_check.missing,
            b.cq_check.fixed,
            b.cq_check.examples,
        )


def _batch(start: int, n: int, topic: str) -> Columns:
    ar = np.arange(start, start + n, dtype=np.int64)
    return Columns(
        phy=ar * 100, size=np.full(n, 100, np.int64), queue_id=ar % 4, queue_offset=ar // 4, store_ts=ar + NOW,
        sys_flag=np.zeros(n, np.int64), tags_code=ar * 7, topic_id=np.zeros(n, np.int64), topics=[topic],
        key_rec=np.repeat(np.arange(n, dtype=np.int64), 2), key_hash=np.arange(2 * n, dtype=np.int64) - n,
    )  # fmt: skip


def test_kept_columns_spill_past_the_budget_and_read_back_in_order() -> None:
    batches = [_batch(i * 1000, 1000, f"T{i}") for i in range(6)]
    keep = KeptColumns(memory_budget=2 * kept.columns_nbytes(batches[0]))
    keep.extend(batches)
    assert keep.spilled and keep.records == 6000 and keep.end == 6000 * 100
    back = list(keep)
    assert len(back) == 6
    for a, b in zip(batches, back, strict=True):
        assert a.topics == b.topics
        for f in dataclasses.fields(Columns):
            if f.name != "topics":
                assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
    keep.clear()
    assert not keep.spilled and len(keep) == 0 and list(keep) == []


def test_dry_run_keeps_no_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not (SHARED / "real-stores" / "clean-2topics").is_dir():
        pytest.skip("real stores not found")
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "abort").touch()
    monkeypatch.setattr(checked, "PART_SIZE", 4096)
    checked._KEPT.clear()
    with open_store(root, writable=False) as st:
        plan = rec.plan_recover_detected(st, now_ms=NOW, use_quarantine=False, keep_columns=False)
    assert plan.dispatch is not None and checked.kept_range(root) is None
