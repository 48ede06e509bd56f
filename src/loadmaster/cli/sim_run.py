"""`loadmaster sim run` itself, apart from its Typer command: what the command does, and the helpers it
shares with `sim compare`. Imports neither Typer nor pydantic, so that cli/fast.py can run a plain `sim run`
without building the Typer app (start-up is most of a short simulation's time)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadmaster.cli import common
from loadmaster.cli.common import SimProgress, note, print_json
from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import POLICIES, make_policy
from loadmaster.sim.collector import paused
from loadmaster.sim.experiment import PLOT_FORMATS, RunOptions, RunOutcome, simulate, write_run
from loadmaster.sim.failures import RetryPolicy
from loadmaster.sim.gang_options import parse_gang, parse_timeout, timeout_label
from loadmaster.sim.quotas import load_quota_file
from loadmaster.traces import load_cluster, load_workload

if TYPE_CHECKING:
    from rich.table import Table

DEFAULT_TRACE = "sample:gavel"
DEFAULT_CLUSTER = "9x4:v100,9x4:p100,9x4:k80"


def inputs(trace: str, fmt: str, cluster: str) -> tuple[Workload, Cluster]:
    workload = load_workload(trace, fmt)
    if workload.report.skipped or workload.report.notes:
        note(workload.report.summary())
    if not workload.jobs:
        raise ValueError(f"{trace}: the trace holds no jobs ({workload.report.summary()})")
    return workload, load_cluster(cluster)


def check_names(policies: list[str], placements: list[str]) -> None:
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"--policy: unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    for p in placements:
        if p not in PLACERS:
            raise ValueError(f"--placement: unknown placement {p!r}; choose from {', '.join(PLACERS)}")


def plot_format(plots: str, no_plots: bool) -> str:
    if plots not in PLOT_FORMATS:
        raise ValueError(f"--plots: {plots!r} is not a plot format; choose from {', '.join(PLOT_FORMATS)}")
    return "none" if no_plots else plots


def summary_table(runs: list[RunOutcome]) -> Table:
    from rich.table import Table  # only when a table is printed: --json runs never pay for it

    table = Table(title="simulation summary")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.label, justify="right")
    keys = ["jobs", "completed", "failed", "rejected", "unfinished", "avg_jct_s", "p50_jct_s", "p99_jct_s",
            "makespan_s", "avg_queue_delay_s", "fair_share_delay_s", "fragmentation_delay_s",
            "gpu_utilization", "max_rho", "median_rho", "jain_fairness", "preemptions",
            "gpu_hours_failed_attempts", "wall_time_s"]
    if any("migrations" in run.summary for run in runs):
        keys += ["migrations", "gpu_hours_lost_to_migration"]
    if any("smoke_tests" in run.summary for run in runs):
        keys += ["smoke_tests", "failures_caught_by_smoke_test", "gpu_hours_smoke_tests",
                 "gpu_hours_failures_caught_would_have_held"]
    if any(not run.summary.get("gang", True) for run in runs):
        keys += ["deadlocked_jobs", "gpu_hours_held_by_partial_gangs", "partial_gang_timeouts"]
    for k in keys:
        cells = []
        for run in runs:
            v = run.summary.get(k, "")
            if isinstance(v, str):  # a key only some runs have (migrations, smoke tests)
                cells.append(v)
                continue
            cells.append(f"{v:,.3f}" if isinstance(v, float) and abs(v) < 100 else
                         f"{v:,.0f}" if isinstance(v, float) else f"{v:,}")
        table.add_row(k, *cells)
    return table


def options(policy: str, placement: str, retry: RetryPolicy, max_attempts: int, seed: int,
             quotas: Path | None, until: float | None, ckpt: float, restart: float, gang: bool = True,
             partial_timeout: float | None = None, migrate: bool = False, smoke_test: float = 0.0,
             vc_queue: int | None = None) -> RunOptions:
    return RunOptions(
        policy=policy, placement=placement, retry=retry, max_attempts=max_attempts, seed=seed,
        checkpoint_interval_s=ckpt, restart_overhead_s=restart, until_s=until,
        quotas=load_quota_file(quotas) if quotas else None, gang=gang, partial_timeout_s=partial_timeout,
        migrate=migrate, smoke_test_s=smoke_test, vc_queue=vc_queue,
    )


def migrate_modes(migrate: str, gang_modes: list[tuple[bool, float | None, str]]) -> list[tuple[bool, str]]:
    """(migrate, label suffix) for each comma-separated --migrate value."""
    values = []
    for text in (m.strip().lower() for m in migrate.split(",") if m.strip()):
        if text not in ("on", "off"):
            raise ValueError(f"--migrate: expected on or off, got {text!r}")
        values.append(text == "on")
    if any(values) and not all(on for on, _, _ in gang_modes):
        raise ValueError("--migrate: moves whole gangs; it applies to gang scheduling only (drop --gang off)")
    return [(on, "/migrate" if on else "") for on in dict.fromkeys(values or [False])]


def modes(gang: str, partial_timeout: str) -> list[tuple[bool, float | None, str]]:
    """(gang, timeout, label suffix) for each comma-separated --gang value (x each timeout when off)."""
    gangs = [parse_gang(g) for g in gang.split(",") if g.strip()] or [True]
    timeouts = [parse_timeout(t) for t in partial_timeout.split(",") if t.strip()] or [None]
    if all(gangs) and timeouts != [None]:
        raise ValueError("--partial-timeout: applies to learner-at-a-time placement only; add --gang off")
    modes: list[tuple[bool, float | None, str]] = []
    for on in dict.fromkeys(gangs):
        if on:
            modes.append((True, None, ""))
        else:
            modes += [(False, t, f"/no-gang/timeout-{timeout_label(t)}") for t in timeouts]
    return modes


def run_sim(out: Path, trace: str, cluster: str, policy: str, placement: str, fmt: str, seed: int,
            retry: RetryPolicy, max_attempts: int, quotas: Path | None, until: float | None,
            checkpoint_interval: float, restart_overhead: float, gang: str, partial_timeout: str, migrate: str,
            smoke_test: float, plots: str, no_plots: bool, as_json: bool, vc_queue: int | None = None) -> None:
    """`sim run`: replay a trace under one policy and placement; write summary.json, jobs.csv and plots."""
    check_names([policy], [placement])
    plots = plot_format(plots, no_plots)
    if "," in gang or "," in partial_timeout or "," in migrate:
        raise ValueError("--gang/--partial-timeout/--migrate: one value each for sim run (lists are for sim compare)")
    [(gang_on, timeout, suffix)] = modes(gang, partial_timeout)
    [(migrate_on, moved)] = migrate_modes(migrate, [(gang_on, timeout, suffix)])
    if smoke_test and not gang_on:
        raise ValueError("--smoke-test: applies to gang scheduling only (drop --gang off)")
    suffix += moved
    if not gang_on:
        from loadmaster.sim.learner_at_a_time import check_supported

        check_supported(make_policy(policy), make_placer(placement))
    # Loading, simulating and writing make objects that live to the end and almost no cycles (collector.py).
    with paused():
        workload, clu = inputs(trace, fmt, cluster)
        opts = options(policy, placement, retry, max_attempts, seed, quotas, until, checkpoint_interval,
                       restart_overhead, gang_on, timeout, migrate_on, smoke_test, vc_queue)
        horizon = workload.jobs[-1].submit_time_s
        bar = SimProgress(horizon, f"{policy}/{placement}{suffix}", enabled=not as_json)
        try:
            outcome = simulate(workload, clu, opts, bar, label=f"{policy}/{placement}{suffix}")
        finally:
            bar.close()
        written = write_run(out, outcome, plots)
    if as_json:
        print_json(outcome.summary)
        return
    console = common.console
    console.print(f"{len(workload)} jobs on {clu.describe()}", highlight=False)
    console.print(summary_table([outcome]))
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}", highlight=False)
