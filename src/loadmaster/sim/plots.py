"""PNG rendering of a run's figures (sim/figures.py) through matplotlib: `--plots png`.

matplotlib costs about a second to import and render three figures on 2 cores, so it is imported only
here, and only when PNGs are asked for; the default renderer is sim/svg.py.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from loadmaster.sim.figures import Figure

# PNGs carry no timestamp, so the same run gives the same bytes.
_PNG_META = {"Software": None}


def render_png(fig: Figure, out: Path) -> Path:
    path = out / f"{fig.name}.png"
    figure, ax = plt.subplots(figsize=fig.size)
    for s in fig.series:
        ax.step(s.x, s.y, where="post", label=s.label, linewidth=0.8 if fig.ylim else None)
    ax.set(xlabel=fig.xlabel, ylabel=fig.ylabel, title=fig.title)
    if fig.xlog:
        ax.set_xscale("log")
    if fig.ylim:
        ax.set_ylim(*fig.ylim)
    ax.grid(alpha=0.3)
    if fig.series:
        ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100, metadata=_PNG_META)
    plt.close(figure)
    return path
