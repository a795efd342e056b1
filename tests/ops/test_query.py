"""`query`: key / unique-key lookups through the index, --scan, queue offset and time lookups.

Expected answers come from the real 4.4.0 engine (truth.json ``queries[]``, ``queues[]``) or from
a brute-force pass over the commit log written here, never from the query module itself.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REAL_CASES, REAL_STORES, case_dir, copy_real_store, is_crash, load_truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.commitlog import TRANSACTION_ROLLBACK_TYPE, Record, encode_properties, encode_record
from rmqstore.codec.indexfile import IndexFile, file_size, is_time_matched, new_index_header_after
from rmqstore.codec.javahash import index_key_hash
from rmqstore.ops import query as q
from rmqstore.store import lookup, open_store
from rmqstore.timeparse import FORMS
from rmqstore.walk.chain import iter_commitlog

runner = CliRunner()


# -- helpers -------------------------------------------------------------------------------------------


def unique_pairs(truth: dict) -> set[tuple[str, str]]:
    """(topic, key) pairs of truth queries that are UNIQ_KEYs of that topic."""
    return {(r["topic"], r["uniqKey"]) for r in truth["commitlog"] if r["kind"] == "message" and r.get("uniqKey")}


def client_filter(query: dict, unique: bool) -> list[int]:
    """What a client keeps of the engine's answer: real matches only, each message once.

    The engine compares key hashes only (false positives) and names a message twice when it was
    indexed twice after a recovery; neither is a message the user asked for.
    """
    keep = set()
    for h in query["hits"]:
        if h["topic"] != query["topic"]:
            continue
        if unique and h["uniqKey"] == query["key"]:
            keep.add(h["commitLogOffset"])
        if not unique and query["key"] in (h["keys"] or "").split(" "):
            keep.add(h["commitLogOffset"])
    return sorted(keep)


def records_of(root: Path) -> list[Record]:
    with open_store(root) as st:
        return [rec for _, rec in iter_commitlog(st) if isinstance(rec, Record)]


def brute_force(records: list[Record], topic: str, key: str, unique: bool, begin: int = 0, end: int = 2**63 - 1):
    """Every message the broker indexed under topic#key and a client accepts, ascending."""
    out = []
    for r in records:
        if r.transaction_type == TRANSACTION_ROLLBACK_TYPE or r.topic != topic:
            continue
        if not begin <= r.store_timestamp_ms <= end:
            continue
        if (unique and r.uniq_key == key) or (not unique and key in (r.keys or "").split(" ")):
            out.append(r)
    return out


def offsets(result: q.KeyQueryResult) -> list[int]:
    return [r.phy_offset for r in result.hits]


def set_conf(root: Path, **values: object) -> None:
    conf = root.parent / "broker.conf"
    lines = [ln for ln in conf.read_text().splitlines() if ln.split("=")[0].strip() not in values]
    lines += [f"{k}={v}" for k, v in values.items()]
    conf.write_text("\n".join(lines) + "\n")


# -- against the real engine -----------------------------------------------------------------------------


def test_every_key_and_unique_key_matches_engine(any_real_case: str) -> None:
    real_case = any_real_case
    truth = load_truth(real_case)
    uniq = unique_pairs(truth)
    aborted = truth["beforeOpen"]["abortExists"]
    dup_queries = 0
    with open_store(case_dir(real_case) / "store") as st, q.Searcher(st) as searcher:
        for query in truth["queries"]:
            topic, key = query["topic"], query["key"]
            unique = (topic, key) in uniq
            # truth.json asked the engine for 64 entries in both cases; --all keeps every copy.
            if unique:
                r = searcher.uniq(topic, key, max_num=64, all_copies=True)
            else:
                r = searcher.key(topic, key)
            want = client_filter(query, unique)
            assert offsets(r) == want, (topic, key)
            by_offset = {h["commitLogOffset"]: h for h in query["hits"]}
            for rec in r.hits:
                h = by_offset[rec.phy_offset]
                got = {"topic": rec.topic, "queueId": rec.queue_id, "queueOffset": rec.queue_offset}
                got |= {"keys": rec.keys, "uniqKey": rec.uniq_key, "msgId": rec.msg_id}
                assert got == {k: h[k] for k in got}
            engine_raw = sorted(h["commitLogOffset"] for h in query["hits"])
            if len(engine_raw) != len(set(engine_raw)):
                dup_queries += 1
                assert len(offsets(r)) == len(set(engine_raw))  # each message once
            if not aborted:
                # Same index files as the engine used: the raw answer is the engine's, entry for entry.
                assert sorted(r.raw_phy_offsets) == engine_raw
                if engine_raw:  # the engine reports these only with a non-empty answer
                    assert r.index_last_update_phy_offset == query["indexLastUpdatePhyoffset"]
                    assert r.index_last_update_timestamp_ms == query["indexLastUpdateTimestamp"]
    if is_crash(real_case):
        assert dup_queries > 0  # the engine re-indexed the record at the kept file's endPhyOffset


def test_unique_key_keeps_earliest_stored(real_case: str) -> None:
    truth = load_truth(real_case)
    stored = {r["offset"]: r for r in truth["commitlog"] if r["kind"] == "message"}
    with open_store(REAL_STORES / real_case / "store") as st, q.Searcher(st) as searcher:
        for query in truth["queries"]:
            if (query["topic"], query["key"]) not in unique_pairs(truth):
                continue
            want = client_filter(query, True)
            r = searcher.uniq(query["topic"], query["key"])
            assert r.max_num == 32  # defaultQueryMaxNum
            if not want:  # a ROLLBACK record's key: never indexed
                assert offsets(r) == []
                continue
            earliest = min(want, key=lambda o: stored[o]["storeTimestamp"])
            assert offsets(r) == [earliest]


def test_scan_gives_identical_results(real_case: str) -> None:
    truth = load_truth(real_case)
    uniq = unique_pairs(truth)
    with open_store(REAL_STORES / real_case / "store") as st, q.Searcher(st) as searcher:
        for query in truth["queries"]:
            unique = (query["topic"], query["key"]) in uniq
            fn = searcher.uniq if unique else searcher.key
            a = fn(query["topic"], query["key"])
            b = fn(query["topic"], query["key"], scan=True)
            assert b.method == "scan"
            assert offsets(b) == offsets(a)
            assert [r.to_json() for r in b.hits] == [r.to_json() for r in a.hits]


def test_crash_store_tail_is_scanned_and_dropped_index_file_ignored() -> None:
    if "crash-midwrite" not in REAL_CASES or not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    truth = load_truth("crash-midwrite")
    tail_keys = {r["keys"].split(" ")[0] for r in truth["commitlog"][-20:] if r["kind"] == "message"}
    with open_store(REAL_STORES / "crash-midwrite" / "store") as st:
        r = q.query_key(st, "TopicA", sorted(tail_keys)[0])
        r = r if r.hits else q.query_key(st, "TopicB", sorted(tail_keys)[0])
    assert r.method == "index+tail"
    assert any("abort file present: 1 index file(s)" in n for n in r.notices)
    kept = truth["indexFiles"][1]  # the engine kept the two full files and rebuilt the third
    assert r.tail_from_phy == kept["endPhyOffset"]


# -- a store whose index has 4 slots: long chains and real hash collisions ----------------------------------

T_GAP = 10_000


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Record], dict[str, int]]:
    """clean-2topics plus six crafted records, re-indexed with maxHashSlotNum=4, maxIndexNum=64.

    "TopicA#Aa" and "TopicA#BB" have the same Java hash (so do the two crafted UNIQ_KEYs), so the
    raw index answer for one names the other. The record at a full file's endPhyOffset is indexed
    again at the start of the next file, as the broker's re-dispatch does, so it is named twice.
    """
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    assert index_key_hash("TopicA#Aa") == index_key_hash("TopicA#BB")
    root = copy_real_store("clean-2topics", tmp_path_factory.mktemp("tiny"))
    recs = records_of(root)
    last = recs[-1]
    seg = sorted((root / "commitlog").iterdir())[-1]
    pos = last.phy_offset + last.total_size - int(seg.name)
    t0 = last.store_timestamp_ms
    crafted = [
        ("c1", {"KEYS": "Aa win"}, 0),
        ("c2", {"KEYS": "BB"}, 0),
        ("c3", {"KEYS": "Aa", "UNIQ_KEY": "U" * 30 + "Aa"}, 0),
        ("c4", {"KEYS": "x", "UNIQ_KEY": "U" * 30 + "BB"}, 0),
        ("c5", {"KEYS": "Aa win"}, TRANSACTION_ROLLBACK_TYPE),  # never indexed
        ("c6", {"KEYS": "win", "UNIQ_KEY": "U" * 30 + "Aa"}, 0),  # a second copy of c3's unique key
    ]
    where: dict[str, int] = {}
    data = bytearray()
    for n, (name, props, sys_flag) in enumerate(crafted, start=1):
        phy = int(seg.name) + pos + len(data)
        where[name] = phy
        data += encode_record(
            topic="TopicA",
            queue_id=0,
            queue_offset=1000 + n,
            phy_offset=phy,
            sys_flag=sys_flag,
            born_timestamp_ms=t0,
            born_addr=b"\x7f\x00\x00\x01",
            born_port=1,
            store_timestamp_ms=t0 + n * T_GAP,
            store_addr=b"\x7f\x00\x00\x01",
            store_port=10911,
            body=name.encode(),
            properties=encode_properties(props),
        )
    with open(seg, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)
    recs = records_of(root)
    assert [r.phy_offset for r in recs[-6:]] == list(where.values())

    slots, entries = 4, 64
    index_dir = root / "index"
    shutil.rmtree(index_dir)
    index_dir.mkdir()
    by_phy = {r.phy_offset: r for r in recs}
    built: list[bytearray] = []
    buf = bytearray(file_size(slots, entries))
    f = IndexFile(buf, slots=slots, entries=entries)

    def keys_of(r: Record) -> list[str]:  # §5.3
        out = [f"{r.topic}#{r.uniq_key}"] if r.uniq_key is not None else []
        return out + [f"{r.topic}#{k}" for k in (r.keys or "").split(" ") if k]

    for r in recs:
        if r.transaction_type == TRANSACTION_ROLLBACK_TYPE:
            continue
        for k in keys_of(r):
            if not f.put_key(k, r.phy_offset, r.store_timestamp_ms):
                built.append(buf)
                h = f.header()
                buf = bytearray(file_size(slots, entries))
                f = IndexFile(buf, slots=slots, entries=entries)
                f.write_header(new_index_header_after(h))
                if len(built) == 3:  # re-dispatch from the full file's endPhyOffset
                    again = by_phy[h.end_phy_offset]
                    for k2 in keys_of(again):
                        assert f.put_key(k2, again.phy_offset, again.store_timestamp_ms)
                assert f.put_key(k, r.phy_offset, r.store_timestamp_ms)
    built.append(buf)
    for i, b in enumerate(built):
        (index_dir / f"20260101000000{i:03d}").write_bytes(bytes(b))
    set_conf(root, maxHashSlotNum=slots, maxIndexNum=entries)
    return root, recs, where


def test_tiny_index_has_long_chains(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, _, _ = tiny
    files = sorted((root / "index").iterdir())
    assert len(files) > 20
    for p in files[:-1]:
        f = IndexFile(bytearray(p.read_bytes()), slots=4, entries=64)
        used = int((f.slots_array() > 0).sum())
        assert used == 4 and (f.header().index_count - 1) / used >= 15  # every slot, chains of 15+


def test_tiny_index_exact_for_every_key(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, recs, _ = tiny
    # Brute force: every record under each (topic, key, unique) it is indexed by, in commit log order.
    want: dict[tuple[str, str, bool], list[Record]] = {}
    for r in recs:
        if r.transaction_type == TRANSACTION_ROLLBACK_TYPE:
            continue
        keys = {(r.topic, r.uniq_key, True)} if r.uniq_key else set()
        keys |= {(r.topic, k, False) for k in (r.keys or "").split(" ") if k}
        for k in keys:
            want.setdefault(k, []).append(r)
    with open_store(root) as st, q.Searcher(st) as searcher:
        assert st.config.max_hash_slot_num == 4
        for (topic, key, unique), expected in sorted(want.items(), key=lambda kv: kv[0]):
            if unique:
                r = searcher.uniq(topic, key, all_copies=True)
                first = searcher.uniq(topic, key)
                assert offsets(first) == [min(expected, key=lambda x: x.store_timestamp_ms).phy_offset]
                s = searcher.uniq(topic, key, all_copies=True, scan=True)
            else:
                r = searcher.key(topic, key)
                s = searcher.key(topic, key, scan=True)
            assert r.method == "index"
            assert offsets(r) == [w.phy_offset for w in expected], (topic, key)
            assert offsets(s) == offsets(r)


def test_tiny_index_collisions_and_duplicates_are_dropped(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, recs, where = tiny
    with open_store(root) as st:
        r = q.query_key(st, "TopicA", "Aa")
        assert offsets(r) == [where["c1"], where["c3"]]
        assert where["c2"] in r.raw_phy_offsets  # the engine would return BB's message too
        why = {x.phy_offset: x.why for x in r.rejected}
        assert why[where["c2"]].startswith("hash collision")
        assert where["c5"] not in r.raw_phy_offsets  # ROLLBACK is never indexed

        u = q.query_uniq(st, "TopicA", "U" * 30 + "Aa")
        assert offsets(u) == [where["c3"]]  # c6 is a later copy, c4 a collision
        assert where["c4"] in u.raw_phy_offsets and where["c6"] in u.raw_phy_offsets

        # The record indexed twice: named twice by the raw answer, once in the hits.
        seen_twice = []
        for rec in recs:
            for k in (rec.keys or "").split(" "):
                if k:
                    res = q.query_key(st, rec.topic, k)
                    if len(res.raw_phy_offsets) != len(set(res.raw_phy_offsets)):
                        seen_twice.append(res)
            if seen_twice:
                break
        assert seen_twice
        res = seen_twice[0]
        assert len(offsets(res)) == len(set(offsets(res))) == len(set(res.raw_phy_offsets))
        assert any(x.why.startswith("duplicate") for x in res.rejected)


def test_tiny_index_time_window(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, recs, where = tiny
    t1 = next(r.store_timestamp_ms for r in recs if r.phy_offset == where["c1"])
    with open_store(root) as st:
        for begin, end, want in (
            (t1 - T_GAP // 2, t1 + T_GAP // 2, ["c1"]),
            (t1 + T_GAP // 2, t1 + 3 * T_GAP, ["c3"]),
            (t1 + 3 * T_GAP, 2**63 - 1, []),
        ):
            for scan in (False, True):
                r = q.query_key(st, "TopicA", "Aa", begin_ms=begin, end_ms=end, scan=scan)
                assert offsets(r) == [where[w] for w in want]
        # max: the newest entries win, as the index walks newest first
        r = q.query_key(st, "TopicA", "win", max_num=1)
        assert offsets(r) == [where["c6"]] and r.limited


def broker_walk(files: list[IndexFile], index_key: str, max_num: int, begin: int, end: int) -> list[int]:
    """IndexService.queryOffset over every file, newest first (§5.4), with no shortcut."""
    found: list[int] = []
    for f in reversed(files):
        h = f.header()
        if is_time_matched(h, begin, end):
            f.select_phy_offsets(index_key, max_num=max_num, begin_ms=begin, end_ms=end, found=found)
        if h.begin_timestamp_ms < begin or len(found) >= max_num:
            break
    return found


def test_index_walk_equals_broker_walk_for_any_window(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, recs, _ = tiny
    files = [IndexFile(bytearray(p.read_bytes()), slots=4, entries=64) for p in sorted((root / "index").iterdir())]
    heads = [f.header() for f in files]
    edges = sorted({t for h in heads for t in (h.begin_timestamp_ms, h.end_timestamp_ms)})
    windows = [(0, t - 1) for t in edges] + [(t, t + 1) for t in edges[::3]]
    windows += [(a, b) for a, b in zip(edges[::4], edges[5::4], strict=False)]
    keys = sorted({f"{r.topic}#{k}" for r in recs[::70] for k in (r.keys or "").split(" ") if k})
    with open_store(root) as st, q.IndexSet(st) as idx:
        for begin, end in windows:
            for k in keys:
                found: list[int] = []
                idx.lookup(k, max_num=64, begin_ms=begin, end_ms=end, found=found)
                assert found == broker_walk(files, k, 64, begin, end), (k, begin, end)


def test_cli_raw_shows_collision(tiny: tuple[Path, list[Record], dict[str, int]]) -> None:
    root, _, where = tiny
    res = runner.invoke(app, ["query", "key", str(root), "TopicA", "Aa", "--raw", "-f", "json"])
    assert res.exit_code == 0
    rows = {row["commitLogOffset"]: row["verdict"] for row in json.loads(res.stdout)}
    assert rows[where["c1"]] == "match" and rows[where["c3"]] == "match"
    assert rows[where["c2"]].startswith("hash collision")


# -- fallback to a scan ------------------------------------------------------------------------------------------


def _expected_for(case: str, topic: str, key: str) -> list[int]:
    truth = load_truth(case)
    query = next(x for x in truth["queries"] if (x["topic"], x["key"]) == (topic, key))
    return client_filter(query, False)


@pytest.mark.parametrize(
    "damage, notice",
    [
        ("rm-index", "no index files"),
        ("disabled", "messageIndexEnable=false"),
        ("truncate", "bytes, expected"),
        ("bad-count", "indexCount"),
    ],
)
def test_unusable_index_falls_back_to_scan(tmp_path: Path, damage: str, notice: str) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    newest = sorted((root / "index").iterdir())[-1]
    if damage == "rm-index":
        shutil.rmtree(root / "index")
    elif damage == "disabled":
        set_conf(root, messageIndexEnable="false")
    elif damage == "truncate":
        os.truncate(newest, 100)
    else:
        with open(newest, "r+b") as fh:
            fh.seek(36)
            fh.write((10**6).to_bytes(4, "big"))
    with open_store(root) as st:
        r = q.query_key(st, "TopicA", "order-68")
    assert r.method == "scan"
    assert notice in r.notices[0] and r.notices[0].startswith("index not usable")
    assert offsets(r) == _expected_for("clean-2topics", "TopicA", "order-68")
    res = runner.invoke(app, ["query", "key", str(root), "TopicA", "order-68", "-f", "json", "-q"])
    assert res.exit_code == 0
    assert res.stderr.splitlines()[0].startswith("note: index not usable (")
    assert [m["commitLogOffset"] for m in json.loads(res.stdout)] == offsets(r)


def test_index_behind_commit_log_is_completed_by_tail_scan(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    truth = load_truth("clean-2topics")
    sorted((root / "index").iterdir())[-1].unlink()  # as if dispatch stopped when the 2nd file filled
    uniq = unique_pairs(truth)
    with open_store(root) as st:
        for query in truth["queries"][::7]:
            unique = (query["topic"], query["key"]) in uniq
            fn = q.query_uniq if unique else q.query_key
            r = (
                fn(st, query["topic"], query["key"], all_copies=True)
                if unique
                else fn(st, query["topic"], query["key"])
            )
            assert offsets(r) == client_filter(query, unique)
            assert r.tail_from_phy == truth["indexFiles"][1]["endPhyOffset"]


def test_expired_commit_log_file_hits_are_unreadable(tmp_path: Path) -> None:
    root = copy_real_store("clean-2topics", tmp_path)
    first = sorted((root / "commitlog").iterdir())[0]
    size = first.stat().st_size
    first.unlink()
    with open_store(root) as st:
        r = q.query_key(st, "TopicA", "order-0")
    want = [o for o in _expected_for("clean-2topics", "TopicA", "order-0") if o >= size]
    assert offsets(r) == want
    assert all(x.why.startswith("unreadable") for x in r.rejected)
    assert r.rejected


# -- message ids -----------------------------------------------------------------------------------------------


def test_offset_msg_ids_read_directly(real_case: str) -> None:
    truth = load_truth(real_case)
    with open_store(REAL_STORES / real_case / "store") as st:
        for queue in truth["queues"]:
            for m in queue["messages"][::3]:
                r = q.query_msg_id(st, m["msgId"].lower())
                assert r.kind == "offset"
                assert [h.phy_offset for h in r.hits] == [m["commitLogOffset"]]


def test_unique_key_ids_in_every_topic() -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    truth = load_truth("delay-tx-retry")
    msgs = [r for r in truth["commitlog"] if r["kind"] == "message"]
    with open_store(REAL_STORES / "delay-tx-retry" / "store") as st:
        for uk in sorted({r["uniqKey"] for r in msgs}):
            want_by_topic: dict[str, dict] = {}
            for r in msgs:
                if r["uniqKey"] == uk and r["sysFlag"] & 0xC != 0xC:
                    best = want_by_topic.get(r["topic"])
                    if best is None or r["storeTimestamp"] < best["storeTimestamp"]:
                        want_by_topic[r["topic"]] = r
            want = sorted(r["offset"] for r in want_by_topic.values())
            for scan in (False, True):
                got = q.query_msg_id(st, uk, scan=scan)
                assert got.kind == "unique"
                assert [h.phy_offset for h in got.hits] == want, uk
        # the delayed message: its SCHEDULE_TOPIC_XXXX copy and the copy re-put when it became due
        re_put = next(r for r in msgs if r["topic"] == "TopicDelay")
        both = q.query_msg_id(st, re_put["uniqKey"])
        assert sorted(h.topic for h in both.hits) == ["SCHEDULE_TOPIC_XXXX", "TopicDelay"]
        one = q.query_msg_id(st, re_put["uniqKey"], topics=["TopicDelay"])
        assert [h.phy_offset for h in one.hits] == [re_put["offset"]]


# -- consume queue lookups ----------------------------------------------------------------------------------------


def _same_as_engine(rec: Record, m: dict) -> None:
    j = rec.to_json(body="base64")
    for k, v in m.items():
        if k == "bodySha256":
            assert hashlib.sha256(rec.body).hexdigest() == v
        elif k == "body":
            assert base64.b64decode(j["body"]) == base64.b64decode(v)
        else:
            assert j[k] == v, k


def test_queue_offset_matches_engine_messages(real_case: str) -> None:
    truth = load_truth(real_case)
    with open_store(REAL_STORES / real_case / "store") as st:
        for queue in truth["queues"]:
            for m in queue["messages"]:
                hit = lookup.query_queue_offset(st, queue["topic"], queue["queueId"], m["queueOffset"])
                assert hit.record is not None, (queue["topic"], queue["queueId"], m["queueOffset"])
                _same_as_engine(hit.record, m)
            if real_case != "crash-midwrite":
                b = lookup.queue_bounds(st, queue["topic"], queue["queueId"])
                assert (b.min_offset, b.max_offset) == (queue["minOffset"], queue["maxOffset"])
            miss = lookup.query_queue_offset(st, queue["topic"], queue["queueId"], queue["maxOffset"])
            assert miss.record is None and "outside" in miss.notices[-1]


def test_queue_offset_filler_entry(tmp_path: Path) -> None:
    root = copy_real_store("delay-tx-retry", tmp_path)
    first = root / "consumequeue" / "TopicOrder" / "0" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    real = bytes(data[:20])
    data[:20] = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + (0).to_bytes(8, "big")
    data[20:40] = real  # queue offset 1 now holds the message; 0 is a fillPreBlank filler
    first.write_bytes(bytes(data))
    with open_store(root) as st:
        hit = lookup.query_queue_offset(st, "TopicOrder", 0, 0)
        assert hit.record is None and "filler" in hit.notices[-1]
        assert lookup.query_queue_offset(st, "TopicOrder", 0, 1).record is not None


def reference_offset_by_time(times: list[int], per_file: int, ts: int) -> set[int]:
    """getOffsetInQueueByTime with the file picked by its last message's store time."""
    files = [list(range(i, min(i + per_file, len(times)))) for i in range(0, len(times), per_file)]
    pick = next((f for f in files if times[f[-1]] >= ts), files[-1])
    exact = {o for o in pick if times[o] == ts}
    if exact:
        return exact  # the search may stop at any of equal times
    below = [o for o in pick if times[o] < ts]
    above = [o for o in pick if times[o] > ts]
    if not below:
        return {above[0]}
    if not above:
        return {below[-1]}
    left, right = below[-1], above[0]
    return {right} if abs(ts - times[left]) > abs(ts - times[right]) else {left}


@pytest.mark.parametrize("case", ["clean-2topics", "delay-tx-retry"])
def test_offset_by_time(case: str, tmp_path: Path) -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    truth = load_truth(case)
    per_file = truth["config"]["mapedFileSizeConsumeQueue"] // 20
    stored = {r["offset"]: r["storeTimestamp"] for r in truth["commitlog"] if r["kind"] == "message"}
    root = copy_real_store(case, tmp_path)
    with open_store(root) as st:
        for queue in truth["queues"]:
            times = [stored[e["commitLogOffset"]] for e in queue["entries"]]
            probes = {0, times[0] - 1, times[-1] + 1, 2**62}
            probes |= {t + d for t in times[::2] for d in (-1, 0, 1)}
            probes |= {(a + b) // 2 for a, b in zip(times, times[1:], strict=False)}
            for ts in sorted(probes):
                hit = lookup.offset_by_time(st, queue["topic"], queue["queueId"], ts)
                assert hit.queue_offset in reference_offset_by_time(times, per_file, ts), (queue["topic"], ts)
                assert (
                    hit.record is not None
                    and hit.record.phy_offset == queue["entries"][hit.queue_offset]["commitLogOffset"]
                )
        # The broker picks the file by mtime: with mtimes set to the files' last store times it agrees.
        queue = max(truth["queues"], key=lambda x: len(x["entries"]))
        times = [stored[e["commitLogOffset"]] for e in queue["entries"]]
        qdir = root / "consumequeue" / queue["topic"] / str(queue["queueId"])
        for n, p in enumerate(sorted(qdir.iterdir())):
            last = times[min(len(times), (n + 1) * per_file) - 1]
            os.utime(p, ns=(last * 1_000_000, last * 1_000_000))
        for ts in times[::3]:
            a = lookup.offset_by_time(st, queue["topic"], queue["queueId"], ts)
            b = lookup.offset_by_time(st, queue["topic"], queue["queueId"], ts, file_by_mtime=True)
            assert a.queue_offset == b.queue_offset
        assert lookup.offset_by_time(st, "NoSuchTopic", 0, 5).queue_offset == 0


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_key_and_alias() -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    store = str(REAL_STORES / "clean-2topics" / "store")
    want = _expected_for("clean-2topics", "TopicA", "order-68")
    outs = []
    for cmd in (["query", "key"], ["query-by-key"]):
        res = runner.invoke(app, [*cmd, store, "TopicA", "order-68", "-f", "json"])
        assert res.exit_code == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [r["commitLogOffset"] for r in rows] == want
        assert all("order-68" in r["keys"].split(" ") and "body" in r for r in rows)
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    res = runner.invoke(app, ["query", "key", store, "TopicA", "order-68", "-f", "ndjson", "--body", "none"])
    assert [json.loads(line)["commitLogOffset"] for line in res.stdout.splitlines()] == want
    res = runner.invoke(app, ["query", "key", store, "TopicA", "order-68", "-f", "csv", "--body", "hex"])
    assert (
        res.stdout.splitlines()[0].startswith("kind,commitLogOffset,storeSize,topic,")
        and len(res.stdout.splitlines()) == 4
    )


def test_cli_not_found_and_errors() -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    store = str(REAL_STORES / "clean-2topics" / "store")
    res = runner.invoke(app, ["query", "key", store, "TopicA", "no-such-key", "-f", "json"])
    assert (res.exit_code, res.stdout, res.stderr.splitlines()[0]) == (0, "[]\n", "no message found")
    res = runner.invoke(app, ["query", "key", store + "-missing", "TopicA", "k"])
    assert res.exit_code == 5 and res.stderr.splitlines()[0].startswith("error: ")
    res = runner.invoke(app, ["query", "key", store, "TopicA", "k", "--begin", "yesterday"])
    assert res.exit_code == 1
    assert res.stderr.splitlines()[0] == f"error: time 'yesterday' is not {FORMS}"
    res = runner.invoke(app, ["query", "id", store, "not-an-id"])
    assert res.exit_code == 1 and res.stderr.splitlines()[0].startswith("error: message id 'not-an-id'")
    res = runner.invoke(app, ["query", "offset", store, "TopicA", "1", "500"])
    assert res.exit_code == 0 and res.stderr.splitlines()[0] == "note: queue offset 500 is outside TopicA/1's [0, 63)"


def test_cli_uniq_id_offset_time() -> None:
    if not REAL_STORES.is_dir():
        pytest.skip("real stores not found")
    truth = load_truth("clean-2topics")
    store = str(REAL_STORES / "clean-2topics" / "store")
    m = truth["queues"][1]["messages"][5]
    uk = m["properties"]["UNIQ_KEY"]
    for args in (
        ["query", "uniq", store, m["topic"], uk],
        ["query", "id", store, m["msgId"]],
        ["query", "id", store, f"{uk},{m['msgId']}"],
        ["query", "offset", store, m["topic"], str(m["queueId"]), str(m["queueOffset"])],
        ["query", "time", store, m["topic"], str(m["queueId"]), str(m["storeTimestamp"])],
    ):
        res = runner.invoke(app, [*args, "-f", "json"])
        assert res.exit_code == 0, (args, res.stderr)
        rows = json.loads(res.stdout)
        assert {r["commitLogOffset"] for r in rows} == {m["commitLogOffset"]}, args
        _same_as_engine_json(rows[0], m)
    # the three time formats name the same instant
    ts = m["storeTimestamp"]
    utc = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
    local = dt.datetime.fromtimestamp(ts / 1000)
    spellings = [
        str(ts),
        utc.isoformat(timespec="milliseconds"),
        local.strftime("%Y-%m-%d#%H:%M:%S:") + f"{ts % 1000:03d}",
    ]
    got = set()
    for t in spellings:
        res = runner.invoke(app, ["query", "time", store, m["topic"], str(m["queueId"]), t, "-f", "json"])
        assert res.exit_code == 0, res.stderr
        got.add(json.loads(res.stdout)[0]["queueOffset"])
    assert got == {m["queueOffset"]}


def _same_as_engine_json(row: dict, m: dict) -> None:
    for k, v in m.items():
        if k in ("body", "bodySha256"):
            continue
        assert row[k] == v, k
