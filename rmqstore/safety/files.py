"""Durable file writes: temp file, fsync, rename, fsync of the directory.

The broker refuses to load a ``commitlog/`` or consume queue directory holding a stray
file (store-format.md §1.1, §2.4), so temp files for those directories are created in
the store's scratch directory ``<root>/.rmqstore/tmp`` (same file system, so rename is
atomic) and never beside the target.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

from rmqstore.errors import CorruptData

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


_ZERO_CHUNK = 8 << 20
_ZEROS = bytes(_ZERO_CHUNK)


def zero_range(path: Path, start: int, end: int) -> None:
    """Overwrite bytes ``[start, end)`` of ``path`` with zeros, durably (the file keeps its size)."""
    if end <= start:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = start
        zmv = memoryview(_ZEROS)
        while pos < end:
            n = min(_ZERO_CHUNK, end - pos)
            pos += os.pwrite(fd, zmv[:n], pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_if_present(path: Path) -> bool:
    """Remove ``path``; False when it was already gone (a re-run)."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def fsync_file(path: Path) -> None:
    """Flush a file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_if_present(path: Path, what: str) -> bytes | None:
    """The bytes of a small file the store may lack (None then); a file that cannot be read is damage."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptData(f"cannot read {what}: {e.strerror}", path=path, pos=0) from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def move(src: Path, dst: Path, *, missing_ok: bool = False) -> None:
    """Rename a file or directory ``src`` to ``dst`` durably (copy, keeping mtimes, then delete across
    file systems). A directory left at ``dst`` by an earlier copy that did not finish is replaced.
    A missing ``src`` raises FileNotFoundError, or does nothing with ``missing_ok`` (a re-run)."""
    if missing_ok and not os.path.lexists(src):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        tmp = dst.with_name(dst.name + ".partial")
        if src.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            os.replace(tmp, dst)
            shutil.rmtree(src)
        else:
            shutil.copy2(src, tmp)
            fsync_file(tmp)
            os.replace(tmp, dst)
            os.unlink(src)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)
