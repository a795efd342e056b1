"""Files of a store: mapping them, listing directories."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rmqstore.errors import FileAccessError, from_os_error
from rmqstore.safety.openfile import open_fd

ZERO_CHUNK = 4 << 20  # bytes looked at per step when searching for zeros


def names_in(directory: Path) -> list[str]:
    """The names in a directory, sorted; none when it does not exist."""
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def read_at(path: Path, pos: int, n: int) -> bytes:
    """Up to ``n`` bytes of a file from ``pos``."""
    fd = open_fd(path)
    try:
        return os.pread(fd, n, pos)
    except OSError as e:  # pread's error names no file
        raise from_os_error(e, path, doing="read it") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def map_file(path: Path, *, write: bool = False) -> Iterator[mmap.mmap | bytes]:
    """Map a file (read-only unless ``write``); an empty file gives ``b""``."""
    flags = os.O_RDWR if write else os.O_RDONLY
    try:
        fd = open_fd(path, flags)
    except OSError as e:
        raise from_os_error(e, path, doing="open it for reading" if not write else "open it for writing") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield b""
            return
        m = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if write else mmap.ACCESS_READ)
    except OSError as e:  # mmap's error names no file: a directory or a device gives ENODEV
        raise from_os_error(e, path, doing="map it into memory") from None
    finally:
        os.close(fd)
    try:
        yield m
    finally:
        try:
            m.close()
        except BufferError:
            pass  # a numpy view still refers to it; it is unmapped when that view goes


def pwrite_all(fd: int, data: bytes | memoryview | Any, pos: int) -> None:
    """Write all of ``data`` (any contiguous buffer) at ``pos``: a short write goes on where it stopped."""
    view = memoryview(data).cast("B")
    while len(view):
        n = os.pwrite(fd, view, pos)
        if n <= 0:
            raise OSError(errno.EIO, f"no progress writing at byte {pos}")
        view, pos = view[n:], pos + n


_WRITEBACK_MIN = 1 << 20  # bytes of one write whose writeback FileWriter starts at once


class FileWriter:
    """Writes runs of bytes into an existing file with ``pwrite``, beside its writable map.

    A run appended through the page cache costs a copy; through a map of a reserved file every new
    page faults in the file system's write path (ext4 starts a journal handle per page), several
    times slower. Both reach the same page cache, so the map still sees what is written here. A run of
    ``_WRITEBACK_MIN`` bytes or more is handed to the disk at once (``POSIX_FADV_DONTNEED`` starts its
    writeback and lets its pages go once clean), so the final sync waits for less."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd: int | None = open_fd(path, os.O_RDWR)
        except OSError as e:
            raise from_os_error(e, path, doing="open it for writing") from None

    def write_at(self, data: bytes | memoryview | Any, pos: int) -> None:
        assert self.fd is not None
        try:
            pwrite_all(self.fd, data, pos)
        except OSError as e:
            raise from_os_error(e, self.path, doing="write it") from None
        size = memoryview(data).nbytes
        if size >= _WRITEBACK_MIN:  # the disk starts on a large run now instead of at the final sync
            with contextlib.suppress(OSError, AttributeError):
                os.posix_fadvise(self.fd, pos, size, os.POSIX_FADV_DONTNEED)

    def close(self, sync: bool) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if sync:
                os.fsync(fd)
        except OSError as e:
            raise from_os_error(e, self.path, doing="sync it") from None
        finally:
            os.close(fd)


_SYNC_THREADS = 16


def run_together(calls: Sequence[Callable[[], object]]) -> None:
    """Run ``calls`` (closes of files that sync them) in threads at once, then raise the first error:
    fsyncs issued together share the file system's journal commits, one after the other each waits
    for its own (30 queue files took 0.2 s alone, 0.04 s together)."""
    if len(calls) < 2:
        for call in calls:
            call()
        return
    from concurrent.futures import ThreadPoolExecutor  # here: only writers need it, and it costs a start

    with ThreadPoolExecutor(min(_SYNC_THREADS, len(calls)), thread_name_prefix="sync") as ex:
        futures = [ex.submit(call) for call in calls]
    for f in futures:
        f.result()


PAGE = mmap.PAGESIZE
RELEASE_STEP = 4 << 20  # bytes written to a mapping between two releases of its pages
_RELEASE_MIN = 16 << 20  # bytes read before their pages are dropped: few calls, a bounded window


def release_pages(buf: mmap.mmap | bytes, start: int, end: int, step: int = _RELEASE_MIN) -> int:
    """Drop the whole pages of ``buf[start:end]`` from this process's resident set once ``step`` bytes
    are done with: the page cache keeps the file (a later read faults them back in, ``flush`` still
    writes written pages to disk), so a reader's or a writer's memory stays at a window, not the file.
    Returns where the next release starts."""
    if not isinstance(buf, mmap.mmap):
        return start
    lo = -(-start // PAGE) * PAGE
    hi = min(end, len(buf))
    hi -= hi % PAGE
    if hi - lo < max(step, PAGE):
        return start
    buf.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    return hi


def release_range(buf: mmap.mmap, start: int, end: int) -> None:
    """Drop the pages of ``buf[start:end]`` (widened to whole pages) from this process's resident set."""
    lo = start - start % PAGE
    hi = min(end, len(buf))
    if hi > lo:
        buf.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def data_extents(path: Path | str, start: int, end: int) -> list[tuple[int, int]]:
    """Ranges of ``path[start:end]`` that hold data (the holes of a sparse file left out)."""
    try:
        fd = open_fd(path)
    except (OSError, FileAccessError):
        return [(start, end)]  # the reader that maps it names what is wrong
    out = []
    pos = start
    try:
        while pos < end:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole from here on
                    break
                raise
            if d >= end:
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            out.append((d, min(h, end)))
            pos = h
    except (AttributeError, OSError):
        return [(start, end)]
    finally:
        os.close(fd)
    return out


_COMPARE_CHUNK = 128 << 10  # bytes of each side compared at a time: both blocks stay in the CPU cache


def first_difference(a: Path, b: Path) -> int | None:
    """The position of the first byte where two files differ (the shorter one's size when one is a
    prefix of the other); None when they are equal. Only where either holds data is read (a hole reads
    as zeros on both sides), so two sparse files of mostly holes compare quickly."""
    import numpy as np

    fa = open_fd(a)
    try:
        fb = open_fd(b)
        try:
            size_a, size_b = os.fstat(fa).st_size, os.fstat(fb).st_size
            common = min(size_a, size_b)
            for fd in (fa, fb):
                with contextlib.suppress(OSError, AttributeError):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            ba, bb = bytearray(_COMPARE_CHUNK), bytearray(_COMPARE_CHUNK)
            for lo, hi in _union(data_extents(a, 0, common) + data_extents(b, 0, common)):
                for pos in range(lo, hi, _COMPARE_CHUNK):
                    n = min(_COMPARE_CHUNK, hi - pos)
                    na, nb = os.preadv(fa, [ba], pos), os.preadv(fb, [bb], pos)
                    if n == na == nb == _COMPARE_CHUNK and ba == bb:
                        continue
                    m = min(n, na, nb)
                    diff = np.flatnonzero(np.frombuffer(ba, np.uint8, m) != np.frombuffer(bb, np.uint8, m))
                    if diff.size:
                        return pos + int(diff[0])
                    if m < n:  # a file shrank while it was read: it ends there
                        return pos + m
            return None if size_a == size_b else common
        finally:
            os.close(fb)
    finally:
        os.close(fa)


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def next_data(path: Path | str, pos: int) -> int | None:
    """The first position at or after ``pos`` that is not in a hole of a sparse file (None: only a
    hole follows); ``pos`` itself where the file system cannot tell."""
    try:
        fd = open_fd(path)
    except (OSError, FileAccessError):
        return pos
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        return None if e.errno == errno.ENXIO else pos
    finally:
        os.close(fd)


def data_end(path: Path, start: int, end: int | None = None) -> int:
    """Position after the last non-zero byte of ``path[start:end]``; ``start`` if all zero."""
    import numpy as np

    fd = open_fd(path)
    try:
        if end is None:
            end = os.fstat(fd).st_size
        if end <= start:
            return start
        for a, b in reversed(data_extents(path, start, end)):
            hi = b
            while hi > a:
                lo = max(a, hi - ZERO_CHUNK)
                data = os.pread(fd, hi - lo, lo)
                arr = np.frombuffer(data, dtype=np.uint8)
                if arr.any():
                    return lo + int(np.flatnonzero(arr)[-1]) + 1
                hi = lo
        return start
    finally:
        os.close(fd)
