"""Opening a store's file: what may stand at a path before rmqstore reads or writes it.

A store is data someone else may have prepared. A FIFO, socket or device in place of a store file
would block a read for ever or never end; a symbolic link would carry a write out of the store. So
every file is opened here: the type is checked before the open (a regular file is expected), a
write never follows a final symbolic link (``O_NOFOLLOW``), and a read through a link is allowed
only when the link stays inside the directory that holds it or inside the store root. Whole
directories may be links (the broker follows ``commitlog/``, ``consumequeue/TOPIC``, ``index/``,
``config/`` and the DLedger data directories): a file's own directory is taken as it resolves.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import stat
from pathlib import Path
from typing import Any

from rmqstore.errors import ConfigError, FileAccessError, from_os_error

_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _wrong(path: Path | str, what: str) -> FileAccessError:
    return FileAccessError(f"{path}: {what}", path=path, errno_=errno.EINVAL, exit_code=6)


def kind_of(mode: int) -> str | None:
    """What a file of this mode is, in words, when it is not a regular file; None for a regular file."""
    for test, word in _KINDS:
        if test(mode):
            return word
    return None if stat.S_ISREG(mode) else "not a regular file"


def _inside(target: str, places: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p.rstrip("/") + "/") for p in places)


def check_link(path: Path | str, root: Path | str | None = None, *, write: bool = False) -> None:
    """Refuse a symbolic link that rmqstore must not follow (any link for a write, a link leading
    out of its directory and of ``root`` for a read); a path that is no link passes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise from_os_error(e, path) from None
    if not stat.S_ISLNK(st.st_mode):
        return
    if write:
        raise _wrong(path, "is a symbolic link; rmqstore never writes through a link")
    target = os.path.realpath(path)
    places = (os.path.realpath(os.path.dirname(os.path.abspath(path))),)
    if root is not None:
        places += (os.path.realpath(root),)
    if not _inside(target, places):
        raise _wrong(path, f"is a symbolic link leading out of the store (to {target}); a store file was expected")


def check_regular(path: Path | str, root: Path | str | None = None, *, write: bool = False) -> os.stat_result | None:
    """The stat of ``path`` when it is a regular file rmqstore may open (None when it does not exist).

    Raises:
        IsADirectoryError: a directory (``from_os_error`` names it, exit 6).
        FileAccessError: exit 6 for a FIFO, socket or device, or a link refused by
            :func:`check_link`; exit 1 with the path named for other OS errors.
    """
    check_link(path, root, write=write)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise from_os_error(e, path) from None
    if stat.S_ISDIR(st.st_mode):  # the OSError callers already tell apart, with their own words
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    word = kind_of(st.st_mode)
    if word is not None:
        raise _wrong(path, f"is {word}; a regular file was expected")
    return st


def open_fd(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644, *, root: Path | str | None = None) -> int:
    """``os.open`` of a store file after :func:`check_regular`: never blocks on a FIFO, never writes
    through a final link. OS errors are raised as ``os.open`` raises them; the refusals are
    FileAccessError, exit 6."""
    write = bool(flags & _WRITES)
    check_regular(path, root, write=write)
    extra = os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if write else 0)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and write:
            raise _wrong(path, "is a symbolic link; rmqstore never writes through a link") from None
        raise  # as os.open raises it: callers tell a missing file or a directory from other errors
    word = kind_of(os.fstat(fd).st_mode)  # replaced between the check and the open
    if word is not None:
        os.close(fd)
        raise _wrong(path, f"is {word}; a regular file was expected")
    os.set_blocking(fd, True)
    return fd


def read_file(path: Path | str, *, root: Path | str | None = None, limit: int | None = None) -> bytes:
    """The bytes of a regular file (at most ``limit``, else its size when opened): a file that grows
    while it is read, or lies about its size, never makes the read endless."""
    fd = open_fd(path, root=root)
    try:
        size = os.fstat(fd).st_size if limit is None else limit
        parts, got = [], 0
        while got < size:
            chunk = os.read(fd, min(size - got, 1 << 22))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


class TooDeep(ConfigError, exit_code=6):
    """A JSON file nested deeper than any file the broker writes: damage, not configuration."""


def json_loads(raw: str | bytes, *, path: Path | str) -> Any:
    """``json.loads`` of a file's text; a document nested too deep for the parser is exit 6 naming the file."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise TooDeep("nested too deep to be a file the broker or rmqstore writes", path=path) from None


def map_readonly(path: Path | str, *, root: Path | str | None = None) -> mmap.mmap:
    """A read-only map of a whole regular file (``ValueError`` for an empty one, as ``mmap`` gives)."""
    try:
        fd = open_fd(path, root=root)
    except OSError as e:
        raise from_os_error(e, path, doing="open it for reading") from None
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise from_os_error(e, path, doing="map it") from None
    finally:
        os.close(fd)


def reserve(fd: int, offset: int, length: int, path: Path | str) -> None:
    """Allocate ``[offset, offset + length)`` of an open file before it is written through a map: a
    full disk is then one error naming the path here, never a SIGBUS in the middle of a write."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return  # a file system without it: the write itself reports the error
        raise from_os_error(e, path, doing="reserve its space") from None


def create_sized(path: Path | str, size: int) -> None:
    """A new file of ``size`` zero bytes with its space reserved (never through a link); a failure
    leaves no file behind."""
    try:
        fd = open_fd(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    except OSError as e:
        raise from_os_error(e, path, doing="create it") from None
    try:
        os.ftruncate(fd, size)
        reserve(fd, 0, size, path)
    except BaseException as e:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        if isinstance(e, OSError):
            raise from_os_error(e, path, doing="create it") from None
        raise
    os.close(fd)


def map_for_writing(path: Path | str, size: int) -> mmap.mmap:
    """A writable map of the first ``size`` bytes of an existing file, its space reserved first."""
    try:
        fd = open_fd(path, os.O_RDWR)
    except OSError as e:
        raise from_os_error(e, path, doing="open it for writing") from None
    try:
        reserve(fd, 0, size, path)
        return mmap.mmap(fd, size)
    except OSError as e:
        raise from_os_error(e, path, doing="map it") from None
    finally:
        os.close(fd)
