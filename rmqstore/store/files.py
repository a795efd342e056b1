"""Files of a store: mapping them, listing directories."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from rmqstore.errors import from_os_error


def names_in(directory: Path) -> list[str]:
    """The names in a directory, sorted; none when it does not exist."""
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def map_file(path: Path, *, write: bool = False) -> Iterator[mmap.mmap | bytes]:
    """Map a file (read-only unless ``write``); an empty file gives ``b""``."""
    flags = os.O_RDWR if write else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise from_os_error(e, path, doing="open it for reading" if not write else "open it for writing") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield b""
            return
        m = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if write else mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        yield m
    finally:
        try:
            m.close()
        except BufferError:
            pass  # a numpy view still refers to it; it is unmapped when that view goes
