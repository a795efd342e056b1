"""Durable file writes: temp file, fsync, rename, fsync of the directory.

The broker refuses to load a ``commitlog/`` or consume queue directory holding a stray
file (store-format.md §1.1, §2.4), so temp files for those directories are created in
the store's scratch directory ``<root>/.rmqstore/tmp`` (same file system, so rename is
atomic) and never beside the target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path

from rmqstore.errors import CorruptData, from_os_error
from rmqstore.safety.openfile import check_link, open_fd, read_file

SCRATCH_DIR = ".rmqstore"


def scratch_dir(store_root: Path, *parts: str) -> Path:
    """Return (and create) ``<root>/.rmqstore/<parts>``."""
    d = Path(store_root)
    for part in (SCRATCH_DIR, *parts):
        d = d / part
        check_link(d, write=True)  # a planted link would carry journals and temp files out of the store
        try:
            d.mkdir(exist_ok=True)
        except OSError as e:
            raise from_os_error(e, d, doing="create rmqstore's scratch directory") from None
    return d


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` at the file position (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes, *, tmp_dir: Path | None = None, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file."""
    path = Path(path)
    tmp_parent = Path(tmp_dir) if tmp_dir is not None else path.parent
    tmp_parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_parent / tmp_name(path.name)
    check_link(path, write=True)
    unlink_if_present(tmp)  # left by a killed run of the same pid; never written through
    fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        unlink_if_present(tmp)
        raise from_os_error(e, path, doing="write it") from None
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


TMP_RE = re.compile(r"^\..+\.[0-9]+\.tmp$|^.+\.partial$")


def tmp_name(name: str) -> str:
    """The temp file :func:`atomic_write` writes before renaming it to ``name`` (this process's)."""
    return f".{name}.{os.getpid()}.tmp"


def remove_stale_tmp(directory: Path) -> list[Path]:
    """Remove the temp files killed runs left in ``directory`` (the names :func:`tmp_name` gives,
    and ``.partial`` copies); call it only while holding the store's lock."""
    gone = []
    try:
        names = os.listdir(directory)
    except OSError:
        return gone
    for name in names:
        p = Path(directory, name)
        if TMP_RE.match(name) and not p.is_dir():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                gone.append(p)
    return gone


_ZERO_CHUNK = 8 << 20
_ZEROS = bytes(_ZERO_CHUNK)


def zero_range(path: Path, start: int, end: int) -> None:
    """Overwrite bytes ``[start, end)`` of ``path`` with zeros, durably (the file keeps its size)."""
    if end <= start:
        return
    fd = open_fd(path, os.O_WRONLY)
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
    fd = open_fd(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_if_present(path: Path, what: str) -> bytes | None:
    """The bytes of a small file the store may lack (None then); a file that cannot be read is damage."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptData(f"cannot read {what}: {e.strerror}", path=path, pos=0) from None


def sha256_file(path: Path, limit: int | None = None) -> str:
    """The sha256 of a regular file's bytes, read up to its size when opened (or ``limit``)."""
    import hashlib  # here: OpenSSL loads in a few ms, which a command that only reads never needs

    h = hashlib.sha256()
    fd = open_fd(path)
    try:
        left = os.fstat(fd).st_size if limit is None else limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 22))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def copy_range(src: Path, dst: Path, start: int = 0, end: int | None = None, *, root: Path | None = None) -> str:
    """Copy bytes ``[start, end)`` of a regular file (``end`` None: its size when opened, never more)
    to a new ``dst``, durably; the sha256 of the bytes copied. A full disk names ``dst``."""
    import hashlib

    digest = hashlib.sha256()
    fd = open_fd(src, root=root)
    try:
        out = open_fd(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            pos, stop = start, os.fstat(fd).st_size if end is None else end
            while pos < stop:
                chunk = os.pread(fd, min(stop - pos, 1 << 22), pos)
                if not chunk:
                    break
                digest.update(chunk)
                write_all(out, chunk)
                pos += len(chunk)
            os.fsync(out)
        except OSError as e:
            raise from_os_error(e, dst if e.errno == errno.ENOSPC else src, doing="copy it") from None
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return digest.hexdigest()


def copy_file(src: Path, dst: Path) -> None:
    """Copy a regular file's bytes, at most its size when opened, to a new ``dst``, durably."""
    copy_range(src, dst)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a directory of regular files (and directories) file by file, each bounded by its size;
    the first failure is one error naming the path (never a list of them)."""
    for dirpath, dirnames, filenames in os.walk(src):
        out = Path(dst, os.path.relpath(dirpath, src))
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise from_os_error(e, out, doing="create it") from None
        for name in filenames:
            copy_file(Path(dirpath, name), out / name)
            shutil.copystat(Path(dirpath, name), out / name)
        dirnames.sort()


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
            try:
                copy_tree(src, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)  # a full disk keeps no half copy
                raise
            os.replace(tmp, dst)
            shutil.rmtree(src)
        else:
            copy_file(src, tmp)
            shutil.copystat(src, tmp)
            os.replace(tmp, dst)
            os.unlink(src)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)
