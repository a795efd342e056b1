"""``offsets`` on a store whose broker runs ``LmqConsumerOffsetManager`` (``enableLmq``, 4.9.3+/5.x):
every group's offsets live in ``config/lmqConsumerOffset.json``, an LMQ group's one offset in its
``lmqOffsetTable`` (``topic@group`` -> offset). Tested on a copy of the real 5.2.0 lmq-multi-dispatch store."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import copy_real_store
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.store import config as cfgmod
from rmqstore.store import open_store
from rmqstore.store.offsets import offsets_file, read_consumer_offsets

runner = CliRunner()
CASE = "5.2.0/lmq-multi-dispatch"
ROOM1 = "%LMQ%room-1"
# The fastjson pretty form LmqConsumerOffsetManager.encode(true) gives (properties in name order).
EXISTING = (
    '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},\n'
    '\t"groupTopicMap":{\n\t\t"GidParent":["TopicLmqParent"]\n\t},\n'
    '\t"lmqOffsetTable":{\n\t\t"%LMQ%room-2@%LMQ%room-2":7,\n\t\t"%LMQ%room-1@%LMQ%room-1":2\n\t},\n'
    '\t"offsetTable":{\n\t\t"TopicLmqParent@GidParent":{0:1,1:2\n\t\t}\n\t}\n}'
)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _set(root: Path, *args: str):
    return runner.invoke(app, ["offsets", "set", str(root), *args])


@pytest.fixture
def lmq_store(tmp_path: Path) -> Path:
    return copy_real_store(CASE, tmp_path)


def test_the_broker_file_is_lmq_consumer_offset(lmq_store):
    with open_store(lmq_store) as st:
        assert offsets_file(st) == "lmqConsumerOffset.json"


def test_dry_run_writes_nothing(lmq_store):
    before = _tree(lmq_store)
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "5", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "lmqConsumerOffset.json" in r.stdout
    assert _tree(lmq_store) == before


def test_new_file_in_the_engine_form(lmq_store):
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "5")
    assert r.exit_code == 0, r.output
    r = _set(lmq_store, "--group", "GidParent", "--topic", "TopicLmqParent", "--to-latest")
    assert r.exit_code == 0, r.output
    assert not (lmq_store / "config" / "consumerOffset.json").exists()
    text = (lmq_store / "config" / "lmqConsumerOffset.json").read_text()
    stamp = re.search(r'"timestamp":(\d+)', text)
    assert stamp is not None
    assert text == (
        '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":' + stamp.group(1) + "\n\t},\n"
        '\t"groupTopicMap":{\n\t\t"GidParent":["TopicLmqParent"]\n\t},\n'
        '\t"lmqOffsetTable":{\n\t\t"%LMQ%room-1@%LMQ%room-1":5\n\t},\n'
        '\t"offsetTable":{\n\t\t"TopicLmqParent@GidParent":{0:30,1:30\n\t\t}\n\t}\n}'
    )


def test_existing_file_changes_one_value_byte_exact(lmq_store):
    cfg = lmq_store / "config"
    cfg.mkdir()
    (cfg / "lmqConsumerOffset.json").write_text(EXISTING)
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "11")
    assert r.exit_code == 0, r.output
    assert (cfg / "lmqConsumerOffset.json").read_text() == EXISTING.replace(
        'room-1@%LMQ%room-1":2', 'room-1@%LMQ%room-1":11'
    )
    assert (cfg / "lmqConsumerOffset.json.bak").read_text() == EXISTING
    assert cfgmod.dumps(cfgmod.loads(EXISTING)) == EXISTING  # the form round-trips


def test_show_reads_lmq_offset_table(lmq_store):
    cfg = lmq_store / "config"
    cfg.mkdir()
    (cfg / "lmqConsumerOffset.json").write_text(EXISTING)
    r = runner.invoke(app, ["offsets", str(lmq_store), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = {(x["group"], x["topic"], x["queueId"]): x for x in json.loads(r.stdout)["offsets"]}
    room1 = rows[(ROOM1, ROOM1, 0)]
    assert (room1["consumerOffset"], room1["maxOffset"], room1["lag"]) == (2, 40, 38)
    room2 = rows[("%LMQ%room-2", "%LMQ%room-2", 0)]
    assert (room2["consumerOffset"], room2["maxOffset"]) == (7, 20)
    assert rows[("GidParent", "TopicLmqParent", 1)]["consumerOffset"] == 2
    with open_store(lmq_store) as st:
        _, table = read_consumer_offsets(st)
    assert table[(ROOM1, ROOM1)] == {0: 2}


def test_lmq_group_has_one_offset_at_queue_zero(lmq_store):
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "1", "--offset", "0", "--force")
    assert r.exit_code == 1
    assert "queue 0" in r.stderr
    assert not (lmq_store / "config").exists()


def test_range_check_on_lmq_queue(lmq_store):
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "41")
    assert r.exit_code == 8
    assert not (lmq_store / "config").exists()


def test_without_enable_lmq_offsets_stay_in_consumer_offset(lmq_store):
    conf = lmq_store.parent / "broker.conf"
    conf.write_text(conf.read_text().replace("enableLmq=true", "enableLmq=false"))
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "3")
    assert r.exit_code == 0, r.output
    assert not (lmq_store / "config" / "lmqConsumerOffset.json").exists()
    data = cfgmod.loads((lmq_store / "config" / "consumerOffset.json").read_bytes())
    assert data["offsetTable"] == {f"{ROOM1}@{ROOM1}": {0: 3}}


def test_killed_write_leaves_old_or_new(lmq_store, monkeypatch):
    """A failure while the new text is written (5.1+: .bak copy, then the main file) keeps a whole file."""
    cfg = lmq_store / "config"
    cfg.mkdir()
    (cfg / "lmqConsumerOffset.json").write_text(EXISTING)
    real = cfgmod.atomic_write
    calls = []

    def failing(path, data, **kw):
        calls.append(Path(path).name)
        if Path(path).name == "lmqConsumerOffset.json":
            raise OSError(5, "Input/output error")
        return real(path, data, **kw)

    monkeypatch.setattr(cfgmod, "atomic_write", failing)
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "11")
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "lmqConsumerOffset.json" in calls
    assert (cfg / "lmqConsumerOffset.json").read_text() == EXISTING
    monkeypatch.setattr(cfgmod, "atomic_write", real)
    r = _set(lmq_store, "--group", ROOM1, "--topic", ROOM1, "--queue", "0", "--offset", "11")
    assert r.exit_code == 0, r.output
    assert '"%LMQ%room-1@%LMQ%room-1":11' in (cfg / "lmqConsumerOffset.json").read_text()
