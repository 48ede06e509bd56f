"""SVG rendering of a run's figures (sim/figures.py): the default `--plots svg`.

Plain text written straight from the arrays: no plotting library to import, a few milliseconds for the
three figures of a run, viewable in any browser. Axes with ticks (decades on a log axis, 1-2-5 steps on
a linear one), a light grid, step curves (a CDF holds its value until the next point), a legend, the same
palette as matplotlib's. Deterministic: the same run gives the same bytes.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

import numpy as np

from loadmaster.sim.figures import Array, Figure

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
DPI = 100
MARGIN = (62.0, 20.0, 34.0, 46.0)  # left, right, top, bottom (px)


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        t += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """The powers of ten in [lo, hi] (at least the two around the range)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0 ** k for k in range(a, b + 1)]


def _label(v: float, log: bool) -> str:
    if log:
        k = round(math.log10(v))
        return f"1e{k}" if abs(k) >= 3 else f"{10.0 ** k:g}"
    return f"{v:g}"


class _Axis:
    """Data to pixels along one axis."""

    def __init__(self, lo: float, hi: float, start: float, end: float, log: bool) -> None:
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        if self.hi <= self.lo:
            self.hi = self.lo + 1.0
        self.start, self.end = start, end

    def __call__(self, v: Array) -> Array:
        d = np.log10(v) if self.log else v
        out: Array = self.start + (d - self.lo) / (self.hi - self.lo) * (self.end - self.start)
        return out


def _range(fig: Figure) -> tuple[float, float, float, float]:
    xs = [s.x for s in fig.series if s.x.size]
    ys = [s.y for s in fig.series if s.y.size]
    if not xs:
        return (1.0, 10.0, 0.0, 1.0) if fig.xlog else (0.0, 1.0, 0.0, 1.0)
    x_lo = min(float(x.min()) for x in xs)
    x_hi = max(float(x.max()) for x in xs)
    if fig.xlog:
        x_lo, x_hi = 10.0 ** math.floor(math.log10(x_lo)), 10.0 ** math.ceil(math.log10(x_hi))
    y_lo, y_hi = fig.ylim if fig.ylim else (min(0.0, min(float(y.min()) for y in ys)),
                                             max(float(y.max()) for y in ys))
    return x_lo, x_hi, y_lo, y_hi


def _steps(x: Array, y: Array) -> Array:
    """The corners of a post-step curve through (x, y): (x0, y0), (x1, y0), (x1, y1), ..."""
    n = x.size
    pts = np.empty((2 * n - 1, 2)) if n else np.empty((0, 2))
    if n:
        pts[0::2, 0], pts[0::2, 1] = x, y
        pts[1::2, 0], pts[1::2, 1] = x[1:], y[:-1]
    return pts


def svg_text(fig: Figure) -> str:
    width, height = fig.size[0] * DPI, fig.size[1] * DPI
    left, right, top, bottom = MARGIN
    x_lo, x_hi, y_lo, y_hi = _range(fig)
    to_x = _Axis(x_lo, x_hi, left, width - right, fig.xlog)
    to_y = _Axis(y_lo, y_hi, height - bottom, top, False)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
           f'viewBox="0 0 {width:g} {height:g}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
           f'<rect width="{width:g}" height="{height:g}" fill="white"/>',
           f'<text x="{(left + width - right) / 2:.1f}" y="20" text-anchor="middle" font-size="13">'
           f'{escape(fig.title)}</text>']
    x_ticks = log_ticks(x_lo, x_hi) if fig.xlog else nice_ticks(x_lo, x_hi)
    for t in x_ticks:
        px = float(to_x(np.array([t]))[0])
        if left - 0.5 <= px <= width - right + 0.5:
            out.append(f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{height - bottom:.1f}" '
                       f'stroke="#000" stroke-opacity="0.15"/>')
            out.append(f'<text x="{px:.1f}" y="{height - bottom + 14:.1f}" text-anchor="middle">'
                       f'{_label(t, fig.xlog)}</text>')
    for t in nice_ticks(y_lo, y_hi):
        py = float(to_y(np.array([t]))[0])
        out.append(f'<line x1="{left:.1f}" y1="{py:.1f}" x2="{width - right:.1f}" y2="{py:.1f}" '
                   f'stroke="#000" stroke-opacity="0.15"/>')
        out.append(f'<text x="{left - 5:.1f}" y="{py + 4:.1f}" text-anchor="end">{_label(t, False)}</text>')
    out.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{width - left - right:.1f}" '
               f'height="{height - top - bottom:.1f}" fill="none" stroke="#000"/>')
    out.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 8:.1f}" text-anchor="middle">'
               f'{escape(fig.xlabel)}</text>')
    out.append(f'<text transform="translate(14 {(top + height - bottom) / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(fig.ylabel)}</text>')
    for i, s in enumerate(fig.series):
        pts = _steps(to_x(s.x), to_y(s.y))
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts.tolist())
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.4" points="{path}"/>')
        ly = top + 14 + 15 * i
        out.append(f'<line x1="{left + 10:.1f}" y1="{ly - 4:.1f}" x2="{left + 30:.1f}" y2="{ly - 4:.1f}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{left + 35:.1f}" y="{ly:.1f}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_svg(fig: Figure, out: Path) -> Path:
    path = out / f"{fig.name}.svg"
    path.write_text(svg_text(fig))
    return path
