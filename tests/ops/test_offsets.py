"""`rmqstore offsets`: consumer progress against truth.json, and byte-exact rewrites of
consumerOffset.json (real files from ../shared/real-world round-trip unchanged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL_WORLD, case_dir, copy_real_store, load_truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.errors import UnsafePlan
from rmqstore.ops import offsets as op
from rmqstore.store import config as cfgjson
from rmqstore.store import offsets as store_offsets
from rmqstore.store import open_store

runner = CliRunner()


def _real_world(*patterns: str) -> list[Path]:
    if not REAL_WORLD.is_dir():
        return []
    return sorted(p for pat in patterns for p in REAL_WORLD.rglob(pat) if p.is_file())


OFFSET_FILES = _real_world("consumerOffset.json", "consumerOffset.json.bak")
TOPIC_FILES = _real_world("topics.json", "topics.json.bak")


def _id(p: Path) -> str:
    return str(p.relative_to(REAL_WORLD))


def offsets_text(table: dict[str, dict[int, int]]) -> str:
    """consumerOffset.json exactly as fastjson writes it for a 4.x broker (§11.4)."""
    items = [f'\t\t"{k}":{{{",".join(f"{q}:{o}" for q, o in v.items())}\n\t\t}}' for k, v in table.items()]
    return '{\n\t"offsetTable":{\n' + ",\n".join(items) + "\n\t}\n}"


def queue(case: str, topic: str, qid: int) -> dict:
    return next(q for q in load_truth(case)["queues"] if (q["topic"], q["queueId"]) == (topic, qid))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """clean-2topics with a consumerOffset.json in the broker's own form."""
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    text = offsets_text({"TopicA@GroupA": {0: 10, 1: 63, 2: 0, 3: 5}, "%RETRY%GroupA@GroupA": {0: 0}})
    (root / "config" / "consumerOffset.json").write_text(text)
    return root


# ---------------------------------------------------------------------------- file forms


@pytest.mark.skipif(not OFFSET_FILES, reason="no real-world consumerOffset.json")
@pytest.mark.parametrize("path", OFFSET_FILES, ids=_id)
def test_real_consumer_offset_files_round_trip(path: Path, tmp_path: Path):
    raw = path.read_bytes()
    data = cfgjson.loads(raw, path=path)
    assert cfgjson.dumps(data).encode() == raw
    table = cfgjson.load_consumer_offsets(data, path=path)
    # a rewrite that sets every offset to its own value changes no byte
    root = copy_real_store("delay-tx-retry", tmp_path)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_bytes(raw)
    for (topic, group), queues in list(table.items())[:3]:
        for qid, value in list(queues.items())[:2]:
            with open_store(root) as st:
                plan = op.plan_reset_offsets(
                    st, pairs=[(topic, group)], mode="offset", queue_id=qid, offset=value, force=True
                )
            assert plan.new_text().encode() == raw
            assert [(c.before, c.after) for c in plan.changes] == [(value, value)]


@pytest.mark.skipif(not TOPIC_FILES, reason="no real-world topics.json")
@pytest.mark.parametrize("path", TOPIC_FILES, ids=_id)
def test_real_topics_files_round_trip(path: Path):
    raw = path.read_bytes()
    assert cfgjson.dumps(cfgjson.loads(raw, path=path)).encode() == raw


def test_offsets_text_is_the_spec_vector():
    # store-format.md §11.4, exact characters
    want = (
        '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251,3:250\n\t\t},'
        '\n\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n\t\t}\n\t}\n}'
    )
    table = {
        "TopicTest@please_rename_unique_group_name_4": {0: 250, 1: 249, 2: 251, 3: 250},
        "%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4": {0: 0},
    }
    assert offsets_text(table) == want


# ------------------------------------------------------------------------------ progress


@pytest.mark.parametrize("case", ["clean-2topics", "delay-tx-retry"])  # stores the broker loads unchanged
def test_queue_ranges_match_the_broker(case: str, tmp_path: Path):
    root = copy_real_store(case, tmp_path)
    with open_store(root) as st:
        for q in load_truth(case)["queues"]:
            rng = st.consume_queues.queue(q["topic"], q["queueId"]).queue_range(st.min_phy_offset())
            assert (rng.min_offset, rng.max_offset) == (q["minOffset"], q["maxOffset"]), q["topic"]
            if q["maxOffset"]:
                assert rng.last_phy_offset == q["maxPhysicOffset"]  # 4.4.0: start of the last entry


def test_min_offset_after_the_first_commit_log_file_expired(store: Path):
    """correctMinOffset (4.x): the first entry of the first CQ file whose record is still there."""
    first_file = store / "commitlog" / f"{0:020d}"
    second = int(sorted(p.name for p in first_file.parent.iterdir())[1])
    first_file.unlink()
    for version in ("4.4.0", "5.3.3"):  # both find the same entry while one qualifies
        with open_store(store, broker=version) as st:
            for qid in range(4):
                q = queue("clean-2topics", "TopicB", qid)
                want = next(e["queueOffset"] for e in q["entries"] if e["commitLogOffset"] >= second)
                assert want > 0
                rng = st.consume_queues.queue("TopicB", qid).queue_range(st.min_phy_offset())
                assert (rng.min_offset, rng.max_offset) == (want, q["maxOffset"])


def test_consumer_progress(store: Path):
    with open_store(store) as st:
        rows = store_offsets.consumer_progress(st)
    got = {(r.group, r.topic, r.queue_id): r for r in rows}
    assert set(got) == {("GroupA", "TopicA", q) for q in range(4)} | {("GroupA", "%RETRY%GroupA", 0)}
    for qid, committed in {0: 10, 1: 63, 2: 0, 3: 5}.items():
        q = queue("clean-2topics", "TopicA", qid)
        r = got[("GroupA", "TopicA", qid)]
        assert (r.consumer_offset, r.min_offset, r.max_offset) == (committed, q["minOffset"], q["maxOffset"])
        assert r.lag == q["maxOffset"] - committed
    retry = got[("GroupA", "%RETRY%GroupA", 0)]
    assert (retry.max_offset, retry.lag) == (0, 0)  # no such queue on disk: the broker answers 0
    totals = store_offsets.progress_totals(rows)
    assert totals[-1] == {"group": None, "topic": None, "lag": sum(r.lag for r in rows)}


def test_cli_show_filters_and_formats(store: Path):
    res = runner.invoke(app, ["offsets", str(store), "--format", "json", "--topic", "TopicA"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(r["topic"], r["queueId"]) for r in doc["offsets"]] == [("TopicA", q) for q in range(4)]
    q0 = queue("clean-2topics", "TopicA", 0)
    row = dict(doc["offsets"][0])
    last_ts, last_at = row.pop("lastConsumedTimestamp"), row.pop("lastConsumedAt")
    # consumerProgress's LastTime: the store time of the message before the committed offset
    assert last_ts == next(m["storeTimestamp"] for m in q0["messages"] if m["queueOffset"] == 9)
    assert last_at.startswith("20") and last_at.endswith("Z")
    assert row == {
        "group": "GroupA",
        "topic": "TopicA",
        "queueId": 0,
        "consumerOffset": 10,
        "minOffset": q0["minOffset"],
        "maxOffset": q0["maxOffset"],
        "lag": q0["maxOffset"] - 10,
    }
    none = runner.invoke(app, ["offsets", "show", str(store), "--group", "nobody", "--format", "json"])
    assert none.exit_code == 0 and json.loads(none.stdout)["offsets"] == []
    plain = runner.invoke(app, ["offsets", str(store), "--format", "plain"])
    assert plain.exit_code == 0 and plain.stdout.splitlines()[0].split()[:3] == ["group", "topic", "queueId"]


def test_ndjson_rows_are_the_json_rows_compact(store: Path):
    """``-f ndjson`` is written from a template: each line is the json format's row, field for field."""
    doc = json.loads(runner.invoke(app, ["offsets", str(store), "--format", "json"]).stdout)
    nd = runner.invoke(app, ["offsets", str(store), "--format", "ndjson"]).stdout
    lines = nd.splitlines()
    assert doc["offsets"] and [json.loads(ln) for ln in lines] == doc["offsets"]
    assert lines == [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in doc["offsets"]]


PER_FILE = 400 // 20  # the real stores' consume queue files hold 20 entries


def broker_offset_for_time(msgs: list[dict], t: int) -> int:
    """getOffsetInQueueByTime (4.4.0) from truth.json's messages of one queue: the first file whose
    last message is stored at or after ``t`` (else the last file); in it the message stored at
    ``t``, else the nearer of its neighbours (the earlier on a tie), else the only side found."""
    files = [msgs[i : i + PER_FILE] for i in range(0, len(msgs), PER_FILE)]
    f = next((f for f in files if f[-1]["storeTimestamp"] >= t), files[-1])
    exact = [m for m in f if m["storeTimestamp"] == t]
    if exact:
        return exact[0]["queueOffset"]
    left = [m for m in f if m["storeTimestamp"] < t]
    right = [m for m in f if m["storeTimestamp"] > t]
    if not left or not right:
        return (right or left)[0 if right else -1]["queueOffset"]
    lo, hi = left[-1], right[0]
    return lo["queueOffset"] if t - lo["storeTimestamp"] <= hi["storeTimestamp"] - t else hi["queueOffset"]


def test_set_to_time_uses_the_brokers_offset_for_a_time(store: Path):
    msgs = queue("clean-2topics", "TopicB", 2)["messages"]
    stamps = [m["storeTimestamp"] for m in msgs]
    once = [t for t in stamps if stamps.count(t) == 1]  # equal store times make an exact hit ambiguous
    probes = [stamps[0] - 5, once[10], once[10] + 1, once[25] - 1, once[-1], stamps[-1] + 1000]
    for t in (p for p in probes if stamps.count(p) <= 1):
        res = runner.invoke(
            app, ["offsets", "set", str(store), "-g", "G", "-t", "TopicB", "--queue", "2", "--to-time", str(t)]
        )
        assert res.exit_code == 0, res.output
        got = cfgjson.loads((store / "config" / "consumerOffset.json").read_bytes())["offsetTable"]["TopicB@G"][2]
        assert got == broker_offset_for_time(msgs, t), t


# ------------------------------------------------------------------------------ set


def test_set_latest_writes_the_broker_form_with_bak(store: Path):
    path = store / "config" / "consumerOffset.json"
    before = path.read_bytes()
    res = runner.invoke(app, ["offsets", "set", str(store), "--group", "GroupA", "--topic", "TopicA", "--to-latest"])
    assert res.exit_code == 0, res.output
    maxes = {q: queue("clean-2topics", "TopicA", q)["maxOffset"] for q in range(4)}
    want = offsets_text({"TopicA@GroupA": maxes, "%RETRY%GroupA@GroupA": {0: 0}})
    assert path.read_text() == want
    assert (store / "config" / "consumerOffset.json.bak").read_bytes() == before
    assert sorted(p.name for p in (store / "config").iterdir()) == ["consumerOffset.json", "consumerOffset.json.bak"]


@pytest.mark.parametrize("version", ["4.4.0", "5.3.3"])
def test_set_one_queue_new_group_and_earliest(store: Path, version: str):
    args = ["offsets", "set", str(store), "--broker-version", version]
    res = runner.invoke(app, [*args, "--group", "GroupA", "--topic", "TopicA", "--queue", "2", "--offset", "7"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*args, "--group", "GroupB", "--topic", "TopicB", "--to-earliest"])
    assert res.exit_code == 0, res.output
    want = offsets_text(
        {
            "TopicA@GroupA": {0: 10, 1: 63, 2: 7, 3: 5},
            "%RETRY%GroupA@GroupA": {0: 0},
            "TopicB@GroupB": {q: queue("clean-2topics", "TopicB", q)["minOffset"] for q in range(4)},
        }
    )
    assert (store / "config" / "consumerOffset.json").read_text() == want


def test_set_keeps_the_5x_form(store: Path):
    """5.x files carry dataVersion and the computed groupTopicMap (§11.4): kept, the map extended."""
    head = '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},'
    groups = '\n\t"groupTopicMap":{\n\t\t"GroupA":["TopicA"]%s\n\t},'
    table = '\n\t"offsetTable":{\n\t\t"TopicA@GroupA":{0:1,1:2,2:3,3:4\n\t\t}%s\n\t}\n}'
    path = store / "config" / "consumerOffset.json"
    before = head + groups % "" + table % ""
    path.write_text(before)
    args = ["offsets", "set", str(store), "--broker-version", "5.3.3", "-g", "GroupB", "-t", "TopicB"]
    res = runner.invoke(app, [*args, "--queue", "1", "--offset", "9"])
    assert res.exit_code == 0, res.output
    assert (
        path.read_text() == head + groups % ',\n\t\t"GroupB":["TopicB"]' + table % ',\n\t\t"TopicB@GroupB":{1:9\n\t\t}'
    )
    assert (store / "config" / "consumerOffset.json.bak").read_text() == before


def test_set_to_time_for_every_queue(store: Path):
    t = queue("clean-2topics", "TopicA", 0)["messages"][20]["storeTimestamp"]
    res = runner.invoke(app, ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA", "--to-time", str(t)])
    assert res.exit_code == 0, res.output
    data = cfgjson.loads((store / "config" / "consumerOffset.json").read_bytes())
    got = data["offsetTable"]["TopicA@GroupA"]
    assert got == {q: broker_offset_for_time(queue("clean-2topics", "TopicA", q)["messages"], t) for q in range(4)}


def test_dry_run_changes_nothing(store: Path):
    path = store / "config" / "consumerOffset.json"
    before = path.read_bytes()
    res = runner.invoke(
        app, ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA", "--to-earliest", "--dry-run", "-f", "json"]
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    changes = plan["changes"]
    assert [(c["queueId"], c["before"], c["after"]) for c in changes] == [(0, 10, 0), (1, 63, 0), (2, 0, 0), (3, 5, 0)]
    assert [(a["action"], a["path"]) for a in plan["actions"]] == [("rewrite", str(path))]
    assert path.read_bytes() == before
    assert not (store / "config" / "consumerOffset.json.bak").exists()


def test_out_of_range_is_refused_unless_forced(store: Path):
    path = store / "config" / "consumerOffset.json"
    before = path.read_bytes()
    big = queue("clean-2topics", "TopicA", 1)["maxOffset"] + 1
    args = ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA", "--queue", "1", "--offset", str(big)]
    res = runner.invoke(app, args)
    assert res.exit_code == 8
    assert res.stderr.splitlines()[0].startswith(f"error: offset {big} is outside TopicA queue 1's range")
    assert path.read_bytes() == before
    res = runner.invoke(app, [*args, "--force"])
    assert res.exit_code == 0
    assert cfgjson.loads(path.read_bytes())["offsetTable"]["TopicA@GroupA"][1] == big


def test_bad_arguments(store: Path):
    base = ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA"]
    res = runner.invoke(app, [*base, "--offset", "3"])
    assert res.exit_code == 1 and res.stderr.startswith("error: --offset needs --queue")
    res = runner.invoke(app, [*base, "--to-latest", "--to-earliest"])
    assert res.exit_code == 1 and "exactly one of" in res.stderr


def test_refused_while_a_broker_holds_the_lock(store: Path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0); print('locked', flush=True); sys.stdin.read()",
            str(store / "lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        path = store / "config" / "consumerOffset.json"
        before = path.read_bytes()
        res = runner.invoke(app, ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA", "--to-latest"])
        assert res.exit_code == 4
        assert res.stderr.splitlines()[0].startswith("error:") and "held by a running broker" in res.stderr
        assert path.read_bytes() == before
        # check reports the store as in use (exit 4), the lock as a fact, not as a problem
        chk = runner.invoke(app, ["check", str(store), "--format", "json"])
        doc = json.loads(chk.stdout)
        assert chk.exit_code == 4 and doc["summary"]["result"] == "in use", chk.output
        assert any(p["severity"] == "info" and "holds the lock" in p["what"] for p in doc["problems"])
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


def test_apply_refuses_a_plan_made_before_the_file_changed(store: Path):
    path = store / "config" / "consumerOffset.json"
    with open_store(store, writable=True) as st:
        plan = op.plan_reset_offsets(st, pairs=[("TopicA", "GroupA")], mode="latest")
        path.write_text(offsets_text({"TopicA@GroupA": {0: 1}}))
        with pytest.raises(UnsafePlan):
            op.apply_reset_offsets(st, plan)
    assert path.read_text() == offsets_text({"TopicA@GroupA": {0: 1}})


def test_unusable_offsets_file_is_not_overwritten(store: Path):
    path = store / "config" / "consumerOffset.json"
    path.write_bytes(b'{\n\t"offsetTable":{\n\t\t"TopicA@GroupA":{0:1,\n')
    res = runner.invoke(app, ["offsets", "set", str(store), "-g", "GroupA", "-t", "TopicA", "--to-latest"])
    assert res.exit_code == 1
    assert res.stderr.splitlines()[0].startswith("error:") and "repair the file first" in res.stderr
    assert path.read_bytes().endswith(b"{0:1,\n")


def test_lmq_consumer_offsets_are_shown(tmp_path: Path):
    """4.9.3+/5.x keep the %LMQ% queues' offsets in lmqConsumerOffset.json (consumerOffset.json's layout)."""
    case = "5.2.0/lmq-multi-dispatch"
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    root = copy_real_store(case, tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "lmqConsumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"%LMQ%room-1@GroupL":{0:12\n\t\t}\n\t}\n}'
    )
    with open_store(root) as st:
        rows = store_offsets.consumer_progress(st)
    room = next(q for q in load_truth(case)["queues"] if q["topic"] == "%LMQ%room-1")
    (r,) = [r for r in rows if r.topic == "%LMQ%room-1"]
    assert (r.group, r.queue_id, r.consumer_offset, r.max_offset) == ("GroupL", 0, 12, room["maxOffset"])
    assert r.lag == room["maxOffset"] - 12
