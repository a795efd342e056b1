"""What a write changes besides the commit log, as planned actions: consume queue files, index files,
config/topics.json (and its .bak), the checkpoint and abort; and which topics are really new."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rmqstore.codec.consumequeue import ENTRY_SIZE
from rmqstore.codec.indexfile import decode_header
from rmqstore.ops.write.columns import RecordColumns
from rmqstore.safety.actions import PlannedAction
from rmqstore.store import Store
from rmqstore.store import config as cfgmod
from rmqstore.store.files import map_file
from rmqstore.store.layout import file_name
from rmqstore.walk.requests import DispatchRequest

OP = "write"


def known_topics(st: Store, pending: Sequence[DispatchRequest]) -> frozenset[str]:
    """Topics the store already holds messages of: a consume queue directory, or records not yet
    dispatched. The broker's topics.json may lack them (a store without config/): adding their
    config there does not create them."""
    return frozenset(q.topic for q in st.consume_queues.queues()) | {r.topic for r in pending}


def write_effects(
    st: Store,
    records: RecordColumns,
    pending: Sequence[DispatchRequest],
    new_topics: Iterable[cfgmod.TopicConfig],
    *,
    dispatch: bool,
) -> tuple[PlannedAction, ...]:
    """Every file the write creates or changes after the commit log, in the order the run does it."""
    out: list[PlannedAction] = []
    if dispatch:
        out += _queue_actions(st, _queue_ranges(records, pending))
        out += _index_actions(st, records.key_count + sum(_keys(r) for r in pending))
    out += _topics_actions(st, [t.topic_name for t in new_topics])
    cfg = st.config
    if not st.abort_exists():
        why = "the commit log, consume queue and index times of the data written (with --flush sync, the default)"
        out.append(PlannedAction(OP, "rewrite", cfg.checkpoint_path, why))
        if not dispatch:
            why = "created: the records are not dispatched, the broker's abnormal recovery dispatches them"
            out.append(PlannedAction(OP, "append", cfg.abort_path, why, 0, 0))
    return tuple(out)


def _keys(r: DispatchRequest) -> int:
    return bool(r.uniq_key) + len([k for k in (r.keys or "").split(" ") if k])


def _queue_ranges(records: RecordColumns, pending: Sequence[DispatchRequest]) -> dict[tuple[str, int], list[int]]:
    """(topic, queue) -> [first, last] queue offset written, for the catch-up and the new records."""
    ranges: dict[tuple[str, int], list[int]] = {}

    def put(key: tuple[str, int], lo: int, hi: int) -> None:
        r = ranges.setdefault(key, [lo, hi])
        r[0], r[1] = min(r[0], lo), max(r[1], hi)

    for req in pending:
        put((req.topic, req.queue_id), req.queue_offset, req.queue_offset)
    for key, (lo, hi) in records.queue_offset_ranges().items():
        put(key, lo, hi)
    return ranges


def _queue_actions(st: Store, ranges: dict[tuple[str, int], list[int]]) -> list[PlannedAction]:
    """The 20-byte units of each queue, file by file (a file that does not exist yet is created)."""
    fs = st.config.cq_file_size
    out = []
    for (topic, qid), (first, last) in sorted(ranges.items()):
        qdir = st.consume_queues.queue(topic, qid).directory
        start, end = first * ENTRY_SIZE, (last + 1) * ENTRY_SIZE
        for base in range(start - start % fs, end, fs):
            path = qdir / file_name(base)
            why = "consume queue units" + ("" if path.exists() else " (new file)")
            out.append(PlannedAction(OP, "append", path, why, max(start, base) - base, min(end, base + fs) - base))
    return out


def _index_actions(st: Store, keys: int) -> list[PlannedAction]:
    cfg = st.config
    if not cfg.message_index_enable or not keys:
        return []
    files, _ = st.index_files()
    last = files[-1] if files else None
    if last is not None:
        with map_file(last) as buf:
            count = decode_header(buf, path=str(last)).index_count
        if count < cfg.max_index_num:
            why = f"index entries of {keys} key(s); a new index file when this one fills up"
            return [PlannedAction(OP, "append", last, why)]
    why = f"new index file(s) named by creation time, for {keys} key(s)"
    return [PlannedAction(OP, "append", cfg.index_dir, why)]


def _topics_actions(st: Store, names: list[str]) -> list[PlannedAction]:
    """The auto-created topics' configs, as the broker persists topics.json (the old text kept in .bak)."""
    if not names:
        return []
    path = st.config.config_dir / "topics.json"
    why = f"topic config added: {', '.join(names)}"
    out = [PlannedAction(OP, "rewrite", path, why)]
    if path.exists():
        out.append(PlannedAction(OP, "rewrite", path.with_name("topics.json.bak"), "the previous topics.json"))
    return out
