"""Queues kept in files of fixed-size units named by their first byte's offset (§2.1, §4.5): what the
consume queue and the batch consume queue share — their directories, reading and placing units, and
the broker's file truncation and expiry rules."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from rmqstore.codec.topic import queue_path_problem
from rmqstore.errors import from_os_error
from rmqstore.problems import Problem
from rmqstore.safety.openfile import open_fd, reserve
from rmqstore.store.files import data_end, map_file, names_in, read_at
from rmqstore.store.layout import Segment, StoreConfig, file_name
from rmqstore.store.queue.interface import QueueCut

if TYPE_CHECKING:
    import numpy as np

_LONG = struct.Struct(">q")


def read_units(path: Path, dtype: np.dtype, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Whole units ``start`` to ``stop`` of a file (fewer where the file ends), as a copy."""
    import numpy as np

    with map_file(path) as buf:
        count = len(buf) // dtype.itemsize
        stop = count if stop is None else max(0, min(stop, count))
        start = min(max(0, start), stop)
        view = np.frombuffer(buf, dtype=dtype, count=stop - start, offset=start * dtype.itemsize)
        out = view.copy()
        del view
    return out


def pread_units(path: Path, dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    """Whole units ``start`` to ``stop`` of a file (fewer where the file ends), read rather than
    mapped: a few units of many files cost a read each, and no page stays resident."""
    import numpy as np

    try:
        data = read_at(path, start * dtype.itemsize, max(0, stop - start) * dtype.itemsize)
    except OSError as e:  # the open's error, worded as a mapping's
        raise from_os_error(e, path, doing="open it for reading") from None
    return np.frombuffer(data, dtype=dtype, count=len(data) // dtype.itemsize)


def nonzero_units(path: Path, start: int, end: int, unit_size: int) -> int:
    """Slots of ``unit_size`` bytes in [start, end) of a file that are not all zeros (a trailing part slot too)."""
    import numpy as np

    if end <= start:
        return 0
    data = read_at(path, start, end - start)
    n = len(data) // unit_size
    arr = np.frombuffer(data[: n * unit_size], dtype=np.uint8).reshape(n, unit_size)
    return int(arr.any(axis=1).sum()) + (1 if len(data) % unit_size and any(data[n * unit_size :]) else 0)


def truncate_dirty_files(segs: list[Segment], file_size: int, end: int, unit_size: int) -> list[QueueCut]:
    """``MappedFileQueue.truncateDirtyFiles(end)`` (§8.5): the data after ``end`` in the file holding it
    zeroed, the files after it deleted; each cut counts the units it removes."""
    out = []
    for s in segs:
        if s.base_offset + file_size <= end:
            continue
        if end >= s.base_offset:
            cut = end - s.base_offset
            stop = data_end(s.path, cut)
            if stop > cut:
                out.append(QueueCut(s.path, "zero", cut, stop, nonzero_units(s.path, cut, stop, unit_size)))
        else:
            out.append(QueueCut(s.path, "delete", 0, s.size, nonzero_units(s.path, 0, s.size, unit_size)))
    return out


def files_expired_before(
    segs: list[Segment], problems: list[Problem], file_size: int, unit_size: int, min_phy: int
) -> tuple[list[tuple[Segment, int]], str | None]:
    """``deleteExpiredFile(min_phy)`` (§10.2): every file but the last whose last unit (at ``file_size -
    unit_size``) points below ``min_phy``, up to the first that does not, each with that offset; why it
    stopped short of the rule when it did (a problem of the directory: nothing goes; a short file)."""
    if problems:
        return [], str(problems[0])
    out: list[tuple[Segment, int]] = []
    for seg in segs[:-1]:
        raw = read_at(seg.path, file_size - unit_size, 8)
        if len(raw) < 8:
            return out, f"{seg.path} is shorter than {file_size} bytes"
        (last_phy,) = _LONG.unpack(raw)
        if last_phy >= min_phy:
            break
        out.append((seg, last_phy))
    return out, None


@dataclass(slots=True)
class MappedFileQueue:
    """Writes units into ``<directory>/<20-digit offset>`` files of ``file_size`` bytes, creating them as needed."""

    directory: Path
    file_size: int
    _fd: int | None = None
    _base: int = -1

    def put_at(self, byte_offset: int, data: bytes) -> None:
        base = byte_offset - byte_offset % self.file_size
        if base != self._base:
            self.close()
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / file_name(base)
            self._fd = open_fd(path, os.O_RDWR | os.O_CREAT)
            if os.fstat(self._fd).st_size < self.file_size:
                os.ftruncate(self._fd, self.file_size)
            reserve(self._fd, 0, self.file_size, path)
            self._base = base
        assert self._fd is not None
        os.pwrite(self._fd, data, byte_offset - base)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            self._base = -1


@dataclass(frozen=True, slots=True)
class FileQueueLifeCycle:
    """One queue kept as ``<root>/<kind>/<topic>/<queueId>/``: the calls that only depend on its files."""

    topic: str
    queue_id: int
    directory: Path  # <root>/<kind>/<topic>/<queueId>
    file_size: int

    unit_size: ClassVar[int]

    @property
    def dtype(self) -> np.dtype:
        raise NotImplementedError

    def exists(self) -> bool:
        return self.directory.is_dir()

    def read(self, seg: Segment, start: int = 0, stop: int | None = None) -> np.ndarray:
        return read_units(seg.path, self.dtype, start, stop)

    def files(self) -> tuple[list[Segment], list[Problem]]:
        raise NotImplementedError

    def destroy(self) -> list[QueueCut]:
        return [
            QueueCut(s.path, "delete", 0, s.size, nonzero_units(s.path, 0, s.size, self.unit_size))
            for s in self.files()[0]
        ]

    def expired_files(self, min_phy: int) -> tuple[list[tuple[Segment, int]], str | None]:
        return files_expired_before(*self.files(), self.file_size, self.unit_size, min_phy)


Q = TypeVar("Q", bound=FileQueueLifeCycle)


@dataclass(frozen=True, slots=True)
class QueueDirectories(Generic[Q]):
    """All queues of one kind under ``root`` (a store, or a build directory beside it)."""

    config: StoreConfig
    root: Path

    kind: ClassVar[str]  # the directory under the root

    @property
    def directory(self) -> Path:
        return self.root / self.kind

    def _topics(self) -> list[str]:
        return names_in(self.directory)

    @staticmethod
    def _is_queue_id(name: str) -> bool:
        return name.isdigit()

    def _queue(self, topic: str, queue_id: int, directory: Path) -> Q:
        raise NotImplementedError

    def queues(self) -> list[Q]:
        """Every queue directory, as the broker loads them (§4.5)."""
        out = []
        for topic in self._topics():
            tdir = self.directory / topic
            if tdir.is_dir():
                ids = [q for q in names_in(tdir) if self._is_queue_id(q) and (tdir / q).is_dir()]
                out += [self._queue(topic, int(q), tdir / q) for q in ids]
        out.sort(key=lambda q: (q.topic, q.queue_id))
        return out

    def close(self, sync: bool = True) -> None:
        """Files are opened per call: nothing is held."""

    def queue(self, topic: str, queue_id: int) -> Q:
        """A name that cannot be a directory never becomes a path: it gets a hidden name inside the
        kind's directory that holds no queue (its writer refuses it, naming the record)."""
        sub = ".refused-topic" if queue_path_problem(topic, queue_id) is not None else topic
        return self._queue(topic, int(queue_id), self.directory / sub / str(int(queue_id)))

    def path_problem(self, topic: str, queue_id: int) -> str | None:
        """Why ``topic``/``queue_id`` cannot be this store's queue directory (None when it can)."""
        return queue_path_problem(topic, queue_id)
