"""Times given by users, and times shown to them.

Accepted forms (``parse_time_ms``):

=============================  ================================================================
``1795316021``                 epoch seconds: an integer below 10^11 (10^11 s is the year 5138)
``1795316021000``              epoch milliseconds: an integer from 10^11 on (10^11 ms is 1973)
``now``                        the current time
``-1h``, ``+30m``, ``now-2d``  relative to now: ``ms``, ``s``, ``m``, ``h``, ``d``, ``w``; parts
                               add up (``-1h30m``)
``2026-11-23T04:30:00+08:00``  ISO-8601 (a date alone is its midnight); ``Z`` is UTC
``2026-11-23#04:30:00:000``    RocketMQ's ``yyyy-MM-dd#HH:mm:ss:SSS`` (mqadmin's form)
=============================  ================================================================

A time without a zone is local time, as mqadmin reads it, unless ``tz`` is given.
"""

from __future__ import annotations

import datetime as dt
import re
import time

from rmqstore.errors import InputError

SECONDS_BELOW = 10**11  # an epoch integer below this is seconds, else milliseconds

_RMQ = re.compile(r"^(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = r"\d+(?:ms|s|m|h|d|w)"
_RELATIVE = re.compile(rf"^(?:now)?\s*([+-])\s*((?:{_PART})+)$")
FORMS = "epoch seconds or ms, now, a relative time (-1h), ISO-8601 or yyyy-MM-dd#HH:mm:ss:SSS"


def epoch_ms(n: int) -> int:
    """An epoch integer in seconds or milliseconds, by magnitude, as milliseconds."""
    return n * 1000 if abs(n) < SECONDS_BELOW else n


def parse_time_ms(text: str, *, tz: dt.tzinfo | None = None, now_ms: int | None = None) -> int:
    """Parse a time (see the module's table) into epoch milliseconds."""
    s = text.strip()
    if re.fullmatch(r"-?\d+", s):
        return epoch_ms(int(s))
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if s.lower() == "now":
        return now
    rel = _RELATIVE.match(s.lower())
    if rel:
        sign = -1 if rel.group(1) == "-" else 1
        total = sum(int(n) * _UNIT_MS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w)", rel.group(2)))
        return now + sign * total
    m = _RMQ.match(s)
    try:
        if m:
            y, mo, d, h, mi, sec, ms = (int(g) for g in m.groups())
            t = dt.datetime(y, mo, d, h, mi, sec, ms * 1000)
        else:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"time {text!r} is not {FORMS}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=tz) if tz else t.astimezone()
    return round(t.timestamp() * 1000)


def format_time_ms(ms: int, *, local: bool = False) -> str:
    """ISO-8601 with milliseconds: in UTC (``Z``), or in local time with its offset."""
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    if local:
        return t.astimezone().isoformat(timespec="milliseconds")
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_ISO_DURATION = re.compile(r"^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration_ms(text: str) -> int:
    """A length of time: ``1h``, ``1h30m``, ``2d``, ``500ms`` (units ms, s, m, h, d, w) or ISO-8601
    ``PT1H30M`` / ``P1D``, as milliseconds."""
    s = text.strip()
    if re.fullmatch(rf"(?:{_PART})+", s.lower()):
        return sum(int(n) * _UNIT_MS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w)", s.lower()))
    m = _ISO_DURATION.match(s.upper())
    if m and s.upper() not in ("P", "PT"):
        w, d, h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
        return round(((((w * 7 + d) * 24 + h) * 60 + mi) * 60 + sec) * 1000)
    raise InputError(f"duration {text!r} is not like 1h30m, 2d, 500ms or ISO-8601 PT1H30M")
