"""Small inline-SVG charts (line, bar, scatter) for self-contained HTML reports: no scripts, no fonts,
no network, and nothing to import at start-up (matplotlib costs ~0.3 s and writes PNGs)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999", "#000000")
WIDTH, HEIGHT = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 44, 44


@dataclass(frozen=True)
class Axis:
    """A value range mapped onto pixels. log: decades (values at or below lo are drawn at lo)."""

    lo: float
    hi: float
    label: str = ""
    log: bool = False
    percent: bool = False  # tick labels as percentages of 1

    def __post_init__(self) -> None:
        if self.log and self.lo <= 0:
            raise ValueError("a log axis needs lo > 0")

    def _decades(self) -> tuple[int, int]:
        """A log axis runs from the decade at or below lo to the decade at or above hi."""
        first = math.floor(math.log10(self.lo))
        return first, max(first + 1, math.ceil(math.log10(max(self.hi, self.lo))))

    def frac(self, v: float) -> float:
        if self.log:
            a, b = self._decades()
            return (math.log10(max(v, self.lo)) - a) / (b - a)
        span = self.hi - self.lo
        return (v - self.lo) / span if span > 0 else 0.0

    def ticks(self) -> list[tuple[float, str]]:
        if self.log:
            first, last = self._decades()
            return [(10.0**e, _short(10.0**e)) for e in range(first, last + 1)]
        step = _nice_step((self.hi - self.lo) / 5)
        start = math.ceil(self.lo / step) * step
        out = []
        v = start
        while v <= self.hi + step * 1e-9:
            out.append((v, f"{v:.0%}" if self.percent else _short(v)))
            v += step
        return out


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(raw))
    return next(m * base for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * base >= raw)


def _short(v: float) -> str:
    if v == 0:
        return "0"
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}" if abs(v) >= 0.01 else f"{v:.0e}"


class _Canvas:
    """The frame every chart shares: title, legend, grid, ticks and axis labels."""

    def __init__(self, title: str, x: Axis, y: Axis) -> None:
        self.x, self.y = x, y
        self.parts: list[str] = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
            f'<text x="{LEFT}" y="14" font-size="13" font-weight="bold">{escape(title)}</text>',
        ]

    def px(self, vx: float, vy: float) -> tuple[float, float]:
        w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
        return LEFT + self.x.frac(vx) * w, HEIGHT - BOTTOM - self.y.frac(vy) * h

    def axes(self, x_ticks: Sequence[tuple[float, str]] | None = None) -> None:
        x0, y0, x1, y1 = LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, TOP  # the plot area (a log axis ends on a decade)
        for v, text in self.y.ticks():
            _, py = self.px(self.x.lo, v)
            self.parts.append(f'<line x1="{x0:.1f}" y1="{py:.1f}" x2="{x1:.1f}" y2="{py:.1f}" stroke="#ddd"/>')
            self.parts.append(f'<text x="{x0 - 4:.1f}" y="{py + 4:.1f}" text-anchor="end">{escape(text)}</text>')
        for v, text in (self.x.ticks() if x_ticks is None else x_ticks):
            px, _ = self.px(v, self.y.lo)
            self.parts.append(f'<line x1="{px:.1f}" y1="{y0:.1f}" x2="{px:.1f}" y2="{y1:.1f}" stroke="#eee"/>')
            self.parts.append(f'<text x="{px:.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{escape(text)}</text>')
        self.parts.append(f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}" '
                          'fill="none" stroke="#444"/>')
        self.parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                          f'{escape(self.x.label)}</text>')
        self.parts.append(f'<text transform="translate(14,{(y0 + y1) / 2:.1f}) rotate(-90)" '
                          f'text-anchor="middle">{escape(self.y.label)}</text>')

    def legend(self, labels: Sequence[str], colours: Sequence[str]) -> None:
        x = float(LEFT)
        for label, colour in zip(labels, colours, strict=True):
            self.parts.append(f'<rect x="{x:.1f}" y="24" width="10" height="10" fill="{colour}"/>')
            self.parts.append(f'<text x="{x + 14:.1f}" y="33">{escape(label)}</text>')
            x += 24 + 6.5 * len(label)

    def svg(self) -> str:
        return "\n".join([*self.parts, "</svg>"])


def _colours(series: Mapping[str, object], colours: Sequence[str] | None) -> list[str]:
    """The colour of each series: as given (so one size bucket keeps its colour across charts), or the
    palette in order."""
    return list(colours) if colours is not None else [PALETTE[i % len(PALETTE)] for i in range(len(series))]


def line_chart(title: str, series: Mapping[str, Sequence[Sequence[float]]], x: Axis, y: Axis,
               step: bool = False, colours: Sequence[str] | None = None) -> str:
    """One polyline per series of (x, y) points; step draws a staircase (for CDFs and time series)."""
    canvas = _Canvas(title, x, y)
    canvas.axes()
    palette = _colours(series, colours)
    canvas.legend(list(series), palette)
    for colour, points in zip(palette, series.values(), strict=True):
        coords: list[tuple[float, float]] = []
        for vx, vy in points:
            if step and coords:
                coords.append((canvas.px(vx, 0)[0], coords[-1][1]))
            coords.append(canvas.px(vx, vy))
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in coords)
        canvas.parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
    return canvas.svg()


def bar_chart(title: str, categories: Sequence[str], series: Mapping[str, Sequence[float]], y: Axis,
              stacked: bool = False, x_label: str = "", colours: Sequence[str] | None = None) -> str:
    """Grouped (or stacked) bars: one group per category, one bar (or segment) per series."""
    n = max(len(categories), 1)
    canvas = _Canvas(title, Axis(0, n, x_label), y)
    canvas.axes([(i + 0.5, c) for i, c in enumerate(categories)])
    palette = _colours(series, colours)
    canvas.legend(list(series), palette)
    k = max(len(series), 1)
    for g in range(len(categories)):
        base = 0.0
        for i, values in enumerate(series.values()):
            v = values[g]
            lo_x = g + 0.15 if stacked else g + 0.1 + 0.8 * i / k
            width = 0.7 if stacked else 0.8 / k
            (x0, y0), (x1, y1) = canvas.px(lo_x, base), canvas.px(lo_x + width, base + v)
            canvas.parts.append(f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{max(y0 - y1, 0):.1f}" '
                                f'fill="{palette[i]}"><title>{escape(_fmt(v, y))}</title></rect>')
            base = base + v if stacked else base
    return canvas.svg()


def scatter_chart(title: str, series: Mapping[str, Sequence[Sequence[float]]], x: Axis, y: Axis,
                  colours: Sequence[str] | None = None) -> str:
    canvas = _Canvas(title, x, y)
    canvas.axes()
    palette = _colours(series, colours)
    canvas.legend(list(series), palette)
    for colour, points in zip(palette, series.values(), strict=True):
        for vx, vy in points:
            px, py = canvas.px(vx, vy)
            canvas.parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.2" fill="none" stroke="{colour}"/>')
    return canvas.svg()


def _fmt(v: float, axis: Axis) -> str:
    return f"{v:.1%}" if axis.percent else f"{v:,.4g}"

