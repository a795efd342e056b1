"""Times users type: every accepted form, and the CLI's --local/--utc and --broker-version checks."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rmqstore.cli import app
from rmqstore.errors import InputError
from rmqstore.timeparse import SECONDS_BELOW, epoch_ms, format_time_ms, parse_time_ms

runner = CliRunner()
NOW = 1_795_316_021_123  # 2026-11-23T...Z
UTC = dt.UTC
PLUS8 = dt.timezone(dt.timedelta(hours=8))

TABLE = [
    # (text, tz for naive times, expected epoch ms)
    ("1795316021", None, 1_795_316_021_000),  # epoch seconds (10 digits)
    ("1795316021000", None, 1_795_316_021_000),  # epoch milliseconds (13 digits)
    ("99999999999", None, 99_999_999_999_000),  # just below 10^11: seconds
    ("100000000000", None, 100_000_000_000),  # 10^11: milliseconds
    ("0", None, 0),
    ("now", None, NOW),
    ("NOW", None, NOW),
    ("-1h", None, NOW - 3_600_000),
    ("+30m", None, NOW + 1_800_000),
    ("now-2d", None, NOW - 2 * 86_400_000),
    ("-1h30m", None, NOW - 5_400_000),
    ("-500ms", None, NOW - 500),
    ("-1w", None, NOW - 7 * 86_400_000),
    ("2026-11-23T04:30:00Z", None, 1_795_408_200_000),
    ("2026-11-23T04:30:00.250+08:00", None, 1_795_408_200_250 - 8 * 3_600_000),
    ("2026-11-23T04:30:00", UTC, 1_795_408_200_000),
    ("2026-11-23T04:30:00", PLUS8, 1_795_408_200_000 - 8 * 3_600_000),
    ("2026-11-23", UTC, 1_795_392_000_000),
    ("2026-11-23#04:30:00:007", UTC, 1_795_408_200_007),
    ("2026-11-23#04:30:00:007", PLUS8, 1_795_408_200_007 - 8 * 3_600_000),
]


@pytest.mark.parametrize(("text", "tz", "want"), TABLE, ids=[t for t, _, _ in TABLE])
def test_time_forms(text, tz, want):
    assert parse_time_ms(text, tz=tz, now_ms=NOW) == want


def test_naive_times_are_local_by_default():
    local = dt.datetime(2026, 11, 23, 4, 30).astimezone()
    assert parse_time_ms("2026-11-23T04:30:00") == int(local.timestamp() * 1000)
    assert parse_time_ms("2026-11-23#04:30:00:000") == int(local.timestamp() * 1000)


def test_now_is_the_clock():
    before = int(time.time() * 1000)
    assert before <= parse_time_ms("now") <= int(time.time() * 1000)


@pytest.mark.parametrize("n", [1, 1_700_000_000, SECONDS_BELOW - 1, SECONDS_BELOW, 1_700_000_000_000])
def test_seconds_and_milliseconds_by_magnitude(n):
    assert epoch_ms(n) == (n * 1000 if n < SECONDS_BELOW else n)
    assert parse_time_ms(str(n)) == epoch_ms(n)


@pytest.mark.parametrize("text", ["yesterday", "1h", "-1x", "2026-13-01", "", "--1h", "1.5"])
def test_bad_times_name_the_forms(text):
    with pytest.raises(InputError, match="ISO-8601"):
        parse_time_ms(text, now_ms=NOW)


def test_format_utc_and_local():
    assert format_time_ms(1_795_408_200_007) == "2026-11-23T04:30:00.007Z"
    local = format_time_ms(1_795_408_200_007, local=True)
    assert dt.datetime.fromisoformat(local).timestamp() == 1_795_408_200.007


SMALL = FIXTURES / "small" / "store"


def _dump(*args: str) -> list[dict]:
    r = runner.invoke(app, ["dump", "commitlog", str(SMALL), "-f", "ndjson", "--body", "none", *args])
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines() if '"msgId"' in line]


def test_since_in_seconds_is_not_read_as_milliseconds():
    rows = _dump()
    times = sorted(r["storeTimestamp"] for r in rows)
    mid = times[len(times) // 2]
    as_seconds = str((mid + 999) // 1000)  # the same instant, in seconds, rounded up
    got = _dump("--since", as_seconds)
    assert got and len(got) < len(rows)
    assert all(r["storeTimestamp"] >= int(as_seconds) * 1000 for r in got)
    assert len(_dump("--since", str(mid))) == sum(t >= mid for t in times)
    assert _dump("--since", "now") == []


def test_local_and_utc_display():
    args = ["query", "offset", str(SMALL), "TopicA", "0", "0", "-f", "plain", "--body", "none"]
    utc = runner.invoke(app, [*args, "--utc"])
    assert utc.exit_code == 0, utc.output
    assert "2023-11-14T22:13:20.007Z" in utc.stdout, utc.stdout
    env = {**os.environ, "TZ": "Asia/Shanghai"}
    code = f"from rmqstore.cli import main; import sys; sys.argv = {['rmqstore', *args, '--local']!r}; main()"
    local = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert local.returncode == 0, local.stderr
    assert "2023-11-15T06:13:20.007+08:00" in local.stdout


def test_utc_reads_naive_input_as_utc():
    rows = _dump("--utc", "--since", "2023-11-14T22:13:20.008")
    assert rows and min(r["storeTimestamp"] for r in rows) >= 1_700_000_000_008


@pytest.mark.parametrize("version", ["banana", "3.2.6", "6.0.0", "4.3.0", "4", "4.x", "6.x"])
def test_broker_version_is_validated(version):
    r = runner.invoke(app, ["info", str(SMALL), "--broker-version", version])
    assert r.exit_code == 2
    assert "4.4 to 5.x" in r.output


@pytest.mark.parametrize("version", ["4.4.0", "4.9.7", "5.3.3", "5.2", "4.4", "4.9", "4.9.x", "5", "5.x"])
def test_broker_versions_accepted(version):
    r = runner.invoke(app, ["info", str(SMALL), "--broker-version", version, "-f", "json"])
    assert r.exit_code == 0, r.output
