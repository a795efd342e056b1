"""Times given by users: epoch ms, ISO-8601, or RocketMQ's ``yyyy-MM-dd#HH:mm:ss:SSS``."""

from __future__ import annotations

import datetime as dt
import re

from .errors import InputError

_RMQ = re.compile(r"^(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})$")


def parse_time_ms(text: str, *, tz: dt.tzinfo | None = None) -> int:
    """Parse a time; naive times are local time (as mqadmin reads them) unless ``tz`` is given."""
    s = text.strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    m = _RMQ.match(s)
    try:
        if m:
            y, mo, d, h, mi, sec, ms = (int(g) for g in m.groups())
            t = dt.datetime(y, mo, d, h, mi, sec, ms * 1000)
        else:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"time {text!r} is not epoch ms, ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=tz) if tz else t.astimezone()
    return int(t.timestamp() * 1000)


def format_time_ms(ms: int) -> str:
    """ISO-8601 in UTC with milliseconds, for output."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
