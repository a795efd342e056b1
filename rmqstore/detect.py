"""Which broker version family wrote a store, from the store's own contents (facts only; which families
a fact admits is decided in ``rules``).

The commit log is sampled, never read whole: in the first two and the last two files the record chain
is followed by its 8-byte headers (magic of every record, the end-of-file blank) up to a budget of
hops, and the properties of the first records of each file are decoded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .codec.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, PROPERTY_SEPARATOR, Record, checked_size, decode_record
from .errors import UnsafePlan
from .layout import Segment, StoreConfig, list_segments
from .rules import EVIDENCE, FAMILIES, OPERATION_RULES, REPRESENTATIVE, differing_rules, families_for, family_of

P = TypeVar("P")

AUTO = "auto"
_HEAD = struct.Struct(">ii")
_HOP_BUDGET = 50_000  # record headers followed in all the files sampled
_SAMPLED_RECORDS = 64  # records per file whose properties are decoded
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
    """An explicit ``--broker-version``: validated (ValueError), never second-guessed."""
    fam = family_of(broker)
    return Detection(broker, fam, (fam,), explicit=True)


def detect(cfg: StoreConfig) -> Detection:
    """The family of the store ``cfg`` points at; with no deciding evidence the oldest candidate is followed."""
    facts = _store_facts(cfg) + _config_facts(cfg) + _commitlog_facts(cfg)
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
    with contextlib.suppress(OSError), open(cfg.checkpoint_path, "rb") as f:
        if any(f.read(40)[24:40]):
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
        table = json.loads(topics.read_text("utf-8")).get("topicConfigTable", {})
        if any(isinstance(t, dict) and "attributes" in t for t in table.values()):
            out.append(Fact("topic-attributes", str(topics)))
    keys = cfg.explicit
    if any(k.startswith("mappedFileSize") for k in keys):
        out.append(Fact("conf-mapped-keys", str(cfg.source)))
    elif any(k.startswith("mapedFileSize") for k in keys):
        out.append(Fact("conf-maped-keys", str(cfg.source)))
    return out


def _commitlog_facts(cfg: StoreConfig) -> list[Fact]:
    """Facts of the first two and the last two non-empty commit log files (a one-shot command stays fast
    on a store of many files)."""
    out: list[Fact] = []
    budget = [_HOP_BUDGET]
    segs: list[Segment] = []
    for d in cfg.commitlog_dirs or (cfg.commitlog_dir,):
        segs += [s for s in list_segments(d, None)[0] if s.size > 0]
    segs.sort(key=lambda s: s.base_offset)
    picked = segs if len(segs) <= 4 else segs[:2] + segs[-2:]
    for seg in picked:
        if budget[0] > 0:
            with contextlib.suppress(OSError, ValueError):
                out += _file_facts(seg, budget)
    return out


def _file_facts(seg: Segment, budget: list[int]) -> list[Fact]:
    import mmap

    out: list[Fact] = []
    seen_v2 = seen_v6 = False
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos, n, end = 0, 0, len(buf)
        unpack = _HEAD.unpack_from
        while pos + 8 <= end and budget[0] > 0:
            budget[0] -= 1
            total, magic = unpack(buf, pos)
            if magic == BLANK_MAGIC:
                out += _blank_fact(buf, pos, end, seg)
                break
            if (magic != MAGIC_V1 and magic != MAGIC_V2) or checked_size(buf, pos, end) is None:
                break
            if magic == MAGIC_V2 and not seen_v2:
                seen_v2 = True
                out.append(Fact("v2-record", f"{seg.path} @{pos}"))
            if not seen_v6 and buf[pos + 39] & 0x30:  # sysFlag's IPv6 bits (its lowest byte)
                seen_v6 = True
                out.append(Fact("ipv6-host", f"{seg.path} @{pos}"))
            if n < _SAMPLED_RECORDS:
                rec = decode_record(buf, pos, path=str(seg.path), file_from=seg.base_offset, end=end)
                if isinstance(rec, Record):
                    out += _property_facts(rec, f"{seg.path} @{pos}")
                n += 1
            pos += total
    return out


def _blank_fact(buf: object, pos: int, end: int, seg: Segment) -> list[Fact]:
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


def resolve(cfg: StoreConfig, broker: str | None) -> Detection:
    """``--broker-version``: an explicit version, or ``auto``/None to detect from the store."""
    if broker and broker != AUTO:
        return explicit(broker)
    return detect(cfg)


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
