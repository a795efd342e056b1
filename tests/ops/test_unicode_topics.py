"""Topics, tags and keys in several scripts, as a 4.4.0 broker stores them (its msgCheck has no
TopicValidator; a client that does not check the characters sends them): ``write`` lays them out,
``redispatch`` rebuilds byte-identical consume queues and index files, and ``check`` finds nothing.

No store in /work/shared holds a non-ASCII topic (every truth.json is ASCII), so the expected consume
queue bytes are computed here from the format: one 20-byte unit per record (commit log offset, size,
tagsCode = Java's String.hashCode of the tags over UTF-16 code units) at queueOffset x 20, under
``consumequeue/<topic as UTF-8>/<queueId>/``, files of mapedFileSizeConsumeQueue bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rmqstore.cli import app

runner = CliRunner()
TOPICS = ["主题-Tópico-テスト", "Тема", "موضوع", "TopicA", "😀emoji"]
TAGS = ["标签", "tág", "TagA", "😀"]
CQ_FILE = 600


def java_string_hash(s: str) -> int:
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def make_store(tmp: Path, version: str = "4.4.0") -> tuple[Path, list[dict], list[dict]]:
    root = tmp / "store"
    root.mkdir(parents=True)
    (root / "broker.conf").write_text(
        f"storePathRootDir={root}\nmapedFileSizeCommitLog=65536\nmapedFileSizeConsumeQueue={CQ_FILE}\n"
        "maxHashSlotNum=64\nmaxIndexNum=256\n"
    )
    msgs = [
        {"topic": TOPICS[i % 5], "tags": TAGS[i % 4], "keys": f"键{i} clé{i}", "body": "b" * (i % 7 + 1)}
        for i in range(80)
    ]
    lines = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in msgs)
    argv = ["write", str(root), "-", "--create", "--now", "1795400000000", "--broker-version", version, "-f", "ndjson"]
    r = runner.invoke(app, argv, input=lines)
    rows = [json.loads(ln) for ln in r.stdout.splitlines()] if r.exit_code == 0 else []
    return root, msgs, rows if r.exit_code == 0 else [{"exit": r.exit_code, "stderr": r.stderr}]


def test_consume_queues_are_what_the_format_says(tmp_path: Path) -> None:
    root, msgs, rows = make_store(tmp_path)
    assert len(rows) == len(msgs)
    want: dict[tuple[str, int], dict[int, bytes]] = {}
    for m, row in zip(msgs, rows, strict=True):
        unit = struct.pack(">qiq", row["commitLogOffset"], row["storeSize"], java_string_hash(m["tags"]))
        want.setdefault((row["topic"], row["queueId"]), {})[row["queueOffset"]] = unit
    assert {t for t, _ in want} == set(TOPICS)
    for (topic, qid), units in want.items():
        d = root / "consumequeue" / topic / str(qid)
        assert d.is_dir(), d
        stream = b"".join(f.read_bytes() for f in sorted(d.iterdir()))
        body = b"".join(units[i] for i in range(len(units)))
        assert stream[: len(body)] == body and not stream[len(body) :].strip(b"\0"), (topic, qid)
        assert all(f.stat().st_size == CQ_FILE for f in d.iterdir())


def test_redispatch_rebuilds_the_same_files_and_check_is_clean(tmp_path: Path) -> None:
    root, _, _ = make_store(tmp_path)
    c = runner.invoke(app, ["check", str(root), "-f", "json"])
    assert c.exit_code == 0, c.output
    r = runner.invoke(app, ["redispatch", str(root), "--dry-run", "-f", "json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["summary"]
    assert (s["consumeQueues"], s["indexFilesState"]) == ("identical to the current files",) * 2
    q = runner.invoke(app, ["query", "key", str(root), "主题-Tópico-テスト", "键5", "-f", "json"])
    assert q.exit_code == 0 and "键5" in q.stdout, q.output


@pytest.mark.parametrize("version", ["4.9.4", "5.2.0"])
def test_a_broker_that_checks_topic_names_refuses_them(tmp_path: Path, version: str) -> None:
    _, _, rows = make_store(tmp_path, version)
    assert rows[0].get("exit") == 1 and "not allowed" in rows[0]["stderr"], rows
