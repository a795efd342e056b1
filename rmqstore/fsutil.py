"""Durable file writes: temp file, fsync, rename, fsync of the directory.

The broker refuses to load a ``commitlog/`` or consume queue directory holding a stray
file (store-format.md §1.1, §2.4), so temp files for those directories are created in
the store's scratch directory ``<root>/.rmqstore/tmp`` (same file system, so rename is
atomic) and never beside the target.
"""

from __future__ import annotations

import os
from pathlib import Path

SCRATCH_DIR = ".rmqstore"


def scratch_dir(store_root: Path, *parts: str) -> Path:
    """Return (and create) ``<root>/.rmqstore/<parts>``."""
    d = Path(store_root, SCRATCH_DIR, *parts)
    d.mkdir(parents=True, exist_ok=True)
    return d


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, tmp_dir: Path | None = None, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    path = Path(path)
    tmp_parent = Path(tmp_dir) if tmp_dir is not None else path.parent
    tmp_parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_file(path: Path) -> None:
    """Flush a file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
