"""The Spark pipeline: data sources, export, stats, find and redispatch against the real 4.4.0 stores.

One SparkSession (local[2], 2 shuffle partitions, no UI) is shared by the whole file. The split
logic itself is checked without Spark, by Hypothesis over random split sizes.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from conftest import REAL_CASES, REAL_STORES, case_dir, copy_real_store, load_rebuild, load_truth  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import rmqstore.spark.redispatch  # noqa: E402, F401  # registers the spark engine
from rmqstore.cli import app  # noqa: E402
from rmqstore.codec.commitlog import MAGIC_V1, MAGIC_V2, Record, decode_record  # noqa: E402
from rmqstore.dispatch import rebuild as local_redispatch  # noqa: E402
from rmqstore.errors import CorruptData, MissingExtra, UnsafePlan  # noqa: E402
from rmqstore.store import open_store
from rmqstore.walk.chain import iter_commitlog

pytestmark = pytest.mark.spark
runner = CliRunner()
MAGICS = (MAGIC_V1.to_bytes(4, "big", signed=True), MAGIC_V2.to_bytes(4, "big", signed=True))


def _java_present() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java")) if not home else (Path(home) / "bin" / "java").exists()


needs_java = pytest.mark.skipif(not _java_present(), reason="Spark needs Java")


@pytest.fixture(scope="session")
def spark():
    if not _java_present():
        pytest.skip("Spark needs Java")
    from rmqstore.spark.session import get_session

    session = get_session(
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    yield session
    session.stop()


def test_a_local_sessions_workers_load_the_compiled_pyspark(spark) -> None:
    """The session's daemon (``rmqstore.spark.daemon``) puts Spark's source zips of the installed
    pyspark last: tasks import pyspark from the package, whose modules are compiled once."""

    def where(_rows):  # type: ignore[no-untyped-def]
        import sys

        import pyspark

        yield pyspark.__file__, sys.modules["__main__"].__file__

    got = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    assert len(got) == 2
    for pyspark_file, main_file in got:
        assert ".zip" not in pyspark_file and Path(main_file).name == "rmqstore_spark_daemon.py", got


def store_of(case: str) -> Path:
    if not REAL_STORES.is_dir():
        pytest.skip(f"real stores not found at {REAL_STORES}")
    return REAL_STORES / case / "store"


def local_records(root: Path) -> list[Record]:
    with open_store(root) as s:
        return [r for _, r in iter_commitlog(s) if isinstance(r, Record)]


def expected_row(rec: Record) -> dict:
    """The source's row for a record, from the codec's own properties (not the reader's code)."""
    return {
        "commitLogOffset": rec.phy_offset,
        "storeSize": rec.total_size,
        "magicCode": rec.magic,
        "bodyCRC": rec.body_crc,
        "queueId": rec.queue_id,
        "flag": rec.flag,
        "queueOffset": rec.queue_offset,
        "sysFlag": rec.sys_flag,
        "bornTimestamp": rec.born_timestamp_ms,
        "bornHost": rec.born_host,
        "storeTimestamp": rec.store_timestamp_ms,
        "storeHost": rec.store_host,
        "reconsumeTimes": rec.reconsume_times,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
        "bodyLength": len(rec.body),
        "topic": rec.topic,
        "tags": rec.tags,
        "keys": [k for k in (rec.keys or "").split(" ") if k],  # KEY_SEPARATOR is one space, not any whitespace
        "uniqKey": rec.uniq_key,
        "properties": rec.properties,
        "body": rec.body,
        "msgId": rec.msg_id,
        "crcOk": rec.crc_ok(),
        "filePos": rec.pos,
    }


EXPECTED_KEYS = (  # the columns expected_row gives
    "commitLogOffset storeSize magicCode bodyCRC queueId flag queueOffset sysFlag bornTimestamp bornHost "
    "storeTimestamp storeHost reconsumeTimes preparedTransactionOffset bodyLength topic tags keys uniqKey "
    "properties body msgId crcOk filePos"
).split()


def truth_messages(case: str) -> list[dict]:
    return [r for r in load_truth(case)["commitlog"] if r["kind"] == "message"]


def truth_served(case: str) -> dict[int, dict]:
    """Every message the engine served through getMessage, by commit log offset."""
    return {m["commitLogOffset"]: m for q in load_truth(case)["queues"] for m in q["messages"]}


def truth_keys(m: dict) -> list[str]:
    return (m.get("keys") or "").split()


# ------------------------------------------------------------------------------ the data source


@pytest.mark.parametrize("case", REAL_CASES)
def test_rows_equal_local_codec_and_truth(spark, case: str) -> None:
    from rmqstore.spark import jobs

    root = store_of(case)
    df = jobs.read_commitlog(spark, [root], options=jobs.ReadOptions(split_size="8k", crc_ok=True))
    rows = sorted((r.asDict() for r in df.collect()), key=lambda r: r["commitLogOffset"])
    recs = local_records(root)
    assert [{k: r[k] for k in expected_row(recs[0])} for r in rows] == [expected_row(x) for x in recs]
    assert {r["store"] for r in rows} == {str(root)}
    # broker.conf paths are taken relative to its resolved directory: compare resolved paths
    assert all(Path(r["file"]).parent.resolve() == (root / "commitlog").resolve() for r in rows)
    assert all(int(Path(r["file"]).name) + r["filePos"] == r["commitLogOffset"] for r in rows)
    # and what the 4.4.0 engine recovered and served
    truth = truth_messages(case)
    assert [(r["commitLogOffset"], r["storeSize"], r["topic"], r["queueId"], r["queueOffset"]) for r in rows] == [
        (t["offset"], t["size"], t["topic"], t["queueId"], t["queueOffset"]) for t in truth
    ]
    for r, t in zip(rows, truth, strict=True):
        assert (r["sysFlag"], r["storeTimestamp"], r["uniqKey"], r["crcOk"]) == (
            t["sysFlag"],
            t["storeTimestamp"],
            t["uniqKey"],
            t["crcOk"],
        )
        assert r["keys"] == truth_keys(t)
        assert r["preparedTransactionOffset"] == t["preparedTransactionOffset"]
    served = truth_served(case)
    for r in rows:
        m = served.get(r["commitLogOffset"])
        if m is None:
            continue  # PREPARED / ROLLBACK records are never served
        for k in ("bodyCRC", "flag", "bornTimestamp", "bornHost", "storeHost", "reconsumeTimes", "msgId"):
            assert r[k] == m[k], k
        assert r["properties"] == m["properties"]
        if "body" in m:
            assert r["body"] == base64.b64decode(m["body"])
        else:
            assert hashlib.sha256(r["body"]).hexdigest() == m["bodySha256"]


def split_read(files: list[tuple[str, int, bytes]], split_size: int, open_cost: int = 0) -> list[dict]:
    """Rows of the columnar reader over splits of ``split_size`` (small pieces packed, as planned
    for Spark), in split order: every column, checked against the codec by the callers."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmqstore.spark.source import COMMITLOG_SCHEMA, Piece, buffer_batches, pack_pieces, plan_splits
    from rmqstore.walk.arrow import row_function

    data_of = {path: data for path, _, data in files}
    pieces = [
        Piece("s", None, path, base, s, e, "4.4.0")
        for path, base, data in files
        for s, e in plan_splits(len(data), split_size=split_size)
    ]
    schema = to_arrow_schema(COMMITLOG_SCHEMA, timezone="UTC")
    row_fn = row_function(schema.names)
    out: list[dict] = []
    for group in pack_pieces(pieces, split_size, open_cost):
        for piece in group:
            for batch in buffer_batches(data_of[piece.path], piece, schema, chunk=97, row_fn=row_fn):
                out += batch.to_pylist()
    return out


def codec_rows(recs: list[Record]) -> list[dict]:
    return [expected_row(r) for r in recs]


def reader_rows(rows: list[dict]) -> list[dict]:
    return [{k: (dict(r[k]) if k == "properties" else r[k]) for k in EXPECTED_KEYS} for r in rows]


def file_bytes(root: Path) -> list[tuple[str, int, bytes]]:
    with open_store(root) as s:
        segs, _ = s.commitlog_segments()
    return [(str(seg.path), seg.base_offset, seg.path.read_bytes()) for seg in segs]


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(REAL_CASES), split_size=st.integers(1, 40_000), open_cost=st.integers(0, 9000))
def test_every_record_exactly_once_for_any_split_size(case: str, split_size: int, open_cost: int) -> None:
    root = store_of(case)
    got = split_read(file_bytes(root), split_size, open_cost)
    assert reader_rows(got) == codec_rows(local_records(root))


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(REAL_CASES), cores=st.integers(1, 64))
def test_even_splits_cover_every_record_once_in_equal_shares(case: str, cores: int) -> None:
    """The cut over a job's cores (``plan_even``): a multiple of ``cores`` splits of one size (the
    last shorter by the rounding), every record read once, in commit log order."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from rmqstore.spark.source import COMMITLOG_SCHEMA, buffer_batches, plan_even, resolve_stores

    root = store_of(case)
    data_of = {path: data for path, _, data in file_bytes(root)}
    groups = plan_even(resolve_stores([str(root)]), cores)
    total = sum(len(d) for d in data_of.values())
    sizes = [sum(p.end - p.start for p in g) for g in groups]
    assert len(groups) % cores == 0 and sum(sizes) == total and max(sizes) - min(sizes) < len(groups)
    schema = to_arrow_schema(COMMITLOG_SCHEMA, timezone="UTC")
    got = [
        row
        for g in groups
        for piece in g
        for batch in buffer_batches(data_of[piece.path], piece, schema, chunk=97)
        for row in batch.to_pylist()
    ]
    assert reader_rows(got) == codec_rows(local_records(root))


@functools.lru_cache(maxsize=16)
def valid_records(path: str, base: int, data: bytes) -> list[Record]:
    """Reference for damaged files: every position, in order, holding a record that decodes and
    whose stored PHYSICALOFFSET is its own position, not inside the record before it."""
    out: list[Record] = []
    after = 0
    for p in range(max(len(data) - 7, 0)):
        if p < after or data[p + 4 : p + 8] not in MAGICS:
            continue
        try:
            rec = decode_record(data, p, path=path, file_from=base)
        except CorruptData:
            continue
        if isinstance(rec, Record) and rec.phy_offset == base + p:
            out.append(rec)
            after = p + rec.total_size
    return out


damage = st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=16)), min_size=1, max_size=4
)


@settings(max_examples=30, deadline=None)
@given(split_size=st.integers(1, 20_000), where=st.integers(0, 3), hits=damage)
def test_damaged_file_every_valid_record_exactly_once(split_size: int, where: int, hits: list) -> None:
    files = file_bytes(store_of("clean-2topics"))
    path, base, data = files[where]
    buf = bytearray(data)
    for frac, junk in hits:
        pos = int(frac * len(buf))
        buf[pos : pos + len(junk)] = junk[: len(buf) - pos]
    files[where] = (path, base, bytes(buf))
    got = split_read(files, split_size)
    want = [r for p, b, d in files for r in valid_records(p, b, d)]
    assert reader_rows(got) == codec_rows(want)
    assert len({r["commitLogOffset"] for r in got}) == len(got)


def test_damaged_store_through_spark(spark, tmp_path: Path) -> None:
    from rmqstore.spark import jobs

    root = copy_real_store("clean-2topics", tmp_path)
    recs = local_records(root)
    files = sorted((root / "commitlog").iterdir())
    # a bad magic in file 0, zeros over a header in file 1, a wrong PHYSICALOFFSET in file 2
    for f, rec, (off, junk) in (
        (files[0], recs[10], (4, b"\0\0\0\1")),
        (files[1], next(r for r in recs if r.phy_offset > 32768 + 9000), (0, bytes(8))),
        (files[2], next(r for r in recs if r.phy_offset > 65536 + 3000), (28, struct.pack(">q", 1))),
    ):
        data = bytearray(f.read_bytes())
        data[rec.pos + off : rec.pos + off + len(junk)] = junk
        f.write_bytes(bytes(data))
    want = [r for p, b, d in file_bytes(root) for r in valid_records(p, b, d)]
    assert len(want) == len(recs) - 3
    for opts in (jobs.ReadOptions(split_size="5k"), jobs.ReadOptions(partitions_per_file=3)):
        df = jobs.read_commitlog(spark, [root], columns=["commitLogOffset", "storeSize", "topic"], options=opts)
        got = sorted((r.commitLogOffset, r.storeSize, r.topic) for r in df.collect())
        assert got == [(r.phy_offset, r.total_size, r.topic) for r in want]


def test_consume_queue_source_equals_engine_queues(spark) -> None:
    from rmqstore.spark import jobs

    store_of("clean-2topics")
    df = jobs.read_consumequeue(spark, [str(REAL_STORES / "*" / "store")])
    got: dict[str, list[tuple]] = defaultdict(list)
    for r in df.collect():
        got[Path(r.store).parent.name].append(
            (r.topic, r.queueId, r.queueOffset, r.commitLogOffset, r.size, r.tagsCode)
        )
    for case in REAL_CASES:
        truth = load_truth(case)
        want = [
            (q["topic"], q["queueId"], e["queueOffset"], e["commitLogOffset"], e["size"], e["tagsCode"])
            for q in truth["queues"]
            for e in q["entries"]
        ]
        if case == "crash-midwrite":
            # on disk: only the first 400 messages were dispatched before the crash (spec)
            cut = truth_messages(case)[400]["offset"]
            want = [w for w in want if w[3] < cut]
        assert sorted(got[case]) == sorted(want), case


# ------------------------------------------------------------------------------------------ jobs


def by_offset(row: dict) -> tuple[str, int]:
    return row["store"], row["commitLogOffset"]


def test_export_reads_back_equal_to_source(spark, tmp_path: Path) -> None:
    from rmqstore.spark import jobs

    stores = [str(REAL_STORES / "*" / "store")]
    store_of("clean-2topics")
    out = tmp_path / "export"
    res = jobs.export_parquet(spark, stores, out, options=jobs.ReadOptions(split_size="16k"))
    assert res.rows == sum(len(truth_messages(c)) for c in REAL_CASES)
    back = sorted((r.asDict() for r in jobs.read_export(spark, out).collect()), key=by_offset)
    src = sorted((r.asDict() for r in jobs.read_commitlog(spark, stores).collect()), key=by_offset)
    assert [{k: v for k, v in r.items() if k != "date"} for r in back] == src
    for r in back:
        assert r["date"] == dt.datetime.fromtimestamp(r["storeTimestamp"] / 1000, dt.UTC).date()
    topics = {p.name for p in out.iterdir() if p.is_dir()}
    assert "topic=TopicA" in topics and any("RETRY" in t for t in topics)
    assert all(d.name.startswith("date=") for t in out.iterdir() if t.is_dir() for d in t.iterdir())
    with pytest.raises(UnsafePlan):
        jobs.export_parquet(spark, stores, out)


def test_export_is_committed_whole_or_not_at_all(spark, tmp_path: Path, monkeypatch) -> None:
    """Tasks write into a staging folder beside the output; only a job whose tasks all succeeded is
    renamed into place, so a failed one leaves the output as it was (and no staging folder)."""
    from pyspark.errors import PythonException

    from rmqstore.spark import jobs

    copy = copy_real_store("clean-2topics", tmp_path / "copy")
    out = tmp_path / "out"
    out.mkdir()
    (out / "before.txt").write_text("kept")
    staging = jobs.staging_dir(out)
    staging.mkdir()
    (staging / "left-by-a-killed-run").write_text("")
    planned = jobs._task_splits

    def plan_then_lose_a_file(*a, **kw):  # the tasks then fail to open a file the driver planned
        got = planned(*a, **kw)
        next((copy / "commitlog").iterdir()).unlink()
        return got

    monkeypatch.setattr(jobs, "_task_splits", plan_then_lose_a_file)
    with pytest.raises(PythonException, match="does not exist"):
        jobs.export_parquet(spark, [copy], out, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["before.txt"] and not staging.exists()
    monkeypatch.undo()

    root = store_of("clean-2topics")
    res = jobs.export_parquet(spark, [root], out, overwrite=True)
    assert res.rows == len(truth_messages("clean-2topics")) == jobs.read_export(spark, out).count()
    assert (out / "_SUCCESS").exists() and not (out / "before.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "out"]  # no staging or replaced folder left
    import pyarrow.dataset as ds

    assert ds.dataset(out, format="parquet", partitioning="hive").count_rows() == res.rows


@pytest.mark.parametrize("mount_point", [False, True])
def test_export_commit_puts_the_staging_folder_in_place(tmp_path: Path, monkeypatch, mount_point: bool) -> None:
    """The driver's commit: the staging folder renamed over an empty output, an old output moved aside
    with --overwrite; on a mount point (no rename replaces one) the staging folder is inside it and its
    entries move up, _SUCCESS last. A non-empty output is never replaced without --overwrite."""
    from rmqstore.spark import jobs

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(jobs.os.path, "ismount", lambda p: mount_point and Path(p) == out)

    def staged(name: str) -> Path:
        staging = jobs.staging_dir(out)
        assert (staging.parent == out) is mount_point
        (staging / "topic=T").mkdir(parents=True)
        (staging / "topic=T" / name).write_text(name)
        (staging / "_SUCCESS").touch()
        return staging

    jobs.commit_export(staged("part-1"), out, overwrite=False)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["_SUCCESS", "topic=T", "topic=T/part-1"]
    with pytest.raises((UnsafePlan, OSError)):
        jobs.commit_export(staged("part-2"), out, overwrite=False)
    assert (out / "topic=T" / "part-1").exists()
    jobs.check_output(out, overwrite=True)
    shutil.rmtree(jobs.staging_dir(out))
    jobs.commit_export(staged("part-3"), out, overwrite=True)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["_SUCCESS", "topic=T", "topic=T/part-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_stats_per_queue_and_hour_match_truth(spark) -> None:
    from rmqstore.spark import jobs

    store_of("clean-2topics")
    got = {
        (Path(r.store).parent.name, r.topic, r.queueId, r.hourStartMs): (
            r.messages,
            r.bytes,
            r.firstStoreTimestamp,
            r.lastStoreTimestamp,
            r.distinctKeys,
            r.hour,
        )
        for r in jobs.stats(spark, [str(REAL_STORES / "*" / "store")]).collect()
    }
    want: dict[tuple, list] = {}
    keys: dict[tuple, set] = defaultdict(set)
    for case in REAL_CASES:
        for m in truth_messages(case):
            hour = m["storeTimestamp"] // 3_600_000 * 3_600_000
            g = (case, m["topic"], m["queueId"], hour)
            w = want.setdefault(g, [0, 0, m["storeTimestamp"], m["storeTimestamp"]])
            w[0] += 1
            w[1] += m["size"]
            w[2] = min(w[2], m["storeTimestamp"])
            w[3] = max(w[3], m["storeTimestamp"])
            keys[g].update(truth_keys(m))
    assert set(got) == set(want)
    for g, w in want.items():
        label = dt.datetime.fromtimestamp(g[3] / 1000, dt.UTC).strftime("%Y-%m-%dT%H:00Z")
        assert got[g] == (*w, len(keys[g]), label), g


def test_stats_estimates_many_keys_and_counts_exactly_when_asked(spark, tmp_path: Path) -> None:
    """A queue-hour with more distinct KEYS than the exact set holds: its count is an estimate within
    the stated error (and marked so), --exact-distinct counts it exactly; messages and bytes equal
    what dump --count finds, in both modes, and the rows match the exact mode's otherwise."""
    from rmqstore.ops import write as wr
    from rmqstore.spark import jobs
    from rmqstore.spark.stats import HLL_ERROR, SET_LIMIT

    root = tmp_path / "store"
    n = SET_LIMIT * 3
    many = [wr.Message(topic="Many", queue_id=0, body=b"m", keys=f"k{i} shared") for i in range(n)]
    few = [wr.Message(topic="Few", queue_id=1, body=b"f" * 40, keys="a b") for _ in range(30)]
    wr.write_messages(root, many + few, create=True, clock=lambda: 1_700_000_000_000)
    approx = jobs.stats_rows(spark, [root])
    exact = jobs.stats_rows(spark, [root], exact_distinct=True)
    by_topic = {r["topic"]: r for r in approx}
    assert by_topic["Few"]["distinctKeys"] == 2 and by_topic["Few"]["distinctKeysExact"]
    estimate = by_topic["Many"]
    assert not estimate["distinctKeysExact"] and abs(estimate["distinctKeys"] - (n + 1)) <= 4 * HLL_ERROR * (n + 1)
    assert [r["distinctKeys"] for r in exact] == [2, n + 1]
    strip = ("distinctKeys", "distinctKeysExact")
    assert [{k: v for k, v in r.items() if k not in strip} for r in approx] == [
        {k: v for k, v in r.items() if k not in strip} for r in exact
    ]
    assert "estimates" in (jobs.estimates_note(approx) or "") and jobs.estimates_note(exact) is None
    r = CliRunner().invoke(app, ["dump", "commitlog", str(root), "--count", "-f", "json"])
    assert r.exit_code == 0, r.output
    messages = next(row for row in json.loads(r.stdout) if row["kind"] == "message")
    assert sum(r["messages"] for r in approx) == messages["count"] == n + 30
    assert sum(r["bytes"] for r in approx) == messages["bytes"]


def test_find_by_key_tag_property_and_body(spark) -> None:
    from rmqstore.spark import jobs

    root = store_of("clean-2topics")
    truth = truth_messages("clean-2topics")
    served = truth_served("clean-2topics")

    def found(q: jobs.FindQuery) -> list[int]:
        return [rec.phy_offset for _, _, rec in jobs.find_records(spark, [root], q)]

    assert found(jobs.FindQuery(keys=("order-5", "user-7"))) == [
        t["offset"] for t in truth if {"order-5", "user-7"} & set(truth_keys(t))
    ]
    uniq = truth[123]["uniqKey"]
    assert found(jobs.FindQuery(keys=(uniq,))) == [truth[123]["offset"]]
    some = served[truth[40]["offset"]]["properties"]
    name = next(k for k in sorted(some) if k not in ("KEYS", "TAGS", "UNIQ_KEY", "WAIT"))
    assert found(jobs.FindQuery(tags=("TagB",), properties=((name, some[name]),))) == sorted(
        o
        for o, m in served.items()
        if m["properties"].get("TAGS") == "TagB" and m["properties"].get(name) == some[name]
    )
    assert found(jobs.FindQuery(body_contains=("message 4",))) == sorted(
        o for o, m in served.items() if "body" in m and b"message 4" in base64.b64decode(m["body"])
    )
    assert found(jobs.FindQuery(keys=("no-such-key",))) == []


# ------------------------------------------------------------------------------------ redispatch


def tree(root: Path) -> dict[str, bytes]:
    """Consume queue files by path; index files by order (their names are creation times)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".rmqstore" not in p.parts:
            rel = p.relative_to(root)
            out[f"index#{len([k for k in out if k.startswith('index#')])}" if rel.parts[0] == "index" else str(rel)] = (
                p.read_bytes()
            )
    return out


def assert_equals_engine_rebuild(root: Path, case: str) -> None:
    reb = load_rebuild(case)
    assert reb["redispatchExpectation"] == "engine-rebuild"
    cq = {p.relative_to(root).as_posix(): p for p in (root / "consumequeue").rglob("*") if p.is_file()}
    assert {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in cq.items()} == {
        f["path"]: f["sha256"] for f in reb["consumeQueueFiles"]
    }
    index = sorted(p for p in (root / "index").iterdir() if p.name.isdigit())
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in index] == [f["sha256"] for f in reb["indexFiles"]]


@pytest.mark.parametrize("case", REAL_CASES)
def test_spark_redispatch_byte_identical_to_local_and_engine(spark, case: str, tmp_path: Path) -> None:
    from rmqstore.spark.redispatch import spark_redispatch

    root = store_of(case)
    with open_store(root) as s:
        a, b, c = tmp_path / "local", tmp_path / "spark", tmp_path / "small"
        for d in (a, b, c):
            d.mkdir()
        stats_a, end_a, why_a = local_redispatch.build(s, a)
        stats_b, end_b, why_b = local_redispatch.build(s, b, engine="spark")
        # tiny tasks: many chunks per file and several waves (same bytes while PHYSICALOFFSET grows)
        stats_c, end_c, why_c = spark_redispatch(s, c, batch=37)
    assert tree(a) == tree(b) == tree(c)
    assert (end_a, why_a) == (end_b, why_b) == (end_c, why_c)
    assert end_b == load_rebuild(case)["maxPhyOffset"]
    for st_ in (stats_b, stats_c):
        assert (st_.records, st_.cq_entries, st_.index_entries) == (
            stats_a.records,
            stats_a.cq_entries,
            stats_a.index_entries,
        )
    assert_equals_engine_rebuild(b, case)


def test_spark_redispatch_damaged_and_from_offset_equal_local(spark, tmp_path: Path) -> None:
    from rmqstore.spark.redispatch import spark_redispatch

    root = copy_real_store("clean-2topics", tmp_path)
    recs = local_records(root)
    f = root / "commitlog" / f"{32768:020d}"
    data = bytearray(f.read_bytes())
    # a size mismatch the dispatcher skips, then a bad magic it stops at
    skip = next(r for r in recs if r.phy_offset > 32768 + 2000)
    props_at = skip.pos + skip.total_size - len(skip.properties_raw.encode()) - 2
    struct.pack_into(">h", data, props_at, len(skip.properties_raw.encode()) - 3)
    stop = next(r for r in recs if r.phy_offset > 32768 + 20000)
    struct.pack_into(">i", data, stop.pos + 4, 0x12345678)
    f.write_bytes(bytes(data))
    with open_store(root) as s:
        for from_phy in (None, recs[30].phy_offset):
            a, b = tmp_path / f"local{from_phy}", tmp_path / f"spark{from_phy}"
            a.mkdir()
            b.mkdir()
            _, end_a, why_a = local_redispatch.build(s, a, from_phy=from_phy)
            _, end_b, why_b = local_redispatch.build(s, b, from_phy=from_phy, engine="spark")
            assert (end_b, why_b) == (end_a, why_a) == (stop.phy_offset, why_a)
            assert why_b.startswith("invalid record:")
            assert tree(a) == tree(b)
        # many small tasks: the invalid record ends the walk inside a chunk that is not the file's last
        c = tmp_path / "small"
        c.mkdir()
        _, end_c, why_c = spark_redispatch(s, c, batch=9)
        assert (end_c, why_c) == (stop.phy_offset, why_a)
        assert tree(c) == tree(tmp_path / "localNone")


# ----------------------------------------------------------------------------------------- CLI


def test_cli_stats_find_export_redispatch(spark, tmp_path: Path) -> None:
    import json

    root = store_of("clean-2topics")
    r = runner.invoke(app, ["spark", "stats", str(root), "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert sum(x["messages"] for x in rows) == 500
    assert sum(x["bytes"] for x in rows) == sum(t["size"] for t in truth_messages("clean-2topics"))

    r = runner.invoke(app, ["spark", "find", str(root), "--key", "order-5", "--format", "ndjson", "-q"])
    assert r.exit_code == 0, r.output
    got = [json.loads(line)["msgId"] for line in r.stdout.splitlines()]
    served = truth_served("clean-2topics")
    assert got == [served[t["offset"]]["msgId"] for t in truth_messages("clean-2topics") if "order-5" in truth_keys(t)]
    assert r.stderr.strip().splitlines()[-1] == f"{len(got)} message(s) found"

    out = tmp_path / "pq"
    r = runner.invoke(app, ["spark", "export", str(root), "--output", str(out), "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows"] == 500
    r = runner.invoke(app, ["spark", "export", str(root), "--output", str(out), "-q"])
    assert r.exit_code == 8
    assert r.stderr.splitlines()[0].startswith(f"error: {out}: output exists")

    copy = copy_real_store("clean-2topics", tmp_path / "copy")
    build = tmp_path / "rebuilt"
    r = runner.invoke(app, ["spark", "redispatch", str(copy), "--output", str(build), "-q"])
    assert r.exit_code == 0, r.output
    assert_equals_engine_rebuild(build, "clean-2topics")
    build2 = tmp_path / "rebuilt2"
    r = runner.invoke(app, ["redispatch", str(copy), "--engine", "spark", "--output", str(build2), "-q"])
    assert r.exit_code == 0, r.output
    assert tree(build2) == tree(build)


def test_cli_errors_come_before_spark(tmp_path: Path) -> None:
    r = runner.invoke(app, ["spark", "stats", str(tmp_path / "nowhere")])
    assert r.exit_code == 5
    assert r.stderr.splitlines()[0] == f"error: {tmp_path / 'nowhere'}: no such directory"
    r = runner.invoke(app, ["spark", "stats", str(tmp_path / "no-*-match")])
    assert r.exit_code == 5
    assert r.stderr.splitlines()[0] == f"error: {tmp_path / 'no-*-match'}: no store matches"
    r = runner.invoke(app, ["spark", "find", str(store_of("delay-tx-retry"))])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0].startswith("error: nothing to find")
    r = runner.invoke(app, ["spark", "find", str(store_of("delay-tx-retry")), "--property", "novalue"])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == "error: --property 'novalue' is not NAME=VALUE"


# ------------------------------------------------------------------------------ bad environment


def test_missing_pyspark_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "rmqstore.spark" or m.startswith("rmqstore.spark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(MissingExtra, match=r"pip install 'rmqstore\[spark\]'"):
        import rmqstore.spark  # noqa: F401
    r = runner.invoke(app, ["spark", "stats", str(store_of("delay-tx-retry"))])
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: the Spark commands need pyspark") and "rmqstore[spark]" in first


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "JAVA_HOME": ""}
    code = "import sys; from rmqstore.cli import main; sys.argv[0] = 'rmqstore'; main()"
    p = subprocess.run(
        [sys.executable, "-c", code, "spark", "stats", str(store_of("delay-tx-retry"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stderr
    assert p.stderr.splitlines()[0].startswith("error: Spark needs a Java 17+ runtime")
    assert "Traceback" not in p.stderr


def test_core_never_imports_spark() -> None:
    code = (
        "import sys, rmqstore.ops.redispatch, rmqstore.dispatch.dispatcher, rmqstore.store, rmqstore.codec.commitlog, rmqstore.cli\n"
        "print(sorted(m for m in ('pyspark', 'pyarrow', 'rmqstore.spark') if m in sys.modules))"
    )
    assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "[]"


# ------------------------------------------------------------------------------------ pushdown


def test_pushed_down_filters_and_keys_option(spark) -> None:
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

    from rmqstore.spark import jobs
    from rmqstore.spark.source import CommitLogSourceReader, commitlog_schema

    root = store_of("clean-2topics")
    recs = local_records(root)
    ts = sorted(r.store_timestamp_ms for r in recs)[len(recs) // 3]
    off = recs[400].phy_offset

    def wanted(r: Record) -> bool:
        return r.topic == "TopicA" and r.queue_id in (0, 2) and r.store_timestamp_ms >= ts and r.phy_offset < off

    want = [r.phy_offset for r in recs if wanted(r)]
    assert want
    df = jobs.read_commitlog(spark, [root], options=jobs.ReadOptions(split_size="8k"))
    cond = (
        (F.col("topic") == "TopicA")
        & F.col("queueId").isin(0, 2)
        & (F.col("storeTimestamp") >= ts)
        & (F.col("commitLogOffset") < off)
    )
    assert sorted(r.commitLogOffset for r in df.where(cond).collect()) == want
    # the reader applies them itself: fewer splits (offsets) and only matching rows
    schema = commitlog_schema()
    reader = CommitLogSourceReader({"paths": json.dumps([str(root)]), "splitSize": "8k"}, schema)
    all_parts = len(reader.partitions())
    filters = [
        EqualTo(("topic",), "TopicA"),
        In(("queueId",), (0, 2)),
        GreaterThanOrEqual(("storeTimestamp",), ts),
        LessThan(("commitLogOffset",), off),
    ]
    assert list(reader.pushFilters(filters)) == filters  # Spark checks them again
    parts = reader.partitions()
    assert len(parts) < all_parts
    got = [o for p in parts for b in reader.read(p) for o in b.column("commitLogOffset").to_pylist()]
    assert got == want
    # keys: a KEYS token or the UNIQ_KEY, as the option of find
    uniq = recs[77].uniq_key
    df = jobs.read_commitlog(spark, [root], options=jobs.ReadOptions(keys=("order-5", uniq)))
    assert sorted(r.commitLogOffset for r in df.collect()) == [
        r.phy_offset for r in recs if "order-5" in (r.keys or "").split() or r.uniq_key == uniq
    ]


def test_dledger_store_reads_and_rebuilds_on_spark(spark, tmp_path: Path) -> None:
    """A DLedger commit log through Spark: every record at its served offset, and the consume queues
    and index files rebuilt byte for byte as the running 4.9.4 broker wrote them."""
    from rmqstore.spark import jobs
    from rmqstore.spark.redispatch import spark_redispatch

    case = "4.9.4/dledger-clean"
    load_truth(case)  # skips when the real stores are absent
    root = case_dir(case) / "store"
    df = jobs.read_commitlog(spark, [root], options=jobs.ReadOptions(split_size="8k"))
    got = sorted((r["commitLogOffset"], r["topic"], r["queueId"], r["queueOffset"]) for r in df.collect())
    want = [(m["offset"], m["topic"], m["queueId"], m["queueOffset"]) for m in truth_messages(case)]
    assert got == want
    with open_store(root) as s:
        out = tmp_path / "spark"
        out.mkdir()
        spark_redispatch(s, out, batch=37)
    engine = {p.relative_to(root): p.read_bytes() for p in (root / "consumequeue").rglob("*") if p.is_file()}
    assert {p.relative_to(out): p.read_bytes() for p in (out / "consumequeue").rglob("*") if p.is_file()} == engine
    index = [p.read_bytes() for p in sorted((out / "index").iterdir())]
    assert index == [p.read_bytes() for p in sorted((root / "index").iterdir())]


# -------------------------------------------------------------------------------------- report

REPORT_NOW = "2026-01-01T00:00:00Z"  # expiry evaluated at one time for both commands


def _without_disk_use(doc: object) -> object:
    """The figures without the file system's used ratios, which change while the tests run."""
    if isinstance(doc, dict):
        return {k: _without_disk_use(v) for k, v in doc.items() if not k.endswith("DiskUsedRatio")}
    if isinstance(doc, list):
        return [_without_disk_use(v) for v in doc]
    return doc


def _both_reports(stores: list[str], *args: str, split_size: str = "128m") -> tuple[str, str]:
    """The output of ``spark report`` and of ``report`` for the same stores and options."""
    common = [*stores, "--now", REPORT_NOW, "-q", *args]
    got = runner.invoke(app, ["spark", "report", "--split-size", split_size, *common])
    assert got.exit_code == 0, got.output
    want = runner.invoke(app, ["report", *common])
    assert want.exit_code == 0, want.output
    return got.stdout, want.stdout


def test_spark_report_figures_equal_report(spark) -> None:
    """One store: every figure of the JSON (full check's verdict included) is report's."""
    got, want = _both_reports([str(store_of("clean-2topics"))], "-f", "json", "--check", "full")
    doc = json.loads(got)
    assert doc["stores"][0]["traffic"]["messages"] == 500
    assert _without_disk_use(doc) == _without_disk_use(json.loads(want))


def test_spark_report_of_several_stores_equals_report(spark) -> None:
    """Stores of three engines (a crashed one and a DLedger one among them), files packed several to a
    task and a store's files spread over tasks: the same figures and the same page as report."""
    from rmqstore.spark.report import StoreFiles, plan_tasks

    stores = [f"{REAL_STORES}/*/store", str(case_dir("4.9.4/dledger-clean") / "store")]
    stores.append(str(case_dir("5.2.0/crc-property") / "store"))
    got, want = _both_reports(stores, "-f", "json", split_size="9m")
    doc = json.loads(got)
    assert len(doc["stores"]) == 5 and not doc["errors"]
    assert _without_disk_use(doc) == _without_disk_use(json.loads(want))
    with open_store(store_of("clean-2topics")) as s:
        files = StoreFiles(str(s.root), s.config.broker, tuple(s.commitlog_segments()[0]))
    tasks = plan_tasks([files], 9 << 20)
    assert len(tasks) > 1 and max(len(t) for t in tasks) > 1
    page, local_page = _both_reports(stores, split_size="9m")
    assert page == local_page and page.count('<section class="store"') == 5
