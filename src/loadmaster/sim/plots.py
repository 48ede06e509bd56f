"""PNG plots of one run or several overlaid: JCT CDF, queueing-delay CDF, GPU utilisation over time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadmaster.sim.simulator import SimResult

# PNGs carry no timestamp, so the same run gives the same bytes.
_PNG_META = {"Software": None}


def _cdf(ax: Axes, values: list[float], label: str, floor: float = 1.0) -> None:
    """floor: smaller values are drawn at it (a log axis cannot show 0; 1 s is "no wait" for delays)."""
    if not values:
        return
    x = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, x.size + 1) / x.size
    if x.size > 2000:
        # 2,000 evenly spaced ranks draw the same curve as 10^5 points, in a fraction of the time.
        pick = np.unique(np.linspace(0, x.size - 1, 2000).astype(np.int64))
        x, y = x[pick], y[pick]
    ax.step(np.maximum(x, floor), y, where="post", label=label)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=_PNG_META)
    plt.close(fig)


def _binned_utilization(res: SimResult, bins: int = 1000) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
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


def _finish(ax: Axes, fig: Figure, path: Path) -> Path:
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)
    return path


def _cdf_figure(results: Mapping[str, SimResult], values: Callable[[SimResult], list[float]], path: Path,
                xlabel: str, title: str, floor: float = 1.0) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, res in results.items():
        _cdf(ax, values(res), label, floor)
    ax.set(xscale="log", xlabel=xlabel, ylabel="fraction of jobs", title=title)
    return _finish(ax, fig, path)


def plot_runs(results: Mapping[str, SimResult], out: Path, prefix: str = "") -> list[Path]:
    """Write the three plots; with several runs their curves are overlaid, one label per run."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        _cdf_figure(results, lambda res: [r.jct_s for r in res.records
                                          if r.jct_s is not None and r.first_start_s is not None],
                    out / f"{prefix}jct_cdf.png", "job completion time (s)", "JCT CDF"),
        _cdf_figure(results, lambda res: [r.queue_delay_s for r in res.records if r.queue_delay_s is not None],
                    out / f"{prefix}queue_delay_cdf.png", "queueing delay (s, values < 1 s shown at 1 s)",
                    "Queueing delay CDF"),
    ]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for label, res in results.items():
        t, busy = _binned_utilization(res)
        ax.step(t / 3600, busy, where="post", label=label, linewidth=0.8)
    ax.set(xlabel="simulated time (h)", ylabel="GPUs busy (fraction)", ylim=(0, 1.05), title="GPU utilization")
    paths.append(_finish(ax, fig, out / f"{prefix}gpu_utilization.png"))
    return paths


def plot_rho_cdf(results: Mapping[str, SimResult], out: Path) -> Path:
    # rho below 1 (faster than on a private 1/N share) is common and must show: no floor at 1 here.
    return _cdf_figure(results, lambda res: [r.rho for r in res.records if r.rho is not None],
                       out / "rho_cdf.png", "finish-time fairness rho", "rho CDF", floor=1e-3)
