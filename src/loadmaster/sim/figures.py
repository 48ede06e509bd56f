"""What the plots of a run show, apart from how they are drawn: the series of each figure.

Two renderers draw these: sim/svg.py (the default: plain SVG text, a few milliseconds, nothing to import)
and sim/plots.py (PNG through matplotlib, about a second with its import). Both get the same Figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.sim.simulator import SimResult

Array = npt.NDArray[np.float64]
# 2,000 evenly spaced ranks draw the same curve as 10^5 points, in a fraction of the time and bytes.
CDF_POINTS = 2000


@dataclass(frozen=True)
class Series:
    """One curve: a step function that holds y[i] from x[i] to x[i + 1] (matplotlib's where="post")."""

    label: str
    x: Array
    y: Array


@dataclass(frozen=True)
class Figure:
    name: str  # file name without its extension
    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...]
    xlog: bool = False
    ylim: tuple[float, float] | None = None
    size: tuple[float, float] = (6.0, 4.0)  # inches at 100 dpi


def cdf(values: list[float], label: str, floor: float = 1.0) -> Series | None:
    """The empirical CDF of `values`; values below `floor` are drawn at it (a log axis cannot show 0)."""
    if not values:
        return None
    x = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, x.size + 1) / x.size
    if x.size > CDF_POINTS:
        # Evenly spaced positions, truncated: non-decreasing, so np.unique() is dropping repeats (without its
        # import of numpy.ma, ~10 ms of a short run's process).
        picks = np.linspace(0, x.size - 1, CDF_POINTS).astype(np.int64)
        pick = picks[np.concatenate(([True], picks[1:] != picks[:-1]))]
        x, y = x[pick], y[pick]
    return Series(label, np.maximum(x, floor), y)


def binned_utilization(res: SimResult, bins: int = 1000) -> tuple[Array, Array]:
    """Time-weighted busy fraction in at most `bins` equal intervals (a long run has 10^5+ changes)."""
    times = np.asarray(res.timeline.times, dtype=float)
    busy = np.asarray(res.timeline.busy_gpus, dtype=float) / max(res.cluster.total_gpus, 1)
    if times.size <= bins:
        return times, busy
    # Integral of the step function busy(t), evaluated at the bin edges, differenced per bin.
    area = np.concatenate(([0.0], np.cumsum(busy[:-1] * np.diff(times))))
    edges = np.linspace(times[0], times[-1], bins + 1)
    at_edges = np.interp(edges, times, area)
    return edges[:-1], np.diff(at_edges) / np.diff(edges)


def _cdf_figure(results: Mapping[str, SimResult], values: Callable[[SimResult], list[float]], name: str,
                xlabel: str, title: str, floor: float = 1.0) -> Figure:
    series = tuple(s for label, res in results.items() if (s := cdf(values(res), label, floor)) is not None)
    return Figure(name, title, xlabel, "fraction of jobs", series, xlog=True)


def run_figures(results: Mapping[str, SimResult], prefix: str = "") -> list[Figure]:
    """JCT CDF, queueing-delay CDF and GPU utilisation; with several runs their curves are overlaid."""
    utilization = []
    for label, res in results.items():
        t, busy = binned_utilization(res)
        utilization.append(Series(label, t / 3600, busy))
    return [
        _cdf_figure(results, lambda res: [r.jct_s for r in res.records
                                          if r.jct_s is not None and r.first_start_s is not None],
                    f"{prefix}jct_cdf", "job completion time (s)", "JCT CDF"),
        _cdf_figure(results, lambda res: [r.queue_delay_s for r in res.records if r.queue_delay_s is not None],
                    f"{prefix}queue_delay_cdf", "queueing delay (s, values < 1 s shown at 1 s)", "Queueing delay CDF"),
        Figure(f"{prefix}gpu_utilization", "GPU utilization", "simulated time (h)", "GPUs busy (fraction)",
               tuple(utilization), ylim=(0.0, 1.05), size=(8.0, 3.5)),
    ]


def rho_figure(results: Mapping[str, SimResult]) -> Figure:
    # rho below 1 (faster than on a private 1/N share) is common and must show: no floor at 1 here.
    return _cdf_figure(results, lambda res: [r.rho for r in res.records if r.rho is not None], "rho_cdf",
                       "finish-time fairness rho", "rho CDF", floor=1e-3)
