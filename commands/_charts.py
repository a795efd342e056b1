"""Charts as inline SVG, written by hand: no script, no font, no network, the same bytes every time.

Every chart is a ``<figure class="chart">``: a sentence saying what it shows, the SVG (each mark
carries a ``<title>``, which browsers show on hover) and a table of the numbers it draws. Every text
that comes from a store (topics, groups, file names) is escaped: it is data, never markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from rmqstore.codec.describe import human_size

WIDTH = 900
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
Fmt = Callable[[float], str]


def count(v: float) -> str:
    return f"{int(v):,}"


def size(v: float) -> str:
    return human_size(int(v))


def table(head: Sequence[str], rows: Sequence[Sequence[object]], *, cls: str = "numbers") -> str:
    """An HTML table; every cell escaped."""
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _cell(v: object) -> str:
    return "" if v is None else str(v)


def figure(name: str, sentence: str, svg: str, numbers: str) -> str:
    """A chart with its sentence and its numbers (open by default for short tables)."""
    return (
        f'<figure class="chart" data-chart="{escape(name)}"><figcaption>{escape(sentence)}</figcaption>{svg}'
        f"<details><summary>numbers</summary>{numbers}</details></figure>"
    )


def empty(name: str, sentence: str) -> str:
    """What stands where a chart has nothing to draw."""
    return f'<p class="empty" data-empty="{escape(name)}">{escape(sentence)}</p>'


def _svg(height: int, body: str, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(label)}" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}">{body}</svg>'
    )


def _text(x: float, y: float, s: str, *, anchor: str = "start", cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}>{escape(s)}</text>'


def bars(label: str, items: Sequence[tuple[str, float]], fmt: Fmt, *, color: str = PALETTE[0]) -> str:
    """Horizontal bars, one per item, longest first as given; the value written after each bar."""
    row, left, right = 22, 260, 110
    top = max((v for _, v in items), default=0) or 1
    marks = []
    for i, (name, v) in enumerate(items):
        y = 6 + i * row
        w = (WIDTH - left - right) * v / top
        shown = name if len(name) <= 38 else name[:37] + "\u2026"
        marks.append(
            f'<g class="mark"><title>{escape(name)}: {escape(fmt(v))}</title>'
            f'<rect x="{left}" y="{y}" width="{max(w, 1):.1f}" height="{row - 6}" fill="{color}"/>'
            + _text(left - 6, y + row - 10, shown, anchor="end")
            + _text(left + w + 6, y + row - 10, fmt(v))
            + "</g>"
        )
    return _svg(12 + len(items) * row, "".join(marks), label)


def _axis_times(x0: float, x1: float, t0: int, t1: int, y: float, fmt_time: Callable[[int], str]) -> str:
    """Three time labels under a time axis: start, middle, end."""
    mid = (t0 + t1) // 2
    return (
        _text(x0, y, fmt_time(t0), cls="axis")
        + _text((x0 + x1) / 2, y, fmt_time(mid), anchor="middle", cls="axis")
        + _text(x1, y, fmt_time(t1), anchor="end", cls="axis")
    )


def stacked_area(
    label: str,
    buckets: Sequence[int],
    series: Sequence[tuple[str, Sequence[float]]],
    fmt: Fmt,
    fmt_time: Callable[[int], str],
    width_ms: int,
) -> str:
    """Series stacked over time buckets: an area per series (columns when there is a single bucket)."""
    h, left, right, top, bottom = 260, 70, 170, 10, 40
    n = len(buckets)
    totals = [sum(s[i] for _, s in series) for i in range(n)]
    peak = max(totals, default=0) or 1
    pw, ph = WIDTH - left - right, h - top - bottom

    def xy(i: float, v: float) -> tuple[float, float]:
        return left + (pw * (i / (n - 1)) if n > 1 else pw * i), top + ph - ph * v / peak

    marks, base = [], [0.0] * n
    for k, (name, values) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        upper = [b + v for b, v in zip(base, values, strict=True)]
        title = f"<title>{escape(name)}: {escape(fmt(sum(values)))} in all</title>"
        if n == 1:
            x, y1 = left + pw * 0.3, top + ph - ph * upper[0] / peak
            y0 = top + ph - ph * base[0] / peak
            shape = (
                f'<rect x="{x:.1f}" y="{y1:.1f}" width="{pw * 0.4:.1f}" height="{max(y0 - y1, 1):.1f}" fill="{color}"/>'
            )
        else:
            pts = [xy(i, v) for i, v in enumerate(upper)] + [xy(i, v) for i, v in reversed(list(enumerate(base)))]
            shape = f'<polygon points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="{color}" opacity="0.85"/>'
        marks.append(f'<g class="mark">{title}{shape}</g>')
        marks.append(f'<rect x="{WIDTH - right + 12}" y="{top + k * 18}" width="12" height="12" fill="{color}"/>')
        shown = name if len(name) <= 20 else name[:19] + "\u2026"
        marks.append(_text(WIDTH - right + 30, top + k * 18 + 11, shown))
        base = upper
    axis = _text(left - 6, top + 10, fmt(peak), anchor="end", cls="axis") + _text(
        left - 6, top + ph, "0", anchor="end", cls="axis"
    )
    axis += f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" class="axis"/>'
    if n:
        axis += _axis_times(left, left + pw, buckets[0], buckets[-1] + width_ms, h - 14, fmt_time)
    return _svg(h, "".join(marks) + axis, label)


def timeline(
    label: str, items: Sequence[tuple[str, int | None, int | None, str]], fmt_time: Callable[[int], str]
) -> str:
    """One horizontal span per item from its first to its last time (a dot when they are equal)."""
    row, left, right = 20, 200, 20
    times = [t for _, a, b, _ in items for t in (a, b) if t is not None]
    t0, t1 = (min(times), max(times)) if times else (0, 1)
    span = (t1 - t0) or 1
    pw = WIDTH - left - right
    marks = []
    for i, (name, a, b, note) in enumerate(items):
        y = 6 + i * row
        marks.append(_text(left - 6, y + row - 8, name, anchor="end"))
        if a is None or b is None:
            marks.append(_text(left + 4, y + row - 8, "no records", cls="axis"))
            continue
        x = left + pw * (a - t0) / span
        w = max(pw * (b - a) / span, 3)
        marks.append(
            f'<g class="mark"><title>{escape(name)}: {escape(fmt_time(a))} to {escape(fmt_time(b))}, {escape(note)}'
            f'</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 6}" fill="{PALETTE[i % 2]}"/></g>'
        )
    h = 12 + len(items) * row + 24
    axis = _axis_times(left, left + pw, t0, t1, h - 8, fmt_time)
    return _svg(h, "".join(marks) + axis, label)


def line(label: str, points: Sequence[tuple[int, float]], fmt: Fmt, fmt_time: Callable[[int], str]) -> str:
    """A line over time with a dot per point (each with its value on hover)."""
    h, left, right, top, bottom = 220, 80, 20, 10, 40
    pw, ph = WIDTH - left - right, h - top - bottom
    t0, t1 = points[0][0], points[-1][0]
    peak = max(v for _, v in points) or 1
    span = (t1 - t0) or 1

    def xy(t: int, v: float) -> tuple[float, float]:
        return left + pw * (t - t0) / span, top + ph - ph * v / peak

    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(t, v) for t, v in points))
    dots = "".join(
        f'<g class="mark"><title>{escape(fmt_time(t))}: {escape(fmt(v))}</title>'
        f'<circle cx="{xy(t, v)[0]:.1f}" cy="{xy(t, v)[1]:.1f}" r="4" fill="{PALETTE[0]}"/></g>'
        for t, v in points
    )
    axis = _text(left - 6, top + 10, fmt(peak), anchor="end", cls="axis") + _text(
        left - 6, top + ph, "0", anchor="end", cls="axis"
    )
    axis += f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" class="axis"/>'
    axis += _axis_times(left, left + pw, t0, t1, h - 14, fmt_time)
    body = f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-width="2"/>{dots}{axis}'
    return _svg(h, body, label)
