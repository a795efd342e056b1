"""`rmqstore dump` against the real 4.4.0 stores and their truth.json, intact and damaged.

Every message row of ``dump commitlog --format ndjson`` must equal the message the engine served
(truth.json ``queues[].messages[]``) field for field; damaged copies (bit flips, zeroed tails, cut
records, garbage) must report exactly the damaged byte ranges and still list every intact record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import INDEX_HEADER_FIELDS, REPO, case_dir, copy_real_store, killed_leaves_no_worker, load_truth
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.columnar import well_formed_records
from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    Record,
    decode_record,
    encode_blank,
    encode_properties,
    encode_record,
)
from rmqstore.codec.dledger import DLEDGER
from rmqstore.codec.framing import magic_positions
from rmqstore.codec.javahash import index_key_hash
from rmqstore.errors import CorruptData
from rmqstore.ops import dump as lib
from rmqstore.store import open_store
from rmqstore.timeparse import format_time_ms

runner = CliRunner()
MAX_INLINE_BODY = 64 * 1024  # truth.json gives bodies over 64 KiB as bodySha256
FILE_SIZE = 32768  # the real stores' mapedFileSizeCommitLog


def dump(*args: str, code: int = 0):
    r = runner.invoke(app, ["dump", *map(str, args)])
    assert "Traceback" not in r.output, r.output
    assert r.exit_code == code, (r.exit_code, r.stdout[-2000:], r.stderr[-2000:])
    return r


def ndjson(*args: str, code: int = 0) -> list[dict]:
    return [json.loads(line) for line in dump("commitlog", *args, "-f", "ndjson", code=code).stdout.splitlines()]


def messages(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["kind"] == "message"]


def served_fields(rows: list[dict]) -> list[dict]:
    """Message rows with the fields of a served message only (as truth.json holds them)."""
    return [{k: v for k, v in r.items() if k not in DERIVED_FIELDS} for r in messages(rows)]


def spans(rows: list[dict], kind: str | None = None) -> list[tuple[str, int, int]]:
    return [
        (r["kind"], r["commitLogOffset"], r["storeSize"])
        for r in rows
        if r["kind"] != "message" and kind in (None, r["kind"])
    ]


def truth_messages(truth: dict) -> dict[int, dict]:
    return {m["commitLogOffset"]: m for q in truth["queues"] for m in q["messages"]}


DLEDGER_FRAME_FIELDS = DLEDGER.frame_fields
# What a dumped message row says beyond the served message: the kind of row, and what the store time and
# the properties say (the same in every format and command).
DERIVED_FIELDS = ("kind", "storeTime", "keys", "tags", "uniqKey")


def same_as_truth(row: dict, want: dict) -> bool:
    """Field for field; a body over 64 KiB is compared through its sha256, as truth.json gives it. The
    fields of a DLedger record's entry are not a served message's (tests/compat/test_dledger_stores.py checks them)."""
    row = {k: v for k, v in row.items() if k not in DLEDGER_FRAME_FIELDS}
    props = want.get("properties") or {}
    derived = {k: row.pop(k) for k in DERIVED_FIELDS if k in row}
    assert derived == {
        "kind": "message",
        "storeTime": format_time_ms(want["storeTimestamp"]),
        "keys": props.get("KEYS") if props else "",
        "tags": props.get("TAGS"),
        "uniqKey": props.get("UNIQ_KEY"),
    }, derived
    if "bodySha256" in want:
        got = dict(row)
        got["bodySha256"] = hashlib.sha256(base64.b64decode(got.pop("body"))).hexdigest()
        return got == want
    return row == want


def truth_records(truth: dict) -> list[dict]:
    return [r for r in truth["commitlog"] if r["kind"] == "message"]


def check_against_truth(rows: list[dict], truth: dict, missing: set[int] = frozenset()) -> None:
    """Every intact record of truth.json is listed (in order), served messages field for field."""
    served = truth_messages(truth)
    by_offset = {r["commitLogOffset"]: r for r in messages(rows)}
    offsets = [r["commitLogOffset"] for r in messages(rows)]
    assert offsets == sorted(offsets)
    want = [r["offset"] for r in truth_records(truth) if r["offset"] not in missing]
    assert sorted(by_offset) == want
    for off, row in by_offset.items():
        if off in served:
            assert same_as_truth(row, served[off]), off
        else:  # prepared / rollback records: not served, but in the engine's commit log walk
            rec = next(r for r in truth["commitlog"] if r["offset"] == off)
            assert (row["topic"], row["queueId"], row["queueOffset"], row["sysFlag"], row["storeSize"]) == (
                rec["topic"], rec["queueId"], rec["queueOffset"], rec["sysFlag"], rec["size"],
            )  # fmt: skip
            assert row["storeTimestamp"] == rec["storeTimestamp"]
            assert row["preparedTransactionOffset"] == rec["preparedTransactionOffset"]
            assert row["properties"].get("UNIQ_KEY") == rec["uniqKey"]


def store_of(case: str) -> Path:
    d = case_dir(case)
    if not d.is_dir():
        pytest.skip(f"real store {case} not found at {d}")
    return d / "store"


def record_offsets(truth: dict) -> list[tuple[int, int]]:
    return [(r["offset"], r["size"]) for r in truth_records(truth)]


# ------------------------------------------------------------------------------- intact stores


def test_ndjson_equals_truth_field_for_field(any_real_case):
    real_case = any_real_case
    truth = load_truth(real_case)
    rows = ndjson(store_of(real_case))
    check_against_truth(rows, truth)
    assert len(messages(rows)) == len(truth_records(truth))
    blanks = [("blank", r["offset"], r["size"]) for r in truth["commitlog"] if r["kind"] == "blank"]
    assert spans(rows, "blank") == blanks
    # data ends where the engine says the next message goes; nothing is reported as damage
    assert spans(rows, "end")[0][1] == truth["maxPhyOffset"]
    assert spans(rows, "corrupt") == []


def test_every_byte_is_accounted_for(real_case):
    rows = ndjson(store_of(real_case))
    pieces = sorted([(r["commitLogOffset"], r["storeSize"]) for r in messages(rows)] + [s[1:] for s in spans(rows)])
    at = 0
    for off, size in pieces:
        assert off == at
        at += size
    files = sorted((store_of(real_case) / "commitlog").iterdir())
    assert at == len(files) * FILE_SIZE


def test_crash_store_lists_the_undispatched_tail_and_the_preallocated_file():
    truth = load_truth("crash-midwrite")
    rows = ndjson(store_of("crash-midwrite"))
    check_against_truth(rows, truth)
    last = 4 * FILE_SIZE
    assert spans(rows, "end") == [
        ("end", truth["maxPhyOffset"], 3 * FILE_SIZE + FILE_SIZE - truth["maxPhyOffset"]),
        ("end", last, FILE_SIZE),  # the pre-allocated, all-zero next file (§2.3)
    ]


@pytest.mark.parametrize("body", ["base64", "hex", "text", "none"])
def test_fast_ndjson_lines_equal_the_record_rows(real_case, body):
    """The direct-from-bytes formatter writes exactly json.dumps(decode_record(...).to_row())."""
    with open_store(store_of(real_case)) as st:
        segs, _ = st.commitlog_segments()
        opts = lib.MessageOptions(body=body, verify_crc=True)
        chunks: list[bytes] = []
        lib.write_ndjson(lib.CommitLogScan(segs), opts, lambda b: chunks.append(bytes(b)))
        fast = b"".join(chunks).decode().splitlines()
        slow = [
            json.dumps(x.to_json() if isinstance(x, lib.Span) else x[1], ensure_ascii=False, separators=(",", ":"))
            for x in lib.iter_messages(lib.CommitLogScan(segs), opts)
        ]
    assert fast == slow
    served = truth_messages(load_truth(real_case))
    for line in fast:
        row = json.loads(line)
        if row["kind"] != "message":
            continue
        assert row.pop("crcOk") is True
        want = dict(served.get(row["commitLogOffset"], row))
        want.pop("body", None)
        if body == "none":
            assert "body" not in row
        else:
            raw = bytes.fromhex(row["body"]) if body == "hex" else None
            if body == "base64":
                raw = base64.b64decode(row["body"])
            if raw is not None and row["commitLogOffset"] in served and "body" in served[row["commitLogOffset"]]:
                assert raw == base64.b64decode(served[row["commitLogOffset"]]["body"])
            row.pop("body")
        want.pop("bodySha256", None)
        for k in DERIVED_FIELDS:
            row.pop(k)
            want.pop(k, None)
        assert row == want


def test_parallel_workers_write_the_same_lines():
    store = store_of("clean-2topics")
    one = dump("commitlog", store, "-f", "ndjson", "--jobs", "1").stdout
    two = dump("commitlog", store, "-f", "ndjson", "--jobs", "2").stdout
    assert one == two and one.count("\n") == 504


_KILLED = textwrap.dedent(
    """\
    import os, sys, threading, time
    sys.path.insert(0, {repo!r})
    report = os.dup(1)
    _, out = os.pipe()
    os.dup2(out, 1)  # the dump's output: a pipe nobody reads, so the dump is still running when killed

    def tell_workers():
        me = os.getpid()
        while len(kids := open(f"/proc/{{me}}/task/{{me}}/children").read().split()) < 2:
            time.sleep(0.02)
        os.write(report, (" ".join(kids) + "\\n").encode())

    threading.Thread(target=tell_workers, daemon=True).start()
    from rmqstore.cli import main
    sys.argv = ["rmqstore", "dump", "commitlog", {store!r}, "-f", "ndjson", "-j", "2", "-q"]
    main()
    """
)


def test_workers_of_a_killed_dump_exit():
    store = store_of("clean-2topics")  # 504 lines: more than the pipe holds
    script = _KILLED.format(repo=str(REPO), store=str(store))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert killed_leaves_no_worker(proc)
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()  # no worker ran on into a dead pipe


def test_count(real_case):
    truth = load_truth(real_case)
    rows = json.loads(dump("commitlog", store_of(real_case), "--count", "-f", "json").stdout)
    got = {r["kind"]: r["count"] for r in rows}
    assert got["message"] == len(truth_records(truth))
    assert got["blank"] == sum(1 for r in truth["commitlog"] if r["kind"] == "blank")
    assert got["corrupt"] == 0
    by_kind = {r["kind"]: r["bytes"] for r in rows}
    assert by_kind["message"] == sum(r["size"] for r in truth_records(truth))


def test_table_and_plain_and_csv_render(real_case):
    truth = load_truth(real_case)
    plain = dump("commitlog", store_of(real_case), "-f", "plain").stdout.splitlines()
    assert plain[0].split()[:3] == ["kind", "commitLogOffset", "storeSize"]  # the csv fields, in order
    assert sum(1 for line in plain if line.startswith("message")) == len(truth_records(truth))
    csv_lines = dump("commitlog", store_of(real_case), "-f", "csv", "--limit", "3").stdout.splitlines()
    assert csv_lines[0].startswith("kind,commitLogOffset,storeSize,topic")
    assert len(csv_lines) == 4
    r = runner.invoke(
        app, ["dump", "commitlog", str(store_of(real_case)), "-f", "table", "--limit", "2"], env={"COLUMNS": "250"}
    )
    assert r.exit_code == 0 and truth_records(truth)[0]["topic"] in r.stdout
    arr = json.loads(dump("commitlog", store_of(real_case), "-f", "json", "--limit", "4").stdout)
    assert [r["commitLogOffset"] for r in arr] == [r["offset"] for r in truth_records(truth)[:4]]


# ------------------------------------------------------------------------------------- filters


def test_topic_and_queue_filter():
    truth = load_truth("clean-2topics")
    q = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == ("TopicB", 2))
    rows = ndjson(store_of("clean-2topics"), "--topic", "TopicB", "--queue", "2")
    assert served_fields(rows) == q["messages"]
    assert spans(rows) == []  # blanks and the end of data are left out of filtered output


def test_key_filter_matches_a_keys_token_or_the_uniq_key():
    truth = load_truth("clean-2topics")
    served = sorted(truth_messages(truth).values(), key=lambda m: m["commitLogOffset"])
    want = [m for m in served if "user-3" in m["properties"].get("KEYS", "").split(" ")]
    assert want
    assert served_fields(ndjson(store_of("clean-2topics"), "--key", "user-3")) == want
    uniq = served[7]["properties"]["UNIQ_KEY"]
    assert served_fields(ndjson(store_of("clean-2topics"), "--key", uniq)) == [served[7]]


def test_tag_filter_with_alternatives():
    truth = load_truth("clean-2topics")
    served = sorted(truth_messages(truth).values(), key=lambda m: m["commitLogOffset"])
    want = [m for m in served if m["properties"].get("TAGS") in ("TagA", "TagC")]
    assert served_fields(ndjson(store_of("clean-2topics"), "--tag", "TagA || TagC")) == want


def test_time_and_offset_filters():
    truth = load_truth("clean-2topics")
    recs = truth_records(truth)
    since, until = recs[100]["storeTimestamp"], recs[200]["storeTimestamp"]
    want = [r["offset"] for r in recs if since <= r["storeTimestamp"] <= until]
    iso = format_time_ms(since)  # ISO-8601 with Z
    got = messages(ndjson(store_of("clean-2topics"), "--since", iso, "--until", str(until)))
    assert [r["commitLogOffset"] for r in got] == want
    lo, hi = recs[10]["offset"], recs[20]["offset"]
    rows = ndjson(store_of("clean-2topics"), "--from-offset", lo, "--to-offset", hi)
    assert [r["commitLogOffset"] for r in messages(rows)] == [r["offset"] for r in recs[10:20]]
    # an offset inside a record starts at the next record
    rows = ndjson(store_of("clean-2topics"), "--from-offset", lo + 1, "--limit", 2)
    assert [r["commitLogOffset"] for r in rows] == [recs[11]["offset"], recs[12]["offset"]]
    assert dump("commitlog", store_of("clean-2topics"), "--limit", 0, "-f", "json").stdout == "[]\n"


def test_rocketmq_time_format(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        truth = load_truth("clean-2topics")
        ts = truth_records(truth)[50]["storeTimestamp"]
        iso = format_time_ms(ts)  # 2026-11-22T02:53:41.350Z
        rmq = f"{iso[:10]}#{iso[11:19]}:{iso[20:23]}"
        got = messages(ndjson(store_of("clean-2topics"), "--since", rmq, "--until", rmq))
        assert {r["storeTimestamp"] for r in got} == {ts}
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


# ------------------------------------------------------------------------------ damaged copies


def damaged(tmp_path: Path, case: str = "clean-2topics") -> tuple[Path, dict, list[tuple[int, int]]]:
    root = copy_real_store(case, tmp_path)
    truth = load_truth(case)
    return root, truth, record_offsets(truth)


def patch(root: Path, phy: int, data: bytes) -> None:
    path = root / "commitlog" / f"{phy - phy % FILE_SIZE:020d}"
    with open(path, "r+b") as f:
        f.seek(phy % FILE_SIZE)
        f.write(data)


def read(root: Path, phy: int, n: int) -> bytes:
    path = root / "commitlog" / f"{phy - phy % FILE_SIZE:020d}"
    with open(path, "rb") as f:
        f.seek(phy % FILE_SIZE)
        return f.read(n)


def test_body_bit_flip_is_flagged_with_verify_crc(tmp_path):
    root, truth, recs = damaged(tmp_path)
    off, _ = recs[42]
    body_pos = off + 88  # IPv4 hosts: BODYLENGTH at 84, body at 88
    patch(root, body_pos, bytes([read(root, body_pos, 1)[0] ^ 0x04]))
    rows = ndjson(root)  # no CRC check: the record decodes and is listed
    assert spans(rows, "corrupt") == []
    r = dump("commitlog", root, "-f", "ndjson", "--verify-crc", code=3)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    flagged = [m["commitLogOffset"] for m in messages(rows) if m["crcOk"] is False]
    assert flagged == [off]
    for m in messages(rows):
        m.pop("crcOk")
    check_against_truth([m for m in rows if m.get("commitLogOffset") != off], truth, missing={off})
    assert f"phy offset {off}" in r.stderr and "body CRC mismatch" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("error: 1 problem(s) found")


def test_header_bit_flip_skips_exactly_that_record(tmp_path):
    root, truth, recs = damaged(tmp_path)
    off, size = recs[7]
    patch(root, off + 2, bytes([read(root, off + 2, 1)[0] ^ 0x10]))  # TOTALSIZE
    rows = ndjson(root, code=3)
    assert spans(rows, "corrupt") == [("corrupt", off, size)]
    check_against_truth(rows, truth, missing={off})


def test_physical_offset_field_must_match_the_position(tmp_path):
    root, truth, recs = damaged(tmp_path)
    off, size = recs[30]
    patch(root, off + 28, struct.pack(">q", off + 1))
    rows = ndjson(root, code=3)
    corrupt = [r for r in rows if r.get("kind") == "corrupt"]
    assert [(r["commitLogOffset"], r["storeSize"]) for r in corrupt] == [(off, size)]
    assert "PHYSICALOFFSET" in corrupt[0]["why"]
    check_against_truth(rows, truth, missing={off})


def test_garbage_in_the_middle_of_a_file(tmp_path):
    root, truth, recs = damaged(tmp_path)
    (r1, s1), (r2, _), (r3, _), (r4, _) = recs[60:64]
    start, end = r1 + s1 // 2, r3 + 6  # from inside r1 to r3's magic code
    patch(root, start, b"\x5a" * (end - start))
    rows = ndjson(root, code=3)
    assert spans(rows, "corrupt") == [("corrupt", r1, r4 - r1)]
    check_against_truth(rows, truth, missing={r1, r2, r3})


def test_zero_tail_of_a_file_is_end_of_data_and_later_records_are_a_problem(tmp_path):
    root, truth, recs = damaged(tmp_path)
    in_first = [o for o, _ in recs if o < FILE_SIZE]
    cut = in_first[-10]
    patch(root, cut, bytes(FILE_SIZE - cut))  # the last 10 records and the BLANK of file 0
    r = dump("commitlog", root, "-f", "ndjson", code=3)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert spans(rows)[0] == ("end", cut, FILE_SIZE - cut)
    assert spans(rows, "corrupt") == []
    check_against_truth(rows, truth, missing=set(in_first[-10:]))
    assert "zeros end the data here" in r.stderr


def test_zeros_followed_by_records_in_the_same_file_are_skipped(tmp_path):
    root, truth, recs = damaged(tmp_path)
    (r1, _), (r2, _), (r3, _) = recs[20:23]
    patch(root, r1, bytes(r3 - r1))
    rows = ndjson(root, code=3)
    assert spans(rows, "corrupt") == [("corrupt", r1, r3 - r1)]
    check_against_truth(rows, truth, missing={r1, r2})


def test_torn_record_at_a_cut_file(tmp_path):
    root, truth, recs = damaged(tmp_path)
    in_second = [(o, s) for o, s in recs if FILE_SIZE <= o < 2 * FILE_SIZE]
    off, size = in_second[50]
    cut = off + 88 + 3  # inside the (ASCII, non-zero) body
    os.truncate(root / "commitlog" / f"{FILE_SIZE:020d}", cut - FILE_SIZE)
    r = dump("commitlog", root, "-f", "ndjson", code=3)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert spans(rows, "corrupt") == [("corrupt", off, cut - off)]
    lost = {o for o, _ in in_second[50:]}
    check_against_truth(rows, truth, missing=lost)
    assert "configured size is 32768" in r.stderr


def test_torn_record_before_a_blank_resyncs_at_the_blank(tmp_path):
    root, truth, recs = damaged(tmp_path)
    off, size = [(o, s) for o, s in recs if o < FILE_SIZE][-1]
    patch(root, off + size // 2, bytes(size - size // 2))  # the second half never reached the disk
    rows = ndjson(root, code=3)
    assert spans(rows)[:2] == [("corrupt", off, size), ("blank", off + size, FILE_SIZE - off - size)]
    check_against_truth(rows, truth, missing={off})


def test_file_whose_records_hold_other_offsets_is_one_damaged_span(tmp_path):
    root, truth, recs = damaged(tmp_path)
    moved = 2 * FILE_SIZE + 1  # the name says one byte later than the records do
    (root / "commitlog" / f"{2 * FILE_SIZE:020d}").rename(root / "commitlog" / f"{moved:020d}")
    rows = ndjson(root, code=3)
    in_file = [(o, s) for o, s in recs if 2 * FILE_SIZE <= o < 3 * FILE_SIZE]
    blank = in_file[-1][0] + in_file[-1][1] - 2 * FILE_SIZE
    (bad,) = [r for r in rows if r.get("kind") == "corrupt"]
    assert (bad["commitLogOffset"], bad["storeSize"]) == (moved, blank)
    assert bad["why"] == f"PHYSICALOFFSET field is {2 * FILE_SIZE}, the record is at {moved}"
    check_against_truth(rows, truth, missing={o for o, _ in in_file})


def test_count_reports_damage(tmp_path):
    root, truth, recs = damaged(tmp_path)
    off, size = recs[5]
    patch(root, off + 4, b"\0\0\0\0")  # magic code
    rows = json.loads(dump("commitlog", root, "--count", "-f", "json", code=3).stdout)
    got = {r["kind"]: (r["count"], r["bytes"]) for r in rows}
    assert got["corrupt"] == (1, size)
    assert got["message"][0] == len(recs) - 1


# ---------------------------------------------------------------- structural index vs. decoder


def _small_log(n: int, seed: int) -> bytes:
    out = bytearray()
    for i in range(n):
        flags = [0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG][
            (i + seed) % 4
        ]
        out += encode_record(
            topic=f"T{i % 3}",
            queue_id=i % 2,
            queue_offset=i,
            phy_offset=len(out),
            sys_flag=flags,
            born_timestamp_ms=1_700_000_000_000 + i,
            born_addr=bytes(16 if flags & BORNHOST_V6_FLAG else 4),
            born_port=1,
            store_timestamp_ms=1_700_000_000_000 + i,
            store_addr=bytes(range(16 if flags & STOREHOSTADDRESS_V6_FLAG else 4)),
            store_port=10911,
            body=bytes([0xDA, 0xA3, 0x20, 0xA7]) * (i % 5) + b"body",
            properties=encode_properties({"KEYS": f"k{i}", "TAGS": "t"}),
            v2=(i + seed) % 5 == 0,
        )
    return bytes(out)


@given(
    seed=st.integers(0, 20),
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=6),
)
def test_index_accepts_exactly_what_the_decoder_accepts(seed, edits):
    buf = bytearray(_small_log(8, seed))
    buf += bytes(64)
    for pos, value in edits:
        if pos < len(buf):
            buf[pos] = value
    buf = bytes(buf)
    starts = magic_positions(buf, len(buf), 0, len(buf)) - 4
    starts = starts[starts >= 0]
    got, _ = well_formed_records(buf, len(buf), 0, starts)
    want = []
    for p in range(len(buf) - 8):
        try:
            rec = decode_record(buf, p)
        except CorruptData:
            continue
        if isinstance(rec, Record) and rec.phy_offset == p:
            want.append(p)
    assert got.tolist() == want


def test_slow_path_records_ipv6_v2_and_compressed(tmp_path):
    from rmqstore.codec.commitlog import compress_body

    plain = b"hello compressed world " * 300
    stored, flag_bits = compress_body(plain)
    log = bytearray(_small_log(6, 1))
    log += encode_record(
        topic="Z", queue_id=0, queue_offset=9, phy_offset=len(log), sys_flag=flag_bits, born_timestamp_ms=1,
        born_addr=bytes(4), born_port=1, store_timestamp_ms=2, store_addr=bytes(4), store_port=3, body=stored,
        properties=encode_properties({"A": "x\"y", "B": "\u00e9"}),
    )  # fmt: skip
    log += encode_blank(FILE_SIZE - len(log))
    log += bytes(FILE_SIZE - len(log))
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(log)
    rows = ndjson(tmp_path, "--body", "text")
    assert len(messages(rows)) == 7
    last = messages(rows)[-1]
    assert last["body"] == plain.decode() and last["bodyLength"] == len(stored)
    assert last["properties"] == {"A": 'x"y', "B": "\u00e9"}
    assert {"[1:203:405:607:809:a0b:c0d:e0f]:10911", "0.1.2.3:10911"} <= {m["storeHost"] for m in messages(rows)}
    end = last["commitLogOffset"] + last["storeSize"]
    assert spans(rows) == [("blank", end, FILE_SIZE - end)]


# ------------------------------------------------------------------------------ consume queues


def on_disk_entries_are_truth(case: str, topic: str, qid: int, rows: list[dict]) -> None:
    truth = load_truth(case)
    q = next(q for q in truth["queues"] if (q["topic"], q["queueId"]) == (topic, qid))
    got = [
        {k: r[k] for k in ("queueOffset", "commitLogOffset", "size", "tagsCode")} for r in rows if r["kind"] == "entry"
    ]
    if truth["beforeOpen"]["abortExists"]:
        # the crash left the last messages undispatched; recovery appended them
        assert got == q["entries"][: len(got)] and got
    else:
        assert got == q["entries"]


def test_consume_queue_resolve_reports_no_mismatch(real_case):
    with open_store(store_of(real_case)) as st:
        queues = [(q.topic, q.queue_id) for q in st.consume_queues.queues()]
    assert queues
    for topic, qid in queues:
        rows = [
            json.loads(line)
            for line in dump(
                "consumequeue", store_of(real_case), topic, qid, "--resolve", "-f", "ndjson"
            ).stdout.splitlines()
        ]
        assert all(r["mismatch"] == [] for r in rows), [r for r in rows if r["mismatch"]][:3]
        on_disk_entries_are_truth(real_case, topic, qid, rows)
        for r in rows:
            if r["kind"] == "entry":
                assert (
                    r["storeSize"] == r["size"]
                    and r["recordTopic"] == topic
                    and r["recordQueueOffset"] == r["queueOffset"]
                )


def test_consume_queue_mismatches_are_flagged(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    path = root / "consumequeue" / "TopicA" / "0" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    phy, size, tags = struct.unpack_from(">qiq", data, 20)
    struct.pack_into(">qiq", data, 20, phy, size + 1, tags)  # entry 1: wrong size
    struct.pack_into(">qiq", data, 40, *struct.unpack_from(">qiq", data, 40)[:2], 12345)  # entry 2: tagsCode
    struct.pack_into(">qiq", data, 60, 10**9, 200, 0)  # entry 3: past the commit log
    data[80:100] = bytes(20)  # entry 4: a hole before entry 5
    path.write_bytes(bytes(data))
    r = dump("consumequeue", root, "TopicA", 0, "--resolve", "-f", "ndjson", code=3)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    by_q = {(row.get("kind", "entry"), row["queueOffset"]): row["mismatch"] for row in rows}
    assert by_q[("entry", 0)] == []
    assert any("size" in m for m in by_q[("entry", 1)])
    assert any("tagsCode 12345" in m for m in by_q[("entry", 2)])
    assert any("past the end of the commit log" in m for m in by_q[("entry", 3)])
    assert by_q[("hole", 4)] and ("entry", 5) in by_q
    assert r.stderr.splitlines()[-1].startswith("error: 4 problem(s) found")


def test_fillers_are_shown_as_such_and_are_no_error(tmp_path):
    """fillPreBlank (§4.4): a queue created at offset N starts with N filler slots (0, 2^31-1, 0)."""
    root = copy_real_store("clean-2topics", tmp_path)
    path = root / "consumequeue" / "TopicB" / "1" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    for i in range(3):
        struct.pack_into(">qiq", data, i * 20, 0, 0x7FFFFFFF, 0)
    path.write_bytes(bytes(data))
    rows = [
        json.loads(x) for x in dump("consumequeue", root, "TopicB", 1, "--resolve", "-f", "ndjson").stdout.splitlines()
    ]
    assert [r.get("kind", "entry") for r in rows[:4]] == ["filler", "filler", "filler", "entry"]
    assert all(r["mismatch"] == [] for r in rows)
    # a filler after real entries is not what the broker writes
    struct.pack_into(">qiq", data, 5 * 20, 0, 0x7FFFFFFF, 0)
    path.write_bytes(bytes(data))
    r = dump("consumequeue", root, "TopicB", 1, "-f", "plain", code=3)
    assert "fillPreBlank filler after real entries" in r.stderr


def test_consume_queue_unknown_queue_is_an_error():
    r = dump("consumequeue", store_of("clean-2topics"), "TopicA", 9, code=1)
    assert r.stderr.splitlines()[0].startswith("error: ") and "no consume queue" in r.stderr


# ------------------------------------------------------------------------------------- index


def test_index_headers_match_truth(real_case):
    truth = load_truth(real_case)
    got = json.loads(dump("index", store_of(real_case), "-f", "json").stdout)
    keys = INDEX_HEADER_FIELDS
    want = {f["name"]: {k: f[k] for k in keys} for f in truth["indexFiles"]}
    cp = truth["beforeOpen"]["checkpointFile"]
    for f in got:
        if f["name"] in want:
            assert {k: f[k] for k in keys} == want[f["name"]]
            assert f["entryCount"] == f["indexCount"] - 1
        else:
            # §5.5: abnormal recovery deletes every file newer than indexMsgTimestamp
            assert truth["beforeOpen"]["abortExists"] and f["endTimestamp"] > cp["indexMsgTimestamp"]


def test_index_key_chain_holds_every_truth_hit():
    truth = load_truth("clean-2topics")
    queries = truth["queries"][::25]
    assert queries
    for q in queries:
        rows = json.loads(dump("index", store_of("clean-2topics"), "--key", q["topic"], q["key"], "-f", "json").stdout)
        hits = {r["phyOffset"] for r in rows if r.get("hashMatch")}
        assert {h["commitLogOffset"] for h in q["hits"]} <= hits
        h = index_key_hash(f"{q['topic']}#{q['key']}")
        assert {r["slot"] for r in rows} == {h % 128}


def test_index_entries_count(real_case):
    with open_store(store_of(real_case)) as st:
        files = [s.to_json() for s in lib.index_summaries(st)]
    rows = [
        json.loads(line) for line in dump("index", store_of(real_case), "--entries", "-f", "ndjson").stdout.splitlines()
    ]
    for f in files:
        assert sum(1 for r in rows if r["file"] == f["name"]) == f["indexCount"] - 1


# ---------------------------------------------------------------------------- checkpoint, config


def test_checkpoint_matches_truth(real_case):
    cp = load_truth(real_case)["beforeOpen"]["checkpointFile"]
    got = json.loads(dump("checkpoint", store_of(real_case), "-f", "json").stdout)
    for k in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        assert got[k] == cp[k]
    assert "physicMsgTimestamp" in dump("checkpoint", store_of(real_case), "-f", "plain").stdout


CONSUMER_OFFSET = (
    '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251,3:250\n\t\t},\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n\t\t}\n\t}\n}'
)  # store-format.md §11.4, byte for byte


def test_config_fastjson_integer_keys(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text(CONSUMER_OFFSET)
    listing = dump("config", root, "-f", "plain").stdout
    assert "consumerOffset.json" in listing
    data = json.loads(dump("config", root, "consumerOffset.json", "-f", "json").stdout)
    assert data["offsetTable"]["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250,
        "1": 249,
        "2": 251,
        "3": 250,
    }
    plain = dump("config", root, "consumerOffset.json", "-f", "plain").stdout
    assert "offsetTable.TopicTest@please_rename_unique_group_name_4.1" in plain


def test_config_falls_back_to_bak_and_says_so(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{')
    (root / "config" / "consumerOffset.json.bak").write_text(CONSUMER_OFFSET)
    r = dump("config", root, "consumerOffset.json", "-f", "json", code=3)
    assert json.loads(r.stdout)["offsetTable"]
    assert ".bak" in r.stderr


def test_config_missing_file_is_an_error(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    r = dump("config", root, "topics.json", code=1)
    assert r.stderr.splitlines()[0].startswith("error: ") and "no such config file" in r.stderr


# ------------------------------------------------------------------------------- bad input


def test_not_a_store(tmp_path):
    r = dump("commitlog", tmp_path / "nope", code=5)
    assert r.stderr.splitlines()[0] == f"error: {tmp_path / 'nope'}: no such directory"


def test_bad_time_is_an_input_error():
    r = dump("commitlog", store_of("clean-2topics"), "--since", "yesterday", code=1)
    assert r.stderr.splitlines()[0].startswith("error: time 'yesterday' is not epoch seconds or ms")


def test_bad_body_mode_is_a_usage_error():
    r = runner.invoke(app, ["dump", "commitlog", str(store_of("clean-2topics")), "--body", "rot13"])
    assert r.exit_code == 2


def test_index_file_of_the_wrong_size_is_reported(tmp_path):
    root = copy_real_store("clean-2topics", tmp_path)
    name = sorted((root / "index").iterdir())[1].name
    os.truncate(root / "index" / name, 1000)
    r = dump("index", root, "-f", "json", code=3)
    files = {f["name"]: f for f in json.loads(r.stdout)}
    assert files[name]["usedSlots"] is None and files[name]["size"] == 1000
    assert name in r.stderr and "expected 10792" in r.stderr


def test_batch_consume_queue_dump_equals_truth():
    case = "5.2.0/batch-cq"
    if not case_dir(case).is_dir():
        pytest.skip("real stores not found")
    truth = load_truth(case)
    for q in (q for q in truth["queues"] if q.get("cqType") == "BatchCQ"):
        out = dump("consumequeue", store_of(case), q["topic"], str(q["queueId"]), "-f", "json").stdout
        rows = json.loads(out)
        got = [
            {k: r[k] for k in ("queueOffset", "commitLogOffset", "size", "tagsCode")} | {"batchNum": r["batchNum"]}
            for r in rows
        ]
        assert got == q["entries"]
        assert sum(r["batchNum"] for r in rows) == q["messageTotal"]


def test_consume_queue_ext_units_are_dumped(tmp_path):
    """§4.6 units (size, tagsCode, store time, bit map size, bit map); a short -1 closes a file."""
    root = copy_real_store("clean-2topics", tmp_path)
    d = root / "consumequeue_ext" / "TopicA" / "0"
    d.mkdir(parents=True)
    units = [(1234, 1700000000000, b"\x0f\xf0"), (-5, 1700000000001, b"")]
    first = b"".join(struct.pack(">hqqh", 20 + len(bm), t, ts, len(bm)) + bm for t, ts, bm in units)
    (d / f"{0:020d}").write_bytes(first + struct.pack(">h", -1) + bytes(64 - len(first) - 2))
    second = struct.pack(">hqqh", 21, 77, 1700000000002, 1) + b"\x01"
    (d / f"{64:020d}").write_bytes(second + bytes(64 - len(second)))
    rows = json.loads(dump("consumequeue-ext", root, "TopicA", "0", "-f", "json").stdout)
    assert [(r["file"], r["address"], r["size"], r["tagsCode"], r["storeTimestamp"], r["bitMap"]) for r in rows] == [
        (f"{0:020d}", 0, 22, 1234, 1700000000000, "0ff0"),
        (f"{0:020d}", 22, 20, -5, 1700000000001, ""),
        (f"{64:020d}", 64, 21, 77, 1700000000002, "01"),
    ]
    # what a consume queue entry's tagsCode holds for the third unit, and back
    from rmqstore.codec.consumequeue import EXT_ADDRESS_BASE, ext_real_offset

    assert ext_real_offset(64 + EXT_ADDRESS_BASE) == 64
    bad = d / f"{0:020d}"
    bad.write_bytes(struct.pack(">hqqh", 30, 0, 0, 2) + bytes(44))  # bitMapSize disagrees with size
    r = dump("consumequeue-ext", root, "TopicA", "0", code=6)
    assert "bitMapSize 2" in r.stderr and f"{0:020d}" in r.stderr


def test_timer_store_is_dumped(tmp_path):
    """timerwheel: 32-byte slots (only used ones listed); timerlog/: 52-byte units up to a blank."""
    from rmqstore.codec.timer import BLANK_MAGIC

    root = copy_real_store("5.2.0/batch-cq", tmp_path)
    wheel = bytearray(32 * 8)
    struct.pack_into(">qqqii", wheel, 32 * 5, 1700000005000, 0, 52, 2, 0)
    (root / "timerwheel").write_bytes(bytes(wheel))
    (root / "timerlog").mkdir()
    units = b"".join(
        struct.pack(">iqiqiqiiq", 52, prev, 1, 1700000000000 + i, 5, 100 * i, 180, 77, 0)
        for i, prev in enumerate((-1, 0))
    )
    blank = struct.pack(">iqi", 128 - len(units), 0, BLANK_MAGIC)
    (root / "timerlog" / f"{0:020d}").write_bytes(units + blank + bytes(128 - len(units) - len(blank)))
    slots = json.loads(dump("timer", root, "-f", "json").stdout)
    assert slots == [{"slot": 5, "timeMs": 1700000005000, "firstPos": 0, "lastPos": 52, "num": 2, "magic": 0}]
    log = json.loads(dump("timer", root, "--log", "-f", "json").stdout)
    assert [(u["position"], u["prevPos"], u["offsetPy"], u["sizePy"]) for u in log] == [
        (0, -1, 0, 180),
        (52, 0, 100, 180),
    ]
    assert BLANK_MAGIC == -875286124  # 0xBBCCDDEE ^ 1880681586 + 8: the commit log's blank magic again


def test_compaction_checkpoint_is_dumped():
    """compaction/position-checkpoint as the 5.2.0 engine wrote it: fastjson, round-trips byte for byte."""
    from rmqstore.store import config as cfgmod

    store = store_of("5.2.0/batch-cq")
    if not store.is_dir():
        pytest.skip("real stores not found")
    assert json.loads(dump("compaction", store, "-f", "json").stdout) == {"empty": True, "queueOffsetMap": {}}
    raw = (store / "compaction" / "position-checkpoint").read_bytes()
    assert cfgmod.dumps(cfgmod.loads(raw)).encode() == raw
