"""Every modifying operation's plan maps to one action shape (rmqstore.safety.PlannedAction) with one
JSON mapping, and planning writes nothing."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_real_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.dispatch import cut
from rmqstore.ops import offsets, recover, redispatch, write
from rmqstore.safety.actions import PlannedAction, actions_json
from rmqstore.safety.plan import Plan
from rmqstore.store import open_store
from rmqstore.walk import expiry

KEYS = {"operation", "action", "path", "from", "to", "bytes", "kept", "why"}
VERBS = {"append", "zero", "delete", "move", "replace", "rewrite"}


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def actions_of(plan: Plan) -> tuple[PlannedAction, ...]:
    return plan.planned_actions()


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
        check(actions_of(recover.plan_recover(st, now_ms=0)), crashed, "recover")
    with open_store(clean) as st:
        wplan = write.plan_write(st, [write.Message(topic="TopicA", queue_id=0, body=b"x")])
        acts = actions_of(wplan)
        check(acts, clean, "write")
        log = [a for a in acts if Path(a.path).parent.name == "commitlog"]
        assert log[-1].verb == "append" and log[-1].start % 32768 == wplan.start_phy % 32768
        rplan = redispatch.plan_redispatch(st, dry_run=True)
        check(actions_of(rplan), clean, "redispatch")
        redispatch.discard(rplan)
        eplan = expiry.plan_expire(st, now_ms=4_102_444_800_000, force=True, disk_usage=lambda _p: 0.1)
        check(actions_of(eplan), clean, "expire")
        oplan = offsets.plan_reset_offsets(st, pairs=[("TopicA", "G")], mode="earliest")
        check(actions_of(oplan), clean, "offsets")
    assert digest(tmp_path) == before  # planning (a dry run) writes nothing


def cli_actions(*argv: str) -> list[dict]:
    """The actions a command's ``--dry-run -f json`` shows."""
    r = CliRunner().invoke(app, [*argv, "--dry-run", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["operation"] == argv[0] and isinstance(doc["summary"], dict)
    return doc["actions"]


def test_every_dry_run_shows_the_plans_actions_and_writes_nothing(tmp_path: Path) -> None:
    crashed = copy_real_store("crash-midwrite", tmp_path / "a")
    clean = copy_real_store("clean-2topics", tmp_path / "b")
    before = digest(tmp_path)
    future = 4_102_444_800_000
    with open_store(crashed) as st:
        want = actions_of(recover.plan_recover(st, now_ms=0))
    assert cli_actions("recover", str(crashed), "-q") == actions_json(want)
    with open_store(clean) as st:
        wplan = write.plan_write(st, [write.Message(topic="TopicA", queue_id=0, body=b"x")])
        rplan = redispatch.plan_redispatch(st, dry_run=True)
        planned = {
            "write": actions_of(wplan),
            "redispatch": actions_of(rplan),
            "expire": actions_of(expiry.plan_expire(st, now_ms=future, force=True, disk_usage=lambda _p: 0.1)),
            "offsets": actions_of(offsets.plan_reset_offsets(st, pairs=[("TopicA", "G")], mode="earliest")),
        }
        redispatch.discard(rplan)
    argv = {
        "write": ["write", str(clean), "--topic", "TopicA", "--queue", "0", "--body", "x"],
        "redispatch": ["redispatch", str(clean), "-q"],
        "expire": ["expire", str(clean), "--force", "--now", str(future), "--disk-used-ratio", "0.1"],
        "offsets": ["offsets", "set", str(clean), "-g", "G", "-t", "TopicA", "--to-earliest"],
    }
    for op, args in argv.items():
        assert planned[op], op
        assert cli_actions(*args) == actions_json(planned[op]), op
    assert digest(tmp_path) == before  # a dry run writes nothing anywhere


@pytest.mark.parametrize("fmt", ["table", "plain", "ndjson", "csv"])
def test_a_plan_shows_its_actions_in_every_format(tmp_path: Path, fmt: str) -> None:
    root = copy_real_store("crash-midwrite", tmp_path)
    with open_store(root) as st:
        want = actions_json(actions_of(recover.plan_recover(st, now_ms=0)))
    r = CliRunner().invoke(app, ["recover", str(root), "-q", "--dry-run", "-f", fmt])
    assert r.exit_code == 0, r.output
    if fmt == "ndjson":
        assert [json.loads(ln) for ln in r.stdout.splitlines()] == want
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert [(x["action"], x["path"], x["why"]) for x in rows] == [(a["action"], a["path"], a["why"]) for a in want]
    else:
        for a in want:  # every action on its line, with its path and reason; the summary says what is lost
            shown = os.path.relpath(a["path"], root)  # table and plain: relative to the store
            line = next(ln for ln in r.stdout.splitlines() if {shown, a["action"]} <= set(ln.split()))
            assert a["why"][:30] in line
        assert "recordsLost" in r.stdout and "quarantine" in r.stdout and "processOffset" in r.stdout


@pytest.mark.parametrize(
    "argv",
    [["recover"], ["redispatch"], ["write", "--topic", "TopicA", "--body", "x"]],
    ids=["recover", "redispatch", "write"],
)
def test_keeping_and_not_keeping_removed_bytes_exclude_each_other(tmp_path: Path, argv: list[str]) -> None:
    store = copy_real_store("crash-midwrite", tmp_path / "a")
    before = digest(store)
    cmd = [argv[0], str(store), *argv[1:], "--quarantine", str(tmp_path / "q"), "--no-quarantine"]
    r = CliRunner().invoke(app, cmd)
    assert r.exit_code == 1, r.output
    assert "--quarantine and --no-quarantine exclude each other" in r.output
    assert digest(store) == before and not (tmp_path / "q").exists()


# -- the one JSON model ---------------------------------------------------------------------------------


def round_trip(value: Any) -> Any:
    """``value`` through its JSON as a journal or a script keeps it: text and back."""
    return type(value).from_json(json.loads(json.dumps(value.to_json())))


def test_every_plan_comes_back_from_its_json(tmp_path: Path) -> None:
    crashed = copy_real_store("crash-midwrite", tmp_path / "a")
    clean = copy_real_store("clean-2topics", tmp_path / "b")
    with open_store(crashed) as st:
        plans: list[Any] = [recover.plan_recover(st, now_ms=0, rebuild_index=True)]
    with open_store(clean) as st:
        rplan = redispatch.plan_redispatch(st, dry_run=True, quarantine=tmp_path / "q")
        plans += [
            recover.plan_recover(st, now_ms=0, use_quarantine=False),
            rplan,
            expiry.plan_expire(st, now_ms=4_102_444_800_000, force=True, disk_usage=lambda _p: 0.1),
            expiry.plan_expire(st, now_ms=0, disk_usage=lambda _p: 0.99, quarantine=tmp_path / "q"),
            offsets.plan_reset_offsets(st, pairs=[("TopicA", "G"), ("TopicB", "G")], mode="latest"),
        ]
        redispatch.discard(rplan)
    for plan in plans:
        assert isinstance(plan, Plan)
        assert round_trip(plan) == plan, plan.operation
        assert round_trip(plan).to_json() == plan.to_json()


_text = st.text(max_size=8)
_maybe_int = st.none() | st.integers()
_lost = st.builds(
    recover.LostRecord, st.integers(), st.integers(), st.none() | _text, _maybe_int, _maybe_int,
    st.none() | _text, st.none() | _text, st.none() | _text, _maybe_int, st.booleans(),
)  # fmt: skip
_paths = st.builds(Path, st.text(alphabet="ab/", min_size=1, max_size=6))
_ratio = st.floats(allow_nan=False, allow_infinity=False)
ROWS = {
    "recover.LostRecord": _lost,
    "cut.Removal": st.builds(
        cut.Removal,
        _text,
        _text,
        _text,
        _text,
        st.integers(),
        st.integers(),
        _text,
        st.lists(_lost, max_size=3).map(tuple),
        st.integers(),
        st.integers(),
        st.integers(),
    ),  # fmt: skip
    "recover.Loss": st.builds(
        recover.Loss, _text, st.integers(), _text, st.none() | _text, st.lists(_lost, max_size=2).map(tuple)
    ),
    "recover.Redispatch": st.builds(recover.Redispatch),
    "redispatch.QueueDiff": st.builds(redispatch.QueueDiff),
    "offsets.OffsetChange": st.builds(offsets.OffsetChange),
    "expiry.FileAction": st.builds(expiry.FileAction, path=_paths),
    "expiry.Triggers": st.builds(expiry.Triggers, commitlog_used_ratio=_ratio, consumequeue_used_ratio=_ratio),
    "expiry.ExpireSettings": st.builds(
        expiry.ExpireSettings, disk_space_warning_level_ratio=_ratio, disk_space_clean_forcibly_ratio=_ratio
    ),
}


@pytest.mark.parametrize("name", ROWS)
@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_row_of_a_plan_comes_back_from_its_json(name: str, data: st.DataObject) -> None:
    row = data.draw(ROWS[name])
    assert round_trip(row) == row
