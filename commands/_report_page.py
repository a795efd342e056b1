"""The page of ``rmqstore report``: one self-contained HTML file from the report figures.

No script, no external style, font or image: the page opens with no network access. The charts are
inline SVG (``_charts``); every chart has a sentence and the table of its numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from rmqstore.ops.report import StoreReport, summary_rows
from rmqstore.timeparse import format_time_ms

from . import _charts as ch

MAX_ROWS = 50  # rows of a long table shown on the page (-f json has them all)
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin-top:22px}
table{border-collapse:collapse;margin:6px 0;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
th{background:#f3f3f3}figure{margin:10px 0}figcaption{margin-bottom:4px}
svg text{font:11px sans-serif;fill:#333}svg text.axis{fill:#666}svg line.axis{stroke:#aaa}
.bad{color:#b00020;font-weight:bold}.ok{color:#1b7f2a;font-weight:bold}.empty{color:#666;font-style:italic}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px}dt{color:#555}dd{margin:0}
"""


def _t(ms: int | None) -> str:
    return "" if ms is None else format_time_ms(ms)


def _dl(items: Sequence[tuple[str, object]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in items) + "</dl>"


def _state(r: StoreReport) -> str:
    s = r.state
    v = s.version or {}
    evidence = "; ".join(f"{e['why']} ({e['where']})" for e in v.get("evidence", []))
    lock = "free" if s.lock_holder_pid is None else f"held by pid {s.lock_holder_pid} (a running broker?)"
    items = [
        ("broker version family", f"{v.get('family', '?')} (rules of {s.broker_version}; {v.get('source', '')})"),
        ("evidence", evidence or "none"),
        ("shutdown", "clean" if s.clean_shutdown else "unclean: abort exists, the broker will run abnormal recovery"),
        ("lock", lock),
        ("commit log", f"offsets {s.min_phy_offset} to {s.max_phy_offset} ({ch.size(max(s.max_phy_offset - s.min_phy_offset, 0))})"),
        ("store times", f"{_t(s.first_store_timestamp_ms)} to {_t(s.last_store_timestamp_ms)}"),
        ("DLedger", "yes" if s.dledger else "no"),
    ]  # fmt: skip
    out = "<h3>State</h3>" + _dl(items)
    if s.problems:
        out += ch.table(["severity", "where", "what"], [(p["severity"], p["path"], p["what"]) for p in s.problems])
    return out + _verdict(r)


def _verdict(r: StoreReport) -> str:
    v = r.verdict
    if v is None:
        return ch.empty("verdict", "check was not run (--check none)")
    errors = v.found.get("error", 0)
    cls, word = ("bad", "problems found") if errors else ("ok", "no errors")
    counts = ", ".join(f"{n} {sev}" for sev, n in v.found.items()) or "nothing"
    out = f'<h3>Check ({"quick" if v.quick else "full"})</h3><p class="{cls}" data-verdict="{errors}">{word}: {escape(counts)}</p>'
    if v.problems:
        rows = [(p["severity"], p["path"], p.get("pos"), p["what"]) for p in v.problems]
        out += ch.table(["severity", "file", "byte", "what"], rows)
    if v.recovery is not None:
        rec = v.recovery
        out += "<h3>What the broker's recovery (and rmqstore recover) would do</h3>" + _dl(sorted(rec.items()))
    return out


def _disk(r: StoreReport) -> str:
    kinds = [(k.kind, k.bytes) for k in r.disk]
    out = "<h3>Disk</h3>" + ch.figure(
        "disk-kinds",
        f"Bytes on disk by kind of file: {ch.size(r.total_bytes)} in all.",
        ch.bars("bytes per kind of file", kinds, ch.size),
        ch.table(["kind", "files", "bytes"], [(k.kind, k.files, k.bytes) for k in r.disk]),
    )
    top = r.topics[:20]
    if top:
        out += ch.figure(
            "disk-topics",
            "Bytes per topic: its records in the commit log plus its consume queue files (largest first).",
            ch.bars("bytes per topic", [(t.topic, t.commit_log_bytes + t.consume_queue_bytes) for t in top], ch.size),
            ch.table(
                ["topic", "messages", "commit log bytes", "consume queue bytes", "queues"],
                [
                    (t.topic, t.messages, t.commit_log_bytes, t.consume_queue_bytes, t.queues)
                    for t in r.topics[:MAX_ROWS]
                ],
            ),
        )
    files = r.files
    if files:
        items = [
            (
                f["name"],
                f["firstStoreTimestamp"],
                f["lastStoreTimestamp"],
                f"{f['records']} records, {ch.size(f['size'])}",
            )
            for f in files[-MAX_ROWS:]
        ]
        out += ch.figure(
            "commitlog-files",
            "Commit log files on a timeline: each spans the store times of its first and last record.",
            ch.timeline("commit log files", items, _t),
            ch.table(
                [
                    "file",
                    "base offset",
                    "size",
                    "mtime",
                    "records",
                    "first store time",
                    "last store time",
                    "damaged bytes",
                ],
                [
                    (
                        f["name"],
                        f["baseOffset"],
                        f["size"],
                        _t(f["mtimeMs"]),
                        f["records"],
                        _t(f["firstStoreTimestamp"]),
                        _t(f["lastStoreTimestamp"]),
                        f["damagedBytes"],
                    )
                    for f in files[-MAX_ROWS:]
                ],
            ),  # fmt: skip
        )
    return out


def _traffic(r: StoreReport) -> str:
    t = r.traffic
    if not t.buckets:
        return "<h3>Traffic</h3>" + ch.empty("traffic", "the commit log holds no records")
    width = ch.size(t.bucket_ms / 1000).replace(" B", " s") if t.bucket_ms >= 1000 else f"{t.bucket_ms} ms"
    out = "<h3>Traffic</h3>"
    for what, fmt, pick in (("messages", ch.count, "messages"), ("bytes", ch.size, "bytes")):
        series = [(s.topic, getattr(s, pick)) for s in t.series]
        out += ch.figure(
            f"traffic-{what}",
            f"{what.capitalize()} stored per {width} bucket, stacked by topic (the top topics by bytes, the rest together).",
            ch.stacked_area(f"{what} over time", t.buckets, series, fmt, _t, t.bucket_ms),
            ch.table(["bucket start", *(s.topic for s in t.series)],
                     [(_t(b), *(v[i] for _, v in series)) for i, b in enumerate(t.buckets[:MAX_ROWS * 4])]),
        )  # fmt: skip
    q = r.top_queues
    out += ch.figure(
        "top-queues",
        "The queues with the most messages in the commit log.",
        ch.bars("messages per queue", [(f"{x.topic} / {x.queue_id}", x.messages) for x in q], ch.count, color=ch.PALETTE[4]),
        ch.table(["topic", "queue", "messages", "bytes"], [(x.topic, x.queue_id, x.messages, x.bytes) for x in q]),
    )  # fmt: skip
    return out


def _consumers(r: StoreReport) -> str:
    out = "<h3>Consumers</h3>"
    if not r.consumers:
        return out + ch.empty("consumers", "no committed consumer offsets (config/consumerOffset.json holds no group)")
    out += ch.figure(
        "group-lag",
        "Consumer groups by lag (messages not consumed yet, over all their queues), most behind first.",
        ch.bars("lag per group", [(g.group, g.lag) for g in r.consumers[:30]], ch.count, color=ch.PALETTE[2]),
        ch.table(["group", "lag", "queues", "last consumed message stored at"],
                 [(g.group, g.lag, len(g.queues), _t(g.last_consumed_ms)) for g in r.consumers]),
    )  # fmt: skip
    for g in r.consumers[:MAX_ROWS]:
        rows = [(q.topic, q.queue_id, q.consumer_offset, q.min_offset, q.max_offset, q.lag, _t(q.last_consumed_ms))
                for q in g.queues[:MAX_ROWS]]  # fmt: skip
        out += f"<h4>{escape(g.group)}</h4>" + ch.table(
            ["topic", "queue", "committed", "min", "max", "lag", "last consumed message stored at"], rows
        )
    return out


def _expiry(r: StoreReport) -> str:
    e = r.expiry
    out = "<h3>Expiry</h3>"
    if e.plan is None:
        return out + ch.empty("expiry", f"expiry not planned: {e.error}")
    s = e.plan["settings"]
    out += (
        f"<p>At the next clean-up hour, {escape(_t(e.next_run_ms))} (deleteWhen {escape(str(s['deleteWhen']))}, "
        f"fileReservedTime {escape(str(s['fileReservedTime']))} h), the broker would delete "
        f'{len(e.plan["actions"])} file(s) and free <b data-freed="{e.freed_bytes}">{escape(ch.size(e.freed_bytes))}</b>. '
        f"Commit log: {escape(e.plan['commitLogStop'])}.</p>"
    )
    if e.plan["actions"]:
        out += ch.table(["kind", "file", "bytes", "mtime", "why"],
                        [(a["kind"], a["path"], a["size"], a["mtime"], a["reason"]) for a in e.plan["actions"][:MAX_ROWS]])  # fmt: skip
    if e.forecast:
        points = [(d.at_ms, d.bytes) for d in e.forecast]
        out += ch.figure(
            "forecast",
            f"The commit log's size at each day's clean-up hour, at {ch.size(e.rate_bytes_per_day)} a day ({e.rate_note}).",
            ch.line("commit log bytes by day", points, ch.size, _t),
            ch.table(["at", "bytes", "expired bytes"], [(_t(d.at_ms), d.bytes, d.expired_bytes) for d in e.forecast]),
        )
    return out


def _summary(reports: Sequence[StoreReport]) -> str:
    rows = summary_rows(reports)
    head = list(rows[0]) if rows else []
    out = "<h2>Summary</h2>" + ch.table(head, [[r[k] for k in head] for r in rows], cls="summary")
    if len(reports) > 1:
        out += ch.figure(
            "stores-bytes",
            "Bytes on disk per store.",
            ch.bars("bytes per store", [(r.store, r.total_bytes) for r in reports], ch.size),
            ch.table(["store", "bytes"], [(r.store, r.total_bytes) for r in reports]),
        )
    return out


def render_page(
    reports: Sequence[StoreReport], *, title: str, generated_ms: int, errors: Sequence[dict[str, Any]] = ()
) -> str:
    """The whole page: a summary across stores first, then a section per store."""
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{_STYLE}</style></head><body>',
        f"<h1>{escape(title)}</h1><p>Generated {escape(_t(generated_ms))} by rmqstore report; times are UTC.</p>",
        _summary(reports),
    ]
    for e in errors:
        parts.append(f'<p class="bad">{escape(e["store"])}: {escape(e["error"])}</p>')
    for i, r in enumerate(reports):
        parts.append(f'<section class="store" id="store-{i}"><h2>{escape(r.store)}</h2>')
        parts += [_state(r), _disk(r), _traffic(r), _consumers(r), _expiry(r), "</section>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)
