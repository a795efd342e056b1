"""DLedger stores written by the real 4.9.4 (dledger 0.2.6) and 5.2.0 (dledger 0.3.1.2) engines, against truth.json.

No ``--broker-version`` anywhere: the mode and the version are found from the store. The generic
real-store tests (records, served messages, consume queue units, index headers, key queries) run on
these stores too (``conftest.DLEDGER_CASES``); here is what only a DLedger store has.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
from conftest import DLEDGER_CASES, case_dir, copy_real_store, load_truth
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.codec.dledger import HEADER_SIZE, INDEX_UNIT_SIZE

runner = CliRunner()
ENTRY_FIELDS = ("index", "magic", "size", "term", "pos", "channel", "chainCrc", "bodyCrc", "bodyLength", "committed")


@pytest.fixture(params=DLEDGER_CASES)
def dledger_case(request: pytest.FixtureRequest) -> str:
    load_truth(request.param)  # skips when the real stores are absent
    return request.param


def store_of(case: str) -> str:
    return str(case_dir(case) / "store")


def run_json(*argv: str) -> tuple[int, object]:
    r = runner.invoke(app, [*argv, "--format", "json"])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else None


def ndjson(*argv: str) -> tuple[int, list[dict]]:
    r = runner.invoke(app, [*argv, "--format", "ndjson"])
    return r.exit_code, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_info_gives_the_ledger_as_the_engine_does(dledger_case: str) -> None:
    truth = load_truth(dledger_case)
    code, info = run_json("info", store_of(dledger_case))
    assert code == 0 and info["problems"] == []
    assert info["brokerVersion"] == truth["engine"].split()[2]
    assert (info["commitLog"]["minPhyOffset"], info["commitLog"]["maxPhyOffset"]) == (
        truth["minPhyOffset"],
        truth["maxPhyOffset"],
    )
    want, got = truth["dledger"], info["dledger"]
    same = ("ledgerBeginIndex", "ledgerEndIndex", "ledgerEndTerm", "committedIndex", "committedPos", "dataMinOffset",
            "dataWritePos", "indexWritePos", "dividedCommitlogOffset", "currTerm")  # fmt: skip
    assert {k: got[k] for k in same} == {k: want[k] for k in same}
    assert got["voteLeader"] == truth["afterShutdown"]["dledgerMemberFiles"]["currterm"]["properties"]["voteLeader"]
    conf = truth["config"]["dledger"]
    assert (got["group"], got["selfId"], got["peers"]) == (
        conf["dLegerGroup"],
        conf["dLegerSelfId"],
        conf["dLegerPeers"],
    )
    for kind in ("dataFiles", "indexFiles"):
        assert [(f["name"], f["fileFromOffset"], f["fileSize"]) for f in got[kind]] == [
            (f["name"], f["fileFromOffset"], f["fileSize"]) for f in want[kind]
        ]


def test_dump_entries_equals_the_engines_entry_headers(dledger_case: str) -> None:
    truth = load_truth(dledger_case)
    code, rows = ndjson("dump", "dledger-entries", store_of(dledger_case))
    assert code == 0
    entries = [r for r in rows if r["kind"] == "entry"]
    assert [{k: r[k] for k in ENTRY_FIELDS} for r in entries] == [
        {k: e[k] for k in ENTRY_FIELDS} for e in truth["dledger"]["entries"]
    ]
    blanks = [(r["offset"], r["size"]) for r in rows if r["kind"] == "blank"]
    assert blanks == [(r["offset"], r["size"]) for r in truth["commitlog"] if r["kind"] == "blank"]
    assert all(r["offset"] == r["pos"] for r in entries)


def test_dump_index_units_name_every_entry(dledger_case: str) -> None:
    truth = load_truth(dledger_case)
    code, units = ndjson("dump", "dledger-index", store_of(dledger_case))
    assert code == 0
    want = [(e["index"], e["pos"], e["size"], e["term"], e["magic"]) for e in truth["dledger"]["entries"]]
    assert [(u["index"], u["pos"], u["size"], u["term"], u["magic"]) for u in units] == want
    assert [u["indexOffset"] for u in units] == [i * INDEX_UNIT_SIZE for i, *_ in want]


def test_dump_commitlog_carries_each_records_entry(dledger_case: str) -> None:
    truth = load_truth(dledger_case)
    messages = [r for r in truth["commitlog"] if r["kind"] == "message"]
    for fmt in ("ndjson", "json", "csv"):
        r = runner.invoke(app, ["dump", "commitlog", store_of(dledger_case), "--format", fmt, "--body", "none"])
        assert r.exit_code == 0, r.output
        if fmt == "csv":
            import csv
            import io

            rows = [row for row in csv.DictReader(io.StringIO(r.stdout)) if row["kind"] == "message"]
            rows = [
                {k: int(v) for k, v in row.items() if k.startswith("entry") or k == "commitLogOffset"} for row in rows
            ]
        elif fmt == "json":
            rows = [row for row in json.loads(r.stdout) if "topic" in row]
        else:
            rows = [json.loads(line) for line in r.stdout.splitlines() if '"topic"' in line]
        got = [(row["commitLogOffset"], row["entryOffset"], row["entrySize"], row["entryIndex"], row["entryTerm"])
               for row in rows]  # fmt: skip
        want = [(m["offset"], m["entryOffset"], m["entrySize"], m["dledger"]["index"], m["dledger"]["term"])
                for m in messages]  # fmt: skip
        assert got == want, fmt
        assert all(o == e + HEADER_SIZE for o, e, *_ in got)


def test_one_data_file_dumps_alone(dledger_case: str) -> None:
    truth = load_truth(dledger_case)
    second = truth["dledger"]["dataFiles"][1]
    path = case_dir(dledger_case) / "store" / "dledger-n0" / "data" / second["name"]
    code, rows = ndjson("dump", "commitlog", str(path), "--body", "none")
    lo, hi = second["fileFromOffset"], second["fileFromOffset"] + second["fileSize"]
    assert code == 0
    assert [r["commitLogOffset"] for r in rows if "topic" in r] == [
        m["offset"] for m in truth["commitlog"] if m["kind"] == "message" and lo <= m["offset"] < hi
    ]


def test_check_is_clean(dledger_case: str) -> None:
    code, report = run_json("check", store_of(dledger_case))
    assert code == 0, report
    assert report["summary"]["dledgerEntries"] == len(load_truth(dledger_case)["dledger"]["entries"])
    assert report["problems"] == []


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_redispatch_writes_the_files_the_engine_wrote(dledger_case: str, tmp_path: Path) -> None:
    """Consume queues and index files rebuilt from the entries equal, byte for byte, the ones the
    running broker wrote (not the 5.2.0 restart's rebuild: README says why that one is empty)."""
    root = copy_real_store(dledger_case, tmp_path)

    def files() -> tuple[dict[Path, str], list[str]]:
        queues = {p.relative_to(root): _sha(p) for p in (root / "consumequeue").rglob("*") if p.is_file()}
        return queues, [_sha(p) for p in sorted((root / "index").iterdir())]  # named by the time of writing

    want = files()
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    r = runner.invoke(app, ["redispatch", str(root)])
    assert r.exit_code == 0, r.output
    assert files() == want


def test_write_is_refused(dledger_case: str, tmp_path: Path) -> None:
    root = copy_real_store(dledger_case, tmp_path)
    before = {p: _sha(p) for p in root.rglob("*") if p.is_file()}
    r = runner.invoke(app, ["write", str(root), "--topic", "TopicA", "--body", "x"])
    assert r.exit_code == 7, r.output
    assert "dledger" in r.output.lower()
    assert {p: _sha(p) for p in root.rglob("*") if p.is_file()} == before


def test_dledger_dumps_refuse_a_plain_store() -> None:
    plain = case_dir("4.9.4/clean-2topics") / "store"
    if not plain.is_dir():
        pytest.skip(f"real stores not found at {plain}")
    for what in ("dledger-entries", "dledger-index"):
        r = runner.invoke(app, ["dump", what, str(plain)])
        assert r.exit_code == 7 and "not a DLedger store" in r.output


# -- damaged DLedger files: one line naming the file, the byte offset and what was expected ----------


def _patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _entry(truth: dict, n: int) -> tuple[str, int]:
    """(data file name, position in it) of entry ``n``."""
    e = truth["dledger"]["entries"][n]
    f = next(
        f
        for f in truth["dledger"]["dataFiles"]
        if f["fileFromOffset"] <= e["pos"] < f["fileFromOffset"] + f["fileSize"]
    )
    return f["name"], e["pos"] - f["fileFromOffset"]


def _damage(root: Path, truth: dict, kind: str) -> tuple[str, int, str]:
    """Damage the copy; returns (file name, byte offset, words the report must hold)."""
    data, index = root / "dledger-n0" / "data", root / "dledger-n0" / "index"
    name, pos = _entry(truth, 150)
    if kind == "wrong magic":
        _patch(data / name, pos, struct.pack(">i", 7))
        return name, pos, "entry magic 7, expected 1"
    if kind == "size past the file end":
        _patch(data / name, pos + 4, struct.pack(">i", 1 << 20))
        return name, pos, "entry size 1048576"
    if kind == "index out of sequence":
        _patch(data / name, pos + 8, struct.pack(">q", 7))
        return name, pos, "entry index 7, expected 150"
    # a broken index unit: entry 300's unit names another position
    unit = index / "00000000000000008192"
    at = 300 * INDEX_UNIT_SIZE - 8192
    _patch(unit, at + 4, struct.pack(">q", 12345))
    return unit.name, at, "position 12345, expected"


@pytest.mark.parametrize("kind", ["wrong magic", "size past the file end", "index out of sequence", "broken unit"])
def test_damaged_dledger_files_are_reported_with_file_and_offset(dledger_case: str, kind: str, tmp_path: Path) -> None:
    truth = load_truth(dledger_case)
    root = copy_real_store(dledger_case, tmp_path)
    name, pos, words = _damage(root, truth, kind)
    r = runner.invoke(app, ["check", str(root), "--format", "json"])
    assert r.exit_code == 3, r.output
    found = [p for p in json.loads(r.stdout)["problems"] if Path(p["path"]).name == name and p["pos"] == pos]
    assert found and words in found[0]["what"], json.loads(r.stdout)["problems"]
    if kind in ("wrong magic", "size past the file end"):  # the record walk stops there too
        d = runner.invoke(app, ["dump", "commitlog", str(root), "--count"])
        assert d.exit_code == 3
        line = next(x for x in d.stderr.splitlines() if name in x)
        assert f"at byte {pos}" in line and "entry" in line
