"""Topic names the broker accepts, and how to show one that is not."""

from __future__ import annotations

import re
from pathlib import Path

from rmqstore.errors import CorruptData

# TopicValidator (4.x and 5.x): letters, digits, "%", "|", "_", "-"
_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+")  # fullmatch: "$" would accept a trailing newline


TOPIC_MAX_LENGTH = 255  # 4.x clients allowed 255 (later 127); longer is no file name (NAME_MAX)


def topic_name_problem(topic: str) -> str | None:
    """Why the broker would refuse ``topic`` as a topic name, or None when it accepts it."""
    if not topic:
        return "the topic is empty"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic is {len(topic)} characters long, more than {TOPIC_MAX_LENGTH}"
    if not _TOPIC_RE.fullmatch(topic):
        return "only letters, digits and %|_- are allowed"
    return None


def shown(text: str) -> str:
    """Record text as one safe line: control characters and non-ASCII escaped."""
    return text.encode("unicode_escape").decode("ascii").replace("'", "\\'")


class BadTopic(CorruptData):
    """A record names a topic the broker could never have accepted: never dispatched to a path."""

    def __init__(self, topic: str, why: str, *, path: Path | str, pos: int, phy_offset: int | None):
        self.topic = topic
        what = f"record topic '{shown(topic)}' is not a topic name the broker accepts ({why})"
        super().__init__(what, path=path, pos=pos, phy_offset=phy_offset)
