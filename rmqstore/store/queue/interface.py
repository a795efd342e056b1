"""What every consume queue store answers (RocketMQ's ``ConsumeQueueStoreInterface`` and
``ConsumeQueueInterface``), and the values it answers with.

A :class:`ConsumeQueueStore` holds all queues of one kind in a store (or in a build directory);
each of its :class:`ConsumeQueue` objects is one ``(topic, queueId)``. Operations only ever use
these calls, so a new kind of queue (the 5.x RocksDB consume queue) is one more implementation,
not one more branch in every operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from rmqstore.problems import Problem
    from rmqstore.store.layout import Segment


@dataclass(frozen=True, slots=True)
class QueueTail:
    """Where a queue's valid units end, as loading it reads its last files (§8.4)."""

    end: int  # byte offset in the queue's file stream after the last valid unit
    max_offset: int  # the queue offset after the last valid unit (maxOffsetInQueue)
    last: tuple[int, int] | None  # (commit log offset, size) of the last valid unit
    max_physic_offset: int  # the queue's maxPhysicOffset after load, -1 without units
    file: Segment | None = None  # the file the end lies in (None without files)


@dataclass(frozen=True, slots=True)
class QueueRange:
    """What a broker reports for one queue right after loading the store (§4.4, §8.4)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_phy_offset: int  # commit log offset of the last valid unit, -1 when none (4.4.0 maxPhysicOffset)
    last_phy_end: int  # offset + size of that unit, -1 when none (4.5.1+ maxPhysicOffset)


@dataclass(frozen=True, slots=True)
class QueueCut:
    """One removal from a queue's files: a whole file, or its bytes from a position on."""

    path: Path
    verb: str  # "delete" (the whole file) | "zero" (from_pos up to to_pos, the end of its data)
    from_pos: int
    to_pos: int
    units: int  # units removed


@dataclass(slots=True)
class QueueRecovery:
    """What a queue's own recovery (``recover()``, §8.4) finds, and what its truncation keeps."""

    queue: ConsumeQueue
    files: list[Segment]  # every file of the queue as loaded
    problems: list[Problem]  # naming and size problems of its directory
    end: int  # byte offset in the queue's file stream where the valid units end (its processOffset)
    first_offset: int  # queue offset of the first slot of the first kept file
    max_offset: int  # queue offset after the last valid unit
    max_physic_offset: int  # per version (§8.1 step 5), -1 when none
    kept: list[Segment] = field(default_factory=list)  # the files truncateDirtyFiles(end) leaves
    cuts: list[QueueCut] = field(default_factory=list)  # what truncateDirtyFiles(end) removes

    @property
    def topic(self) -> str:
        return self.queue.topic

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id


class QueueWriter(Protocol):
    """Appends the units of dispatched records to one queue, as the broker's dispatch does."""

    written: int  # units written so far
    last_ts: int  # store time of the record behind the last unit written

    def put(
        self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray, queue_offset: np.ndarray, store_ts: np.ndarray
    ) -> None:
        """Units for records in commit log order (the broker's ``putMessagePositionInfo``)."""
        ...

    def close(self, sync: bool = True) -> None: ...


class ConsumeQueue(Protocol):
    """One ``(topic, queueId)`` of a consume queue store."""

    @property
    def topic(self) -> str: ...

    @property
    def queue_id(self) -> int: ...

    @property
    def unit_size(self) -> int:
        """Bytes of one unit in the queue's file stream."""
        ...

    @property
    def directory(self) -> Path:
        """Where the queue is kept (problems about it name this)."""
        ...

    def exists(self) -> bool: ...

    def files(self) -> tuple[list[Segment], list[Problem]]:
        """The queue's files as the broker loads them, with every naming and size problem."""
        ...

    def read(self, seg: Segment, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Units ``start`` to ``stop`` (slots, whole ones only) of one of the queue's files, a copy."""
        ...

    def units(self) -> tuple[int, np.ndarray]:
        """The queue's valid units in order (up to the first invalid one), and the queue offset of the first."""
        ...

    def get(self, queue_offset: int) -> np.void | None:
        """The unit holding ``queue_offset`` (valid or not), None when no file holds it."""
        ...

    def tail(self) -> QueueTail: ...

    def last_unit(self) -> tuple[int, int] | None:
        """(commit log offset, size) of the last valid unit found from the last file back; None if none."""
        ...

    def queue_range(self, min_phy: int) -> QueueRange:
        """Min and max queue offsets as the broker computes them, ``min_phy`` being the commit log's min offset."""
        ...

    def recover(self) -> QueueRecovery: ...

    def truncate_dirty(self, phy_offset: int, recovered: QueueRecovery) -> list[QueueCut]:
        """What ``truncateDirtyLogicFiles(phy_offset)`` removes after ``recovered`` (reads only)."""
        ...

    def phy_offsets_at(self, queue_offsets: np.ndarray, recovered: QueueRecovery) -> np.ndarray:
        """The commit log offset in each queue offset's unit among the files ``recovered`` keeps, -1 where none."""
        ...

    def destroy(self) -> list[QueueCut]:
        """Every file of the queue, removed (what the broker does to all queues without a commit log)."""
        ...

    def expired_files(self, min_phy: int) -> tuple[list[tuple[Segment, int]], str | None]:
        """``deleteExpiredFile(min_phy)`` (§10.2): the files it deletes, each with its last unit's commit log
        offset, and why it stopped short of the usual rule (None when it did not)."""
        ...

    def writer(self, *, where: tuple[Path | str, int, int | None] | None = None) -> QueueWriter:
        """A writer continuing the queue; ``where`` is the record (file, pos, phy offset) a refused name came from."""
        ...


class ConsumeQueueStore(Protocol):
    """All queues of one kind under a store root."""

    @property
    def directory(self) -> Path: ...

    def queues(self) -> Sequence[ConsumeQueue]:
        """Every queue present, sorted by topic and queue id."""
        ...

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """One queue, present or not."""
        ...

    def path_problem(self, topic: str, queue_id: int) -> str | None:
        """Why the store cannot keep a queue of this name (a directory name that is not one safe path
        component), None when it can: such a record is reported and not dispatched."""
        ...

    def close(self, sync: bool = True) -> None:
        """Release what the store holds open (a database); a writable one is flushed first with ``sync``."""
        ...
