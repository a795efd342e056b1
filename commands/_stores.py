"""Which store(s) a command works on: several paths and globs, a parent-of-store folder, a segment file."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from rmqstore.errors import InputError, StoreNotFound

# What a store root holds (any one of them makes a folder look like a store).
STORE_ENTRIES = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock", "config")
_GLOB_CHARS = set("*?[")


def expand(paths: list[Path]) -> list[Path]:
    """Paths as given, a pattern (one that names no existing file) replaced by its sorted matches."""
    out: list[Path] = []
    for p in paths:
        text = str(p)
        if not p.exists() and _GLOB_CHARS & set(text):
            matches = sorted(glob.glob(text))
            if not matches:
                raise StoreNotFound(f"{text}: no store matches this pattern")
            out += [Path(m) for m in matches]
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def looks_like_store(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in STORE_ENTRIES)


def stores_inside(path: Path) -> list[Path]:
    """Sub-folders of ``path`` that look like store roots (``path`` being the folder that holds them)."""
    try:
        children = sorted(c for c in path.iterdir() if c.is_dir())
    except OSError:
        return []
    return [c for c in children if looks_like_store(c)]


def refuse_parent_of_store(path: Path) -> None:
    """A folder that holds a store but is none (a case folder with broker.conf beside store/) is not
    read as a store: say which folder was probably meant (exit 5)."""
    if not path.is_dir() or looks_like_store(path):
        return
    inner = stores_inside(path)
    if inner:
        names = ", ".join(str(c) for c in inner[:3]) + (" ..." if len(inner) > 3 else "")
        raise StoreNotFound(f"{path}: not a store, but the folder that holds one; did you mean {names}?")


@dataclass(frozen=True)
class SegmentFile:
    """One commit log or consume queue file given instead of a store."""

    path: Path
    root: Path
    kind: str  # "commitlog" | "consumequeue" | "index"
    base_offset: int  # the file name: a commit log offset, or a byte position in the queue
    size: int
    topic: str | None = None
    queue_id: int | None = None


def segment_file(path: Path) -> SegmentFile | None:
    """``path`` as a segment file of a store (root found from its place), or None if it is a folder."""
    if path.is_dir() or not path.exists():
        return None
    name = path.name
    size = path.stat().st_size
    parent = path.parent
    if parent.parent.name.startswith("dledger-") and name.isdigit() and len(name) == 20:
        if parent.name == "data":  # a DLedger member's data file: a file of the store's commit log
            return SegmentFile(path, parent.parent.parent, "commitlog", int(name), size)
        if parent.name == "index":
            raise InputError(f"{path}: a DLedger index file; use rmqstore dump dledger-index {parent.parent.parent}")
    if parent.name == "index" and name.isdigit():  # yyyyMMddHHmmssSSS
        return SegmentFile(path, parent.parent, "index", 0, size)
    if not (name.isdigit() and len(name) == 20):
        raise InputError(f"{path}: not a store folder nor a segment file (a 20-digit file name)")
    if parent.name == "commitlog":
        return SegmentFile(path, parent.parent, "commitlog", int(name), size)
    if parent.parent.parent.name == "consumequeue" and parent.name.lstrip("-").isdigit():
        return SegmentFile(
            path, parent.parent.parent.parent, "consumequeue", int(name), size, parent.parent.name, int(parent.name)
        )
    raise InputError(
        f"{path}: cannot tell which store this file belongs to (expected STORE/commitlog/FILE, "
        "STORE/dledger-ID/data/FILE, STORE/consumequeue/TOPIC/QUEUE/FILE or STORE/index/FILE)"
    )
