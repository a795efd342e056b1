"""Broker version detection (``--broker-version auto``): one test per rule, the real stores of the 4.4.0,
4.9.4 and 5.2.0 engines, an explicit version winning, and an ambiguous store making recover refuse."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from conftest import ALL_REAL_CASES, case_dir, copy_real_store, small_record
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.checkpoint import FILE_SIZE
from rmqstore.rules import families_for, family_of
from rmqstore.store import open_store, resolve_config
from rmqstore.store.detect import detect

runner = CliRunner()
FIVE = ("5.0-5.3.1", "5.3.2+")


def bare_store(tmp_path: Path) -> Path:
    """A store with no evidence at all: empty commit log and consume queue folders, a zero checkpoint."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    (root / "consumequeue").mkdir()
    (root / "checkpoint").write_bytes(bytes(FILE_SIZE))
    return root


def facts_of(root: Path) -> set[str]:
    return {f.name for f in resolve_config(root, None, None).detection.facts}


def with_commitlog_of(root: Path, case: str) -> None:
    src = case_dir(case) / "store" / "commitlog"
    if not src.is_dir():
        pytest.skip(f"real stores not found at {src}")
    first = sorted(src.iterdir())[0]
    shutil.copy2(first, root / "commitlog" / first.name)


def test_a_store_with_no_evidence_could_be_any_family(tmp_path):
    root = bare_store(tmp_path)
    det = resolve_config(root, None, None).detection
    assert det.facts == () and det.candidates == ("4.4", "4.9", *FIVE) and not det.settled
    assert det.broker == "4.4.0"  # the oldest is followed for reading


def _abort_pid(root: Path) -> None:
    (root / "abort").write_text("27736")


def _abort_bak(root: Path) -> None:
    (root / "abort.bak").write_bytes(b"")


def _checkpoint_5x(root: Path) -> None:
    data = bytearray(FILE_SIZE)
    struct.pack_into(">q", data, 32, 105190)  # confirmPhyOffset
    (root / "checkpoint").write_bytes(bytes(data))


def _dir(name: str):
    return lambda root: (root / name).mkdir(parents=True)


def _file(name: str, text: str = "{}"):
    def make(root: Path) -> None:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)

    return make


def _topic_attributes(root: Path) -> None:
    table = {"topicConfigTable": {"T": {"topicName": "T", "attributes": {"queue.type": "BatchCQ"}}}}
    _file("config/topics.json", json.dumps(table))(root)


def _conf(key: str):
    return lambda root: (root.parent / "broker.conf").write_text(f"storePathRootDir=store\n{key}=32768\n")


STORE_RULES = [
    ("abort-pid", _abort_pid, FIVE),
    ("abort-bak", _abort_bak, FIVE),
    ("checkpoint-5x", _checkpoint_5x, FIVE),
    ("batchconsumequeue", _dir("batchconsumequeue/T/0"), FIVE),
    ("timer-store", _dir("timerlog"), FIVE),
    ("compaction", _dir("compaction"), FIVE),
    ("config-5x", _file("config/topicQueueMapping.json"), FIVE),
    ("topic-attributes", _topic_attributes, FIVE),
    ("lmq-queue", _dir("consumequeue/%LMQ%room-1/0"), ("4.9", *FIVE)),
    ("lmq-offsets", _file("config/lmqConsumerOffset.json"), ("4.9", *FIVE)),
    ("conf-mapped-keys", _conf("mappedFileSizeCommitLog"), ("4.9", *FIVE)),
    ("conf-maped-keys", _conf("mapedFileSizeCommitLog"), ("4.4",)),
]


@pytest.mark.parametrize(("fact", "make", "families"), STORE_RULES, ids=[r[0] for r in STORE_RULES])
def test_store_detection_rule(tmp_path, fact, make, families):
    root = bare_store(tmp_path)
    make(root)
    det = resolve_config(root, None, None).detection
    assert {f.name for f in det.facts} == {fact}
    assert det.candidates == families
    assert det.family == families[0]


# (case whose first commit log file shows it, fact, families that fact alone admits)
RECORD_RULES = [
    ("5.2.0/long-topic-v2", "v2-record", FIVE),
    ("5.2.0/crc-property", "crc32-property", FIVE),
    ("4.9.4/clean-2topics", "props-no-trailing-separator", ("4.9",)),
    ("clean-2topics", "props-trailing-separator", ("4.4", *FIVE)),
    ("clean-2topics", "blank-stale-tail", ("4.4",)),
    ("4.9.4/clean-2topics", "blank-zero-tail", ("4.9", *FIVE)),
]


@pytest.mark.parametrize(("case", "fact", "families"), RECORD_RULES, ids=[r[1] for r in RECORD_RULES])
def test_commitlog_detection_rule(tmp_path, case, fact, families):
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    root = bare_store(tmp_path)
    with_commitlog_of(root, case)
    assert fact in facts_of(root)
    assert families_for([fact])[0] == families


def test_ipv6_host_rule(tmp_path):
    root = bare_store(tmp_path)
    rec = small_record(sys_flag=0x30, born_addr=bytes(16), store_addr=bytes(15) + b"\x01", store_port=10911, body=b"x")
    (root / "commitlog" / f"{0:020d}").write_bytes(rec + bytes(4096))
    assert facts_of(root) == {"ipv6-host"}
    assert "4.4" in families_for(["ipv6-host"])[0]  # 4.6.0 and later: the 4.4 family's tail still admits it


@pytest.mark.parametrize("case", ALL_REAL_CASES)
def test_real_stores_are_detected(case):
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    det = resolve_config(case_dir(case) / "store", None, None).detection
    want = {"4.9.4": "4.9", "5.2.0": "5.0-5.3.1"}.get(case.split("/")[0], "4.4")
    assert det.family == want and not det.conflict
    assert det.broker == {"4.9": "4.9.4", "5.0-5.3.1": "5.2.0", "4.4": "4.4.0"}[want]
    if want == "5.0-5.3.1":
        assert det.candidates == FIVE  # nothing in a 5.2.0 store tells it from 5.3.2+
    else:
        assert det.settled


def test_info_shows_family_and_evidence():
    case = "5.2.0/long-topic-v2"
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    result = runner.invoke(app, ["info", str(case_dir(case) / "store"), "-f", "json"])
    doc = json.loads(result.stdout)
    assert doc["brokerFamily"] == "5.0-5.3.1" and doc["brokerVersion"] == "5.2.0"
    assert "v2-record" in {e["fact"] for e in doc["version"]["evidence"]}
    plain = runner.invoke(app, ["info", str(case_dir(case) / "store"), "-f", "plain"]).stdout
    assert "5.0-5.3.1 (rules of 5.2.0, detected; could also be 5.3.2+)" in plain


def test_explicit_version_wins_and_is_validated(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    with open_store(root, broker="5.3.3") as st:
        assert st.config.broker == "5.3.3" and st.config.detection.explicit
    result = runner.invoke(app, ["info", str(root), "--broker-version", "9.1"])
    assert result.exit_code == 2 and "unknown broker version" in result.stderr
    assert family_of("4.9.4") == "4.9" and family_of("5.3.2") == "5.3.2+" and family_of("4.5.1") == "4.4"


def test_conflicting_evidence_is_reported(tmp_path):
    root = bare_store(tmp_path)
    with_commitlog_of(root, "4.9.4/clean-2topics")  # 4.9 only
    _abort_bak(root)  # 5.x only
    det = detect(resolve_config(root, None, None))
    assert det.conflict and not det.settled


def test_ambiguous_store_makes_recover_refuse(tmp_path):
    """A 5.x store whose consume queues are behind after a clean shutdown: 5.0-5.3.1 leave the tail
    undispatched, 5.3.2+ dispatch it; nothing in the store says which, so recover refuses."""
    root = copy_real_store("5.2.0/crash-5x-midwrite", tmp_path)
    (root / "abort").unlink()  # a normal start: the two families' rules now differ
    before = sorted((p, p.stat().st_size) for p in root.rglob("*"))
    result = runner.invoke(app, ["recover", str(root)])
    assert result.exit_code == 8, result.output
    assert "5.0-5.3.1, 5.3.2+" in result.stderr and "normal_dispatch_beyond_cq" in result.stderr
    assert sorted((p, p.stat().st_size) for p in root.rglob("*")) == before
    # saying which settles it
    ok = runner.invoke(app, ["recover", str(root), "--dry-run", "--broker-version", "5.3.3", "-f", "json"])
    plan = json.loads(ok.stdout)["plan"]
    assert ok.exit_code == 0 and plan["redispatch"]["records"] > 0
    # 5.3.2+: normal recovery starts at the last file starting at or before the consume queues' max offset
    cq_max = plan["maxPhyOffsetOfConsumeQueue"]
    files = sorted(int(p.name) for p in (root / "commitlog").iterdir())
    assert (
        plan["startPhyOffset"] == max(b for b in files if b <= cq_max)
        and plan["redispatch"]["onlyAfterPhyOffset"] == cq_max
    )
    old = json.loads(
        runner.invoke(app, ["recover", str(root), "-n", "--broker-version", "5.2.0", "-f", "json"]).stdout
    )["plan"]
    assert old["startPhyOffset"] == files[-3] and old["redispatch"] is None  # 5.0-5.3.1: the third file from the end


def test_unambiguous_crash_recovers_without_a_version():
    case = "5.2.0/crash-5x-midwrite"
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    result = runner.invoke(app, ["recover", str(case_dir(case) / "store"), "--dry-run", "-f", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["summary"]["path"] == "abnormal"


def test_info_lists_timer_and_compaction_files(tmp_path):
    root = copy_real_store("5.2.0/batch-cq", tmp_path)
    (root / "timerlog").mkdir()
    (root / "timerlog" / f"{0:020d}").write_bytes(bytes(64))
    doc = json.loads(runner.invoke(app, ["info", str(root), "-f", "json"]).stdout)
    assert {(e["path"], e["size"]) for e in doc["extraParts"]} == {
        ("compaction/position-checkpoint", 39),
        (f"timerlog/{0:020d}", 64),
    }
    plain = runner.invoke(app, ["info", str(root), "-f", "plain"]).stdout
    assert "compaction/position-checkpoint (39 B)" in plain


def test_write_refuses_a_store_between_families_whose_write_rules_differ(tmp_path):
    """Property strings ending with 0x02 and nothing else: 4.4 or 5.x, which store records differently."""
    root = copy_real_store("clean-2topics", tmp_path)
    (root.parent / "broker.conf").write_text("storePathRootDir=store\n")  # no version-specific keys
    for p in sorted((root / "commitlog").iterdir())[:-1]:  # the files ending with a blank (stale tails) expired
        p.unlink()
    det = resolve_config(root, None, None).detection
    assert det.candidates == ("4.4", *FIVE)
    before = sorted((p, p.stat().st_size) for p in root.rglob("*"))
    result = runner.invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x"])
    assert result.exit_code == 8 and "4.4, 5.0-5.3.1, 5.3.2+" in result.stderr
    assert "props_trailing_separator" not in result.stderr and "v2_magic" in result.stderr
    assert sorted((p, p.stat().st_size) for p in root.rglob("*")) == before
    ok = runner.invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x", "--broker-version", "4.4.0"])
    assert ok.exit_code == 0, ok.output


def test_a_store_with_nothing_written_follows_the_oldest_family_for_write(tmp_path):
    root = tmp_path / "store"
    result = runner.invoke(app, ["write", str(root), "--create", "--topic", "T", "--body", "x"])
    assert result.exit_code == 0, result.output
    assert resolve_config(root, None, None).detection.family == "4.4"
