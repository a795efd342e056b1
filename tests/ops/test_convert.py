"""convert: the real DLedger stores of 4.9.4 and 5.2.0 as plain commit logs, and back to DLedger byte for byte."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import copy_real_store, data_files, hold_lock, load_truth, run_with_hook
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import Blank
from rmqstore.ops import query
from rmqstore.store import lookup, open_store
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()
DLEDGER_CASES = ("4.9.4/dledger-clean", "5.2.0/dledger-5x-clean")
OFFSETS = '{"offsetTable":{"TopicA@GroupA":{0:7,1:3}}}'


def source_store(case: str, tmp: Path) -> Path:
    """A copy of a real DLedger store, with a consumer's offsets (the real ones have no config/)."""
    root = copy_real_store(case, tmp / "src")
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text(OFFSETS)
    return root


def convert(*args: str | Path) -> None:
    res = runner.invoke(app, ["convert", *map(str, args), "-q"])
    assert res.exit_code == 0, res.output


def messages(root: Path) -> list[tuple]:
    with open_store(root) as st:
        return [
            (r.topic, r.queue_id, r.queue_offset, r.body, r.properties_raw, r.tags, r.keys, r.msg_id, r.phy_offset)
            for _, r in iter_commitlog(st)
            if not isinstance(r, Blank)
        ]


@pytest.fixture(params=DLEDGER_CASES, scope="module")
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    tmp = tmp_path_factory.mktemp(request.param.replace("/", "-"))
    src = source_store(request.param, tmp)
    (tmp / "out").mkdir()
    convert(src, "--to", "commitlog", "--output", tmp / "out" / "store", "--write-broker-conf")
    return request.param, src, tmp / "out" / "store"


def test_the_plain_store_serves_every_message_at_its_queue_offset(converted: tuple[str, Path, Path]) -> None:
    case, src, new = converted
    old, got = messages(src), messages(new)
    assert len(old) == len(got) == 400
    assert [m[:7] for m in old] == [m[:7] for m in got]
    truth = [r for r in load_truth(case)["commitlog"] if r.get("kind") == "message"]
    assert [(r["offset"], r["queueOffset"], r.get("keys")) for r in truth] == [(m[8], m[2], m[6]) for m in old]
    with open_store(new) as st:
        assert not st.config.dledger and (new / "commitlog").is_dir() and not list(new.glob("dledger-*"))
        for topic, qid, qoff, body, *_ in got[::7]:
            hit = lookup.query_queue_offset(st, topic, qid, qoff)
            assert hit.record is not None and (hit.record.topic, hit.record.body) == (topic, body)


def test_every_key_and_unique_key_is_found(converted: tuple[str, Path, Path]) -> None:
    _, _, new = converted
    with open_store(new) as st:
        for topic, _, _, _, _, _, keys, _, phy in messages(new)[::5]:
            for key in (keys or "").split():
                assert phy in [r.phy_offset for r in query.query_key(st, topic, key).hits], (topic, key)
        rec = next(r for _, r in iter_commitlog(st) if not isinstance(r, Blank))
        assert [h.phy_offset for h in query.query_uniq(st, rec.topic, rec.uniq_key).hits] == [rec.phy_offset]


def test_check_is_clean_and_config_is_copied(converted: tuple[str, Path, Path]) -> None:
    _, src, new = converted
    res = runner.invoke(app, ["check", str(new)])
    assert res.exit_code == 0, res.output
    assert (new / "config" / "consumerOffset.json").read_bytes() == (
        src / "config" / "consumerOffset.json"
    ).read_bytes()
    conf = (new.parent / "broker.conf").read_text()
    assert "enableDLegerCommitLog=false" in conf and f"storePathRootDir={new}" in conf and "dLegerPeers" not in conf
    assert not list(new.parent.glob(".*")) and not (new / ".rmqstore").exists()


def test_the_msgid_map_pairs_every_old_id_with_the_new_one(converted: tuple[str, Path, Path]) -> None:
    _, src, new = converted
    pairs = [json.loads(line) for line in (new.parent / "msgid-map.ndjson").read_text().splitlines()]
    assert [(p["oldMsgId"], p["newMsgId"]) for p in pairs] == [
        (a[7], b[7]) for a, b in zip(messages(src), messages(new), strict=True)
    ]
    with open_store(new) as st:
        found = query.query_msg_id(st, pairs[-1]["newMsgId"])
        assert [r.msg_id for r in found.hits] == [pairs[-1]["newMsgId"]]


def member_files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (root / "dledger-n0").rglob("*")
        if p.is_file() and not p.name.endswith(".bak")
    }


def index_contents(root: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "index").iterdir())]


def test_back_to_dledger_gives_the_engine_s_bytes(converted: tuple[str, Path, Path], tmp_path: Path) -> None:
    """Data, index and member files of the round trip equal what the engine wrote, and so do the queues."""
    _, src, new = converted
    back = tmp_path / "back"
    convert(new, "--to", "dledger", "--output", back, "--dledger-index-file-size", 8192, "--dleger-group", "g0")
    assert member_files(back) == member_files(src)
    queues = {k: v for k, v in data_files(back).items() if k.startswith("consumequeue/")}
    assert queues == {k: v for k, v in data_files(src).items() if k.startswith("consumequeue/")}
    assert index_contents(back) == index_contents(src)
    assert messages(back) == messages(src)
    assert runner.invoke(app, ["check", str(back)]).exit_code == 0


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    src = source_store(DLEDGER_CASES[0], tmp_path)
    before = data_files(src)
    res = runner.invoke(
        app, ["convert", str(src), "--to", "commitlog", "-o", str(tmp_path / "new"), "-n", "-f", "json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["operation"] == "convert" and doc["summary"]["to"] == "commitlog"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"] and data_files(src) == before


def test_refusals(tmp_path: Path) -> None:
    src = source_store(DLEDGER_CASES[0], tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("x")
    res = runner.invoke(app, ["convert", str(src), "--to", "commitlog", "-o", str(out)])
    assert res.exit_code == 8 and "must not exist or be empty" in res.output
    res = runner.invoke(app, ["convert", str(src), "--to", "dledger", "-o", str(tmp_path / "n")])
    assert res.exit_code == 1 and "DLedger mode already" in res.output
    res = runner.invoke(app, ["convert", str(src), "--to", "plain", "-o", str(tmp_path / "n")])
    assert res.exit_code == 2 and "--to commitlog|dledger" in res.output
    holder = hold_lock(src)
    try:
        res = runner.invoke(app, ["convert", str(src), "--to", "commitlog", "-o", str(tmp_path / "n")])
        assert res.exit_code == 4, res.output
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "n").exists() and not (tmp_path / ".n.convert").exists()


def test_a_torn_last_entry_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    src = source_store(DLEDGER_CASES[0], tmp_path)
    last = sorted((src / "dledger-n0" / "data").iterdir())[-1]
    data = bytearray(last.read_bytes())
    end = len(data.rstrip(b"\0"))
    data[end - 150 : end] = bytes(150)  # the last record's second half never reached the disk
    last.write_bytes(bytes(data))
    res = runner.invoke(app, ["convert", str(src), "--to", "commitlog", "-o", str(tmp_path / "n")])
    assert res.exit_code == 6, res.output
    assert str(last) in res.output and "at byte" in res.output and "recover" in res.output
    assert "Traceback" not in res.output


def test_killed_at_every_step_then_rerun_gives_the_same_store(tmp_path: Path) -> None:
    src = source_store(DLEDGER_CASES[1], tmp_path)

    def argv(out: Path) -> list[str]:
        return ["convert", str(src), "--to", "commitlog", "-o", str(out / "store"), "--write-broker-conf", "-q"]

    ref = tmp_path / "ref"
    ref.mkdir()
    steps_file = tmp_path / "steps.txt"
    assert run_with_hook("-", 1, steps_file, argv(ref)).returncode == 0
    steps = steps_file.read_text().split()
    assert steps[-1] == "convert:finished", steps
    want = {**data_files(ref / "store"), "map": (ref / "msgid-map.ndjson").read_text()}
    for i, step in enumerate(steps):
        out = tmp_path / f"run{i}"
        out.mkdir()
        killed = run_with_hook(step, 1, None, argv(out))
        assert killed.returncode == -9, (step, killed.stderr)
        if step != "convert:finished":
            assert not (out / "store").exists() or (out / "store" / ".rmqstore").exists(), step
        again = runner.invoke(app, argv(out))
        done = step == "convert:finished"  # a second run into a finished store is refused
        assert again.exit_code == (8 if done else 0), (step, again.output)
        assert {**data_files(out / "store"), "map": (out / "msgid-map.ndjson").read_text()} == want, step
        assert sorted(p.name for p in out.iterdir()) == ["broker.conf", "msgid-map.ndjson", "store"], step


def test_before_4_9_1_a_blank_carries_the_broker_s_record_buffer(tmp_path: Path) -> None:
    """A 4.5-4.9.0 broker writes a blank from its reused record buffer: the last record's bytes show after
    the 8-byte header, as version detection expects of that family."""
    src = source_store(DLEDGER_CASES[0], tmp_path)
    out = tmp_path / "n"
    convert(src, "--to", "commitlog", "-o", out, "--broker-version", "4.8.0")
    with open_store(out, broker="4.8.0") as st:
        items = list(iter_commitlog(st))
    blanks = [(i, b) for i, (_, b) in enumerate(items) if isinstance(b, Blank)]
    assert len(blanks) == 3
    for i, blank in blanks:
        seg, last = items[i - 1]
        data = seg.path.read_bytes()
        rest = blank.total_size
        assert rest - 8 <= last.total_size - 8
        tail = data[blank.pos + 8 : blank.pos + rest]
        assert tail == data[last.pos + 8 : last.pos + rest]


def migrated_store(tmp: Path) -> Path:
    """A store that ran as a plain commit log (the 4.9.4 clean-2topics files, the last one closed with a
    blank) and then in DLedger mode: the records of dledger-clean in entries from the next file on."""
    import numpy as np

    from rmqstore.codec.commitlog import encode_blank
    from rmqstore.codec.dledger import DLEDGER
    from rmqstore.ops.convert.layout import IndexUnits, LogWriter, OffsetMap

    root = copy_real_store("4.9.4/clean-2topics", tmp / "m")
    last = sorted((root / "commitlog").iterdir())[-1]
    data = bytearray(last.read_bytes())
    end = len(data.rstrip(b"\0"))
    data[end : end + 8] = encode_blank(len(data) - end)
    last.write_bytes(bytes(data))
    divided = int(last.name) + len(data)
    member = root / "dledger-n0"
    writer = LogWriter(member / "data", len(data), divided, DLEDGER, OffsetMap(tmp / "offsets.bin"),
                       units=IndexUnits(member / "index", 8192))  # fmt: skip
    src = iter_commitlog_of(case_store(DLEDGER_CASES[0]))
    for seg_bytes, rec in src:
        record = np.frombuffer(seg_bytes[rec.pos : rec.pos + rec.total_size], np.uint8)
        list(writer.put(record, np.array([rec.total_size]), "test"))
    writer.close()
    conf = (root.parent / "broker.conf").read_text()
    (root.parent / "broker.conf").write_text(conf + "enableDLegerCommitLog=true\ndLegerSelfId=n0\ndLegerGroup=g0\n")
    return root


def case_store(case: str) -> Path:
    from conftest import case_dir

    return case_dir(case) / "store"


def iter_commitlog_of(root: Path) -> list[tuple[bytes, object]]:
    with open_store(root) as st:
        return [(seg.path.read_bytes(), r) for seg, r in iter_commitlog(st) if not isinstance(r, Blank)]


def test_a_migrated_store_keeps_its_plain_part_and_follows_with_the_dledger_records(tmp_path: Path) -> None:
    root = migrated_store(tmp_path)
    with open_store(root) as st:
        segs, _ = st.commitlog_segments()
        assert [s.framing.name for s in segs] == ["plain"] * 4 + ["dledger"] * 4
    before = messages(root)
    assert len(before) == 900
    out = tmp_path / "out"
    out.mkdir()
    convert(root, "--to", "commitlog", "-o", out / "store")
    after = messages(out / "store")
    assert [m[:7] for m in after] == [m[:7] for m in before]
    assert [m[8] for m in after[:500]] == [m[8] for m in before[:500]]  # the plain part stays where it was
    assert [m[8] for m in after[500:]] != [m[8] for m in before[500:]]
