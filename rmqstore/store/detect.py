"""Which broker version family wrote a store, from the store's own contents (facts only; which families
a fact admits is decided in ``rules``).

The commit log is sampled, never read whole: in at most 8 files (the first two, the last two and
evenly spaced ones between) the chain of frames is followed from the file's start (magic of every
record, the end-of-file blank) up to a budget of hops per file, and the properties of the first
records are decoded; then a few records are decoded at evenly spaced places of the file, each found
by the framing as the next intact record that stores its own physical offset, so a V2 record or a
``__CRC32#`` property in the middle of a large store is seen. The first frames of a file are followed
one step at a time (a store of a few records is read without numpy); the rest of the budget goes
through the framing's numpy chain, the records' structure, magic and host flags tested as arrays,
with the same facts as steps would give. Detection runs while a store is opened, below the walk's
layer: it follows the framing (``codec.framing``) itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rmqstore.codec.commitlog import (
    BORNHOST_V6_FLAG,
    OFFSETS_V4,
    PROPERTY_SEPARATOR,
    STOREHOSTADDRESS_V6_FLAG,
    Record,
    checked_size,
    checked_sizes,
    decode_record,
    first_v2_and_ipv6,
    record_version,
)
from rmqstore.codec.framing import BLANK, PLAIN, RECORD, UNTIL, Framing
from rmqstore.errors import UnsafePlan, VersionContradicted
from rmqstore.rules import (
    EVIDENCE,
    FAMILIES,
    OPERATION_RULES,
    REPRESENTATIVE,
    WEAK_EVIDENCE,
    differing_rules,
    families_for,
    family_of,
    version_for,
)
from rmqstore.safety.openfile import json_loads, map_readonly, read_file
from rmqstore.store.layout import Segment, StoreConfig, log_segments

if TYPE_CHECKING:
    import numpy as np

P = TypeVar("P")

AUTO = "auto"
_HOP_BUDGET = 50_000  # record headers followed in all the files sampled (shared out evenly)
_SAMPLED_RECORDS = 64  # records per file whose properties are decoded
_STEPPED = 128  # frames per file followed one step at a time before the rest go through the numpy chain
_FILES_SAMPLED = 8  # the first two, the last two and evenly spaced files between
_PLACES = 4  # evenly spaced places per file where a few records are decoded
_PLACE_RECORDS = 8  # records read at each place
_SEARCH_BYTES = 1 << 20  # how far a place looks for the next intact record
_CRC_KEY = "__CRC32#"
_LMQ_KEY = "INNER_MULTI_DISPATCH"
_CONFIG_5X = ("topicQueueMapping.json", "messageRequestMode.json", "timercheck", "timermetrics")


@dataclass(frozen=True, slots=True)
class Fact:
    name: str  # a key of rules.EVIDENCE
    where: str  # the file (and byte offset) that shows it

    @property
    def why(self) -> str:
        return EVIDENCE[self.name][1]


@dataclass(frozen=True, slots=True)
class Detection:
    """The family a store's broker belongs to, or the families it could still be."""

    broker: str  # the version whose rules are followed
    family: str
    candidates: tuple[str, ...]  # families consistent with the evidence, oldest first
    facts: tuple[Fact, ...] = field(default=())
    explicit: bool = False  # --broker-version given
    conflict: bool = False  # the store's evidence contradicts itself

    @property
    def settled(self) -> bool:
        return self.explicit or (len(self.candidates) == 1 and not self.conflict)

    def to_json(self) -> dict[str, object]:
        return {
            "family": self.family,
            "broker": self.broker,
            "source": "--broker-version" if self.explicit else "detected",
            "settled": self.settled,
            "candidates": list(self.candidates),
            "conflict": self.conflict,
            "evidence": [{"fact": f.name, "where": f.where, "why": f.why} for f in self.facts],
        }


def explicit(broker: str) -> Detection:
    """An explicit ``--broker-version`` (a version or a family name, ``rules.version_for``):
    validated (ValueError), followed as given."""
    version = version_for(broker)
    fam = family_of(version)
    return Detection(version, fam, (fam,), explicit=True)


def contradicting(chosen: Detection, found: Detection) -> tuple[Fact, ...]:
    """The store's strong facts that rule out the family chosen with ``--broker-version``."""
    return tuple(f for f in found.facts if f.name not in WEAK_EVIDENCE and chosen.family not in EVIDENCE[f.name][0])


def _warn_contradiction(given: str, chosen: Detection, against: tuple[Fact, ...]) -> None:
    """One warning (the command line shows it as one line on stderr); the version is followed as given."""
    first = against[0]
    more = f" and {len(against) - 1} more fact(s)" if len(against) > 1 else ""
    warnings.warn(
        VersionContradicted(
            f"--broker-version {given} (family {chosen.family}, rules of {chosen.broker}) contradicts the store: "
            f"{first.why} ({first.where}){more}; following {chosen.broker} as asked"
        ),
        stacklevel=2,
    )


def detect(cfg: StoreConfig, framing: Framing = PLAIN) -> Detection:
    """The family of the store ``cfg`` points at (its commit log records in ``framing``); with no
    deciding evidence the oldest candidate is followed."""
    facts = _store_facts(cfg) + _config_facts(cfg) + _commitlog_facts(cfg, framing)
    seen: dict[str, Fact] = {}
    for f in facts:
        seen.setdefault(f.name, f)
    unique = tuple(seen.values())
    candidates, conflict = families_for([f.name for f in unique])
    candidates = candidates or FAMILIES
    return Detection(REPRESENTATIVE[candidates[0]], candidates[0], candidates, unique, conflict=conflict)


def _store_facts(cfg: StoreConfig) -> list[Fact]:
    root = cfg.store_root
    out: list[Fact] = []
    with contextlib.suppress(OSError):
        if cfg.abort_path.stat().st_size > 0:
            out.append(Fact("abort-pid", str(cfg.abort_path)))
    if (root / "abort.bak").exists():
        out.append(Fact("abort-bak", str(root / "abort.bak")))
    with contextlib.suppress(OSError):
        if any(read_file(cfg.checkpoint_path, limit=40)[24:40]):
            out.append(Fact("checkpoint-5x", f"{cfg.checkpoint_path} @24"))
    for name, fact in (("batchconsumequeue", "batchconsumequeue"), ("compaction", "compaction")):
        if (root / name).is_dir():
            out.append(Fact(fact, str(root / name)))
    for name in ("timerwheel", "timerlog"):
        if (root / name).exists():
            out.append(Fact("timer-store", str(root / name)))
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(cfg.consumequeue_dir)):
            if name.startswith("%LMQ%"):
                out.append(Fact("lmq-queue", str(cfg.consumequeue_dir / name)))
                break
    return out


def _config_facts(cfg: StoreConfig) -> list[Fact]:
    out: list[Fact] = []
    conf_dir = cfg.store_root / "config"
    for name in _CONFIG_5X:
        if (conf_dir / name).exists():
            out.append(Fact("config-5x", str(conf_dir / name)))
    if (conf_dir / "lmqConsumerOffset.json").exists():
        out.append(Fact("lmq-offsets", str(conf_dir / "lmqConsumerOffset.json")))
    topics = conf_dir / "topics.json"
    with contextlib.suppress(OSError, ValueError, AttributeError):
        table = json_loads(read_file(topics), path=topics).get("topicConfigTable", {})
        if any(isinstance(t, dict) and "attributes" in t for t in table.values()):
            out.append(Fact("topic-attributes", str(topics)))
    keys = cfg.explicit
    if any(k.startswith("mappedFileSize") for k in keys):
        out.append(Fact("conf-mapped-keys", str(cfg.source)))
    elif any(k.startswith("mapedFileSize") for k in keys):
        out.append(Fact("conf-maped-keys", str(cfg.source)))
    return out


def sampled_files(segs: list[Segment], limit: int = _FILES_SAMPLED) -> list[Segment]:
    """At most ``limit`` files: the first two, the last two, and evenly spaced ones between."""
    n = len(segs)
    if n <= limit:
        return list(segs)
    ends = {0, 1, n - 2, n - 1}
    between = limit - len(ends)
    picks = ends | {1 + round((i + 1) * (n - 3) / (between + 1)) for i in range(between)}
    return [segs[i] for i in sorted(picks)]


def _commitlog_facts(cfg: StoreConfig, framing: Framing) -> list[Fact]:
    """Facts of a bounded sample of the non-empty commit log files (a one-shot command stays fast on a
    store of many large files)."""
    out: list[Fact] = []
    segs = [s for s in log_segments(cfg, framing, None)[0] if s.size > 0]
    picked = sampled_files(segs)
    for seg in picked:
        with contextlib.suppress(OSError, ValueError):
            out += _file_facts(seg, _HOP_BUDGET // len(picked))
    return out


class _Seen:
    """The per-file facts already reported (each once per file)."""

    def __init__(self) -> None:
        self.v2 = self.v6 = False


def _record_facts(buf: Any, pos: int, seg: Segment, seen: _Seen, decode: bool) -> list[Fact]:
    """Facts of the intact record at ``pos``: its magic and host flags, with ``decode`` its properties."""
    out: list[Fact] = []
    if not seen.v2 and record_version(buf, pos) == 2:
        seen.v2 = True
        out.append(Fact("v2-record", f"{seg.path} @{pos}"))
    if not seen.v6 and buf[pos + _SYS_FLAG_LOW] & _V6_BITS:
        seen.v6 = True
        out.append(Fact("ipv6-host", f"{seg.path} @{pos}"))
    if decode:
        rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=len(buf))
        if isinstance(rec, Record):
            out += _property_facts(rec, f"{seg.path} @{pos}")
    return out


def _file_facts(seg: Segment, hops: int) -> list[Fact]:
    seen = _Seen()
    with map_readonly(seg.path) as buf:
        out, pos, ended = _stepped_facts(buf, seg, seen, min(hops, _STEPPED))
        if not ended and hops > _STEPPED:
            more, ended = _chained_facts(buf, pos, seg, seen, hops - _STEPPED)
            out += more
        if not ended:  # the budget ran out: a few records further in (only the first ones were decoded)
            for i in range(1, _PLACES + 1):
                out += _place_facts(buf, len(buf) * i // (_PLACES + 1), seg, seen)
    return out


def _stepped_facts(buf: Any, seg: Segment, seen: _Seen, hops: int) -> tuple[list[Fact], int, bool]:
    """Facts of the first ``hops`` frames, one step at a time: (facts, where the next frame starts,
    whether the chain ended there: a blank, the end of the data or damage)."""
    out: list[Fact] = []
    step = seg.framing.step
    pos, end = 0, len(buf)
    for n in range(hops):
        kind, at, frame_end = step(buf, pos, end)
        if kind == BLANK:
            return out + _blank_fact(buf, pos, end, seg), pos, True
        if kind != RECORD or checked_size(buf, at, end) is None:
            return out, pos, True  # the end of the data (or damage): nothing after it is the broker's
        out += _record_facts(buf, at, seg, seen, n < _SAMPLED_RECORDS)
        pos = frame_end
    return out, pos, False


def _chained_facts(buf: Any, pos: int, seg: Segment, seen: _Seen, hops: int) -> tuple[list[Fact], bool]:
    """The facts ``_stepped_facts`` would find in the next ``hops`` frames from ``pos``, with the numpy
    chain: the records' structure, magic and host flags tested as arrays, the per-record facts taken
    from the first V2 record and the first with an IPv6 host (and the first ones, when fewer than
    ``_SAMPLED_RECORDS`` were stepped)."""
    records, kind, stop = _chain_records(buf, pos, seg.framing, hops)
    bad = (checked_sizes(buf, records, len(buf)) < 0).nonzero()[0]
    intact = records[: bad[0]] if len(bad) else records
    firsts = set(range(min(len(intact), max(_SAMPLED_RECORDS - _STEPPED, 0))))
    out: list[Fact] = []
    for i in sorted(firsts | first_v2_and_ipv6(buf, intact)):
        out += _record_facts(buf, int(intact[i]), seg, seen, i + _STEPPED < _SAMPLED_RECORDS)
    if len(bad):
        return out, True
    if kind == BLANK:
        return out + _blank_fact(buf, stop, len(buf), seg), True
    return out, kind is not None


def _chain_records(buf: Any, pos: int, framing: Framing, hops: int) -> tuple[np.ndarray, str | None, int]:
    """Record positions of the next ``hops`` frames from ``pos`` that ``framing.step`` calls records, and
    the kind and position of the frame after them (None: the budget ran out first). The chain is read
    in spans sized by the records seen so far, so no more of the file is chained than the budget needs."""
    import numpy as np  # a store of a few records is read step by step, without numpy

    parts, n, start, span, end = [], 0, pos, 1 << 16, len(buf)
    while n < hops:
        got, stop, reason = framing.chain(buf, pos, end, pos + span)
        parts.append(got[: hops - n])
        n += len(parts[-1])
        pos = stop
        if n == hops or reason == UNTIL:
            span = max(span, (stop - start) * (hops - n) // max(n, 1) + 4096)
            continue
        kind, at, frame_end = framing.step(buf, stop, end)
        if kind != RECORD:
            return np.concatenate(parts), kind, stop
        parts.append(np.array([at], np.int64))  # a frame the chain refuses but one step takes (a DLedger
        n, pos = n + 1, frame_end  # entry out of the file's position sequence): the old walk went on
    return np.concatenate(parts), None, pos


def _intact(buf: Any, pos: int, seg: Segment) -> tuple[int, int] | None:
    """(record position, frame end) of the frame at ``pos`` when it holds an intact record that stores its
    own physical offset (a magic code inside a body is not one: its bytes would have to match all of that)."""
    kind, at, frame_end = seg.framing.step(buf, pos, len(buf))
    if kind != RECORD or checked_size(buf, at, len(buf)) is None or _phy_field(buf, at) != seg.base_offset + at:
        return None
    return at, frame_end


def _place_facts(buf: Any, start: int, seg: Segment, seen: _Seen) -> list[Fact]:
    """Facts of a few records from the first intact frame at or after ``start``."""
    stop = min(len(buf), start + _SEARCH_BYTES)
    pos = seg.framing.resync(buf, start, stop, lambda p: _intact(buf, p, seg) is not None)
    out: list[Fact] = []
    for _ in range(_PLACE_RECORDS):
        found = None if pos is None else _intact(buf, pos, seg)
        if found is None:
            break
        out += _record_facts(buf, found[0], seg, seen, True)
        pos = found[1]
    return out


_PHY = struct.Struct(">q")
_PHY_AT = OFFSETS_V4["phy_offset"]
_SYS_FLAG_LOW = OFFSETS_V4["sys_flag"] + 3  # the lowest byte of the big-endian SYSFLAG
_V6_BITS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG  # sysFlag's IPv6 bits (in its lowest byte)


def _phy_field(buf: Any, pos: int) -> int:
    return _PHY.unpack_from(buf, pos + _PHY_AT)[0] if pos + _PHY_AT + 8 <= len(buf) else -1


def _blank_fact(buf: object, pos: int, end: int, seg: Segment) -> list[Fact]:
    if not seg.framing.blank_tells_version:
        return []
    tail = bytes(buf[pos + 8 : min(end, pos + 8 + 4096)])  # type: ignore[index]
    if not tail:
        return []
    return [Fact("blank-stale-tail" if any(tail) else "blank-zero-tail", f"{seg.path} @{pos}")]


def _property_facts(rec: Record, where: str) -> list[Fact]:
    raw = rec.properties_raw
    if _CRC_KEY in raw:
        return [Fact("crc32-property", where)]
    if not raw or _LMQ_KEY in raw:  # 5.2.0 leaves 20 stray bytes after an LMQ record's properties
        return []
    if raw.endswith(PROPERTY_SEPARATOR):
        return [Fact("props-trailing-separator", where)]
    return [Fact("props-no-trailing-separator", where)]


def resolve(cfg: StoreConfig, broker: str | None, framing: Framing = PLAIN) -> Detection:
    """``--broker-version``: an explicit version, or ``auto``/None to detect from the store."""
    if broker and broker != AUTO:
        chosen = explicit(broker)
        found = detect(cfg, framing)
        against = contradicting(chosen, found)
        if against:
            _warn_contradiction(broker, chosen, against)
        return dataclasses.replace(chosen, facts=found.facts)
    return detect(cfg, framing)


def candidate_versions(det: Detection) -> list[str]:
    """The representative version of every family the store could belong to."""
    return [REPRESENTATIVE[f] for f in det.candidates]


# plan fields that describe how a decision was reached, not what is done to the store
_DESCRIPTIVE = frozenset(
    {"brokerVersion", "broker", "startFile", "startPhyOffset", "stop", "createdAt", "notes", "reason"}
)


def _comparable(data: Any) -> Any:
    """What a plan does to the store: its JSON without the descriptive fields."""
    if isinstance(data, dict):
        return {k: _comparable(v) for k, v in data.items() if k not in _DESCRIPTIVE}
    if isinstance(data, list):
        return [_comparable(v) for v in data]
    return data


def plan_for_detected(st: Any, make_plan: Callable[[Any], P], operation: str) -> P:
    """``make_plan(st)`` when the store's version is settled; otherwise the plan of every family the
    store could be, which must all agree, else UnsafePlan (exit 8) naming the versions and what differs."""
    det: Detection | None = st.config.detection
    if det is None or det.settled:
        return make_plan(st)
    plans: dict[str, P] = {}
    for version in candidate_versions(det):
        plans[version] = make_plan(dataclasses.replace(st, config=dataclasses.replace(st.config, broker=version)))
    shapes = {v: _comparable(p.to_json()) for v, p in plans.items()}  # type: ignore[attr-defined]
    first = candidate_versions(det)[0]
    differ = [v for v in shapes if shapes[v] != shapes[first]]
    if differ:
        fams = ", ".join(det.candidates)
        rules = sorted({r for v in differ for r in differing_rules(first, v)})
        raise UnsafePlan(
            f"{st.root}: the store could be written by broker {fams}; their {operation} plans differ "
            f"(rules: {', '.join(rules) or 'none'}); give --broker-version to say which"
        )
    return plans[det.broker]


def require_settled(det: Detection | None, operation: str, root: Path) -> None:
    """UnsafePlan (exit 8) when the store shows evidence that leaves several families whose rules for
    ``operation`` differ. A store with no evidence at all (nothing written yet) follows the oldest."""
    if det is None or det.settled or not det.facts or operation not in OPERATION_RULES:
        return
    versions = candidate_versions(det)
    differ = sorted({r for v in versions[1:] for r in differing_rules(versions[0], v)} & OPERATION_RULES[operation])
    if differ:
        raise UnsafePlan(
            f"{root}: the store could be written by broker {', '.join(det.candidates)}; their {operation} rules "
            f"differ ({', '.join(differ)}); give --broker-version to say which"
        )
