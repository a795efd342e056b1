"""Bytes on disk per kind of file and per topic's consume queue, from one listing of the store's tree."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from rmqstore.ops.report.figures import KindBytes
from rmqstore.safety.quarantine import default_quarantine_base
from rmqstore.store.layout import Segment

# the store's top-level entries by kind (store-format.md §1.1); anything else counts as "other"
_KINDS = {
    "consumequeue": "consumeQueue",
    "batchconsumequeue": "batchConsumeQueue",
    "consumequeue_ext": "consumeQueue",
    "index": "index",
    "config": "config",
    "timerwheel": "timer",
    "timerlog": "timer",
    "compaction": "compaction",
    ".rmqstore": "journal",
    "checkpoint": "checkpoint",
    "abort": "checkpoint",
    "abort.bak": "checkpoint",
    "lock": "checkpoint",
}
KIND_ORDER = (
    "commitLog", "consumeQueue", "batchConsumeQueue", "index", "config", "timer", "compaction", "dledger",
    "checkpoint", "journal", "quarantine", "other",
)  # fmt: skip


def _kind(top: str) -> str:
    if top.startswith("dledger-"):
        return "dledger"
    return _KINDS.get(top, "other")


def _tree(root: Path) -> os.walk:
    return os.walk(root, onerror=None, followlinks=False)


def disk_figures(root: Path, segs: list[Segment]) -> tuple[tuple[KindBytes, ...], dict[str, int]]:
    """Bytes and files per kind (commit log segments by their list, wherever they are), and the
    bytes of each topic's consume queue files (``consumequeue/<topic>/`` and ``batchconsumequeue/``)."""
    files: Counter[str] = Counter()
    size: Counter[str] = Counter()
    per_topic: Counter[str] = Counter()
    seg_paths = {os.path.abspath(s.path) for s in segs}
    for s in segs:
        files["commitLog"] += 1
        size["commitLog"] += s.size
    for dirpath, _dirs, names in _tree(root):
        rel = Path(dirpath).relative_to(root).parts
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.abspath(path) in seg_paths:
                continue
            try:
                n = os.lstat(path).st_size
            except OSError:
                continue
            kind = _kind(rel[0] if rel else name)
            files[kind] += 1
            size[kind] += n
            if kind in ("consumeQueue", "batchConsumeQueue") and len(rel) >= 2:
                per_topic[rel[1]] += n
    quarantine = default_quarantine_base(root)
    for dirpath, _dirs, names in _tree(quarantine):
        for name in names:
            try:
                size["quarantine"] += os.lstat(os.path.join(dirpath, name)).st_size
                files["quarantine"] += 1
            except OSError:
                continue
    rows = tuple(KindBytes(k, files[k], size[k]) for k in KIND_ORDER if files[k])
    return rows, dict(per_topic)
