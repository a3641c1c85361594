"""Run reports: plain text, and one self-contained HTML page (inline SVG, no assets)."""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass

from ._run import Result

__all__ = ["html_report", "repro_command", "text_report"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


def repro_command(res: Result, scenario_path: str | None) -> str:
    o = res.options
    if scenario_path:
        return f"python -m sim run {scenario_path} --seed {o.seed}"
    return f"python -m sim explore --seeds {o.seed}..{o.seed}"


def text_report(res: Result, scenario_path: str | None = None) -> str:
    o = res.options
    lines = [
        f"seed {o.seed}  scenario {o.scenario}  verdict {'PASS' if res.ok else 'FAIL'}",
        f"options: {o.describe()}",
        f"trace {res.trace_hash}",
        f"virtual time {res.end_t:.1f}s (healed at {res.heal_t:.1f}s); "
        + (
            f"converged {res.converged_after_s:.1f}s after healing"
            if res.converged_after_s is not None
            else "NOT converged"
        ),
        f"cost {res.wall_s:.2f}s wall, {res.loop_iterations} loop iterations",
        f"operations {res.ops}; receiver requests {res.deliveries}",
        f"network {res.net}",
        "nemesis:",
        *(f"  t={t:9.3f}s  {e}" for t, e in res.events),
    ]
    if res.violations:
        kinds = Counter(v.kind for v in res.violations)
        lines.append(f"violations ({dict(sorted(kinds.items()))}):")
        lines += [f"  {v}" for v in res.violations[:50]]
        lines.append(f"reproduce: {repro_command(res, scenario_path)}")
    return "\n".join(lines) + "\n"


def html_report(res: Result, scenario_path: str | None = None) -> str:
    o = res.options
    svg = _timeline_svg(res)
    verdict = "PASS" if res.ok else "FAIL"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>regionsync sim seed {o.seed} {verdict}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}pre{{background:#f6f6f6;padding:1em;
white-space:pre-wrap}}.FAIL{{color:#c00}}.PASS{{color:#080}}</style></head><body>
<h1>regionsync simulation: {html.escape(o.scenario)}, seed {o.seed}:
<span class="{verdict}">{verdict}</span></h1>
<p>Convergence timeline over virtual time. Bands: registry hash per region (dark green:
all regions agree; light green: with the majority; red: differs; grey: down). Shaded:
chaos phase (faults and workload); dashed lines: nemesis events (hover for details).
Chart: records each region lacks compared with the union of all version vectors.</p>
{svg}
<pre>{html.escape(text_report(res, scenario_path))}</pre>
</body></html>
"""


@dataclass(frozen=True)
class _Frame:
    """The timeline's geometry: x of a virtual time, the hash bands, the chart below."""

    end: float  # virtual time at the right edge
    regions: list[str]
    width: int = 1000
    left: int = 90
    band: int = 16
    chart_h: int = 220

    def x(self, t: float) -> float:
        return self.left + (self.width - self.left - 10) * t / self.end

    @property
    def chart_y(self) -> int:
        top_h = self.band * len(self.regions) + 30
        return top_h + 20


def _timeline_svg(res: Result) -> str:
    """The convergence timeline as one inline SVG (see the page's text for the legend)."""
    regions = sorted(res.timeline[0][1]) if res.timeline else []
    f = _Frame(end=max(res.end_t, 1e-9), regions=regions)
    parts = [*_nemesis_marks(res, f), *_hash_bands(res, f), *_behind_chart(res, f)]
    svg_h = f.chart_y + f.chart_h + 40
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{f.width}" height="{svg_h}" '
        f'font-family="sans-serif">{"".join(parts)}</svg>'
    )


def _nemesis_marks(res: Result, f: _Frame) -> list[str]:
    """The heal marker (chaos phase shaded) and a dashed line per nemesis event."""
    x, bottom = f.x, f.chart_y + f.chart_h
    parts = [
        f'<rect x="{x(0):.1f}" y="0" width="{x(res.heal_t) - x(0):.1f}" '
        f'height="{bottom}" fill="#fff4e0"><title>chaos phase</title></rect>'
    ]
    for t, e in res.events:
        parts.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="0" y2="{bottom}" '
            f'stroke="#999" stroke-dasharray="3,3"><title>t={t:.1f}s {html.escape(e)}'
            f"</title></line>"
        )
    return parts


def _hash_bands(res: Result, f: _Frame) -> list[str]:
    """Per region, its registry hash over time against the others'."""
    x, band, end = f.x, f.band, f.end
    parts: list[str] = []
    for i, name in enumerate(f.regions):
        y = 20 + i * band
        parts.append(f'<text x="4" y="{y + 12}" font-size="11">{html.escape(name)}</text>')
        for k, (t, snap) in enumerate(res.timeline):
            t2 = res.timeline[k + 1][0] if k + 1 < len(res.timeline) else end
            hashes = Counter(h for h, _ in snap.values() if h is not None)
            major = hashes.most_common(1)[0][0] if hashes else None
            h, behind = snap[name]
            color = (
                "#bbb"
                if h is None
                else (
                    "#4caf50"
                    if h == major and len(hashes) == 1
                    else "#8bc34a"
                    if h == major
                    else "#f44336"
                )
            )
            tip = f"t={t:.1f}s {name} " + (
                "down" if h is None else f"hash {h[:10]} behind {behind}"
            )
            parts.append(
                f'<rect x="{x(t):.1f}" y="{y}" width="{max(x(t2) - x(t), 0.5):.1f}" '
                f'height="{band - 3}" fill="{color}"><title>{tip}</title></rect>'
            )
    return parts


def _behind_chart(res: Result, f: _Frame) -> list[str]:
    """Records behind per region over time, with its legend and time axis."""
    x, left, width, end = f.x, f.left, f.width, f.end
    chart_y, chart_h = f.chart_y, f.chart_h
    max_behind = max([b for _, snap in res.timeline for _, b in snap.values()] + [1])
    parts = [
        f'<text x="4" y="{chart_y - 4}" font-size="11">records behind (max {max_behind})</text>',
        f'<rect x="{left}" y="{chart_y}" width="{width - left - 10}" height="{chart_h}" '
        'fill="none" stroke="#ccc"/>',
    ]
    for i, name in enumerate(f.regions):
        pts = " ".join(
            f"{x(t):.1f},{chart_y + chart_h - chart_h * snap[name][1] / max_behind:.1f}"
            for t, snap in res.timeline
        )
        c = _COLORS[i % len(_COLORS)]
        parts.append(
            f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
        parts.append(
            f'<text x="{left + 10 + 110 * i}" y="{chart_y + chart_h + 16}" '
            f'font-size="11" fill="{c}">{html.escape(name)}</text>'
        )
    for frac in (0, 0.25, 0.5, 0.75, 1):
        t = end * frac
        parts.append(
            f'<text x="{x(t) - 10:.1f}" y="{chart_y + chart_h + 32}" font-size="10">{t:.0f}s</text>'
        )
    return parts
