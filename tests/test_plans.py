"""Every modifying operation's plan maps to one action shape (rmqstore.safety.PlannedAction) with one
JSON mapping, and planning writes nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

from conftest import copy_real_store

from rmqstore import expire, offsets, recover, redispatch, write
from rmqstore.safety import PlannedAction, actions_json
from rmqstore.store import open_store

KEYS = {"operation", "action", "path", "from", "to", "bytes", "kept", "why"}
VERBS = {"append", "zero", "delete", "move", "replace", "rewrite"}


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def check(actions: tuple[PlannedAction, ...], root: Path, operation: str) -> None:
    assert actions
    for row in actions_json(actions):
        assert set(row) == KEYS and row["operation"] == operation and row["action"] in VERBS
        assert Path(row["path"]).is_absolute() and Path(root).resolve() in Path(row["path"]).resolve().parents


def test_every_plan_has_the_common_shape(tmp_path: Path) -> None:
    crashed = copy_real_store("crash-midwrite", tmp_path / "a")
    clean = copy_real_store("clean-2topics", tmp_path / "b")
    before = digest(tmp_path)
    with open_store(crashed) as st:
        check(recover.planned_actions(recover.plan_recover(st, now_ms=0)), crashed, "recover")
    with open_store(clean) as st:
        wplan = write.plan_write(st, [write.Message(topic="TopicA", queue_id=0, body=b"x")])
        acts = write.planned_actions(wplan)
        check(acts, clean, "write")
        assert acts[-1].verb == "append" and acts[-1].start % 32768 == wplan.start_phy % 32768
        rplan = redispatch.plan_redispatch(st, dry_run=True)
        check(redispatch.planned_actions(rplan), clean, "redispatch")
        redispatch.discard(rplan)
        eplan = expire.plan_expire(st, now_ms=4_102_444_800_000, force=True, disk_usage=lambda _p: 0.1)
        check(expire.planned_actions(eplan), clean, "expire")
        oplan = offsets.plan_set_offsets(st, group="G", topic="TopicA", mode="earliest")
        check(offsets.planned_actions(oplan), clean, "offsets")
    assert digest(tmp_path) == before  # planning (a dry run) writes nothing
