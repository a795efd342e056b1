"""The NDJSON reader's chunk path and the run lane against the per-message path, on hostile text.

Engine-shaped lines (TAGS, KEYS, UNIQ_KEY, WAIT and user properties) with property names and values
drawn from text that breaks naive encoders (separators, ``%``, non-ASCII, lone surrogates, names the
broker reads itself, empty names and values) are read through ``read_ndjson_stream`` (the chunk path,
a batch) and written through the run lane, and read line by line into ``Message`` values written one
by one: the two stores are the same byte for byte, or both writes fail with the same message.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import InputError
from rmqstore.ops import write as wr

CONF = "mapedFileSizeCommitLog=8192\nmapedFileSizeConsumeQueue=400\nmaxHashSlotNum=64\nmaxIndexNum=256\n"
_TEXT = st.text(st.sampled_from(["a", "Z", "é", "中", "%", "s", " ", "\x01", "\x02", "\ud800", "\\", '"']), max_size=6)
_NAME = st.one_of(_TEXT, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "traceId", "region", "DELAY"]))
_PROPS = st.dictionaries(_NAME, _TEXT, max_size=3)


def _lines(draw_props: list[dict[str, str]], tags: list[str], keys: list[str]) -> bytes:
    out = []
    for i, (props, t, k) in enumerate(zip(draw_props, tags, keys, strict=True)):
        m = {"topic": f"T{i % 2}", "tags": t, "keys": k, "uniqKey": f"C0A8000A1F9018B4AAC22A3B{i:08X}", "wait": True}
        m |= {"properties": props, "body": "b" * (i % 7)}
        out.append(json.dumps(m, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def _write(root: Path, messages: object, broker: str) -> tuple[dict[str, str] | None, str | None]:
    (root / "broker.conf").write_text(CONF)
    try:
        wr.write_messages(
            root / "store",
            messages,  # type: ignore[arg-type]
            broker_config=root / "broker.conf",
            broker=broker,
            create=True,
            clock=lambda: 1_800_000_000_000,
            uniq_keys=wr.UniqKeySource(seed=7),
            topic_queue_nums=2,
        )
    except InputError as e:
        return None, str(e)
    files = sorted(p for p in (root / "store").rglob("*") if p.is_file() and ".rmqstore" not in p.parts)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}, None


@pytest.mark.parametrize("broker", ["4.4.0", "4.9.4", "5.2.0"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    props=st.lists(_PROPS, min_size=12, max_size=12),
    same=st.booleans(),
    tags=st.lists(_TEXT.filter(bool), min_size=12, max_size=12),
    keys=st.lists(_TEXT, min_size=12, max_size=12),
)
def test_chunk_path_and_run_lane_match_message_by_message(
    broker: str,
    props: list[dict[str, str]],
    same: bool,
    tags: list[str],
    keys: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if same:  # every message with the first one's names: one run of the lane
        props = [dict(zip(props[0], (p.get(k, "v") for k in props[0]), strict=True)) for p in props]
    data = _lines(props, tags, keys)
    batch, _ = wr.read_ndjson_stream(io.BytesIO(data), source="in")
    lines = data.decode().splitlines()
    one_by_one = [wr.message_from_json(json.loads(x), origin=f"in:{n}") for n, x in enumerate(lines, 1)]
    assert isinstance(batch, wr.MessageBatch) and batch.messages() == one_by_one
    base = tmp_path_factory.mktemp("w")
    monkeypatch.setattr(wr.plan, "_FAST_MIN_RUN", 1)
    (base / "lane").mkdir()
    lane = _write(base / "lane", batch, broker)
    monkeypatch.setattr(wr.plan, "_FAST_MIN_RUN", 10**9)
    (base / "ref").mkdir()
    ref = _write(base / "ref", one_by_one, broker)
    assert lane == ref


def test_chunk_path_falls_back_line_by_line() -> None:
    """A chunk with a blank line, a spaced line, a dumped blank row or a bad line is read line by line:
    the same messages as read_ndjson, the same error naming the line."""
    good = '{"topic":"A","uniqKey":"U1","wait":false,"properties":{"p":"1"},"body":"x"}'
    data = "\n".join([good, "", "  " + good, '{"kind":"blank","commitLogOffset":0}', good]) + "\n"
    got, _ = wr.read_ndjson_stream(io.BytesIO(data.encode()), source="in")
    want = wr.read_ndjson(data.split("\n"), source="in")
    assert isinstance(got, wr.MessageBatch) and got.messages() == want.messages()  # type: ignore[union-attr]
    assert [m.origin for m in got.messages()] == ["in:1", "in:3", "in:5"]
    for bad, why in (('{"topic":"A"', "in:2: not valid JSON"), ('{"topic":"A"},{"topic":"B"}', "in:2: not valid JSON")):
        with pytest.raises(InputError, match=why):
            wr.read_ndjson_stream(io.BytesIO(f"{good}\n{bad}\n{good}\n".encode()), source="in")
    # keys of the same count but not the same keys: read a column at a time instead of by shape
    mixed = '{"topic":"A","tags":"t"}\n{"topic":"B","keys":"k"}\n'
    got, _ = wr.read_ndjson_stream(io.BytesIO(mixed.encode()), source="in")
    assert [(m.topic, m.tags, m.keys) for m in got.messages()] == [("A", "t", None), ("B", None, "k")]  # type: ignore[union-attr]
