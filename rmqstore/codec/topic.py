"""Names taken from record bytes that become directory names, and how to show one that cannot.

A topic, an LMQ queue named in ``INNER_MULTI_DISPATCH``, a retry or DLQ topic: the broker makes each
of them one directory under ``consumequeue/`` (``<topic>/<queueId>``) without checking its
characters (4.4.0 stores and serves a topic in any script). The one rule here is the file system's:
the name must be a single path component, so that no name read from a record can write outside the
consume queue directory or into another queue's directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore.errors import CorruptData

NAME_MAX_BYTES = 255  # NAME_MAX of Linux file systems: a directory name's length in bytes
# TopicValidator's characters: the clients' rule, and the broker's from 4.7.0 (rules.broker_checks_topic_name)
TOPIC_VALIDATOR_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def queue_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one directory under ``consumequeue/`` (None when it can): empty,
    ``.`` or ``..``, a ``/`` or NUL inside, or longer than 255 bytes in UTF-8. Any script is fine."""
    if not name:
        return "the name is empty"
    if name in (".", ".."):
        return f"{name!r} names a directory, not a queue"
    if "/" in name:
        return "a '/' in it would make nested directories"
    if "\0" in name:
        return "a NUL byte cannot be in a file name"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX_BYTES:
        return f"it is {size} bytes in UTF-8, more than the {NAME_MAX_BYTES} a directory name may have"
    return None


def queue_path_problem(name: str, queue_id: int) -> str | None:
    """:func:`queue_name_problem`, and a queue id that is no directory the broker loads (negative)."""
    why = queue_name_problem(name)
    if why is None and queue_id < 0:
        return f"queue id {queue_id} is negative"
    return why


def shown(text: str) -> str:
    """Record text as one safe line: control characters and non-ASCII escaped."""
    return text.encode("unicode_escape").decode("ascii").replace("'", "\\'")


class BadTopic(CorruptData):
    """A record names a queue that cannot be a directory: it is never dispatched to a path."""

    def __init__(self, topic: str, why: str, *, path: Path | str, pos: int, phy_offset: int | None):
        self.topic = topic
        what = f"record names queue '{shown(topic)}', which cannot be a consume queue directory ({why})"
        super().__init__(what, path=path, pos=pos, phy_offset=phy_offset)


@dataclass(slots=True)
class SkippedQueue:
    """Records whose queue name cannot be a directory: reported, and not entered in that queue (the
    broker's LMQ dispatch skips such a name too). The first record is the one named."""

    name: str
    queue_id: int
    why: str
    path: str  # the commit log file of the first record
    pos: int  # its byte position in that file
    phy_offset: int
    records: int = 1

    def what(self) -> str:
        return (
            f"{self.records} record(s) from commit log offset {self.phy_offset} name queue "
            f"'{shown(self.name)}' {self.queue_id}, not dispatched there: {self.why}"
        )

    def line(self) -> str:
        """One line naming the file and byte offset of the first record."""
        return f"{self.path}: offset {self.pos}: {self.what()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.name,
            "queueId": self.queue_id,
            "why": self.why,
            "file": self.path,
            "pos": self.pos,
            "phyOffset": self.phy_offset,
            "records": self.records,
        }


def note_skipped(
    skipped: dict[tuple[str, int], SkippedQueue],
    name: str,
    queue_id: int,
    why: str,
    where: tuple[Any, int, int],
    n: int,
) -> None:
    """Count ``n`` more records of an unsafe queue name in ``skipped``, keeping the first one's place."""
    s = skipped.get((name, queue_id))
    if s is None:
        skipped[(name, queue_id)] = SkippedQueue(name, queue_id, why, str(where[0]), where[1], where[2], n)
    else:
        s.records += n


def skipped_lines(items: list[dict[str, Any]], limit: int = 20) -> list[str]:
    """The lines of the skipped queues a dispatch recorded (:meth:`SkippedQueue.to_json`), the first ``limit``."""
    out = [
        SkippedQueue(d["queue"], d["queueId"], d["why"], d["file"], d["pos"], d["phyOffset"], d["records"]).line()
        for d in items[:limit]
    ]
    if len(items) > limit:
        out.append(f"... and {len(items) - limit} more queue name(s) not dispatched")
    return out
