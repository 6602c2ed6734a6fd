"""Render a :class:`Timeline` as Mermaid (a ``gantt`` chart) or as one self-contained
HTML page with an inline SVG (no network, no external script or font; APP-INS-2).

The HTML page carries a few lines of inline script that, once the browser laid the SVG
out, count the spans and marks that have a non-empty bounding box and write the count
to ``<body data-drawn="N">`` — so a headless browser's DOM dump shows what was drawn.
"""

from __future__ import annotations

import html

from ._model import Mark, Span, Timeline

__all__ = ["to_mermaid", "to_html", "SPAN_CLASS", "MARK_CLASS"]

#: CSS class of a span: ``span <kind> <outcome>``; of a mark: ``mark <kind>``.
SPAN_CLASS = "span"
MARK_CLASS = "mark"

_COLOURS = {
    "completed": "#4c9f70", "approved": "#8fbf9f", "answered": "#8fbf9f",
    "failed": "#d1495b", "rejected": "#d1495b", "unknown": "#edae49",
    "recovered": "#edae49", "withdrawn": "#a0a0a0", "open": "#66a3d2",
}
_MARK_COLOURS = {
    "created": "#333", "input": "#3d5a80", "approval": "#2a9d8f", "answer": "#2a9d8f",
    "rejection": "#d1495b", "recovery": "#edae49", "takeover": "#9b5de5",
    "cancel": "#d1495b", "end": "#333",
}


def _mermaid_text(text: str) -> str:
    return "".join(c if c.isalnum() or c in " ._-#()→" else " " for c in text).strip() or "-"


def to_mermaid(tl: Timeline) -> str:
    """A Mermaid ``gantt`` chart: one section per lane, spans as tasks, marks as
    milestones; the axis is the log position (``dateFormat X``)."""
    lines = ["gantt", f"    title Run {_mermaid_text(tl.run_id)} (axis: log position)",
             "    dateFormat X", "    axisFormat %s"]
    for band in tl.epochs:
        lines.append(f"    %% epoch {band.epoch}: positions {band.start}..{band.end}")
    n = 0
    for lane in tl.lanes:
        spans = [s for s in tl.spans if s.lane == lane]
        marks = [m for m in tl.marks if m.lane == lane]
        if not spans and not marks:
            continue
        lines.append(f"    section {_mermaid_text(lane)}")
        for s in spans:
            n += 1
            tag = {"completed": "done, ", "open": "active, ", "failed": "crit, ",
                   "unknown": "crit, ", "rejected": "crit, "}.get(s.outcome, "")
            lines.append(f"    {_mermaid_text(s.label)} {s.outcome} :{tag}s{n}, "
                         f"{s.start}, {s.end + 1}")
        for m in marks:
            n += 1
            lines.append(f"    {_mermaid_text(m.label)} :milestone, m{n}, {m.position}, "
                         f"{m.position}")
    return "\n".join(lines) + "\n"


_STEP = 34  # px per log position
_LANE_H = 34
_LEFT = 120
_TOP = 46


def _x(position: int) -> int:
    return _LEFT + position * _STEP


def _y(tl: Timeline, lane: str) -> int:
    return _TOP + tl.lanes.index(lane) * _LANE_H


def _span_svg(tl: Timeline, s: Span) -> str:
    x, y = _x(s.start), _y(tl, s.lane) + 7
    w = max(_x(s.end + 1) - x - 4, 6)
    fill = _COLOURS.get(s.outcome, "#888")
    dash = ' stroke-dasharray="4 3"' if s.kind == "wait" else ""
    title = html.escape(f"{s.kind} {s.label}: {s.outcome} (positions {s.start}..{s.end})")
    return (f'<g><title>{title}</title><rect class="{SPAN_CLASS} {s.kind} {s.outcome}" '
            f'data-lane="{html.escape(s.lane)}" x="{x}" y="{y}" width="{w}" height="20" '
            f'rx="4" fill="{fill}" fill-opacity="{0.45 if s.kind == "wait" else 0.9}" '
            f'stroke="#222"{dash}/><text x="{x + 4}" y="{y + 14}" font-size="11" '
            f'fill="#111">{html.escape(s.label[:max(1, w // 7)])}</text></g>')


def _mark_svg(tl: Timeline, m: Mark) -> str:
    cx, cy = _x(m.position) + _STEP // 2 - 2, _y(tl, m.lane) + 17
    fill = _MARK_COLOURS.get(m.kind, "#333")
    title = html.escape(f"{m.kind}: {m.label} (position {m.position})")
    return (f'<g><title>{title}</title><path class="{MARK_CLASS} {m.kind}" '
            f'data-lane="{html.escape(m.lane)}" d="M {cx} {cy - 8} L {cx + 8} {cy} '
            f'L {cx} {cy + 8} L {cx - 8} {cy} Z" fill="{fill}" stroke="#fff"/></g>')


_SCRIPT = """
(function () {
  var drawn = 0;
  document.querySelectorAll('svg .span, svg .mark').forEach(function (el) {
    var box = el.getBBox();
    if (box.width > 0 && box.height > 0) { drawn += 1; }
  });
  document.body.setAttribute('data-drawn', String(drawn));
})();
"""


def to_html(tl: Timeline) -> str:
    """One HTML page: header, legend and the SVG (lanes, epoch bands, position axis,
    spans and marks, each with a ``<title>`` tooltip). Self-contained."""
    width = _x(max(tl.length, 1)) + 40
    height = _TOP + len(tl.lanes) * _LANE_H + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">']
    palette = ("#f4f1fb", "#eef6f0")
    for i, band in enumerate(tl.epochs):
        x = _x(band.start)
        w = _x(band.end + 1) - x
        parts.append(f'<rect class="epoch" data-epoch="{band.epoch}" x="{x}" y="{_TOP - 26}" '
                     f'width="{w}" height="{height - _TOP}" fill="{palette[i % 2]}"/>'
                     f'<text x="{x + 3}" y="{_TOP - 12}" font-size="11" fill="#555">'
                     f'epoch {band.epoch}</text>')
    for lane in tl.lanes:
        y = _y(tl, lane)
        parts.append(f'<text class="lane" x="8" y="{y + 21}" font-size="12">'
                     f'{html.escape(lane)}</text><line x1="{_LEFT}" y1="{y + _LANE_H}" '
                     f'x2="{width - 20}" y2="{y + _LANE_H}" stroke="#ddd"/>')
    axis_y = _TOP + len(tl.lanes) * _LANE_H + 16
    for pos in range(tl.length):
        parts.append(f'<text class="tick" x="{_x(pos) + 10}" y="{axis_y}" font-size="10" '
                     f'fill="#777">{pos}</text>')
    parts.extend(_span_svg(tl, s) for s in tl.spans)
    parts.extend(_mark_svg(tl, m) for m in tl.marks)
    parts.append("</svg>")
    legend = " · ".join(
        f'<span style="color:{c}">■</span> {html.escape(k)}' for k, c in _COLOURS.items())
    marks = " · ".join(
        f'<span style="color:{c}">◆</span> {html.escape(k)}' for k, c in _MARK_COLOURS.items())
    title = html.escape(f"Run {tl.run_id} — scope {tl.scope}")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title><style>body{{font-family:sans-serif;margin:16px}}"
        "p{font-size:12px;color:#444}</style></head><body>"
        f"<h1 style=\"font-size:16px\">{title}</h1>"
        f"<p>{tl.length} facts; the axis is the log position (commit order). Bars: "
        f"{legend}; dashed: waiting for an approval or a response.</p><p>Marks: {marks}</p>"
        + "".join(parts)
        + f"<script>{_SCRIPT}</script></body></html>\n")
