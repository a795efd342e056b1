"""offsets set: --shift-by, --by-duration, --all-groups and the --topic scope; the plan is shown first."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.errors import InputError
from rmqstore.store import open_store
from rmqstore.store.offsets import read_consumer_offsets
from rmqstore.timeparse import parse_duration_ms

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def committed(store: Path) -> dict:
    """{"topic@group": {queue: offset}} as the broker loads consumerOffset.json (fastjson form)."""
    with open_store(store) as st:
        _, table = read_consumer_offsets(st)
    return {f"{t}@{g}": dict(qs) for (t, g), qs in table.items()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The small fixture with GroupA on TopicA and TopicB, GroupB on TopicA, all at offset 5."""
    shutil.copytree(FIXTURES / "small", tmp_path / "small")
    root = tmp_path / "small" / "store"
    for group, topic in (("GroupA", "TopicA"), ("GroupA", "TopicB"), ("GroupB", "TopicA")):
        for q in range(4):
            r = invoke("offsets", "set", root, "-g", group, "-t", topic, "--queue", q, "--offset", 5, "-f", "json")
            assert r.exit_code == 0, r.output
    return root


def ranges(store: Path) -> dict:
    r = invoke("offsets", store, "-f", "json")
    return {(x["topic"], x["queueId"]): (x["minOffset"], x["maxOffset"]) for x in json.loads(r.stdout)["offsets"]}


def test_shift_by_moves_and_clamps(store):
    rng = ranges(store)
    r = invoke("offsets", "set", store, "-g", "GroupA", "-t", "TopicA", "--shift-by", "-3", "-f", "json")
    assert r.exit_code == 0, r.output
    assert committed(store)["TopicA@GroupA"] == {q: 2 for q in range(4)}
    r = invoke("offsets", "set", store, "-g", "GroupA", "-t", "TopicA", "--shift-by", "1000000", "-f", "json")
    assert committed(store)["TopicA@GroupA"] == {q: rng[("TopicA", q)][1] for q in range(4)}
    r = invoke("offsets", "set", store, "-g", "GroupA", "-t", "TopicA", "--shift-by", "-1000000", "-f", "json")
    assert committed(store)["TopicA@GroupA"] == {q: rng[("TopicA", q)][0] for q in range(4)}
    assert committed(store)["TopicA@GroupB"] == {q: 5 for q in range(4)}  # other groups untouched


def test_all_groups_on_one_topic(store):
    rng = ranges(store)
    r = invoke("offsets", "set", store, "--all-groups", "-t", "TopicA", "--to-latest", "-f", "json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["changes"]
    assert {(c["group"], c["topic"]) for c in plan} == {("GroupA", "TopicA"), ("GroupB", "TopicA")}
    table = committed(store)
    for g in ("GroupA", "GroupB"):
        assert table[f"TopicA@{g}"] == {q: rng[("TopicA", q)][1] for q in range(4)}
    assert table["TopicB@GroupA"] == {q: 5 for q in range(4)}


def test_a_group_without_topic_is_every_topic_it_committed_on(store):
    r = invoke("offsets", "set", store, "-g", "GroupA", "--to-earliest", "-f", "json")
    assert r.exit_code == 0, r.output
    assert {c["topic"] for c in json.loads(r.stdout)["changes"]} == {"TopicA", "TopicB"}
    assert committed(store)["TopicA@GroupB"] == {q: 5 for q in range(4)}


def test_by_duration_is_the_offset_for_now_minus_the_duration(store):
    # the fixture's messages are from 2023: an hour ago is after all of them (the broker's offset
    # for such a time is its last message's, as `query time` finds it), ten years ago before all
    rng = ranges(store)
    invoke("offsets", "set", store, "-g", "GroupA", "-t", "TopicA", "--by-duration", "1h")
    for q in range(4):
        r = invoke("query", "time", store, "TopicA", q, str(int(time.time() * 1000) - 3_600_000), "-f", "json")
        assert (
            committed(store)["TopicA@GroupA"][q] == json.loads(r.stdout)[0]["queueOffset"] == rng[("TopicA", q)][1] - 1
        )
    years = int(time.time() * 1000 - 1_600_000_000_000) // 86_400_000
    r = invoke("offsets", "set", store, "-g", "GroupA", "-t", "TopicA", "--by-duration", f"{years}d")
    assert r.exit_code == 0, r.output
    assert committed(store)["TopicA@GroupA"] == {q: rng[("TopicA", q)][0] for q in range(4)}


def test_plan_is_shown_and_dry_run_writes_nothing(store):
    before = (store / "config" / "consumerOffset.json").read_bytes()
    r = invoke("offsets", "set", store, "--all-groups", "--shift-by", "1", "--dry-run", "-f", "plain")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:5] == ["group", "topic", "queueId", "before", "after"])
    assert len(lines) == head + 1 + 12 and all(ln.split()[3:5] == ["5", "6"] for ln in lines[head + 1 :])
    assert any(ln.split()[:2] == ["offsetsChanged", "12"] for ln in lines[:head])
    assert any(ln.split()[:2] == ["offsets", "rewrite"] for ln in lines[:head])
    assert "nothing written" in r.stderr
    assert (store / "config" / "consumerOffset.json").read_bytes() == before
    r = invoke("offsets", "set", store, "--all-groups", "--shift-by", "1", "-f", "plain")
    assert r.stdout.splitlines() == lines and "wrote 12 offset(s)" in r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--to-latest"],  # no scope
        ["-g", "GroupA", "--all-groups", "--to-latest"],
        ["-g", "GroupA", "--to-latest", "--shift-by", "1"],
        ["-g", "Nobody", "--to-latest"],
    ],
)
def test_scope_and_mode_mistakes_are_input_errors(store, argv):
    before = (store / "config" / "consumerOffset.json").read_bytes()
    r = invoke("offsets", "set", store, *argv)
    assert r.exit_code == 1 and r.stderr.startswith("error: "), r.output
    assert (store / "config" / "consumerOffset.json").read_bytes() == before


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1h", 3_600_000),
        ("1h30m", 5_400_000),
        ("2d", 172_800_000),
        ("500ms", 500),
        ("PT1H30M", 5_400_000),
        ("P1D", 86_400_000),
        ("PT0.5S", 500),
    ],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1", "h", "P", "PT", "-1h", "1y"])
def test_bad_durations(text):
    with pytest.raises(InputError):
        parse_duration_ms(text)
