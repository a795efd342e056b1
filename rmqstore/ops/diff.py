"""Where two replicas of a store diverged: the commit logs compared record by record (reads only).

HA replication copies commit log bytes, so a slave's commit log is a byte prefix of its master's
until a failover; then each side may append records of its own at the same offsets. The comparison
finds ``commonEnd``, where the longest run of identical records from the first one on ends:

1. files at the same base offset are compared in large blocks (a byte compare, as ``cmp``), so the
   identical part costs one read of each side;
2. in the file where the bytes first differ, the lenient walk of both sides (``walk.lenient``) gives
   the frame boundaries up to the first differing byte; the last boundary both sides share is
   ``commonEnd``. End-of-file blanks are records: two files that agree to their end put
   ``commonEnd`` at the next file's start (the blank's own offset is the same cut, ``commonEndBlank``);
3. past ``commonEnd`` each side is walked leniently (damage is reported with its file and offset and
   the walk goes on), every record decoded: records at the same offset with the same bytes on both
   sides still match (after a damaged record, say), the others are what each side holds alone,
   counted per queue from the records' own queue offsets (what the broker serves after its recovery,
   whatever the consume queue files say).
"""

from __future__ import annotations

import shlex
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rmqstore.safety.plan import JsonModel
from rmqstore.store import Store
from rmqstore.store.files import first_difference, map_file
from rmqstore.store.layout import Segment
from rmqstore.walk.chain import holds_data, queued
from rmqstore.walk.lenient import BlankEnd, Damage, DataEnd, Run, boundaries, intact_record, walk_file

IDENTICAL, A_BEHIND, B_BEHIND, DIVERGED = "identical", "a-behind", "b-behind", "diverged"


@dataclass(frozen=True, slots=True)
class Damaged(JsonModel):
    """Bytes past ``commonEnd`` on one side that are no record, and why."""

    side: str
    file: str
    pos: int
    phy_offset: int
    resume: int  # where records go on (the file position)
    why: str

    json_keys = "side file pos phy_offset=commitLogOffset resume why"


@dataclass(frozen=True, slots=True)
class Side(JsonModel):
    """One side's commit log range and what it holds past ``commonEnd``."""

    store: str
    min_phy_offset: int
    max_phy_offset: int  # where its records end, as the broker reports it (a last blank's own offset)
    records: int  # records past commonEnd (end-of-file blanks included)
    messages: int
    bytes: int
    matching: int  # records past commonEnd identical to the other side's at the same offset
    first_store_timestamp: int | None
    last_store_timestamp: int | None
    topics: tuple[str, ...]

    json_keys = (
        "store min_phy_offset max_phy_offset records=recordsAfterCommonEnd messages=messagesAfterCommonEnd "
        "bytes=bytesAfterCommonEnd matching=matchingAfterCommonEnd first_store_timestamp last_store_timestamp topics"
    )


@dataclass(frozen=True, slots=True)
class QueueDiff(JsonModel):
    """One queue: where its common messages end, and the messages only one side holds after that."""

    topic: str
    queue_id: int
    common_end: int
    only_a: int
    only_b: int
    max_offset_a: int
    max_offset_b: int

    json_keys = "topic queue_id common_end only_a=onlyA only_b=onlyB max_offset_a=maxOffsetA max_offset_b=maxOffsetB"


@dataclass(frozen=True, slots=True)
class FirstRecord(JsonModel):
    """What a side holds at ``commonEnd``."""

    kind: str  # "message" | "blank" | "damage" | "end"
    offset: int
    size: int
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    body_crc: int | None = None
    store_timestamp: int | None = None

    json_keys = "kind offset size topic queue_id queue_offset body_crc=bodyCRC store_timestamp"


@dataclass(frozen=True, slots=True)
class DiffReport(JsonModel):
    """The comparison of two commit logs."""

    operation: ClassVar[str] = "diff"
    json_keys = (
        "relation common_end common_end_blank=commonEndBlank cut_side truncate_command a b first_a=firstDifferenceA "
        "first_b=firstDifferenceB queues damaged notes"
    )

    relation: str
    common_end: int
    common_end_blank: int | None  # the end-of-file blank's offset when commonEnd is the next file's start
    cut_side: str | None
    truncate_command: str | None
    a: Side
    b: Side
    first_a: FirstRecord | None
    first_b: FirstRecord | None
    queues: tuple[QueueDiff, ...]
    damaged: tuple[Damaged, ...]
    notes: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return 3 if self.relation == DIVERGED else 0


# -- 1. and 2.: the common prefix ---------------------------------------------------------------


@dataclass
class Prefix:
    """Where the common run of records ends, and how that was found."""

    end: int
    blank: int | None = None  # the shared blank that ends the file before ``end``
    notes: list[str] = field(default_factory=list)


def _file_end(seg: Segment, broker: str) -> tuple[int, int | None]:
    """Where the data of one file ends: (the next file's start, the blank) when a blank ends it, else
    (the commit log offset after its last record, None)."""
    last: Any = None
    with map_file(seg.path) as buf:
        for last in walk_file(buf, seg, broker=broker):  # noqa: B007 - the last item says how the file ends
            pass
    if isinstance(last, BlankEnd):
        return seg.base_offset + seg.size, seg.base_offset + last.pos
    return seg.base_offset + (last.pos if isinstance(last, DataEnd) else 0), None


def common_prefix(a: Sequence[Segment], b: Sequence[Segment], broker: str) -> Prefix:
    """Where the longest run of identical records of two commit logs ends (steps 1 and 2)."""
    ba, bb = {s.base_offset: s for s in a}, {s.base_offset: s for s in b}
    a_data = [s for s in a if holds_data(s)]
    b_data = [s for s in b if holds_data(s)]
    notes: list[str] = []
    if not a_data or not b_data:
        empty = "A" if not a_data else "B"
        other = b_data or a_data
        start = other[0].base_offset if other else 0
        return Prefix(start, None, [f"side {empty} holds no record"])
    start = max(a_data[0].base_offset, b_data[0].base_offset)
    if a_data[0].base_offset != b_data[0].base_offset:
        notes.append(
            f"the commit logs start at {a_data[0].base_offset} (A) and {b_data[0].base_offset} (B): compared from {start}"
        )
    base, prev = start, None
    while True:
        sa, sb = ba.get(base), bb.get(base)
        if sa is None or sb is None or not holds_data(sa) or not holds_data(sb):
            if prev is None:
                return Prefix(base, None, notes)
            end, blank = _file_end(prev, broker)
            return Prefix(end, blank, notes)
        if sa.size != sb.size:
            notes.append(f"file {sa.path.name} is {sa.size} bytes in A and {sb.size} in B")
        d = first_difference(sa.path, sb.path)
        if d is None:
            prev, base = sa, base + sa.size
            continue
        with map_file(sa.path) as bufa, map_file(sb.path) as bufb:
            cut = np.intersect1d(boundaries(bufa, sa, d, broker=broker), boundaries(bufb, sb, d, broker=broker))
        return Prefix(base + int(cut[-1]) if len(cut) else base, None, notes)


# -- 3.: each side past commonEnd, both streamed in offset order -------------------------------


@dataclass(frozen=True, slots=True)
class TailRecord:
    """A record past ``commonEnd`` as the comparison needs it."""

    phy: int
    size: int
    crc: int  # of all its bytes (-1 for a blank)
    key: tuple[str, int] | None  # its queue when it gets a consume queue entry
    queue_offset: int
    store_ts: int  # -1 for a blank


@dataclass
class Tail:
    """One side from ``commonEnd`` on: what its walk met besides records, and what the records add up to."""

    side: str
    damaged: list[Damaged] = field(default_factory=list)
    first: FirstRecord | None = None
    end: int = 0  # where the records end, a last blank's own offset
    records: int = 0  # held alone (not matched by the other side)
    messages: int = 0
    bytes: int = 0
    matching: int = 0
    first_ts: int | None = None  # store time of the first message held alone
    last_ts: int | None = None
    min_ts: int | None = None
    topics: set[str] = field(default_factory=set)
    queues: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # [alone, first alone, max offset]

    def count(self, r: TailRecord, matched: bool) -> None:
        if r.key is not None:
            q = self.queues.setdefault(r.key, [0, 1 << 62, -1])
            q[2] = max(q[2], r.queue_offset + 1)
            if not matched:
                q[0] += 1
                q[1] = min(q[1], r.queue_offset)
        if matched:
            self.matching += 1
            return
        self.records += 1
        self.bytes += r.size
        if r.store_ts >= 0:
            self.messages += 1
            self.first_ts = r.store_ts if self.first_ts is None else self.first_ts
            self.min_ts = r.store_ts if self.min_ts is None else min(self.min_ts, r.store_ts)
            self.last_ts = r.store_ts if self.last_ts is None else max(self.last_ts, r.store_ts)
        if r.key is not None:
            self.topics.add(r.key[0])

    @property
    def alone(self) -> bool:
        return bool(self.records or self.damaged)


def _segments_from(segs: Sequence[Segment], offset: int) -> Iterator[tuple[Segment, int]]:
    """The files of the chain from ``offset`` on, each with the position to start at."""
    expect = None
    for s in segs:
        if s.base_offset + s.size <= offset:
            continue
        if expect is not None and s.base_offset != expect:
            return
        yield s, max(0, offset - s.base_offset)
        expect = s.base_offset + s.size


def walk_tail(t: Tail, segs: Sequence[Segment], offset: int, broker: str) -> Iterator[TailRecord]:
    """Every record of one side from ``offset`` on, in order; damage is noted in ``t`` and walked past."""
    t.end = offset
    for seg, start in _segments_from(segs, offset):
        with map_file(seg.path) as buf:
            last = None
            for item in walk_file(buf, seg, broker=broker, start=start):
                last = item
                if isinstance(item, Run):
                    yield from _run_records(t, buf, seg, item, broker)
                elif isinstance(item, Damage):
                    _add_damage(t, seg, item.pos, item.resume, item.why)
                elif isinstance(item, BlankEnd) and item.error is not None:  # a blank that does not fit the file
                    _add_damage(t, seg, item.pos, seg.size, item.error.what)
                elif isinstance(item, BlankEnd):
                    t.first = t.first or FirstRecord("blank", seg.base_offset + item.pos, seg.size - item.pos)
                    yield TailRecord(seg.base_offset + item.pos, seg.size - item.pos, -1, None, -1, -1)
                    t.end = seg.base_offset + item.pos  # the broker's end when no file follows
                elif item.garbage is not None:  # DataEnd with bytes after it
                    _add_damage(t, seg, item.pos, item.zeros, item.why)
            if not isinstance(last, BlankEnd):
                return


def _run_records(t: Tail, buf: Any, seg: Segment, run: Run, broker: str) -> Iterator[TailRecord]:
    path, base = str(seg.path), seg.base_offset
    for pos in run.positions.tolist():
        rec = intact_record(buf, pos, path=path, file_from=base, broker=broker)
        if t.first is None:
            t.first = FirstRecord(
                "message", base + pos, rec.total_size, rec.topic, rec.queue_id, rec.queue_offset, rec.body_crc,
                rec.store_timestamp_ms,
            )  # fmt: skip
        key = (rec.topic, rec.queue_id) if queued(rec.sys_flag) else None
        crc = zlib.crc32(buf[pos : pos + rec.total_size])
        yield TailRecord(base + pos, rec.total_size, crc, key, rec.queue_offset, rec.store_timestamp_ms)
        t.end = base + run.end_pos


def _add_damage(t: Tail, seg: Segment, pos: int, resume: int, why: str) -> None:
    t.damaged.append(Damaged(t.side, str(seg.path), pos, seg.base_offset + pos, resume, why))
    if t.first is None:
        t.first = FirstRecord("damage", seg.base_offset + pos, resume - pos)


def compare_tails(ta: Tail, a: Iterator[TailRecord], tb: Tail, b: Iterator[TailRecord]) -> None:
    """Both sides' records past ``commonEnd`` merged by offset: a record the other side holds at the same
    offset with the same bytes matches, every other one is held alone (counted in its side's ``Tail``)."""
    ra, rb = next(a, None), next(b, None)
    while ra is not None or rb is not None:
        if rb is None or (ra is not None and ra.phy < rb.phy):
            ta.count(ra, False)  # type: ignore[arg-type]
            ra = next(a, None)
        elif ra is None or rb.phy < ra.phy:
            tb.count(rb, False)
            rb = next(b, None)
        else:
            same = ra.size == rb.size and ra.crc == rb.crc
            ta.count(ra, same)
            tb.count(rb, same)
            ra, rb = next(a, None), next(b, None)


# -- the report --------------------------------------------------------------------------------


def _side(st: Store, t: Tail) -> Side:
    segs, _ = st.commitlog_segments()
    first = segs[0].base_offset if segs else 0
    topics = tuple(sorted(t.topics))
    return Side(str(st.root), first, t.end, t.records, t.messages, t.bytes, t.matching, t.min_ts, t.last_ts, topics)


def _queues(st_a: Store, st_b: Store, ta: Tail, tb: Tail) -> list[QueueDiff]:
    out = []
    for key in sorted(set(ta.queues) | set(tb.queues)):
        na, fa, xa = ta.queues.get(key, (0, 1 << 62, -1))
        nb, fb, xb = tb.queues.get(key, (0, 1 << 62, -1))
        common = min(fa, fb)
        if common == 1 << 62:  # every record past commonEnd matched: the queue ends alike
            common = max(xa, xb)
        out.append(QueueDiff(key[0], key[1], common, na, nb, xa if xa >= 0 else common, xb if xb >= 0 else common))
    seen = set(ta.queues) | set(tb.queues)
    rest: dict[tuple[str, int], int] = {}
    for st in (st_a, st_b):  # queues with no record past commonEnd: the same on both sides
        for cq in st.consume_queues.queues():
            key = (cq.topic, cq.queue_id)
            if key not in seen:
                rest[key] = max(rest.get(key, 0), cq.tail().max_offset)
    out += [QueueDiff(k[0], k[1], n, 0, 0, n, n) for k, n in rest.items() if n > 0]
    return sorted(out, key=lambda r: (r.topic, r.queue_id))


def _relation(ta: Tail, tb: Tail) -> str:
    if ta.alone and tb.alone:
        return DIVERGED
    return A_BEHIND if tb.alone else B_BEHIND if ta.alone else IDENTICAL


def _cut_side(ta: Tail, tb: Tail) -> tuple[str, str]:
    """The side to cut back: the old master, whose records past commonEnd were stored before the other's
    (it wrote them before the failover; the promoted slave after). B when that does not tell."""
    fa, fb = ta.first_ts, tb.first_ts
    if fa is not None and fb is not None and fa < fb:
        return "a", "its first record past commonEnd was stored before B's: A is the old master"
    if fa is not None and fb is not None and fb < fa:
        return "b", "its first record past commonEnd was stored before A's: B is the old master"
    return "b", "the store times do not tell which side was the master: B, the second argument, is cut"


def diff_stores(st_a: Store, st_b: Store, *, config_a: Path | None = None, config_b: Path | None = None) -> DiffReport:
    """Compare the commit logs of two stores (both only read; either may be in use by a broker)."""
    segs_a, _ = st_a.commitlog_segments()
    segs_b, _ = st_b.commitlog_segments()
    prefix = common_prefix(segs_a, segs_b, st_a.config.broker)
    notes = list(prefix.notes)
    if st_a.config.broker != st_b.config.broker:
        notes.append(f"A follows broker {st_a.config.broker}'s rules, B {st_b.config.broker}'s")
    ta, tb = Tail("a"), Tail("b")
    recs_a = walk_tail(ta, segs_a, prefix.end, st_a.config.broker)
    compare_tails(ta, recs_a, tb, walk_tail(tb, segs_b, prefix.end, st_b.config.broker))
    for t in (ta, tb):
        if t.first is None and prefix.blank is not None:
            t.end = prefix.blank  # the broker's end: the blank's own offset, no next file
    relation = _relation(ta, tb)
    first_segs = min((s.base_offset for s in segs_a[:1] + segs_b[:1]), default=0)
    if relation == DIVERGED and prefix.end <= first_segs:
        notes.append("no common first record: the two stores hold different histories (not replicas of one broker?)")
    cut_side = command = None
    if relation == DIVERGED:
        cut_side, why = _cut_side(ta, tb)
        st, conf = (st_a, config_a) if cut_side == "a" else (st_b, config_b)
        conf_opt = f" --broker-config {shlex.quote(str(conf))}" if conf is not None else ""
        command = f"rmqstore truncate {shlex.quote(str(st.root))} --to-offset {prefix.end}{conf_opt}"
        notes.append(f"cut side {cut_side.upper()}: {why}")
    return DiffReport(
        relation,
        prefix.end,
        prefix.blank,
        cut_side,
        command,
        _side(st_a, ta),
        _side(st_b, tb),
        ta.first,
        tb.first,
        tuple(_queues(st_a, st_b, ta, tb)),
        tuple(ta.damaged + tb.damaged),
        tuple(notes),
    )
