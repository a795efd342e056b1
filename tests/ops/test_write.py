"""`rmqstore write`: byte-for-byte against the real 4.4.0 stores, read-back, append rules, atomicity, CLI."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, REAL_STORES, REPO, case_dir, load_rebuild, load_spec, load_truth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    Blank,
    Record,
    decode_record,
    parse_properties,
)
from rmqstore.codec.consumequeue import entries_array, valid_prefix
from rmqstore.codec.indexfile import IndexFile
from rmqstore.codec.messages import BATCH_FIELDS
from rmqstore.errors import InputError, UnsafePlan
from rmqstore.ops import write as wr
from rmqstore.ops.write.append_point import find_append_point
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

SMALL_CONF = textwrap.dedent(
    """\
    storePathRootDir=store
    storePathCommitLog=store/commitlog
    mapedFileSizeCommitLog={cl}
    mapedFileSizeConsumeQueue=400
    maxHashSlotNum=128
    maxIndexNum=512
    """
)


# ------------------------------------------------------------------------------------------ helpers


def _new_store(tmp: Path, *, cl: int = 32768, extra: str = "") -> Path:
    (tmp / "broker.conf").write_text(SMALL_CONF.format(cl=cl) + extra)
    (tmp / "store" / "commitlog").mkdir(parents=True)  # an empty store, as a broker creates it
    return tmp / "store"


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _records(root: Path) -> list[Record]:
    with open_store(root) as st:
        return [r for _, r in iter_commitlog(st, check_crc=True) if isinstance(r, Record)]


def _commitlog_with_zeroed_blanks(root: Path) -> dict[str, bytes]:
    """Commit log files with every byte after a BLANK header zeroed: 4.4.0 fills that tail with stale
    buffer contents, which the format leaves unspecified (§3.4) and a writer sets to zeros."""
    files = {p.name: bytearray(p.read_bytes()) for p in sorted((root / "commitlog").iterdir())}
    with open_store(root) as st:
        for seg, rec in iter_commitlog(st):
            if isinstance(rec, Blank):
                buf = files[seg.path.name]
                buf[rec.pos + 8 :] = bytes(len(buf) - rec.pos - 8)
    return {k: bytes(v) for k, v in files.items()}


def _cq_files(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def _index_files(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def _spec_batches(case: str) -> list[list[wr.Message]]:
    """spec.json's messages as the harness handed them to the engine, with the store timestamps the
    engine gave (truth.json) and its references (ids) resolved; split where dispatch was paused."""
    spec, truth = load_spec(case), load_truth(case)
    puts = spec["engineResult"]["puts"]
    stamps = [r["storeTimestamp"] for r in truth["commitlog"] if r["kind"] == "message"]
    plain = [m for m in spec["write"]["messages"] if "pauseDispatch" not in m]
    by_id = {m["id"]: p for m, p in zip(plain, puts, strict=False) if "id" in m}
    batches: list[list[wr.Message]] = [[]]
    i = 0
    for m in spec["write"]["messages"]:
        if m.get("pauseDispatch"):
            batches.append([])
            continue
        if i >= len(puts):  # written by the harness but never stored (the process died)
            continue
        m = dict(m)
        m.pop("id", None)
        if "preparedTransactionOffsetFromId" in m:
            m["preparedTransactionOffset"] = by_id[m.pop("preparedTransactionOffsetFromId")]["wroteOffset"]
        if "bodyFromQueueOffsetOfId" in m:
            m["body"] = str(by_id[m.pop("bodyFromQueueOffsetOfId")]["queueOffset"])
        for name, ref in m.pop("propertyRefs", {}).items():
            m.setdefault("properties", {})[name] = by_id[ref["id"]][ref["field"]]
        m["storeTimestamp"] = stamps[i]
        batches[-1].append(wr.message_from_json(m, origin=f"{case}#{i}"))
        i += 1
    return batches


def _reputs(root: Path, stamps: list[int]) -> list[wr.Message]:
    """What ScheduleMessageService writes when a delay level comes due: the scheduled record's
    body, flags, hosts and times, and its stored properties unchanged (DELAY, REAL_TOPIC and
    REAL_QID included), into REAL_TOPIC / REAL_QID."""
    due = [r for r in _records(root) if r.topic == "SCHEDULE_TOPIC_XXXX" and r.properties.get("DELAY") == "1"]
    out = []
    for rec, ts in zip(due, stamps, strict=True):
        p = rec.properties
        fields = {"topic": p["REAL_TOPIC"], "queue_id": int(p["REAL_QID"]), "store_timestamp_ms": ts}
        out.append(_message_of(rec, properties=tuple(p.items()), origin="reput", **fields))
    return out


def _message_of(rec: Record, **fields) -> wr.Message:
    """A raw message (properties as given) with the fields of ``rec``; ``fields`` override them."""
    copied = ("topic", "queue_id", "body", "flag", "sys_flag", "born_timestamp_ms", "born_host", "store_host")
    base = {name: getattr(rec, name) for name in (*copied, "store_timestamp_ms", "reconsume_times")}
    return wr.Message(**{**base, "raw": True, **fields})


def _write_real_case(case: str, tmp: Path, *, pause_dispatch: bool = True) -> Path:
    """Write a real case's messages into a fresh store made with the case's broker.conf (a fresh store
    holds nothing to tell its version from: the engine's version is given)."""
    shutil.copy(case_dir(case) / "broker.conf", tmp / "broker.conf")
    broker = case.split("/")[0] if "/" in case else None
    root = tmp / "store"
    root.mkdir()
    batches = _spec_batches(case)
    if not pause_dispatch:
        batches = [[m for b in batches for m in b]]
    first_ts = batches[0][0].store_timestamp_ms
    for n, batch in enumerate(batches):
        wr.write_messages(
            root,
            batch,
            broker_config=tmp / "broker.conf",
            broker=broker,
            allow_system_topic=True,
            dispatch=n == 0,  # crash-midwrite: dispatch was stopped after the first 400
            clock=lambda: first_ts,
            create=n == 0,
        )
    truth = load_truth(case)
    stamps = [r["storeTimestamp"] for r in truth["commitlog"] if r["kind"] == "message"]
    written = sum(len(b) for b in batches)
    if written < len(stamps):  # delay-tx-retry: the level-1 messages came due while the engine ran
        wr.write_messages(
            root,
            _reputs(root, stamps[written:]),
            broker_config=tmp / "broker.conf",
            broker=broker,
            allow_system_topic=True,
            clock=lambda: first_ts,
        )
    return root


# ------------------------------------------------------------------------------- HashMap order

_CLIENT_FIRST = ("TAGS", "KEYS", "WAIT", "UNIQ_KEY", "DELAY")
_BROKER_ADDED = ("REAL_TOPIC", "REAL_QID")


def _insertion_order(rec: Record) -> list[str]:
    """Keys in the order the documented rule puts them: producer keys first, then user properties,
    then the broker's delay additions (scheduled records and their re-puts)."""
    keys = [k for k in rec.properties_raw.split("\x02") if k]
    names = [k.split("\x01")[0] for k in keys]
    broker = set(_BROKER_ADDED) if "DELAY" in names else set()
    first = [k for k in _CLIENT_FIRST if k in names]
    user = [k for k in names if k not in first and k not in broker]
    return first + user + [k for k in _BROKER_ADDED if k in broker]


def test_hashmap_order_reproduces_every_real_record(real_case: str) -> None:
    recs = _records(REAL_STORES / real_case / "store")
    assert recs
    tie_sensitive = 0
    for rec in recs:
        stored = [k.split("\x01")[0] for k in rec.properties_raw.split("\x02") if k]
        ins = _insertion_order(rec)
        assert wr.java_hashmap_order(ins) == stored, (rec.phy_offset, ins)
        if wr.java_hashmap_order(list(reversed(ins))) != stored:
            tie_sensitive += 1
    # keys sharing a bucket (UNIQ_KEY/region, WAIT/DELAY, WAIT/PGROUP) make insertion order matter
    assert tie_sensitive > 0


_JAVA = textwrap.dedent(
    """\
    import java.util.*;
    public class HM {
      public static void main(String[] a) throws Exception {
        Scanner in = new Scanner(System.in);
        while (in.hasNextLine()) {
          String[] p = in.nextLine().split("\\\\|", -1);
          int cap = Integer.parseInt(p[0]);
          Map<String, String> m = cap == 0 ? new HashMap<>() : new HashMap<>(cap);
          for (String k : p[1].split(",")) m.put(k, "v");
          System.out.println(String.join(",", m.keySet()));
        }
      }
    }
    """
)


@pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="no JDK")
def test_hashmap_order_matches_a_jvm(tmp_path: Path) -> None:
    (tmp_path / "HM.java").write_text(_JAVA)
    subprocess.run(["javac", "HM.java"], cwd=tmp_path, check=True)
    rng = random.Random(7)
    pool = ["TAGS", "KEYS", "WAIT", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID", "CLUSTER", "PGROUP", "TRAN_MSG"]
    pool += ["region", "traceId", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "MAX_RECONSUME_TIMES", "a😀b", "中文"]
    pool += [f"k{i}" for i in range(60)]
    cases = []
    for _ in range(300):
        keys = rng.sample(pool, rng.randrange(1, 70))
        cases.append((rng.choice([0, 0, 16, 128]), keys))
    stdin = "".join(f"{cap}|{','.join(keys)}\n" for cap, keys in cases)
    out = subprocess.run(["java", "-cp", str(tmp_path), "HM"], input=stdin, capture_output=True, text=True, check=True)
    for (cap, keys), line in zip(cases, out.stdout.splitlines(), strict=True):
        assert wr.java_hashmap_order(keys, initial_capacity=cap or 16) == line.split(","), (cap, keys)


# --------------------------------------------------------------------------- real stores, byte for byte


def test_reproduces_real_store_byte_for_byte(real_case: str, tmp_path: Path) -> None:
    """Commit log identical (BLANK tails aside), consume queue files identical, index files identical
    in creation order. crash-midwrite: the first 400 dispatched, the last 30 not, as the engine left it;
    its extra preallocated all-zero file is not created by a writer."""
    root = _write_real_case(real_case, tmp_path)
    real = case_dir(real_case) / "store"
    mine_cl, real_cl = _commitlog_with_zeroed_blanks(root), _commitlog_with_zeroed_blanks(real)
    for name, data in real_cl.items():
        if name not in mine_cl:
            assert not any(data), f"{name} holds data but was not written"
            continue
        assert mine_cl[name] == data, name
    assert set(mine_cl) <= set(real_cl)
    assert _cq_files(root) == _cq_files(real)
    assert _index_files(root) == _index_files(real)
    with open_store(root) as st:
        end = find_append_point(st).end_phy
    assert end == load_truth(real_case)["maxPhyOffset"]


def test_crash_midwrite_dispatched_at_once_matches_engine_rebuild(tmp_path: Path) -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    root = _write_real_case("crash-midwrite", tmp_path, pause_dispatch=False)
    rebuild = load_rebuild("crash-midwrite")
    assert rebuild["redispatchExpectation"] == "engine-rebuild"
    want = {f["path"]: f["sha256"] for f in rebuild["consumeQueueFiles"]}
    got = {f"consumequeue/{k}": hashlib.sha256(v).hexdigest() for k, v in _cq_files(root).items()}
    assert got == want
    assert [hashlib.sha256(b).hexdigest() for b in _index_files(root)] == [f["sha256"] for f in rebuild["indexFiles"]]


def test_catch_up_dispatches_records_the_consume_queues_miss(tmp_path: Path) -> None:
    """After 400 dispatched + 30 appended undispatched, the next write dispatches the 30 first:
    every queue then serves what the engine serves after recovery (truth.json), plus the new one."""
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    root = _write_real_case("crash-midwrite", tmp_path)
    assert (root / "abort").exists()  # left by the --no-dispatch batch
    res = wr.write_messages(
        root,
        [wr.Message(topic="TopicA", queue_id=1, body=b"after the crash", store_timestamp_ms=1795316030000)],
        broker_config=tmp_path / "broker.conf",
    )
    assert res.summary()["catchUpRecords"] == 30
    truth = load_truth("crash-midwrite")
    new = res.plan.records.record(0)
    assert new.phy_offset == truth["maxPhyOffset"]
    for q in truth["queues"]:
        with open_store(root) as st:
            segs, _ = st.consume_queues.queue(q["topic"], q["queueId"]).files()
        entries = []
        for seg in segs:
            arr = entries_array(seg.path.read_bytes())
            entries += [(int(e["phy_offset"]), int(e["size"]), int(e["tags_code"])) for e in arr[: valid_prefix(arr)]]
        want = [(e["commitLogOffset"], e["size"], e["tagsCode"]) for e in q["entries"]]
        if (q["topic"], q["queueId"]) == ("TopicA", 1):
            assert new.queue_offset == q["maxOffset"]
            want.append((new.phy_offset, new.size, 0))  # no TAGS: tagsCode 0
        assert entries == want, (q["topic"], q["queueId"])


# ---------------------------------------------------------------------------------- read back


def _mixed_messages() -> list[wr.Message]:
    return [
        wr.Message(
            topic="Orders", queue_id=2, body=b"hello", tags="TagA", keys="k1 k2", properties=(("color", "red"),)
        ),
        wr.Message(topic="Orders", body=bytes(range(256)), keys="bin", flag=7, born_timestamp_ms=1700000000000),
        wr.Message(topic="Orders", body="ünïcode 中文".encode(), properties=(("名前", "値😀"),), uniq_key="0A0B0C0D"),
        wr.Message(topic="Orders", queue_id=0, body=b"later", delay_level=3, tags="D"),
        wr.Message(topic="Orders", queue_id=1, body=b"too late", delay_level=99),
        wr.Message(topic="Pay", queue_id=0, body=b"p", sys_flag=4, keys="prep"),
        wr.Message(topic="Pay", queue_id=0, body=b"c", sys_flag=8, prepared_transaction_offset=5, keys="com"),
        wr.Message(topic="Pay", queue_id=0, body=b"r", sys_flag=12, keys="rb"),
        wr.Message(topic="Pay", queue_id=0, body=b"", born_host="10.1.2.3:4567", store_host="10.9.9.9:10911"),
        wr.Message(topic="%RETRY%G1", queue_id=0, body=b"retry", reconsume_times=3, wait=False),
    ]


def test_written_records_read_back(tmp_path: Path) -> None:
    root = _new_store(tmp_path)
    msgs = _mixed_messages()
    res = wr.write_messages(root, msgs, clock=lambda: 1795000000000, topic_queue_nums=4)
    recs = _records(root)
    assert len(recs) == len(msgs)
    planned = list(res.plan.records)
    delivery: dict[int, int] = {}
    levels = [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000, 540000]
    levels += [600000, 1200000, 1800000, 3600000, 7200000]
    for m, rec, pr in zip(msgs, recs, planned, strict=True):
        props = rec.properties
        assert rec.body == m.body and rec.flag == m.flag and rec.crc_ok()
        assert rec.reconsume_times == m.reconsume_times
        assert rec.prepared_transaction_offset == m.prepared_transaction_offset
        assert rec.born_timestamp_ms == (m.born_timestamp_ms or rec.store_timestamp_ms)
        assert rec.store_timestamp_ms >= 1795000000000
        assert rec.born_host == (m.born_host or "127.0.0.1:0")
        assert rec.msg_id == pr.msg_id and rec.phy_offset == pr.phy_offset
        assert rec.queue_offset == pr.queue_offset and rec.total_size == pr.size
        assert props.get("TAGS") == m.tags and rec.keys == m.keys
        assert props["WAIT"] == ("true" if m.wait else "false")
        assert props["UNIQ_KEY"] == (m.uniq_key or pr.uniq_key) and len(props["UNIQ_KEY"]) >= 8
        for k, v in m.properties:
            assert props[k] == v
        if m.delay_level:
            level = min(m.delay_level, 18)
            assert (rec.topic, rec.queue_id) == ("SCHEDULE_TOPIC_XXXX", level - 1)
            assert (props["REAL_TOPIC"], props["REAL_QID"], props["DELAY"]) == (m.topic, str(m.queue_id), str(level))
            delivery[rec.phy_offset] = rec.store_timestamp_ms + levels[level - 1]
        else:
            assert rec.topic == m.topic and "REAL_TOPIC" not in props
    assert [r.queue_offset for r in recs if r.topic == "Pay"] == [0, 0, 0, 1]  # prepared/rollback: offset 0
    # generated UNIQ_KEYs use the born host address and the client layout (32 hex digits)
    gen = recs[8].uniq_key
    assert gen is not None and gen.startswith("0A010203") and len(gen) == 32
    # consume queues hold NOT/COMMIT records only; the index finds every key but ROLLBACK's
    with open_store(root) as st:
        cq = {}
        for queue in st.consume_queues.queues():
            topic, qid = queue.topic, queue.queue_id
            segs, _ = queue.files()
            arr = entries_array(segs[0].path.read_bytes())
            cq[(topic, qid)] = [int(e["phy_offset"]) for e in arr[: valid_prefix(arr)]]
            for e in arr[: valid_prefix(arr)]:
                if int(e["phy_offset"]) in delivery:  # SCHEDULE_TOPIC_XXXX: tagsCode = delivery time
                    assert int(e["tags_code"]) == delivery.pop(int(e["phy_offset"]))
        files, _ = st.index_files()
        idx = IndexFile(files[0].read_bytes(), slots=128, entries=512)
    assert delivery == {}
    for rec in recs:
        in_cq = rec.phy_offset in cq.get((rec.topic, rec.queue_id), [])
        assert in_cq == (rec.sys_flag & 0xC in (0, 8))
        hits = idx.select_phy_offsets(f"{rec.topic}#{rec.uniq_key}", max_num=64, begin_ms=0, end_ms=2**62)
        assert (rec.phy_offset in hits) == (rec.sys_flag & 0xC != 12)


@pytest.mark.parametrize("broker", ["4.9.7", "5.3.3"])
def test_broker_edits_by_version(tmp_path: Path, broker: str) -> None:
    root = _new_store(tmp_path)
    long_topic = "T" * 200
    msgs = [
        wr.Message(
            topic="V6", queue_id=0, body=b"x", born_host="[2001:db8::1]:40000", store_host="[2001:db8::2]:10911"
        ),
        wr.Message(topic="Plain", queue_id=0, body=b"y", tags="a", delay_level=2),
    ]
    if broker.startswith("5"):
        msgs.append(wr.Message(topic=long_topic, queue_id=0, body=b"z"))
    wr.write_messages(root, msgs, broker=broker, clock=lambda: 1795000000000, max_topic_length=255)
    recs = _records(root)
    v6 = recs[0]
    assert v6.sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) == 0x30
    assert v6.born_host == "[2001:db8::1]:40000" and len(v6.msg_id) == 56
    for rec in recs:
        props = rec.properties
        assert props["CLUSTER"] == "DefaultCluster"  # 4.6.0+
        assert ("WAIT" in props) == (broker.startswith("5") or rec.topic == "SCHEDULE_TOPIC_XXXX")
    if broker.startswith("5"):
        assert recs[2].magic == MAGIC_V2 and recs[2].topic == long_topic
    with pytest.raises(InputError, match="only 5.1.0"):
        wr.write_messages(root, [wr.Message(topic=long_topic, queue_id=0)], broker="4.9.7", max_topic_length=255)


def test_info_reads_written_store() -> None:
    if CliRunner().invoke(app, ["info", "--help"]).exit_code != 0:
        pytest.skip("`rmqstore info` is not available yet")
    store = FIXTURES / "small" / "store"
    result = CliRunner().invoke(app, ["info", str(store), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    truth = json.loads((FIXTURES / "small" / "truth.json").read_text())
    assert str(truth["maxPhyOffset"]) in result.stdout


# ------------------------------------------------------------------------------ append rules


def test_blank_rule_len_plus_8(tmp_path: Path) -> None:
    """A record is appended only if len + 8 <= remaining (§3.4); else BLANK + next full-size file."""
    fs = 4096
    root = _new_store(tmp_path, cl=fs)
    first = wr.Message(topic="T", queue_id=0, body=b"a" * 1000, uniq_key="U", store_timestamp_ms=1)
    wr.write_messages(root, [first])
    size1 = _records(root)[0].total_size
    overhead = size1 - 1000
    remaining = fs - size1
    fits = wr.Message(topic="T", queue_id=0, body=b"b" * (remaining - 8 - overhead), uniq_key="U", store_timestamp_ms=2)
    res = wr.write_messages(root, [fits])
    assert res.plan.blanks == () and res.plan.end_phy == fs - 8
    nope = wr.Message(topic="T", queue_id=0, body=b"", uniq_key="U", store_timestamp_ms=3)
    res = wr.write_messages(root, [nope])
    assert res.plan.blanks == ((fs - 8, 8),)
    assert res.plan.records.record(0).phy_offset == fs
    nxt = root / "commitlog" / "00000000000000004096"
    assert nxt.stat().st_size == fs
    with open(root / "commitlog" / "00000000000000000000", "rb") as f:
        f.seek(fs - 8)
        assert f.read() == bytes.fromhex("00000008CBD43194")
    # one byte more than fits: blank of remaining bytes
    (tmp_path / "b").mkdir()
    root2 = _new_store(tmp_path / "b", cl=fs)
    wr.write_messages(root2, [first])
    big = wr.Message(topic="T", queue_id=0, body=b"b" * (remaining - 7 - overhead), uniq_key="U", store_timestamp_ms=2)
    res = wr.write_messages(root2, [big])
    assert res.plan.blanks == ((size1, remaining),) and res.plan.start_phy == size1
    with pytest.raises(InputError, match="cannot fit"):
        wr.write_messages(root2, [wr.Message(topic="T", queue_id=0, body=b"c" * fs)])


def test_queue_offsets_round_robin_and_topics_json(tmp_path: Path) -> None:
    root = _new_store(tmp_path)
    for i in range(6):
        wr.write_messages(root, [wr.Message(topic="Auto", body=str(i).encode())])
    wr.write_messages(root, [wr.Message(topic="%RETRY%G", queue_id=0, body=b"r")], allow_system_topic=False)
    wr.write_messages(root, [wr.Message(topic="%DLQ%G", queue_id=0, body=b"d")])
    wr.write_messages(
        root, [wr.Message(topic="Auto", queue_id=1, body=b"late", delay_level=1)], clock=lambda: 1795000000000
    )
    recs = _records(root)
    auto = [(r.queue_id, r.queue_offset) for r in recs if r.topic == "Auto"]
    assert auto == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1)]
    topics = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert (topics["Auto"]["readQueueNums"], topics["Auto"]["writeQueueNums"], topics["Auto"]["perm"]) == (4, 4, 6)
    assert (topics["%RETRY%G"]["writeQueueNums"], topics["%RETRY%G"]["perm"]) == (1, 6)
    assert (topics["%DLQ%G"]["writeQueueNums"], topics["%DLQ%G"]["perm"]) == (1, 2)  # 4.x: write only
    assert "SCHEDULE_TOPIC_XXXX" not in topics  # registered by the broker itself
    assert (root / "config" / "topics.json.bak").exists()
    with pytest.raises(InputError, match="not a queue of topic 'Auto'"):
        wr.write_messages(root, [wr.Message(topic="Auto", queue_id=4)])


@pytest.mark.parametrize(
    "topic",
    ["../escape", "a/b", "x" * 128, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102", "", "é" * 64],
)
def test_illegal_topics_refused(tmp_path: Path, topic: str) -> None:
    root = _new_store(tmp_path)
    with pytest.raises(InputError):
        wr.write_messages(root, [wr.Message(topic=topic, queue_id=0, body=b"x")])
    assert os.listdir(root / "commitlog") == [] and not (root / "consumequeue").exists()


@pytest.mark.parametrize("topic", ["sp ace", "a@b", "中"])
def test_topic_characters_by_broker_version(tmp_path: Path, topic: str) -> None:
    """4.4.0's broker stores a topic in any characters; from 4.7.0 on its TopicValidator refuses them."""
    root = _new_store(tmp_path)
    with pytest.raises(InputError, match="only the characters"):
        wr.write_messages(root, [wr.Message(topic=topic, queue_id=0, body=b"x")], broker="4.9.7")
    wr.write_messages(root, [wr.Message(topic=topic, queue_id=0, body=b"x")])
    assert (root / "consumequeue" / topic / "0").is_dir()


def test_size_limits(tmp_path: Path) -> None:
    root = _new_store(tmp_path, extra="maxMessageSize=1024\n")
    with pytest.raises(InputError, match="maxMessageSize is 1024"):
        wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"x" * 1000)])  # record > 1024 on 4.4.0
    wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"x" * 1000)], broker="4.9.7")  # body limit
    with pytest.raises(InputError, match="at most 32767"):
        wr.write_messages(root, [wr.Message(topic="T", queue_id=0, properties=(("p", "v" * 40000),))], broker="4.9.7")
    with pytest.raises(InputError, match="separator"):
        wr.write_messages(root, [wr.Message(topic="T", queue_id=0, properties=(("p", "a\x01b"),))])
    with pytest.raises(InputError, match="empty value"):
        wr.write_messages(root, [wr.Message(topic="T", queue_id=0, properties=(("p", ""),))])


def _copy_fixture(name: str, tmp: Path) -> Path:
    shutil.copytree(FIXTURES / name, tmp / name)
    return tmp / name / "store"


def test_torn_tail_is_replaced(tmp_path: Path) -> None:
    root = _copy_fixture("crashed-torn-tail", tmp_path)
    truth = json.loads((root.parent / "truth.json").read_text())
    res = wr.write_messages(root, [wr.Message(topic="TopicA", queue_id=0, body=b"new")], clock=lambda: 1795000000000)
    assert res.plan.start_phy == truth["maxPhyOffset"]
    assert res.quarantine is not None and (res.quarantine / "manifest.json").exists()
    recs = _records(root)
    assert recs[-1].body == b"new" and recs[-1].phy_offset == truth["maxPhyOffset"]
    assert len(recs) == len([r for r in truth["commitlog"] if r["kind"] == "message"]) + 1
    assert res.checkpoint is None  # abort present: the checkpoint is left alone


def test_dirty_tail_quarantined_then_zeroed(tmp_path: Path) -> None:
    root = _copy_fixture("crashed-dirty-tail", tmp_path)
    spec = json.loads((root.parent / "spec.json").read_text())
    mut = spec["mutations"][0]
    path = root.parent / mut["file"]
    junk = path.read_bytes()[mut["pos"] : mut["pos"] + mut["length"]]
    qdir = tmp_path / "q"
    res = wr.write_messages(root, [wr.Message(topic="TopicB", queue_id=0, body=b"n")], quarantine=qdir)
    assert res.plan.stale is not None and res.plan.stale.length == len(junk)
    assert res.quarantine is not None and res.quarantine.parent == qdir  # a fresh folder per run
    manifest = json.loads((res.quarantine / "manifest.json").read_text())
    assert Path(manifest["items"][0]["saved"]).read_bytes() == junk
    data = path.read_bytes()
    end = res.plan.end_phy - int(path.name)
    assert not any(data[end : mut["pos"] + mut["length"]])
    assert _records(root)[-1].body == b"n"


def test_cq_behind_fixture_is_caught_up(tmp_path: Path) -> None:
    root = _copy_fixture("crashed-cq-behind", tmp_path)
    truth = json.loads((root.parent / "truth.json").read_text())
    res = wr.write_messages(root, [wr.Message(topic="TopicA", queue_id=3, body=b"n")])
    assert res.summary()["catchUpRecords"] == 25
    with open_store(root) as st:
        for q in truth["queues"]:
            segs, _ = st.consume_queues.queue(q["topic"], q["queueId"]).files()
            got = []
            for seg in segs:
                arr = entries_array(seg.path.read_bytes())
                got += [int(e["phy_offset"]) for e in arr[: valid_prefix(arr)]]
            want = [e["commitLogOffset"] for e in q["entries"]]
            if (q["topic"], q["queueId"]) == ("TopicA", 3):
                want.append(res.plan.end_phy - res.plan.records.size[0])
            assert got == want


def test_refuses_data_after_the_end(tmp_path: Path) -> None:
    root = _new_store(tmp_path, cl=4096)
    wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"x" * 3000) for _ in range(3)])
    last = sorted((root / "commitlog").iterdir())[-1]
    later = root / "commitlog" / f"{int(last.name) + 4096:020d}"
    later.write_bytes(b"\x00" * 100 + b"\x01" + b"\x00" * (4096 - 101))
    with pytest.raises(UnsafePlan, match="holds data after the end"):
        wr.write_messages(root, [wr.Message(topic="T", queue_id=0)])
    later.write_bytes(bytes(4096))  # an all-zero preallocated file is fine and gets used
    res = wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"y" * 3000)])
    assert res.plan.files_created == ()


def test_checkpoint_and_abort_policy(tmp_path: Path) -> None:
    root = _new_store(tmp_path)
    m = [wr.Message(topic="T", queue_id=0, body=b"x", store_timestamp_ms=1000 + i) for i in range(3)]
    res = wr.write_messages(root, m[:1])
    with open_store(root) as st:
        cp = st.read_checkpoint()
    assert cp is not None and (cp.physic_msg_timestamp_ms, cp.logics_msg_timestamp_ms) == (1000, 1000)
    assert res.checkpoint == cp
    res = wr.write_messages(root, m[1:2], flush="async")
    with open_store(root) as st:
        assert st.read_checkpoint() == cp and res.checkpoint is None
    res = wr.write_messages(root, m[2:], dispatch=False)
    with open_store(root) as st:
        cp2 = st.read_checkpoint()
    assert res.abort_created and (root / "abort").exists()
    assert cp2 is not None and cp2.physic_msg_timestamp_ms == 1002 and cp2.logics_msg_timestamp_ms == 1000


# ------------------------------------------------------------------------------------ atomicity


def _fixture_copy_hashes(tmp: Path) -> tuple[Path, dict[str, str]]:
    root = _copy_fixture("small", tmp)
    return root, _hashes(root.parent)


def test_bad_ndjson_line_leaves_store_unchanged(tmp_path: Path) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    lines = [json.dumps({"topic": "TopicA", "queueId": 0, "body": f"m{i}"}) for i in range(5)]
    lines[2] = '{"topic": "TopicA", "queueId": 0, "boddy": "typo"}'
    src = tmp_path / "in.ndjson"
    src.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["write", str(root), str(src)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"error: {src}:3: unknown field 'boddy' (did you mean 'body'?)"
    assert _hashes(root.parent) == before


def test_failure_midway_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    calls = {"n": 0}
    real = wr.Dispatcher.dispatch_columns

    def flaky(self: wr.Dispatcher, cols: object) -> None:
        calls["n"] += 1
        real(self, cols)  # the entries reach the files, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wr.Dispatcher, "dispatch_columns", flaky)
    msgs = [wr.Message(topic=t, queue_id=i % 4, body=b"z" * 900, keys=f"k{i}") for i in range(60) for t in ("TopicA",)]
    msgs.append(wr.Message(topic="BrandNew", queue_id=0, body=b"new topic"))
    with pytest.raises(Exception, match="rolled back"):
        wr.write_messages(root, msgs)
    assert calls["n"] == 1
    assert _hashes(root.parent) == before
    assert wr.pending_journal(root) is None


_KILL = textwrap.dedent(
    """\
    import os, sys
    sys.path.insert(0, {repo!r})
    from rmqstore.ops import write as wr
    def die(self, sync=True):
        os._exit(9)  # killed after the commit log, consume queues and index were written
    wr.Dispatcher.close = die
    msgs = [wr.Message(topic="TopicA", queue_id=i % 4, body=b"k" * 700, keys="kill") for i in range(80)]
    msgs.append(wr.Message(topic="Fresh", queue_id=0, body=b"f"))
    wr.write_messages({root!r}, msgs)
    """
)


def test_killed_write_is_rolled_back_by_the_next_write(tmp_path: Path) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILL.format(repo=str(REPO), root=str(root))], timeout=60)
    assert proc.returncode == 9
    assert wr.pending_journal(root) is not None
    assert _hashes(root.parent) != before
    with open_store(root, writable=True, operation="write") as st:
        report = wr.rollback_pending(st)
    assert report is not None and report.files_removed
    assert _hashes(root.parent) == before
    # and a write after a kill does the rollback itself
    subprocess.run([sys.executable, "-c", _KILL.format(repo=str(REPO), root=str(root))], timeout=60)
    res = wr.write_messages(root, [wr.Message(topic="TopicA", queue_id=0, body=b"after")])
    assert res.rolled_back is not None
    recs = _records(root)
    assert recs[-1].body == b"after" and not any(r.keys == "kill" for r in recs)


# --------------------------------------------------------------------------------------- CLI


def test_cli_single_message_and_dry_run(tmp_path: Path) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    truth = json.loads((root.parent / "truth.json").read_text())
    args = ["write", str(root), "--topic", "TopicB", "--queue", "2", "--tags", "T", "--keys", "a b", "--body", "hi"]
    dry = CliRunner().invoke(app, [*args, "--dry-run", "--format", "json"])
    assert dry.exit_code == 0 and dry.stderr.startswith("dry run")
    assert _hashes(root.parent) == before
    out = json.loads(dry.stdout)["messages"][0]
    result = CliRunner().invoke(app, [*args, "-p", "color=blue", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)["messages"][0]
    entries = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicB", 2))
    assert row["commitLogOffset"] == truth["maxPhyOffset"] == out["commitLogOffset"]
    assert row["queueOffset"] == entries["maxOffset"]
    with open(root / "commitlog" / f"{row['commitLogOffset'] // 32768 * 32768:020d}", "rb") as f:
        rec = decode_record(f.read(), row["commitLogOffset"] % 32768, check_crc=True)
    assert isinstance(rec, Record) and rec.msg_id == row["msgId"]
    assert parse_properties(rec.properties_raw)["color"] == "blue" and rec.keys == "a b"


def test_cli_shows_the_plan_before_writing(tmp_path: Path) -> None:
    root, _ = _fixture_copy_hashes(tmp_path)
    args = ["write", str(root), "--topic", "TopicB", "--queue", "1", "--body", "hi", "--now", "1795400000000"]
    with open_store(root) as st:
        start = find_append_point(st).end_phy
    shown = CliRunner().invoke(app, [*args, "--format", "plain"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    planned = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["write", "append"])
    written = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["cqEntries"])
    assert planned < written and str(start) in shown.stdout  # the plan (its append, the offset), then the result
    assert lines[written].split()[1] == "1"
    doc = json.loads(CliRunner().invoke(app, [*args, "--again", "--format", "json"]).stdout)
    # the commit log append, then its consume queue unit, index entry and the checkpoint
    assert doc["operation"] == "write" and [a["action"] for a in doc["actions"]] == ["append"] * 3 + ["rewrite"]
    assert [Path(a["path"]).parent.name for a in doc["actions"]] == ["commitlog", "1", "index", root.name]
    assert doc["messages"][0]["commitLogOffset"] == doc["summary"]["startPhyOffset"] > start
    assert doc["result"]["cqEntries"] == 1 and doc["result"]["endPhyOffset"] == doc["summary"]["endPhyOffset"]


def test_cli_refuses_a_store_a_broker_holds(tmp_path: Path) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)\nprint('locked', flush=True)\ntime.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        result = CliRunner().invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x"])
        assert result.exit_code == 4
        assert result.stderr.splitlines()[0].startswith("error: ") and "held by a running broker" in result.stderr
        dry = CliRunner().invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x", "--dry-run"])
        assert dry.exit_code == 4
    finally:
        holder.kill()
        holder.wait()
    assert _hashes(root.parent) == before


@pytest.mark.parametrize(
    ("args", "code", "first_line"),
    [
        (["--topic", "../x"], 1, "error: topic '../x' is not allowed: a '/' in it would make nested directories"),
        (["--topic", "SCHEDULE_TOPIC_XXXX"], 1, "error: topic 'SCHEDULE_TOPIC_XXXX' is reserved for the broker;"),
        (["--topic", "T", "-p", "novalue"], 1, "error: --property 'novalue' is not NAME=VALUE"),
        ([], 1, "error: nothing to write: give --topic (one message) or an NDJSON file / - for stdin"),
    ],
)
def test_cli_input_errors(tmp_path: Path, args: list[str], code: int, first_line: str) -> None:
    root, before = _fixture_copy_hashes(tmp_path)
    result = CliRunner().invoke(app, ["write", str(root), *args])
    assert result.exit_code == code
    assert result.stderr.splitlines()[0].startswith(first_line)
    assert _hashes(root.parent) == before


def test_cli_not_a_store_and_create(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["write", str(tmp_path / "nope"), "--topic", "T", "--body", "x"])
    assert result.exit_code == 5
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["write", str(tmp_path / "empty"), "--topic", "T", "--body", "x"])
    assert result.exit_code == 5
    result = CliRunner().invoke(app, ["write", str(tmp_path / "new"), "--create", "--topic", "T", "--body", "x"])
    assert result.exit_code == 0, result.stderr
    assert _records(tmp_path / "new")[0].body == b"x"
    assert (tmp_path / "new" / "commitlog" / "00000000000000000000").stat().st_size == 1073741824  # default size


def test_cli_ndjson_from_stdin(tmp_path: Path) -> None:
    root = _new_store(tmp_path)
    lines = "".join(
        json.dumps({"topic": "S", "queueId": 0, "bodyBase64": "AAEC", "keys": ["x", "y"], "transactionType": t}) + "\n"
        for t in ("NOT", "COMMIT")
    )
    result = CliRunner().invoke(app, ["write", str(root), "-", "--format", "ndjson"], input=lines + "\n")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(x) for x in result.stdout.splitlines()]
    assert [r["queueOffset"] for r in rows] == [0, 1] and [r["sysFlag"] for r in rows] == [0, 8]
    assert [r.body for r in _records(root)] == [b"\x00\x01\x02"] * 2
    bad = CliRunner().invoke(app, ["write", str(root), "-"], input='{"topic": "S"}\nnot json\n')
    assert bad.exit_code == 1 and bad.stderr.startswith("error: <stdin>:2: not valid JSON")


# ------------------------------------------------------------------------------------ fixtures


def test_fixtures_are_regenerated_identically(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "fixtures" / "make_fixtures.py"), "--out", str(tmp_path)], check=True, timeout=120
    )
    assert _hashes(tmp_path) == _hashes(FIXTURES)


def test_fixture_consume_queues_match_their_records() -> None:
    """The dispatch of `small` (consume queue files) agrees with its records decoded independently."""
    truth = json.loads((FIXTURES / "small" / "truth.json").read_text())
    with open_store(FIXTURES / "small" / "store") as st:
        for q in truth["queues"]:
            segs, _ = st.consume_queues.queue(q["topic"], q["queueId"]).files()
            got = []
            for seg in segs:
                arr = entries_array(seg.path.read_bytes())
                got += [(int(e["phy_offset"]), int(e["size"]), int(e["tags_code"])) for e in arr[: valid_prefix(arr)]]
            assert got == [(e["commitLogOffset"], e["size"], e["tagsCode"]) for e in q["entries"]]
    assert wr.pending_journal(FIXTURES / "small" / "store") is None
    assert not (FIXTURES / "small" / "store" / ".rmqstore").exists()


def test_nothing_left_in_segment_directories(tmp_path: Path) -> None:
    root = _new_store(tmp_path)
    wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"x")])
    for d in ("commitlog", "index", "consumequeue/T/0"):
        assert all(p.name.isdigit() for p in (root / d).iterdir())
    assert os.listdir(root / ".rmqstore") == [wr.LAST_WRITE]  # the last write's digest and offsets, no journal
    assert os.listdir(root / "config") == ["topics.json"]


def test_append_after_a_blank_that_ends_the_log(tmp_path: Path) -> None:
    """The last file is full (BLANK, no next file): the broker appends at the BLANK's position, so a
    record that fits reuses the padding and one that does not writes the BLANK again and rolls over."""
    fs = 4096
    root = _new_store(tmp_path, cl=fs)
    wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"a" * 3000, uniq_key="U")])
    big = wr.Message(topic="T", queue_id=0, body=b"b" * 3000, uniq_key="U")
    res = wr.write_messages(root, [big], dispatch=False)  # nothing refers to the record in the next file
    blank_pos = res.plan.blanks[0][0]
    (root / "commitlog" / f"{fs:020d}").unlink()  # as if the second file had never been created
    res = wr.write_messages(root, [wr.Message(topic="T", queue_id=0, body=b"c", uniq_key="U")])
    assert res.plan.start_phy == blank_pos and res.plan.blanks == () and res.quarantine is None
    res = wr.write_messages(root, [big])
    assert res.plan.blanks == ((res.plan.start_phy, fs - res.plan.start_phy),) and res.quarantine is None
    assert [r.body[:1] for r in _records(root)] == [b"a", b"c", b"b"]


# ------------------------------------------------------------------ the fast lane equals put_one

_LANE_TOPICS = ["LaneA"] * 4 + ["LaneB"] * 4 + ["Bad Topic", "x" * 130]
_plain_message = st.builds(
    wr.Message,
    topic=st.sampled_from(_LANE_TOPICS),
    body=st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=600)),
    queue_id=st.one_of(st.none(), st.none(), st.integers(0, 2), st.integers(0, 2), st.integers(3, 9)),
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "", "é", "t\x01"])),
    keys=st.one_of(st.none(), st.sampled_from(["", " ", "k1", "k1 k2", "ключ", "k\x02"]), st.text(max_size=12)),
)
_good_plain_message = st.builds(
    wr.Message,
    topic=st.sampled_from(["LaneA", "LaneB", "LaneC"]),
    body=st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=600)),
    queue_id=st.one_of(st.none(), st.integers(0, 2)),
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "é", "𝄞"])),
    keys=st.one_of(st.none(), st.sampled_from(["", " ", "k1", "k1 k2", "ключ"])),
)
_PROPERTY_NAMES = ["traceId", "region", "TRAN_MSG", "a%b", "ключ", "", "KEYS", "DELAY", "k\x01"]
_producer_message = st.builds(
    wr.Message,
    topic=st.sampled_from(["LaneA", "LaneB", "LaneC", "LaneA", "Bad Topic"]),
    body=st.binary(max_size=60),
    queue_id=st.one_of(st.none(), st.integers(0, 2)),
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "é", ""])),
    keys=st.one_of(st.none(), st.sampled_from(["k1", "k1 k2", " ", "ключ"])),
    uniq_key=st.one_of(st.none(), st.sampled_from(["C0A8000A1F9018B4AAC22A3B00000000", "U-é", "", "u\x02"])),
    wait=st.sampled_from([True, True, False]),
    properties=st.one_of(
        st.just(()),
        st.lists(st.sampled_from(_PROPERTY_NAMES[:3]), max_size=3).map(lambda ns: tuple((n, "v") for n in ns)),
        st.lists(
            st.tuples(st.sampled_from(_PROPERTY_NAMES), st.sampled_from(["v", "é", "", "x\x02", "%s"])), max_size=3
        ).map(tuple),
    ),
    flag=st.sampled_from([0, 0, 7, -1]),
    born_timestamp_ms=st.one_of(st.none(), st.just(1_600_000_000_000)),
    born_host=st.sampled_from([None, None, "10.0.0.1:10", "[::1]:5", "bad"]),
    store_host=st.sampled_from([None, None, "10.0.0.9:10911", "[::2]:6"]),
    store_timestamp_ms=st.one_of(st.none(), st.none(), st.integers(1_650_000_000_000, 1_650_000_000_010)),
)
_other_message = st.one_of(
    st.builds(
        wr.Message, topic=st.just("LaneA"), body=st.binary(max_size=50), store_timestamp_ms=st.just(1_700_000_000_000)
    ),
    st.builds(wr.Message, topic=st.just("LaneB"), body=st.binary(max_size=50), delay_level=st.integers(1, 3)),
    st.builds(wr.Message, topic=st.just("LaneA"), properties=st.just((("p", "v"),)), wait=st.booleans()),
)


def _plan_or_error(root: Path, msgs: object, conf: Path, broker: str, min_run: int, monkeypatch) -> object:
    monkeypatch.setattr(wr.plan, "_FAST_MIN_RUN", min_run)
    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 3))
    with open_store(root, broker_config=conf, broker=broker) as st_:
        try:
            plan = wr.plan_write(
                st_, msgs, clock=ticks.__next__, uniq_keys=wr.UniqKeySource(seed=7), topic_queue_nums=3
            )
        except InputError as e:
            return str(e)
    return (
        [(w.path.name, w.pos, bytes(w.data), w.create) for w in plan.writes],
        plan.blanks,
        [r.to_json() for r in plan.records],
        plan.records.tags_code.tolist(),
        list(plan.records.topic),
        [t.topic_name for t in plan.new_topics],
        plan.records.columns(0, len(plan.records)),
    )


@pytest.mark.parametrize("broker", ["4.4.0", "4.9.4", "5.1.0"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    msgs=st.one_of(
        st.lists(st.one_of(_plain_message, _plain_message, _plain_message, _other_message), max_size=60),
        st.lists(st.one_of(*[_good_plain_message] * 8, _other_message), min_size=20, max_size=120),
        st.lists(st.one_of(*[_producer_message] * 8, _other_message), min_size=10, max_size=80),
        st.lists(_producer_message, max_size=40).map(
            lambda ms: [replace(ms[0], origin=m.origin) for m in ms[:1]] * 12 + ms
        ),
    )
)
def test_fast_lane_gives_what_put_one_gives(tmp_path_factory, monkeypatch, broker, msgs):
    # Runs of plain messages are encoded a run at a time; the per-message path is the reference:
    # same bytes, same layout (small files: BLANKs and rolls), same columns, or the same error.
    tmp = tmp_path_factory.mktemp("lane")
    root = _new_store(tmp, cl=2048)
    conf = tmp / "broker.conf"
    msgs = [replace(m, origin=f"m{i}") for i, m in enumerate(msgs)]
    slow = _plan_or_error(root, msgs, conf, broker, 10**9, monkeypatch)
    inputs: list[object] = [msgs]
    producer = wr.Message(topic="t").__class__.__dataclass_fields__
    if all(
        getattr(m, f) == producer[f].default for m in msgs for f in producer if f not in _BATCH_FIELDS
    ):  # plain producer messages: the same as a column batch
        inputs.append(wr.MessageBatch.from_messages(msgs))
    for given_as in inputs:
        fast = _plan_or_error(root, given_as, conf, broker, 1, monkeypatch)
        if isinstance(slow, str) or isinstance(fast, str):
            assert fast == slow
            continue
        *head_s, cols_s = slow
        *head_f, cols_f = fast
        assert head_f == head_s
        for name in (
            "phy",
            "size",
            "queue_id",
            "queue_offset",
            "store_ts",
            "sys_flag",
            "tags_code",
            "topic_id",
            "key_rec",
            "key_hash",
        ):
            assert getattr(cols_f, name).tolist() == getattr(cols_s, name).tolist(), name
        assert cols_f.topics == cols_s.topics


_BATCH_FIELDS = set(BATCH_FIELDS)


def test_ndjson_plain_lines_read_as_a_batch(tmp_path: Path) -> None:
    lines = [
        '{"topic": "A", "queueId": 1, "tags": "t", "keys": "k1 k2", "body": "x"}',
        "",
        '{"topic": "B", "body": "é"}',
        '{"topic": "A", "keys": "k3"}',
    ]
    got = wr.read_ndjson(lines, source="in.ndjson")
    assert isinstance(got, wr.MessageBatch)
    want = [wr.message_from_json(json.loads(x), origin=f"in.ndjson:{n}") for n, x in enumerate(lines, 1) if x]
    assert got.messages() == want
    # one line that is more than a plain message: every line becomes a Message, origins kept
    mixed = wr.read_ndjson([*lines, '{"topic": "A", "delayTimeLevel": 3}'], source="in.ndjson")
    assert isinstance(mixed, list)
    assert mixed == [*want, wr.message_from_json({"topic": "A", "delayTimeLevel": 3}, origin="in.ndjson:5")]
    # the batch and the Message list write the same store, byte for byte
    roots = []
    many = [*lines, *(json.dumps({"topic": "C", "tags": "t", "keys": f"k{i}", "body": "b" * i}) for i in range(40))]
    batch = wr.read_ndjson(many, source="in.ndjson")
    assert isinstance(batch, wr.MessageBatch) and len(batch) == 43
    for source in (batch, batch.messages()):  # 40 in a row: the plain-message lane
        (tmp_path / str(len(roots))).mkdir()
        root = _new_store(tmp_path / str(len(roots)), cl=4096)
        ticks = iter(range(1_700_000_000_000, 1_800_000_000_000))
        wr.write_messages(root, source, clock=ticks.__next__, uniq_keys=wr.UniqKeySource(seed=3))
        roots.append(root)
    files = [
        sorted(
            p.relative_to(r)
            for p in r.rglob("*")
            if p.is_file() and "checkpoint" not in p.name and ".rmqstore" not in p.parts  # the digest of the input
        )
        for r in roots
    ]
    assert files[0] == files[1] and files[0]
    for rel in files[0]:
        assert (roots[0] / rel).read_bytes() == (roots[1] / rel).read_bytes(), rel


def _spec_lines(case: str) -> list[str]:
    """The producer messages of a real case's spec.json as NDJSON lines (the harness's own fields left out)."""
    spec = load_spec(case)
    keep = [m for m in spec["write"]["messages"] if not {"id", "pauseDispatch"} & m.keys()]
    out = []
    for m in keep:
        m = {k: v for k, v in m.items() if "From" not in k and k != "bodySuffix" and v is not None}
        if isinstance(m.get("wait"), str):
            m["wait"] = m["wait"] == "true"
        out.append(json.dumps(m))
    return out


def test_ndjson_producer_lines_read_as_a_batch(tmp_path: Path) -> None:
    """Lines with uniqKey, wait, keys lists, user properties, flag, born time and hosts, store time,
    body or bodyBase64 (the real 5.2.0 case's messages): a batch equal to message_from_json line by line,
    and the same store written from the batch as from those messages."""
    case = "5.2.0/clean-5x-mixed"
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    others = {"delayTimeLevel", "sysFlag", "transactionType", "reconsumeTimes", "preparedTransactionOffset", "raw"}
    lines = [x for x in _spec_lines(case) if not others & json.loads(x).keys()]
    lines.append('{"topic": "A", "wait": false, "keys": [], "properties": {}}')
    got = wr.read_ndjson(lines, source="s")
    assert isinstance(got, wr.MessageBatch) and got.uniq_key is not None and got.born_host is not None
    want = [wr.message_from_json(json.loads(x), origin=f"s:{n}") for n, x in enumerate(lines, 1)]
    assert got.messages() == want
    lane = want[:-1]
    assert len(lane) > 300
    with pytest.raises(InputError, match=re.escape("s:2: not valid JSON")):
        wr.read_ndjson([lines[0], lines[1][:-1]], source="s")
    roots = []
    for n, source in enumerate((wr.read_ndjson([json.dumps(_as_json(m)) for m in lane]), lane)):
        (tmp_path / str(n)).mkdir()
        root = _new_store(tmp_path / str(n))
        keys = wr.UniqKeySource(seed=5)  # the messages without a UNIQ_KEY get one
        wr.write_messages(root, source, clock=lambda: 1_800_000_000_000, uniq_keys=keys, allow_system_topic=True)
        roots.append(root)
    same = [{k: v for k, v in _hashes(r).items() if not k.startswith(".rmqstore")} for r in roots]
    assert same[0] == same[1]


@pytest.mark.parametrize("case", ["clean-2topics", "crash-midwrite", "delay-tx-retry", "4.9.4/clean-2topics"])
def test_real_messages_take_the_run_lane(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real cases' producer messages (given UNIQ_KEY, born time and host, store time, flag, user
    properties) go through the run lane (runs of any length here: every fourth message has no TAGS):
    the store equals the 4.4.0 engine's, and on every version the one the per-message path writes
    (4.9.4: no separator after the last property; its engine store has no broker edits to compare)."""
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    one_by_one = []
    monkeypatch.setattr(wr.encode_run, "put_one", lambda p, m: one_by_one.append(m) or wr.encode_one.put_one(p, m))
    monkeypatch.setattr(wr.plan, "put_one", wr.encode_run.put_one)
    monkeypatch.setattr(wr.plan, "_FAST_MIN_RUN", 1)
    lane = _write_real_case(case, tmp_path)
    spec = [m for b in _spec_batches(case) for m in b]
    broker_named = {"REAL_TOPIC", "REAL_QID", "DELAY"}
    others = [
        m
        for m in spec
        if m.delay_level
        or m.sys_flag
        or m.reconsume_times
        or m.uniq_key is None
        or broker_named & {k for k, _ in m.properties}
    ]
    assert len([m for m in one_by_one if m.origin != "reput"]) == len(others) < len(spec)
    if "/" not in case:
        real = case_dir(case) / "store"
        mine_cl, real_cl = _commitlog_with_zeroed_blanks(lane), _commitlog_with_zeroed_blanks(real)
        assert all(mine_cl[name] == data for name, data in real_cl.items() if name in mine_cl)
        assert _cq_files(lane) == _cq_files(real) and _index_files(lane) == _index_files(real)
    monkeypatch.setattr(wr.plan, "_FAST_MIN_RUN", 10**9)
    (tmp_path / "ref").mkdir()
    ref = _write_real_case(case, tmp_path / "ref")
    assert _commitlog_with_zeroed_blanks(lane) == _commitlog_with_zeroed_blanks(ref)
    assert _cq_files(lane) == _cq_files(ref) and _index_files(lane) == _index_files(ref)


def _as_json(m: wr.Message) -> dict[str, object]:
    """A batch-shaped message as an NDJSON object (bodies as base64)."""
    import base64

    return {
        "topic": m.topic,
        "queueId": m.queue_id,
        "tags": m.tags,
        "keys": m.keys,
        "uniqKey": m.uniq_key,
        "wait": m.wait,
        "properties": dict(m.properties),
        "flag": m.flag,
        "bornTimestamp": m.born_timestamp_ms,
        "bornHost": m.born_host,
        "storeHost": m.store_host,
        "storeTimestamp": m.store_timestamp_ms,
        "bodyBase64": base64.b64encode(m.body).decode(),
    }


def test_digest_is_of_the_input_bytes(tmp_path: Path) -> None:
    """The NDJSON input's digest is the sha256 of its bytes, read in chunks; a lone CR, a last line
    without newline and a non-UTF-8 byte are read as before."""
    data = b'{"topic": "A", "body": "x"}\r\n\n{"topic": "B", "uniqKey": "U", "wait": false}'
    msgs, digest = wr.read_ndjson_stream(__import__("io").BytesIO(data), source="in")
    assert digest == hashlib.sha256(data).hexdigest()
    assert msgs.messages() == wr.read_ndjson(data.split(b"\n"), source="in").messages()  # type: ignore[union-attr]
    with pytest.raises(InputError, match=re.escape("in:2: not UTF-8 (byte 3)")):
        wr.read_ndjson_stream(__import__("io").BytesIO(b'{}\n{"a\xff": 1}\n'), source="in")
    src = tmp_path / "in.ndjson"
    src.write_bytes(data)
    root = _new_store(tmp_path)
    run = CliRunner().invoke
    args = ["write", str(root), str(src), "--broker-config", str(tmp_path / "broker.conf"), "-f", "json"]
    assert run(app, args).exit_code == 0
    assert wr.last_write(root)["inputDigest"] == digest  # type: ignore[index]
    again = run(app, args)
    assert again.exit_code == 8 and "already written" in again.output


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("queue_id", "3", "message 1 of the batch: queue_id is a str"),
        ("queue_id", -1, "message 1 of the batch: queueId -1 is out of range"),
        ("body", "text", "message 1 of the batch: body is a str"),
        ("topic", None, "message 1 of the batch: topic is a NoneType"),
    ],
)
def test_message_batch_refuses_wrong_values(column: str, value: object, says: str) -> None:
    cols = {"topic": ["A", "A"], "body": [b"", b""], "queue_id": [0, 0], "tags": [None, "t"], "keys": [None, "k"]}
    cols[column][1] = value
    with pytest.raises(InputError, match=re.escape(says)):
        wr.MessageBatch(**cols)
    with pytest.raises(InputError, match="one length"):
        wr.MessageBatch(["A"], [], [None], [None], [None])


# ------------------------------------------------- 5.2.0: CRC property, V2 records, LMQ dispatch

# properties the 5.2.0 store adds to what it is handed (checked, so left out of the input)
_STORE_ADDED = ("__CRC32#", "INNER_MULTI_QUEUE_OFFSET")


def _engine_records(case: str) -> list[Record]:
    return _records(case_dir(case) / "store")


def _as_input(rec: Record) -> wr.Message:
    """The message the engine was handed for ``rec``: its fields, and its properties in the stored order
    without the ones the store added."""
    raw = rec.properties_raw
    if "INNER_MULTI_DISPATCH" in raw:
        raw = raw[:-20]  # the 20 bytes 5.2.0 reserves after an LMQ record's properties
    pairs = [k.split("\x01", 1) for k in raw.split("\x02") if "\x01" in k]
    kept = [(k, v) for k, v in pairs if k not in _STORE_ADDED]
    return _message_of(rec, properties=tuple(kept), origin=f"{rec.topic}@{rec.phy_offset}")


def _record_bytes(root: Path, recs: list[Record]) -> list[bytes]:
    out = []
    for r in recs:
        path = root / "commitlog" / f"{r.phy_offset - r.phy_offset % 32768:020d}"
        pos = r.phy_offset % 32768
        with open(path, "rb") as f:
            f.seek(pos)
            out.append(f.read(r.total_size))
    return out


@pytest.mark.parametrize("case", ["5.2.0/crc-property", "5.2.0/long-topic-v2", "5.2.0/lmq-multi-dispatch"])
def test_write_5x_records_byte_for_byte(case: str, tmp_path: Path) -> None:
    """The engine's records of each store written again by rmqstore into a fresh store with the same
    broker.conf: same bytes (V2 topic length, the __CRC32# property and its CRC, the LMQ queue offsets);
    an LMQ record's 20 reserved bytes are zeros in a fresh write (5.2.0 leaves an earlier record's bytes)."""
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    engine = _engine_records(case)
    # up to the putMessages batch of crc-property, whose inner messages repeat WAIT (batch-level properties)
    dup = [i for i, r in enumerate(engine) if len(r.properties_raw.split("\x02")) - 1 > len(r.properties)]
    engine = engine[: dup[0]] if dup else engine
    assert len(engine) >= 20
    shutil.copy(case_dir(case) / "broker.conf", tmp_path / "broker.conf")
    root = tmp_path / "store"
    root.mkdir()
    wr.write_messages(
        root,
        [_as_input(r) for r in engine],
        broker_config=tmp_path / "broker.conf",
        broker="5.2.0",
        allow_system_topic=True,
        max_topic_length=255,
        create=True,
    )
    mine = _records(root)
    assert [(r.phy_offset, r.total_size, r.magic) for r in mine] == [
        (r.phy_offset, r.total_size, r.magic) for r in engine
    ]
    got, want = _record_bytes(root, mine), _record_bytes(case_dir(case) / "store", engine)
    for r, g, w in zip(engine, got, want, strict=True):
        if "INNER_MULTI_DISPATCH" in r.properties:
            assert g[-20:] == bytes(20)
            g, w = g[:-20], w[:-20]
        assert g == w, r.phy_offset
    if "lmq" in case:  # the %LMQ% queues written by the write's dispatch equal the engine's
        assert _cq_files(root) == _cq_files(case_dir(case) / "store")
