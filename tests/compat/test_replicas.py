"""`diff` and `truncate` on the pairs of stores the real 4.9.4 engine wrote before and after a failover
(``replicas-4.9.4``): the relation, commonEnd and per-queue figures its ``expect.json`` states, in both
argument orders, and the old master cut back to the common prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPLICA_PAIRS, copy_replica, data_files, load_replica_expect
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.ops.diff import diff_stores
from rmqstore.store import open_store

runner = CliRunner()
SWAP = {"a-behind": "b-behind", "b-behind": "a-behind", "identical": "identical", "diverged": "diverged"}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for pair in REPLICA_PAIRS:
        d = tmp_path_factory.mktemp(pair)
        copy_replica(pair, "a", d / "a")
        copy_replica(pair, "b", d / "b")
        out[pair] = d
    return out


def _queues(rows: list[dict], swap: bool) -> dict[tuple[str, int], tuple[int, int, int, int, int]]:
    out = {}
    for q in rows:
        a, b = (q["onlyB"], q["onlyA"]) if swap else (q["onlyA"], q["onlyB"])
        xa, xb = (q["maxOffsetB"], q["maxOffsetA"]) if swap else (q["maxOffsetA"], q["maxOffsetB"])
        out[(q["topic"], q["queueId"])] = (q["commonEnd"], a, b, xa, xb)
    return out


@pytest.mark.parametrize("pair", REPLICA_PAIRS)
@pytest.mark.parametrize("swap", [False, True], ids=["a-b", "b-a"])
def test_diff_states_what_the_pair_expects(pairs: dict[str, Path], pair: str, swap: bool) -> None:
    want = load_replica_expect(pair)
    first, second = ("b", "a") if swap else ("a", "b")
    r = runner.invoke(
        app, ["diff", str(pairs[pair] / first / "store"), str(pairs[pair] / second / "store"), "-f", "json"]
    )
    assert r.exit_code == want["exitCode"], r.output
    doc = json.loads(r.stdout)
    assert doc["relation"] == (SWAP[want["relation"]] if swap else want["relation"])
    assert doc["commonEnd"] == want["commonEnd"]
    sides = {first: doc["a"], second: doc["b"]}
    for side in ("a", "b"):
        assert sides[side]["maxPhyOffset"] == want[side]["maxPhyOffset"]
        assert sides[side]["recordsAfterCommonEnd"] == want[side]["recordsAfterCommonEnd"]
        assert sides[side]["messagesAfterCommonEnd"] == want[side]["messagesAfterCommonEnd"]
    assert _queues(doc["queues"], swap) == _queues(want["queues"], False)
    cut = want["cutSide"]
    if cut is None:
        assert doc["cutSide"] is None and doc["truncateCommand"] is None
    else:
        cut_arg = {first: "a", second: "b"}[cut]
        assert doc["cutSide"] == cut_arg
        assert doc["truncateCommand"].startswith(f"rmqstore truncate {pairs[pair] / cut / 'store'} ")
        assert doc["truncateCommand"].split()[-1] == str(want["commonEnd"])
        fd = want["firstDifference"]
        got = doc["firstDifferenceA" if cut_arg == "b" else "firstDifferenceB"]
        assert (got["offset"], got["size"], got["topic"], got["queueId"]) == (
            fd["offset"], fd["a"]["size"], fd["a"]["topic"], fd["a"]["queueId"],
        )  # fmt: skip


def test_diff_rows_in_every_format(pairs: dict[str, Path]) -> None:
    d = pairs["replica-diverged-midfile"]
    argv = ["diff", str(d / "a" / "store"), str(d / "b" / "store")]
    rows = [json.loads(x) for x in runner.invoke(app, [*argv, "-f", "ndjson"]).stdout.splitlines()]
    csv = runner.invoke(app, [*argv, "-f", "csv"]).stdout.splitlines()
    assert len(rows) == len(csv) - 1 == 12
    assert csv[0] == "topic,queueId,commonEnd,onlyA,onlyB,maxOffsetA,maxOffsetB"
    for fmt in ("plain", "table"):
        r = runner.invoke(app, [*argv, "-f", fmt])
        assert r.exit_code == 3 and "diverged" in r.stdout and "76189" in r.stdout


def test_truncating_the_old_master_leaves_the_common_prefix(tmp_path: Path) -> None:
    """Both sides cut at commonEnd hold the same commit log, consume queues and index files byte for byte;
    diff then says the promoted slave is ahead, and the old master can follow it again."""
    a = copy_replica("replica-diverged-midfile", "a", tmp_path / "a")
    b = copy_replica("replica-diverged-midfile", "b", tmp_path / "b")
    doc = json.loads(runner.invoke(app, ["diff", str(a), str(b), "-f", "json"]).stdout)
    cmd = doc["truncateCommand"].split()
    assert cmd[:3] == ["rmqstore", "truncate", str(b)]
    assert runner.invoke(app, [*cmd[1:], "-q"]).exit_code == 0
    after = json.loads(runner.invoke(app, ["diff", str(a), str(b), "-f", "json"]).stdout)
    assert (after["relation"], after["commonEnd"], after["b"]["maxPhyOffset"]) == ("b-behind", 76189, 76189)
    a_cut = copy_replica("replica-diverged-midfile", "a", tmp_path / "a-cut")
    assert runner.invoke(app, ["truncate", str(a_cut), "--to-offset", "76189", "-q"]).exit_code == 0
    same = {k: v for k, v in data_files(a_cut).items() if k != "checkpoint"}
    assert {k: v for k, v in data_files(b).items() if k != "checkpoint"} == same
    with open_store(a) as sa, open_store(b) as sb:
        report = diff_stores(sa, sb)
    assert [(q.topic, q.only_a, q.only_b) for q in report.queues if q.topic == "TopicC"] == [
        ("TopicC", n, 0) for n in (5, 4, 5, 5)
    ]
