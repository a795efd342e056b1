"""What the broker's clean-up does at its next ``deleteWhen`` hour, and the commit log's size by day after it.

The next run is the expire plan (``walk.expiry.plan_expire``, the one ``expire --dry-run --now``
shows) evaluated at the next local hour listed in ``deleteWhen`` (now, when this hour is one).
The forecast is simple on purpose: each day at that hour the files whose mtime is
``fileReservedTime`` hours old go, oldest first, never the newest; new records arrive at the rate
the records' store times show (bytes over their span, when it is an hour or more) and go in turn
``fileReservedTime`` hours after they were written.
"""

from __future__ import annotations

import time

from rmqstore.errors import RmqstoreError
from rmqstore.ops.report.figures import ExpiryFigures, ForecastDay
from rmqstore.store import Store
from rmqstore.walk.expiry import ExpireSettings, expire_settings, local_hour, plan_expire
from rmqstore.walk.traffic import DAY_MS, HOUR_MS, FileFigures, Traffic

FORECAST_DAYS = 14
MIN_RATE_SPAN_MS = HOUR_MS  # a shorter span of store times tells no daily rate


def next_clean_ms(now_ms: int, hours: tuple[int, ...]) -> int | None:
    """The time of the broker's next clean-up by the hour: now within a ``deleteWhen`` hour, else the
    start of the next such local hour; None when no listed hour is a local hour."""
    if not any(0 <= h <= 23 for h in hours):
        return None
    if local_hour(now_ms) in hours:
        return now_ms
    lt = time.localtime(now_ms / 1000)
    start = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, lt.tm_hour, 0, 0, 0, 0, -1)))
    for i in range(1, 49):  # a day and a margin for a daylight saving change
        at = (start + i * 3600) * 1000
        if local_hour(at) in hours:
            return at
    return None  # pragma: no cover - every hour 0-23 comes within a day


def daily_rate(traffic: Traffic) -> tuple[int, str]:
    """Commit log bytes written per day, from the records' bytes over the span of their store times."""
    span = traffic.span_ms
    total = sum(f.record_bytes for f in traffic.files)
    if span < MIN_RATE_SPAN_MS:
        return 0, f"the records span {span / 1000:.0f} s, too short for a daily rate: the forecast adds no new data"
    return int(total * DAY_MS / span), f"{total} bytes written over {span / HOUR_MS:.1f} h of store times"


def forecast(
    files: list[FileFigures], settings: ExpireSettings, first_run_ms: int, now_ms: int, rate: int
) -> tuple[ForecastDay, ...]:
    """The commit log's bytes at each day's clean-up hour for :data:`FORECAST_DAYS` days."""
    reserved = settings.file_reserved_time_h * HOUR_MS
    size_now = sum(f.size for f in files)
    last = len(files) - 1
    while last > 0 and not files[last].records:  # a pre-allocated empty file is not the newest
        last -= 1
    out = []
    for day in range(FORECAST_DAYS):
        at = first_run_ms + day * DAY_MS
        gone = 0
        for f in files[: max(last, 0)]:
            if f.mtime_ms + reserved > at:
                break  # later files are never deleted before it
            gone += f.size
        written = rate * max(at - now_ms, 0) // DAY_MS
        aged = rate * max(at - now_ms - reserved, 0) // DAY_MS
        out.append(ForecastDay(at, size_now - gone + written - aged, gone + aged))
    return tuple(out)


def expiry_figures(st: Store, traffic: Traffic, now_ms: int) -> ExpiryFigures:
    """The next clean-up's plan and the forecast; a store whose expiry cannot be planned says why."""
    rate, note = daily_rate(traffic)
    try:
        settings = expire_settings(st.config)
        at = next_clean_ms(now_ms, settings.delete_hours)
        if at is None:
            return ExpiryFigures(
                None, None, 0, rate, note, (), f"deleteWhen {settings.delete_when!r} is never a local hour"
            )
        plan = plan_expire(st, now_ms=at, settings=settings)
    except RmqstoreError as e:
        return ExpiryFigures(None, None, 0, rate, note, (), str(e))
    days = forecast(traffic.files, settings, at, now_ms, rate)
    return ExpiryFigures(at, plan.summary(), plan.freed_size, rate, note, days)
