"""Tests for rmqstore.config: fastjson config files (store-format.md §11, §12, §15.13).

Where the ~200 real config files under shared/real-world differ from store-format.md (real files win):

* Not every file is pretty-printed. 5.x ``timermetrics`` / ``transactionMetrics`` (and their .bak) are
  compact one-line JSON, and so is the 3.x ``delayOffset.json`` of humphery755/RocketMQ
  (``{"offsetTable":{12:37,6:41,...}}``). §11.1 says persist always pretty-prints; ``dumps(pretty=False)``
  reproduces the compact ones byte for byte, and ``write_config`` writes timermetrics/transactionMetrics
  compact.
* Integer-keyed maps are in Java hash order, not ascending: ``{6:2,5:2,7:2,0:6,...}`` (3.x
  consumerOffset.json), ``{12:37,6:41,13:37,...}`` (3.x delayOffset.json). The doc's examples are all
  ascending; the writer keeps whatever order it is given.
* RocketMQ 3.x ``dataVersion`` spells its time ``"timestatmp"`` (topics.json, subscriptionGroup.json), and
  3.x subscription groups have no ``notifyConsumerIdsChangedEnable``. Neither is in the doc.
* The 5.x ``consumerOffset.json`` files carry ``"groupTopicMap":{}`` (always empty here); no real file has
  an array anywhere, so the array layouts (one line for Set / int[] as in §11.4 and §11.7, one item per
  line for java.util.List) rest on the doc and fastjson's source only.
* ``consumerOrderInfo.json`` (``{"table":{}}``), ``timermetrics`` and ``transactionMetrics`` are not
  described in the doc.
* Every real file is ASCII with LF line ends, no BOM and no trailing newline: no CRLF variant exists
  (the parser still accepts CRLF). No real 5.x store has topics.json or subscriptionGroup.json, so the
  5.x ``attributes`` / ``stateVersion`` layouts of §11.3 are checked against the doc only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from rmqstore.errors import ConfigError, InputError
from rmqstore.store import config as cfgmod
from rmqstore.store.config import (
    PERM_INHERIT,
    ConfigFile,
    JavaList,
    TopicConfig,
    auto_create_topic,
    bean,
    bump_data_version,
    dumps,
    load_consumer_offsets,
    load_delay_offsets,
    load_topics,
    loads,
    read_config,
    set_consumer_offset,
    set_topic,
    topic_to_bean,
    write_config,
)

_SHARED = Path(os.environ.get("RMQSTORE_SHARED") or Path(__file__).resolve().parents[3] / "shared")
REAL_WORLD = _SHARED / "real-world"
STORE_FORMAT = _SHARED / "docs" / "store-format.md"
_NO_REAL_WORLD = f"real-world config files not found at {REAL_WORLD} (shared/ must sit beside the checkout)"

KINDS = (
    "topics.json",
    "consumerOffset.json",
    "delayOffset.json",
    "subscriptionGroup.json",
    "consumerFilter.json",
    "consumerOrderInfo.json",
    "timermetrics",
    "transactionMetrics",
)


def _kind(path: Path) -> str:
    return path.name.removesuffix(".bak")


def _real_config_files() -> list[Path]:
    if not REAL_WORLD.is_dir():
        return []
    return sorted(p for p in REAL_WORLD.rglob("*") if p.is_file() and _kind(p) in KINDS)


REAL_FILES = _real_config_files()


def _real_params() -> list[Any]:
    if not REAL_FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=_NO_REAL_WORLD))]
    return [pytest.param(p, id=str(p.relative_to(REAL_WORLD))) for p in REAL_FILES]


def _real(kind: str) -> list[Path]:
    return [p for p in REAL_FILES if _kind(p) == kind]


def _doc(name: str) -> str:
    """A format document example (§11), byte for byte as the broker writes it (TAB indents, no final newline)."""
    return (Path(__file__).parents[1] / "data" / "config-docs" / f"{name}.json").read_text(encoding="utf-8")


def _canon(x: Any, *, keep_javalist: bool = True) -> Any:
    """A type-strict, order-strict view (1 == 1.0 == True and dict equality ignore both)."""
    if isinstance(x, dict):
        return ("dict", [(_canon(k), _canon(v, keep_javalist=keep_javalist)) for k, v in x.items()])
    if isinstance(x, list):
        tag = "jlist" if keep_javalist and isinstance(x, JavaList) and x else "list"
        return (tag, [_canon(v, keep_javalist=keep_javalist) for v in x])
    if isinstance(x, float):
        return ("float", repr(x))
    return (type(x).__name__, x)


# ----------------------------------------------------------------------------- real-world files


def test_real_world_corpus_found() -> None:
    if not REAL_FILES:
        pytest.skip(_NO_REAL_WORLD)
    assert len(REAL_FILES) >= 200
    assert {_kind(p) for p in REAL_FILES} == set(KINDS)


def _quote_bare_keys(text: str) -> str:
    return re.sub(r"([{,]\s*)(-?\d+)(\s*:)", r'\1"\2"\3', text)


def _keys_to_str(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _keys_to_str(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_keys_to_str(v) for v in x]
    return x


@pytest.mark.parametrize("path", _real_params())
def test_real_file_parses(path: Path) -> None:
    raw = path.read_bytes()
    data = loads(raw, path=path)
    assert isinstance(data, dict) and data
    # Same content as Python's json module reads once the bare integer keys are quoted (§11.2).
    assert _keys_to_str(data) == json.loads(_quote_bare_keys(raw.decode()))
    # Bare keys come back as int, quoted keys as str.
    assert all(type(k) is str for k in data)
    if _kind(path) == "consumerOffset.json":
        assert all(type(q) is int for queues in data["offsetTable"].values() for q in queues)
    if _kind(path) == "delayOffset.json":
        assert all(type(level) is int for level in data["offsetTable"])


@pytest.mark.parametrize("path", _real_params())
def test_real_file_rewritten_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    pretty = b"\n" in raw
    if pretty:
        assert b"\t" in raw  # every multi-line real file is fastjson pretty form
    assert dumps(loads(raw, path=path), pretty=pretty).encode("utf-8") == raw


def _real_config_dirs() -> list[Any]:
    dirs = sorted({p.parent for p in REAL_FILES})
    if not dirs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=_NO_REAL_WORLD))]
    return [pytest.param(d, id=str(d.relative_to(REAL_WORLD))) for d in dirs]


@pytest.mark.parametrize("config_dir", _real_config_dirs())
@pytest.mark.parametrize("broker_version", ["4.4.0", "5.3.3"])
def test_real_dir_read_write_same_bytes(config_dir: Path, broker_version: str, tmp_path: Path) -> None:
    work = tmp_path / "config"
    shutil.copytree(config_dir, work)
    for name in sorted({_kind(p) for p in work.iterdir() if _kind(p) in KINDS}):
        before = (work / name).read_bytes() if (work / name).exists() else None
        cf = read_config(work, name)
        assert cf.source == ("file" if before else "bak")
        assert cf.raw is not None
        # write_config picks the broker's layout; only the 3.x compact delayOffset.json needs telling.
        pretty = None if b"\n" in cf.raw or name in cfgmod.COMPACT_FILES else False
        write_config(work, name, cf.data, broker_version=broker_version, pretty=pretty)
        after = (work / name).read_bytes()
        assert after == cf.raw
        if before is not None:
            assert (work / f"{name}.bak").read_bytes() == before
    assert not [p.name for p in work.iterdir() if p.name.endswith(".tmp")]


def test_real_topics_views() -> None:
    files = _real("topics.json")
    if not files:
        pytest.skip(_NO_REAL_WORLD)
    for path in files:
        data = loads(path.read_bytes(), path=path)
        topics = load_topics(data, path=path)
        assert list(topics) == list(data["topicConfigTable"])
        for key, tc in topics.items():
            assert tc.topic_name == key
            assert topic_to_bean(tc) == data["topicConfigTable"][key]
            assert list(topic_to_bean(tc)) == list(data["topicConfigTable"][key])
        assert topics["TBW102"] == TopicConfig("TBW102", 8, 8, 7, "SINGLE_TAG", 0, False, None)
        if "TopicTest" in topics:  # auto-created by the quickstart producer
            assert topics["TopicTest"] == auto_create_topic("TopicTest", template=topics["TBW102"])


def test_real_topics_bak_is_previous_version() -> None:
    pairs = [(p, p.with_name("topics.json.bak")) for p in _real("topics.json") if p.name == "topics.json"]
    pairs = [(m, b) for m, b in pairs if b.exists()]
    if not pairs:
        pytest.skip(_NO_REAL_WORLD)
    for main, bak in pairs:
        new, old = loads(main.read_bytes()), loads(bak.read_bytes())
        assert new["dataVersion"]["counter"] == old["dataVersion"]["counter"] + 1
        added = set(load_topics(new)) - set(load_topics(old))
        assert len(added) == 1
        # Replaying the broker's change on the .bak gives the main file's table and counter.
        (name,) = added
        set_topic(old, load_topics(new)[name], now_ms=new["dataVersion"]["timestamp"])
        assert old == new


def test_real_consumer_offsets_views() -> None:
    files = _real("consumerOffset.json")
    if not files:
        pytest.skip(_NO_REAL_WORLD)
    seen = 0
    for path in files:
        data = loads(path.read_bytes(), path=path)
        offsets = load_consumer_offsets(data, path=path)
        assert len(offsets) == len(data.get("offsetTable", {}))
        seen += len(offsets)
    assert seen > 50
    shaoxubao = [p for p in files if "Shaoxubao" in str(p) and p.name == "consumerOffset.json.bak"]
    if shaoxubao:
        offsets = load_consumer_offsets(loads(shaoxubao[0].read_bytes()))
        assert offsets == {
            ("TopicTest", "please_rename_unique_group_name_4"): {0: 250, 1: 250, 2: 250, 3: 250},
            ("%RETRY%please_rename_unique_group_name_4", "please_rename_unique_group_name_4"): {0: 0},
        }


def test_real_delay_offsets_views() -> None:
    files = _real("delayOffset.json")
    if not files:
        pytest.skip(_NO_REAL_WORLD)
    for path in files:
        levels = load_delay_offsets(loads(path.read_bytes(), path=path), path=path)
        assert all(1 <= lv <= 18 for lv in levels)
    humphery = [p for p in files if "humphery755" in str(p) and p.name == "delayOffset.json"]
    if humphery:
        levels = load_delay_offsets(loads(humphery[0].read_bytes()))
        assert len(levels) == 16 and levels[18] == 74 and levels[12] == 37
        assert list(levels)[:3] == [12, 6, 13]  # file (hash) order kept


def test_real_3x_data_version_spelling_is_kept() -> None:
    files = [p for p in _real("topics.json") if "humphery755" in str(p)]
    if not files:
        pytest.skip(_NO_REAL_WORLD)
    data = loads(files[0].read_bytes())
    counter = data["dataVersion"]["counter"]
    set_topic(data, auto_create_topic("NewTopic"), now_ms=1_700_000_000_000)
    assert data["dataVersion"] == {"counter": counter + 1, "timestatmp": 1_700_000_000_000}
    assert list(data["topicConfigTable"])[-1] == "NewTopic"


# --------------------------------------------------------------------------- doc examples (§11)

DOC_OFFSET_4X = (
    '{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251,3:250\n\t\t},'
    '\n\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n\t\t}\n\t}\n}'
)


def test_doc_11_4_consumer_offset_exact() -> None:
    data = {
        "offsetTable": {
            "TopicTest@please_rename_unique_group_name_4": {0: 250, 1: 249, 2: 251, 3: 250},
            "%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4": {0: 0},
        }
    }
    assert dumps(data) == DOC_OFFSET_4X
    assert _canon(loads(DOC_OFFSET_4X)) == _canon(data)
    assert dumps({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert load_consumer_offsets(loads(DOC_OFFSET_4X)) == {
        ("TopicTest", "please_rename_unique_group_name_4"): {0: 250, 1: 249, 2: 251, 3: 250},
        ("%RETRY%please_rename_unique_group_name_4", "please_rename_unique_group_name_4"): {0: 0},
    }


def test_doc_11_4_consumer_offset_built_with_setter() -> None:
    data: dict[str, Any] = {}
    for qid, off in enumerate([250, 249, 251, 250]):
        set_consumer_offset(data, "TopicTest", "please_rename_unique_group_name_4", qid, off)
    set_consumer_offset(data, "%RETRY%please_rename_unique_group_name_4", "please_rename_unique_group_name_4", 0, 0)
    assert dumps(data) == DOC_OFFSET_4X


def test_doc_11_4_consumer_offset_5x() -> None:
    doc = _doc("consumerOffset-5x")
    data = {
        "dataVersion": bean(counter=3, stateVersion=0, timestamp=1_700_000_000_000),
        "groupTopicMap": {"please_rename_unique_group_name_4": ["TopicTest"]},
        "offsetTable": {"TopicTest@please_rename_unique_group_name_4": {0: 250, 1: 249, 2: 251, 3: 250}},
    }
    assert dumps(data) == doc
    assert dumps(loads(doc)) == doc
    # The setter keeps groupTopicMap in step when the file has one.
    built: dict[str, Any] = {"dataVersion": data["dataVersion"], "groupTopicMap": {}, "offsetTable": {}}
    for qid, off in enumerate([250, 249, 251, 250]):
        set_consumer_offset(built, "TopicTest", "please_rename_unique_group_name_4", qid, off)
    assert dumps(built) == doc


def test_doc_11_5_and_15_13_delay_offset_exact() -> None:
    assert dumps({"offsetTable": {1: 5, 3: 12}}) == '{\n\t"offsetTable":{1:5,3:12\n\t}\n}'
    assert loads('{\n\t"offsetTable":{1:5,3:12\n\t}\n}') == {"offsetTable": {1: 5, 3: 12}}
    assert load_delay_offsets(loads('{\n\t"offsetTable":{1:5,3:12\n\t}\n}')) == {1: 5, 3: 12}
    doc_5x = (
        '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},'
        '\n\t"offsetTable":{1:5\n\t}\n}'
    )
    data = bean(dataVersion=bean(counter=0, stateVersion=0, timestamp=1_700_000_000_000), offsetTable={1: 5})
    assert dumps(data) == doc_5x
    assert dumps(loads(doc_5x)) == doc_5x


DOC_TOPICS_4X = _doc("topics-4x")

DOC_TOPICS_5X = _doc("topics-5x")


def test_doc_11_3_topics_4x_built_from_typed_views() -> None:
    data: dict[str, Any] = {}
    set_topic(data, auto_create_topic("TopicTest"), now_ms=1_600_000_000_000)
    set_topic(data, TopicConfig("TBW102", 8, 8, 7), now_ms=1_700_000_000_000)
    assert dumps(data) == DOC_TOPICS_4X
    assert dumps(loads(DOC_TOPICS_4X)) == DOC_TOPICS_4X
    assert load_topics(loads(DOC_TOPICS_4X))["TopicTest"] == auto_create_topic("TopicTest")


def test_doc_11_3_topics_5x_built_from_typed_views() -> None:
    data: dict[str, Any] = {}
    fifo = TopicConfig("FifoTopic", 2, 2, attributes={"message.type": "FIFO"})
    set_topic(data, fifo, now_ms=1, broker_version="5.1.0")
    set_topic(data, auto_create_topic("TopicTest", broker_version="5.1.0"), now_ms=1_700_000_000_000)
    assert dumps(data) == DOC_TOPICS_5X
    topics = load_topics(loads(DOC_TOPICS_5X))
    assert topics["FifoTopic"] == fifo
    assert topics["TopicTest"].attributes == {}


def test_doc_11_6_subscription_group_5x() -> None:
    doc = _doc("subscriptionGroup-5x")
    group = bean(
        groupName="please_rename_unique_group_name_4",
        attributes={},
        brokerId=0,
        consumeBroadcastEnable=True,
        consumeEnable=True,
        consumeFromMinEnable=True,
        consumeMessageOrderly=False,
        consumeTimeoutMinute=15,
        groupRetryPolicy=bean(type="CUSTOMIZED", customizedRetryPolicy=None, exponentialRetryPolicy=None),
        groupSysFlag=0,
        notifyConsumerIdsChangedEnable=True,
        retryMaxTimes=16,
        retryQueueNums=1,
        whichBrokerWhenConsumeSlowly=1,
        subscriptionDataSet=None,
    )
    data = bean(
        subscriptionGroupTable={"please_rename_unique_group_name_4": group},
        forbiddenTable={},
        dataVersion=bean(timestamp=1_700_000_000_000, counter=0, stateVersion=0),
    )
    assert dumps(data) == doc
    assert dumps(loads(doc)) == doc


def test_doc_11_7_consumer_filter() -> None:
    doc = _doc("consumerFilter")
    data = loads(doc)
    bloom = data["filterDataByTopic"]["TopicTest"]["groupFilterData"]["GID_SQL"]["bloomFilterData"]
    assert bloom["bitPos"] == [3, 17, 40] and not isinstance(bloom["bitPos"], JavaList)
    assert dumps(data) == doc
    assert dumps({"filterDataByTopic": {}}) == '{\n\t"filterDataByTopic":{}\n}'


def _doc_code_blocks() -> list[Any]:
    if not STORE_FORMAT.is_file():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{STORE_FORMAT} not found"))]
    text = STORE_FORMAT.read_text(encoding="utf-8")
    section = text[text.index("## 11. config/*.json") : text.index("## 12.")]
    blocks = re.findall(r"^```\n(.*?)\n```$", section, flags=re.S | re.M)
    assert len(blocks) >= 9
    return [pytest.param(b, id=f"block{i}") for i, b in enumerate(blocks)]


@pytest.mark.parametrize("block", _doc_code_blocks())
def test_every_doc_section_11_example_round_trips(block: str) -> None:
    assert dumps(loads(block)) == block


# ------------------------------------------------------------------------------- dumps / loads


def test_int_key_map_layout_nested_and_empty() -> None:
    assert dumps({}) == "{}"
    assert dumps({"a": {}}) == '{\n\t"a":{}\n}'
    assert dumps({0: 1}) == "{0:1\n}"
    assert dumps({"t": {0: {"x": 1}}}) == '{\n\t"t":{0:{\n\t\t\t"x":1\n\t\t}\n\t}\n}'
    assert dumps({-1: 2, "s": 3}) == '{-1:2,\n\t"s":3\n}'
    assert dumps({"a": {0: 1}}, pretty=False) == '{"a":{0:1}}'


def test_none_values_are_skipped_like_fastjson() -> None:
    assert dumps({"a": None, "b": 1}) == '{\n\t"b":1\n}'
    assert dumps({"a": None}) == "{\n}"  # MapSerializer prints the newline whenever size() > 0
    assert dumps([None, 1]) == "[null,1]"
    assert bean(b=2, a=None, c=1) == {"b": 2, "c": 1}
    assert list(bean({"z": 1, "a": 2}, m=3)) == ["a", "m", "z"]


def test_list_layouts() -> None:
    obj = {"set": ["a", "b"], "list": JavaList(["a", {"k": 1}]), "empty": JavaList()}
    text = dumps(obj)
    assert text == ('{\n\t"set":["a","b"],\n\t"list":[\n\t\t"a",\n\t\t{\n\t\t\t"k":1\n\t\t}\n\t],\n\t"empty":[]\n}')
    back = loads(text)
    assert isinstance(back["list"], JavaList) and not isinstance(back["set"], JavaList)
    assert dumps(back) == text
    assert dumps([{"k": 1}, {"k": 2}]) == '[{\n\t"k":1\n},{\n\t"k":2\n}]'  # beans in a Set
    assert dumps(obj, pretty=False) == '{"set":["a","b"],"list":["a",{"k":1}],"empty":[]}'


def test_string_escapes_match_fastjson() -> None:
    assert dumps('a"b\\c/d') == '"a\\"b\\\\c/d"'
    assert dumps("\b\t\n\f\r") == '"\\b\\t\\n\\f\\r"'
    assert dumps("\x00\x0b\x1f") == '"\\u0000\\u000B\\u001F"'
    assert dumps("\x7f\x9f\xa0") == '"\\u007F\\u009F\xa0"'
    assert dumps("\u2028\u2029é中😀") == '"\\u2028\\u2029é中😀"'
    assert loads('"\\u000b\\v\\x41\\0\\/\\\'"') == "\x0b\x0bA\x00/'"
    assert loads('"\\uD83D\\uDE00"') == "😀"
    assert loads("'single'") == "single"


def test_numbers() -> None:
    longs = "[9223372036854775807,-9223372036854775808,0,true,false]"
    assert dumps([2**63 - 1, -(2**63), 0, True, False]) == longs
    assert dumps([1.0, 0.001, 1e7, 1.5e-5, -2.5, 123456.75, -0.0]) == ("[1.0,0.001,1.0E7,1.5E-5,-2.5,123456.75,-0.0]")
    assert dumps(float("nan")) == "null"
    assert loads("[1,1.0,1e3,-7]") == [1, 1.0, 1000.0, -7]
    assert [type(v) for v in loads("[1,1.0,1e3,-7]")] == [int, float, float, int]


def test_unsupported_values_raise_type_error() -> None:
    for bad in ({True: 1}, {None: 1}, {1.5: 1}, {"a": object()}, b"x", {1, 2}):
        with pytest.raises(TypeError):
            dumps(bad)


def test_loads_keys_order_and_tolerance() -> None:
    data = loads('{"b":1,"a":{3:4,"3":5,-1:0},c_1:2}')
    assert list(data) == ["b", "a", "c_1"]
    assert list(data["a"].items()) == [(3, 4), ("3", 5), (-1, 0)]
    assert loads('\ufeff{\r\n\t"a":1\r\n}') == {"a": 1}
    assert loads(b'\xef\xbb\xbf{"a":[]}') == {"a": []}
    assert loads(" \f{}\b ") == {}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 1),
        ("{", 1),
        ('{\n\t"a":1,\n\t"b":}', 3),
        ('{\n\t"a":1\n\t"b":2\n}', 3),
        ('{"a":1}}', 1),
        ('{"a":"x', 1),
        ('{\n"a":"\\q"}', 2),
        ('{"a":tru}', 1),
        ("{1.5:2}", 1),
        ("[1,]", 1),
        ('{"a" 1}', 1),
        ('{"a":\n\n' + "[" * 500, 3),
        ('{"a":' + "9" * 5000 + "}", 1),
        ("nul", 1),
    ],
)
def test_bad_input_names_file_and_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError) as info:
        loads(text, path="config/topics.json")
    assert info.value.path == Path("config/topics.json")
    assert info.value.line == line
    assert str(info.value).startswith(f"config/topics.json:{line}: ")


def test_bad_utf8_is_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        loads(b'{\n"a":"\xff"}', path="x.json")
    assert info.value.line == 2


# --------------------------------------------------------------------------------- hypothesis

_java_long = st.integers(-(2**63), 2**63 - 1)
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['"', "\\", '\\"', "a@b", "\u2028", "\x00\x7f\x9f", "é中😀", "%RETRY%g", "{0:1}", "'"]
)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.booleans() | _java_long | _text | _floats
_int_keys = st.integers(-(2**31), 2**31 - 1)
_int_maps = st.dictionaries(_int_keys, _java_long, max_size=6)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    non_null = children.filter(lambda v: v is not None)
    return (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(JavaList)
        | st.dictionaries(_text, non_null, max_size=4)
        | st.dictionaries(_int_keys, non_null, max_size=4)
        | st.dictionaries(_text | _int_keys, non_null, max_size=4)
    )


_values = st.recursive(_scalars | st.none() | _int_maps, _containers, max_leaves=24)


@given(_values, st.booleans())
@example({"offsetTable": {"t@g": {0: 2**63 - 1, 1: -(2**63)}}}, True)
@example(JavaList([JavaList([1, 2]), {}]), True)
def test_round_trip_random_structures(obj: Any, pretty: bool) -> None:
    text = dumps(obj, pretty=pretty)
    back = loads(text)
    assert _canon(back, keep_javalist=pretty) == _canon(obj, keep_javalist=pretty)
    assert dumps(back, pretty=pretty) == text
    if not pretty:
        assert "\n" not in text


_json_values = st.recursive(
    st.booleans() | _java_long | _text | st.none(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c.filter(lambda v: v is not None), max_size=4),
    max_leaves=16,
)


@given(_json_values)
def test_str_keyed_output_is_plain_json(obj: Any) -> None:
    assert json.loads(dumps(obj)) == obj


@given(st.binary(max_size=300))
@example(b"")
@example(b"{" * 5000)
@example(b"[" * 5000)
@example(b'{"a":1e999}')
def test_random_bytes_only_config_error(raw: bytes) -> None:
    try:
        loads(raw, path="random.json")
    except ConfigError as e:
        assert e.path == Path("random.json") and e.line is not None and e.line >= 1


@given(st.data())
def test_truncated_real_files_raise_config_error(data: st.DataObject) -> None:
    if not REAL_FILES:
        pytest.skip(_NO_REAL_WORLD)
    path = data.draw(st.sampled_from(REAL_FILES))
    raw = path.read_bytes()
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ConfigError) as info:
        loads(raw[:cut], path=path)
    assert info.value.path == path


@given(st.data())
def test_damaged_real_files_parse_or_raise_config_error(data: st.DataObject) -> None:
    if not REAL_FILES:
        pytest.skip(_NO_REAL_WORLD)
    path = data.draw(st.sampled_from(REAL_FILES))
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        loads(bytes(raw), path=path)
    except ConfigError as e:
        assert e.path == path


# -------------------------------------------------------------------------------- files on disk

OLD = {"offsetTable": {"t@g": {0: 1}}}
NEW = {"offsetTable": {"t@g": {0: 2}}}


def _put(path: Path, data: Any | bytes) -> None:
    path.write_bytes(data if isinstance(data, bytes) else dumps(data).encode())


def test_read_main_file(tmp_path: Path) -> None:
    _put(tmp_path / "consumerOffset.json", NEW)
    _put(tmp_path / "consumerOffset.json.bak", OLD)
    cf = read_config(tmp_path, "consumerOffset.json")
    assert cf == ConfigFile(tmp_path / "consumerOffset.json", NEW, "file", dumps(NEW).encode())


@pytest.mark.parametrize("main", [None, b"", b'{\n\t"offsetTable":{', b"\x00" * 64, b"[1,2]", b"  "])
def test_bak_used_when_main_missing_empty_or_garbage(tmp_path: Path, main: bytes | None) -> None:
    if main is not None:
        _put(tmp_path / "consumerOffset.json", main)
    _put(tmp_path / "consumerOffset.json.bak", OLD)
    cf = read_config(tmp_path, "consumerOffset.json")
    assert cf.source == "bak" and cf.data == OLD and cf.raw == dumps(OLD).encode()
    assert cf.path == tmp_path / "consumerOffset.json"
    assert (cf.skipped is None) == (not main)
    if cf.skipped is not None:
        assert cf.skipped.path == tmp_path / "consumerOffset.json"


def test_bak_used_when_main_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "topics.json").mkdir()  # reading it fails with an OSError
    _put(tmp_path / "topics.json.bak", OLD)
    cf = read_config(tmp_path, "topics.json")
    assert cf.source == "bak" and cf.data == OLD and cf.skipped is not None


@pytest.mark.parametrize("main", [None, b"", b"garbage"])
@pytest.mark.parametrize("bak", [None, b""])
def test_missing_state_without_usable_bak(tmp_path: Path, main: bytes | None, bak: bytes | None) -> None:
    if main is not None:
        _put(tmp_path / "delayOffset.json", main)
    if bak is not None:
        _put(tmp_path / "delayOffset.json.bak", bak)
    cf = read_config(tmp_path, "delayOffset.json")
    assert (cf.data, cf.source, cf.raw) == ({}, "missing", None)
    assert (cf.skipped is not None) == (main == b"garbage")


def test_both_unparsable_names_main_file(tmp_path: Path) -> None:
    _put(tmp_path / "topics.json", b'{\n\t"a":\n')
    _put(tmp_path / "topics.json.bak", b"{oops")
    with pytest.raises(ConfigError) as info:
        read_config(tmp_path, "topics.json")
    assert info.value.path == tmp_path / "topics.json"
    assert info.value.line == 3
    assert "topics.json.bak" in str(info.value)


def test_bak_unparsable_with_main_missing_names_bak(tmp_path: Path) -> None:
    _put(tmp_path / "topics.json.bak", b"{oops")
    with pytest.raises(ConfigError) as info:
        read_config(tmp_path, "topics.json")
    assert info.value.path == tmp_path / "topics.json.bak"


@pytest.mark.parametrize("name", ["", "..", "a/b", "x\0"])
def test_bad_names_rejected(tmp_path: Path, name: str) -> None:
    with pytest.raises(InputError):
        read_config(tmp_path, name)
    with pytest.raises(InputError):
        write_config(tmp_path, name, {})


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("version", ["4.4.0", "4.9.7", "5.0.0", "5.1.0", "5.3.3"])
def test_write_rotates_bak_and_leaves_no_tmp(tmp_path: Path, version: str) -> None:
    d = tmp_path / "store" / "config"
    write_config(d, "consumerOffset.json", OLD, broker_version=version)  # creates the directory
    assert sorted(p.name for p in d.iterdir()) == ["consumerOffset.json"]
    old_raw = (d / "consumerOffset.json").read_bytes()
    assert old_raw == dumps(OLD).encode()
    (d / "consumerOffset.json").chmod(0o600)
    write_config(d, "consumerOffset.json", NEW, broker_version=version)
    assert (d / "consumerOffset.json").read_bytes() == dumps(NEW).encode()
    assert (d / "consumerOffset.json.bak").read_bytes() == old_raw
    assert stat.S_IMODE((d / "consumerOffset.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in d.iterdir()) == ["consumerOffset.json", "consumerOffset.json.bak"]
    cf = read_config(d, "consumerOffset.json")
    assert (cf.source, cf.data) == ("file", NEW)


def test_write_copies_even_a_broken_main_to_bak_like_the_broker(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_bytes(b"\xffnot json")
    write_config(tmp_path, "topics.json", NEW)
    assert (tmp_path / "topics.json.bak").read_bytes() == b"\xffnot json"
    assert read_config(tmp_path, "topics.json").data == NEW


def test_write_layout_follows_the_broker_per_file(tmp_path: Path) -> None:
    metrics = bean(dataVersion=bean(counter=0, stateVersion=0, timestamp=1), timingCount={})
    write_config(tmp_path, "timermetrics", metrics)
    assert (tmp_path / "timermetrics").read_bytes() == (
        b'{"dataVersion":{"counter":0,"stateVersion":0,"timestamp":1},"timingCount":{}}'
    )
    write_config(tmp_path, "delayOffset.json", {"offsetTable": {1: 5}}, pretty=False)
    assert (tmp_path / "delayOffset.json").read_bytes() == b'{"offsetTable":{1:5}}'
    write_config(tmp_path, "x.json", {"k": "é"})
    assert (tmp_path / "x.json").read_bytes() == '{\n\t"k":"é"\n}'.encode()


def test_write_errors_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError):
        write_config(tmp_path / "file", "topics.json", {})
    with pytest.raises(TypeError):
        write_config(tmp_path, "topics.json", {"a": object()})
    assert not (tmp_path / "topics.json").exists()


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (except the cleanup our code does on the way out)."""


class _Killer:
    """Lets ``after`` durable steps (writes, renames) happen, then kills the writer."""

    def __init__(self, *, after: int) -> None:
        self.after = after
        self.calls = 0

    def wrap(self, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls > self.after:
                raise _Killed
            return real(*args, **kwargs)

        return wrapped


@pytest.mark.parametrize("version", ["4.4.0", "5.1.0"])
def test_kill_at_any_step_leaves_a_loadable_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    older = {"offsetTable": {"t@g": {0: 0}}}
    step = 0
    while True:
        d = tmp_path / f"run{step}"
        d.mkdir()
        _put(d / "consumerOffset.json", OLD)
        _put(d / "consumerOffset.json.bak", older)
        killer = _Killer(after=step)

        with monkeypatch.context() as m:
            m.setattr(cfgmod, "atomic_write", killer.wrap(cfgmod.atomic_write))
            m.setattr(cfgmod, "_write_synced", killer.wrap(cfgmod._write_synced))
            m.setattr(cfgmod.os, "replace", killer.wrap(os.replace))
            try:
                write_config(d, "consumerOffset.json", NEW, broker_version=version)
                finished = True
            except _Killed:
                finished = False
        cf = read_config(d, "consumerOffset.json")
        assert cf.source == "file" and cf.data in (OLD, NEW)
        assert loads((d / "consumerOffset.json.bak").read_bytes()) in (older, OLD)
        if finished:
            assert cf.data == NEW
            assert loads((d / "consumerOffset.json.bak").read_bytes()) == OLD
            assert _leftovers(d) == []
            break
        step += 1
    assert step >= 2


# ------------------------------------------------------------------------------------ typed views


def test_auto_create_topic_defaults() -> None:
    tc = auto_create_topic("OrderTopic")
    assert tc == TopicConfig("OrderTopic", 4, 4, 6, "SINGLE_TAG", 0, False, None)
    assert auto_create_topic("T", broker_version="5.1.0").attributes == {}
    assert auto_create_topic("T", client_queue_nums=16).read_queue_nums == 8
    assert auto_create_topic("T", client_queue_nums=16, default_queue_nums=12).write_queue_nums == 12
    small = TopicConfig("TBW102", 2, 2, 7, "MULTI_TAG")
    assert auto_create_topic("T", template=small) == TopicConfig("T", 2, 2, 6, "MULTI_TAG")
    assert auto_create_topic("T", template=TopicConfig("TBW102", 8, 8, 5)).perm == 4
    assert auto_create_topic("%RETRY%g", topic_sys_flag=1).topic_sys_flag == 1


@pytest.mark.parametrize("name", ["", "a b", "a@b", "x" * 128, "中"])
def test_auto_create_topic_rejects_bad_names(name: str) -> None:
    with pytest.raises(InputError):
        auto_create_topic(name, broker_version="4.9.4")  # TopicValidator in the broker


def test_auto_create_topic_on_4_4_takes_any_directory_name() -> None:
    """4.4.0's broker has no TopicValidator: any name that is one directory name is created."""
    for name in ("a b", "a@b", "中", "主题-Tópico-テスト"):
        assert auto_create_topic(name).topic_name == name
    for name in ("", "..", "a/b", "x" * 256):
        with pytest.raises(InputError):
            auto_create_topic(name)


def test_auto_create_topic_needs_inheritable_template() -> None:
    assert not 6 & PERM_INHERIT
    with pytest.raises(InputError):
        auto_create_topic("T", template=TopicConfig("TBW102", 8, 8, 6))


def test_set_topic_replaces_in_place_and_bumps_version() -> None:
    data = loads(DOC_TOPICS_4X)
    data["topicConfigTable"]["TopicTest"]["futureField"] = 1
    set_topic(data, TopicConfig("TopicTest", 8, 8), now_ms=1_800_000_000_000)
    assert data["dataVersion"] == {"counter": 3, "timestamp": 1_800_000_000_000}
    assert list(data["topicConfigTable"]) == ["TopicTest", "TBW102"]
    entry = data["topicConfigTable"]["TopicTest"]
    assert entry["readQueueNums"] == 8 and entry["futureField"] == 1
    assert list(entry) == sorted(entry)
    set_topic(data, TopicConfig("New"), now_ms=1_800_000_000_001)
    assert list(data["topicConfigTable"]) == ["TopicTest", "TBW102", "New"]
    assert data["dataVersion"]["counter"] == 4


def test_bump_data_version_creates_and_keeps_state_version() -> None:
    d: dict[str, Any] = {"topicConfigTable": {}}
    bump_data_version(d, now_ms=5)
    assert list(d) == ["dataVersion", "topicConfigTable"]
    assert d["dataVersion"] == {"counter": 1, "timestamp": 5}
    d5: dict[str, Any] = {}
    bump_data_version(d5, now_ms=5, broker_version="5.3.3")
    assert d5["dataVersion"] == {"counter": 1, "stateVersion": 0, "timestamp": 5}
    d5["dataVersion"]["stateVersion"] = 7
    bump_data_version(d5, now_ms=6, broker_version="5.3.3")
    assert list(d5["dataVersion"].items()) == [("counter", 2), ("stateVersion", 7), ("timestamp", 6)]


def test_load_topics_defaults_and_errors() -> None:
    topics = load_topics({"topicConfigTable": {"A": {}}})
    assert topics["A"] == TopicConfig("A", 16, 16, 6, "SINGLE_TAG", 0, False, None)
    assert load_topics({}) == {}
    for bad in (
        [],
        {"topicConfigTable": []},
        {"topicConfigTable": {"A": 1}},
        {"topicConfigTable": {"A": {"perm": "6"}}},
        {"topicConfigTable": {"A": {"perm": True}}},
        {"topicConfigTable": {"A": {"order": 0}}},
        {"topicConfigTable": {"A": {"attributes": {"k": 1}}}},
    ):
        with pytest.raises(ConfigError) as info:
            load_topics(bad, path="t.json")
        assert info.value.path == Path("t.json")


def test_consumer_offset_keys_split_at_first_at() -> None:
    data = {"offsetTable": {"T@g@x": {0: 1}, "noseparator": {0: 2}, "%RETRY%g@g": {"3": 4}}}
    assert load_consumer_offsets(data) == {("T", "g@x"): {0: 1}, ("%RETRY%g", "g"): {3: 4}}
    for table in ({"t@g": [1]}, {"t@g": {"x": 1}}, {"t@g": {0: "1"}}, {"t@g": {0: True}}, {1: {}}):
        bad = {"offsetTable": table}
        with pytest.raises(ConfigError):
            load_consumer_offsets(bad)


def test_set_consumer_offset_keeps_order_and_quoting() -> None:
    data = loads('{\n\t"offsetTable":{\n\t\t"b@g":{6:2,5:2,0:6\n\t\t},\n\t\t"a@g":{"1":3\n\t\t}\n\t}\n}')
    set_consumer_offset(data, "b", "g", 5, 9)
    set_consumer_offset(data, "b", "g", 7, 1)
    set_consumer_offset(data, "a", "g", 1, 4)
    set_consumer_offset(data, "c", "g", 0, 0)
    assert dumps(data) == (
        '{\n\t"offsetTable":{\n\t\t"b@g":{6:2,5:9,0:6,7:1\n\t\t},\n\t\t"a@g":{\n\t\t\t"1":4\n\t\t},'
        '\n\t\t"c@g":{0:0\n\t\t}\n\t}\n}'
    )


@pytest.mark.parametrize(
    ("topic", "group", "qid", "offset"),
    [
        ("", "g", 0, 0),
        ("a@b", "g", 0, 0),
        ("t", "", 0, 0),
        ("t", "g", -1, 0),
        ("t", "g", 2**31, 0),
        ("t", "g", 0, -1),
        ("t", "g", 0, 2**63),
        ("t", "g", True, 0),
    ],
)
def test_set_consumer_offset_rejects_bad_input(topic: str, group: str, qid: int, offset: int) -> None:
    with pytest.raises(InputError):
        set_consumer_offset({}, topic, group, qid, offset)


def test_delay_offsets_accept_quoted_levels_and_reject_garbage() -> None:
    assert load_delay_offsets({"offsetTable": {"2": 7, 1: 0}}) == {2: 7, 1: 0}
    assert load_delay_offsets({}) == {}
    with pytest.raises(ConfigError):
        load_delay_offsets({"offsetTable": {1: None}})
    with pytest.raises(ConfigError):
        load_delay_offsets({"offsetTable": 3})


@given(st.dictionaries(st.integers(1, 18), st.integers(0, 2**63 - 1), max_size=18))
def test_delay_offsets_round_trip(levels: dict[int, int]) -> None:
    text = dumps({"offsetTable": levels})
    assert load_delay_offsets(loads(text)) == levels
    assume(levels)
    body = ",".join(f"{k}:{v}" for k, v in levels.items())
    assert text == '{\n\t"offsetTable":{' + body + "\n\t}\n}"


_SEQUENCE_UP_TO_5_0 = [
    "write consumerOffset.json.tmp",
    "atomic consumerOffset.json.bak",
    "rename -> consumerOffset.json",
]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("4.4.0", _SEQUENCE_UP_TO_5_0),
        ("5.0.0", _SEQUENCE_UP_TO_5_0),
        ("5.1.0", ["atomic consumerOffset.json.bak", "atomic consumerOffset.json"]),
    ],
)
def test_write_follows_the_broker_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, expected: list[str]
) -> None:
    """§11.1: up to 5.0.0 .tmp first, then .bak, then rename; 5.1.0+ .bak first, then the file."""
    _put(tmp_path / "consumerOffset.json", OLD)
    steps: list[str] = []
    real_atomic, real_synced, real_replace = cfgmod.atomic_write, cfgmod._write_synced, os.replace

    def atomic(path: Path, data: bytes, **kw: Any) -> None:
        steps.append(f"atomic {Path(path).name}")
        real_atomic(path, data, **kw)

    def synced(path: Path, data: bytes, mode: int) -> None:
        steps.append(f"write {path.name}")
        real_synced(path, data, mode)

    def replace(src: Any, dst: Any) -> None:
        if Path(src).name == "consumerOffset.json.tmp":
            steps.append(f"rename -> {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(cfgmod, "atomic_write", atomic)
    monkeypatch.setattr(cfgmod, "_write_synced", synced)
    monkeypatch.setattr(cfgmod.os, "replace", replace)
    write_config(tmp_path, "consumerOffset.json", NEW, broker_version=version)
    assert steps == expected


def test_5x_topic_attributes_round_trip_byte_for_byte():
    """5.x topics.json with topic attributes (queue.type=BatchCQ), as the 5.2.0 engine wrote it."""
    from conftest import case_dir

    path = case_dir("5.2.0/batch-cq") / "store" / "config" / "topics.json"
    if not path.is_file():
        pytest.skip("real stores not found")
    raw = path.read_bytes()
    data = cfgmod.loads(raw)
    assert data["topicConfigTable"]["TopicBatchCQ"]["attributes"] == {"queue.type": "BatchCQ"}
    assert cfgmod.dumps(data).encode() == raw


# ------------------------------------------------------------ the json fast path of loads()


def _shared_config_files() -> list[Path]:
    from conftest import SHARED

    if not SHARED.is_dir():
        return []
    names = (
        "consumerOffset.json",
        "lmqConsumerOffset.json",
        "topics.json",
        "delayOffset.json",
        "subscriptionGroup.json",
    )
    return sorted(p for n in names for pat in (n, n + ".bak") for p in SHARED.rglob(pat) if p.is_file())


def test_fast_path_gives_the_parsers_values_on_every_real_config_file() -> None:
    from rmqstore.store.config import _loads_json, _Parser

    files = _shared_config_files()
    if not files:
        pytest.skip("no /work/shared stores")
    offsets = 0
    for p in files:
        text = p.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
        try:
            want: object = _Parser(text, p).document()
        except ConfigError:
            want = ConfigError
        fast = _loads_json(text)
        if fast is not None:
            assert fast.value == want and repr(fast.value) == repr(want), p  # int keys stay int, str stay str
        if p.name.startswith("consumerOffset.json") and want is not ConfigError:
            offsets += 1
            assert fast is not None, f"{p}: a consumer offset file left the json path"
    assert offsets >= 10


@pytest.mark.parametrize(
    "text",
    [
        '{0:1,-2:3,"4":5}',
        '{"a\\\\":{7:8},"x":"{5:6}","y":"a\\"b:1"}',
        "{ 5 :\r\n 1 }",
        '{"a":1.5e3,"b":-0,"c":true,"d":null,"e":"\\ud83d\\ude00\\u00e9"}',
        '{"a":[1,2]}',
        "{'a':1}",
        '{"a":01}',
        '{"a":1e999}',
        '{"a":NaN}',
        "{a:1}",
        '{"a":1,}',
        '{"a":"\\v"}',
        '{"a":1}\f',
        '{"a":"\\u0000","b":{1:2}}',
        '{"\\u0000" : {1:2}}',
        "{" * 201 + "}" * 201,
        "{" * 200 + "}" * 200,
        '{"a":{1:2}} x',
        "",
    ],
)
def test_loads_is_the_tolerant_parser(text: str) -> None:
    """Whatever path it takes, loads() gives what the tolerant parser gives, or fails the same way."""
    from rmqstore.store.config import _Parser

    def outcome(fn):
        try:
            v = fn()
            return ("ok", repr(v), v)
        except ConfigError as e:
            return ("error", str(e), None)

    assert outcome(lambda: loads(text))[:2] == outcome(lambda: _Parser(text, "<string>").document())[:2]
