"""One simulation run from named parts, and a comparison of several: what the CLI and bench/ call."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.snapshot import TenantQuota
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.metrics import summarize, write_jobs_csv
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.quotas import quotas_by_demand
from loadmaster.sim.simulator import ProgressFn, SimConfig, SimResult, Simulator

if TYPE_CHECKING:
    from loadmaster.sim.figures import Figure


@dataclass(frozen=True)
class RunOptions:
    policy: str = "fifo"
    placement: str = "pack"
    retry: RetryPolicy = RetryPolicy.TRACE
    max_attempts: int = 3
    seed: int = 0
    checkpoint_interval_s: float = 900.0
    restart_overhead_s: float = 30.0
    until_s: float | None = None
    quotas: Mapping[str, TenantQuota] | None = None  # None: sized by demand
    locality_model: bool = True
    cpu_model: bool = True
    gang: bool = True  # False: learner-at-a-time placement (sim/learner_at_a_time.py), the baseline
    partial_timeout_s: float | None = None  # learner-at-a-time only: a partial gang gives up after this (None: never)
    migrate: bool = False  # defragment by moving smaller running jobs (SimConfig.migrate)
    smoke_test_s: float = 0.0  # each attempt of a multi-GPU job first runs this long on one GPU (0: off)
    vc_queue: int | None = None  # closed-loop users: held back while their tenant has this many queued (None: off)


@dataclass
class RunOutcome:
    label: str
    result: SimResult
    summary: dict[str, Any] = field(default_factory=dict)


def simulate(workload: Workload, cluster: Cluster, opts: RunOptions, progress: ProgressFn | None = None,
             label: str | None = None) -> RunOutcome:
    started = time.perf_counter()
    if opts.vc_queue is not None and not opts.gang:
        raise ValueError("vc_queue: closed-loop users apply to gang scheduling only (drop --gang off)")
    quotas = dict(opts.quotas) if opts.quotas is not None else quotas_by_demand(workload, cluster.total_gpus)
    parts = (
        cluster,
        make_policy(opts.policy),
        make_placer(opts.placement),
        FailureModel(opts.retry, opts.max_attempts, opts.seed),
        PerformanceModel(cluster, locality=opts.locality_model, cpu=opts.cpu_model),
        SimConfig(opts.checkpoint_interval_s, opts.restart_overhead_s, opts.until_s, opts.seed, opts.migrate,
                  opts.smoke_test_s, opts.vc_queue),
        quotas,
    )
    if opts.gang:
        sim = Simulator(*parts)
    else:  # imported only for `--gang off`: a gang-scheduled run never needs it
        from loadmaster.sim.learner_at_a_time import LearnerAtATimeSimulator

        sim = LearnerAtATimeSimulator(*parts, opts.partial_timeout_s)
    result = sim.run(workload, progress)
    if opts.gang:  # true by construction: a gang holds all its GPUs or none
        result.mode_metrics = {"gang": True, "gpu_hours_held_by_partial_gangs": 0.0, "deadlocked_jobs": 0,
                               **result.mode_metrics}
    summary = summarize(result, time.perf_counter() - started)
    summary["policy"] = opts.policy
    summary["placement"] = opts.placement
    summary["retry"] = opts.retry.value
    summary["seed"] = opts.seed
    return RunOutcome(label or f"{opts.policy}/{opts.placement}", result, summary)


PLOT_FORMATS = ("svg", "png", "none")


def render(figures: list[Figure], out: Path, plots: str) -> list[Path]:
    """Draw `figures` into `out` as `plots` says: svg (default, written directly), png (matplotlib), none."""
    if plots not in PLOT_FORMATS:
        raise ValueError(f"--plots: {plots!r} is not one of {', '.join(PLOT_FORMATS)}")
    if plots == "none":
        return []
    if plots == "png":
        from loadmaster.sim.plots import render_png  # matplotlib costs ~0.5 s to import: only when asked for

        return [render_png(f, out) for f in figures]
    from loadmaster.sim.svg import render_svg

    return [render_svg(f, out) for f in figures]


def write_run(out: Path, run: RunOutcome, plots: str = "svg") -> list[Path]:
    """summary.json, jobs.csv and the plots of one run."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(run.summary, indent=2, sort_keys=True) + "\n")
    write_jobs_csv(run.result.records, out / "jobs.csv")
    written = [out / "summary.json", out / "jobs.csv"]
    if plots != "none":
        # The figures' modules (and numpy.typing, which they import) only when plots are drawn: a --plots none
        # run's process skips ~40 M instructions of imports (~60 M where no bytecode cache is written).
        from loadmaster.sim.figures import run_figures

        written += render(run_figures({run.label: run.result}), out, plots)
    return written


COMPARE_COLUMNS = (
    "jobs", "completed", "failed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_delay_s",
    "avg_total_wait_s", "fair_share_delay_s", "fragmentation_delay_s", "gpu_utilization", "max_rho", "median_rho",
    "jain_fairness", "preemptions", "gpu_hours_failed_attempts", "wall_time_s",
)
# Shown only when a compared run migrates.
MIGRATION_COLUMNS = ("migrations", "gpu_hours_lost_to_migration")
# Shown only when a compared run smoke-tests.
SMOKE_COLUMNS = ("smoke_tests", "failures_caught_by_smoke_test", "gpu_hours_smoke_tests",
                 "gpu_hours_failures_caught_would_have_held")
# Shown only when a compared run places learner at a time.
LEARNER_COLUMNS = ("unfinished", "deadlocked_jobs", "gpu_hours_held_by_partial_gangs", "partial_gang_timeouts")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
    return str(v)


def write_comparison(out: Path, runs: list[RunOutcome], plots: str = "svg") -> list[Path]:
    """One table (markdown + CSV + JSON) and overlaid plots; each run also gets its own folder."""
    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        write_run(out / run.label.replace("/", "_"), run, plots)
    columns = COMPARE_COLUMNS + (LEARNER_COLUMNS if any(not r.summary.get("gang", True) for r in runs) else ())
    columns += MIGRATION_COLUMNS if any("migrations" in r.summary for r in runs) else ()
    columns += SMOKE_COLUMNS if any("smoke_tests" in r.summary for r in runs) else ()
    header = ["run", *columns]
    rows = [[run.label, *(_cell(run.summary.get(c, "")) for c in columns)] for run in runs]
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    (out / "comparison.md").write_text("\n".join(md) + "\n")
    (out / "comparison.csv").write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    (out / "comparison.json").write_text(
        json.dumps({run.label: run.summary for run in runs}, indent=2, sort_keys=True) + "\n"
    )
    written = [out / "comparison.md", out / "comparison.csv", out / "comparison.json"]
    if plots != "none":
        from loadmaster.sim.figures import rho_figure, run_figures

        results = {run.label: run.result for run in runs}
        written += render([*run_figures(results), rho_figure(results)], out, plots)
    return written
