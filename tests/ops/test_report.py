"""`rmqstore report`: its numbers are those of info, offsets and expire --dry-run on the same store, and
its page stands alone (no script, nothing fetched), with every chart drawn."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import REAL_STORES, case_dir, copy_real_store
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.cli._report_page import render_page
from rmqstore.ops.report import GroupLag, QueueLag, gather_report
from rmqstore.store import open_store
from rmqstore.store.queue.summary import QueueInfo

runner = CliRunner()
DAY_MS = 86_400_000


def run_json(*args: str) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def report_json(store: Path, *extra: str) -> dict:
    return run_json("report", str(store), "-f", "json", "--check", "none", "-q", *extra)["stores"][0]


def store_of(case_root: Path) -> Path:
    return case_root / "store"


def test_numbers_equal_info(any_real_case):
    store = store_of(case_dir(any_real_case))
    rep = report_json(store)
    info = run_json("info", str(store), "-f", "json", "-q")
    state, clog = rep["state"], info["commitLog"]
    assert (state["minPhyOffset"], state["maxPhyOffset"]) == (clog["minPhyOffset"], clog["maxPhyOffset"])
    assert state["firstStoreTimestamp"] == clog["firstStoreTimestamp"]
    assert state["lastStoreTimestamp"] == clog["lastStoreTimestamp"]
    assert state["cleanShutdown"] == info["cleanShutdown"]
    assert state["version"]["family"] == info["brokerFamily"]
    assert rep["queues"] == info["queues"]
    # every commit log file of info, with its size, on the timeline
    assert [(f["name"], f["size"]) for f in rep["commitLogFiles"]] == [(f["name"], f["size"]) for f in clog["files"]]


def test_messages_are_the_records_check_reads(real_case):
    """The one walk counts what check's full walk reads (records of every topic)."""
    store = store_of(case_dir(real_case))
    rep = report_json(store)
    r = runner.invoke(app, ["check", str(store), "-f", "json", "-q"])
    counts = json.loads(r.stdout)["summary"]
    assert rep["traffic"]["messages"] == counts["records"] == sum(t["messages"] for t in rep["topics"])
    assert sum(sum(s["messages"]) for s in rep["traffic"]["series"]) == counts["records"]
    assert sum(f["records"] for f in rep["commitLogFiles"]) == counts["records"]


OFFSETS = (
    b'{\n\t"offsetTable":{\n\t\t"TopicA@GroupA":{0:10,1:63,2:0,3:30\n\t\t},\n\t\t"TopicB@GroupB":{1:5\n\t\t}\n\t}\n}'
)


def test_lag_equals_offsets(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_bytes(OFFSETS)
    rep = report_json(root)
    rows = run_json("offsets", str(root), "-f", "json")["offsets"]
    shown = {
        (g["group"], q["topic"], q["queueId"]): (q["consumerOffset"], q["minOffset"], q["maxOffset"], q["lag"], q["lastConsumedAt"])
        for g in rep["consumers"]
        for q in g["queues"]
    }  # fmt: skip
    want = {
        (r["group"], r["topic"], r["queueId"]): (r["consumerOffset"], r["minOffset"], r["maxOffset"], r["lag"], r["lastConsumedTimestamp"])
        for r in rows
    }  # fmt: skip
    assert shown == want and len(shown) == 8
    lags = [g["lag"] for g in rep["consumers"]]
    assert lags == sorted(lags, reverse=True) and rep["consumers"][0]["group"] == "GroupA"


def test_expiry_equals_expire_dry_run(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    old = time.time() - 10 * 86400
    for f in sorted((root / "commitlog").iterdir())[:2]:
        os.utime(f, (old, old))
    with open(root.parent / "broker.conf", "a") as conf:
        conf.write("\ndeleteWhen=04\nfileReservedTime=72\n")
    rep = report_json(root)
    expiry = rep["expiry"]
    at = expiry["nextRunMs"]
    plan = run_json("expire", str(root), "--dry-run", "--now", str(at), "-f", "json")
    mine = [(str(root / a["path"]), a["size"], a["reason"]) for a in expiry["plan"]["actions"]]
    assert mine == [(a["path"], a["bytes"], a["why"]) for a in plan["actions"]]
    assert expiry["plan"]["newMinPhyOffset"] == plan["summary"]["newMinPhyOffset"] == 65536
    assert expiry["freedBytes"] == plan["summary"]["freedBytes"] > 0
    assert [a["path"] for a in expiry["plan"]["actions"] if a["kind"] == "commitlog"] == [
        "commitlog/00000000000000000000",
        "commitlog/00000000000000032768",
    ]
    day0 = expiry["forecast"][0]
    assert day0["atMs"] == at and day0["expiredBytes"] == 2 * 32768
    assert [d["atMs"] - at for d in expiry["forecast"]] == [i * DAY_MS for i in range(14)]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _page_tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Page()
    p.feed(text)
    return p.tags


def test_page_stands_alone_and_escapes_store_text(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    hostile = b'{\n\t"offsetTable":{\n\t\t"TopicA@<script>alert(1)</script>":{0:1\n\t\t}\n\t}\n}'
    (root / "config" / "consumerOffset.json").write_bytes(hostile)
    out = tmp_path / "page.html"
    r = runner.invoke(app, ["report", str(root), "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    tags = _page_tags(text)
    names = {t for t, _ in tags}
    assert "script" not in names and "link" not in names and "img" not in names and "iframe" not in names
    assert not [a for _, a in tags if {"src", "href"} & set(a)]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    charts = [a["data-chart"] for t, a in tags if t == "figure"]
    assert {"disk-kinds", "disk-topics", "commitlog-files", "traffic-messages", "traffic-bytes", "top-queues", "group-lag", "forecast"} <= set(charts)  # fmt: skip


def test_several_stores_summary_first(tmp_path):
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    doc = run_json("report", f"{REAL_STORES}/*/store", "-f", "json", "--check", "quick", "-q")
    assert [s["store"] for s in doc["summary"]] == [s["store"] for s in doc["stores"]]
    assert len(doc["stores"]) == 3
    crash = next(s for s in doc["stores"] if "crash-midwrite" in s["store"])
    assert crash["state"]["cleanShutdown"] is False and crash["verdict"]["recovery"]["mode"] == "abnormal"
    out = tmp_path / "all.html"
    runner.invoke(app, ["report", f"{REAL_STORES}/*/store", "-o", str(out), "-q"])
    text = out.read_text()
    assert text.index("<h2>Summary</h2>") < text.index('<section class="store"')
    assert text.count('<section class="store"') == 3


def test_page_of_ten_thousand_queues_is_under_5_mb(tmp_path):
    """The page's tables are capped: a store of 10,000 queues (and 1,000 groups) stays small."""
    with open_store(
        store_of(REAL_STORES / "clean-2topics") if REAL_STORES.is_dir() else Path("fixtures/stores/small/store")
    ) as st:
        base = gather_report(st, now_ms=int(time.time() * 1000))
    queues = tuple(QueueInfo(f"Topic{i // 8:04d}", i % 8, 1, 0, 1000, 0, 0) for i in range(10_000))
    lag = tuple(QueueLag(q.topic, q.queue_id, 1, 0, 1000, 999, 1) for q in queues[:100])
    groups = tuple(GroupLag(f"Group{i:04d}", 99_900, 1, lag) for i in range(1_000))
    big = dataclasses.replace(base, queues=queues, consumers=groups)
    text = render_page([big], title="big", generated_ms=0)
    assert len(text.encode()) < 5_000_000
