"""`loadmaster sim run|compare`: replay a workload and measure every job."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import SimProgress, console, err_console, guarded, print_json
from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import POLICIES, make_policy
from loadmaster.sim.experiment import PLOT_FORMATS, RunOptions, RunOutcome, simulate, write_comparison, write_run
from loadmaster.sim.failures import RetryPolicy
from loadmaster.sim.learner_at_a_time import check_supported, parse_gang, parse_timeout, timeout_label
from loadmaster.sim.quotas import load_quota_file
from loadmaster.traces import load_cluster, load_workload

app = typer.Typer(help="Trace-driven simulation.", no_args_is_help=True)

DEFAULT_TRACE = "sample:gavel"
DEFAULT_CLUSTER = "9x4:v100,9x4:p100,9x4:k80"

TraceOpt = Annotated[str, typer.Option("--trace", help="Trace file or folder, or sample:NAME (bundled).")]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="YAML file, shorthand like 16x8 or 9x4:v100,9x4:k80, "
                                                           "or a name: philly, alibaba.")]
FormatOpt = Annotated[str, typer.Option("--format", help="Trace format: auto, canonical, philly, gavel, "
                                                         "gavel-vc, alibaba.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for every random choice (same seed, same output).")]
RetryOpt = Annotated[RetryPolicy, typer.Option("--retry", help="Retry policy for failed attempts.")]
MaxAttemptsOpt = Annotated[int, typer.Option("--max-attempts", min=1, help="Attempts per job for "
                                                                           "--retry always|classified.")]
QuotaOpt = Annotated[Path | None, typer.Option("--quotas", help="YAML quota file; default: sized by demand.")]
UntilOpt = Annotated[float | None, typer.Option("--until", min=0, help="Stop the clock at this simulated second.")]
CkptOpt = Annotated[float, typer.Option("--checkpoint-interval", min=0, help="Seconds of work between "
                                                                             "checkpoints (0: none).")]
PlotsOpt = Annotated[str, typer.Option("--plots", help="Plots to write: svg (default; written directly, in "
                                                       "milliseconds), png (matplotlib, about a second more), "
                                                       "none.")]
NoPlotsOpt = Annotated[bool, typer.Option("--no-plots", help="The same as --plots none.")]
RestartOpt = Annotated[float, typer.Option("--restart-overhead", min=0, help="Seconds a restart costs.")]
GANG_HELP = ("on: gang scheduling (a job's learners start together or not at all). off: learner-at-a-time, "
             "like a pod-at-a-time scheduler (FIFO, pack or spread): learners bound so far hold GPUs idle "
             "until the last one fits, and partial gangs can deadlock.")
MIGRATE_HELP = ("on: defragment: when a gang waits on fragmentation (or for locality), move up to 8 smaller running "
                "jobs to other servers so it fits; a move costs the restart overhead and the work since the last "
                "checkpoint. off: never move a running job.")
SmokeOpt = Annotated[float, typer.Option("--smoke-test", min=0, help="Seconds each attempt of a multi-GPU job first "
                                       "runs on one GPU before its gang is placed; an attempt that ends within "
                                       "them (most failures come early) costs one GPU, not the gang (0: off).")]
TIMEOUT_HELP = ("With --gang off: seconds after its first learner is bound that a still-partial job gives its "
                "learners back and requeues, or 'never'.")


def _inputs(trace: str, fmt: str, cluster: str) -> tuple[Workload, Cluster]:
    workload = load_workload(trace, fmt)
    if workload.report.skipped or workload.report.notes:
        err_console.print(f"[dim]{workload.report.summary()}[/]", highlight=False)
    if not workload.jobs:
        raise ValueError(f"{trace}: the trace holds no jobs ({workload.report.summary()})")
    return workload, load_cluster(cluster)


def _check_names(policies: list[str], placements: list[str]) -> None:
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"--policy: unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    for p in placements:
        if p not in PLACERS:
            raise ValueError(f"--placement: unknown placement {p!r}; choose from {', '.join(PLACERS)}")


def _plot_format(plots: str, no_plots: bool) -> str:
    if plots not in PLOT_FORMATS:
        raise ValueError(f"--plots: {plots!r} is not a plot format; choose from {', '.join(PLOT_FORMATS)}")
    return "none" if no_plots else plots


def _summary_table(runs: list[RunOutcome]) -> Table:
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


def _options(policy: str, placement: str, retry: RetryPolicy, max_attempts: int, seed: int,
             quotas: Path | None, until: float | None, ckpt: float, restart: float, gang: bool = True,
             partial_timeout: float | None = None, migrate: bool = False, smoke_test: float = 0.0) -> RunOptions:
    return RunOptions(
        policy=policy, placement=placement, retry=retry, max_attempts=max_attempts, seed=seed,
        checkpoint_interval_s=ckpt, restart_overhead_s=restart, until_s=until,
        quotas=load_quota_file(quotas) if quotas else None, gang=gang, partial_timeout_s=partial_timeout,
        migrate=migrate, smoke_test_s=smoke_test,
    )


def _migrate_modes(migrate: str, gang_modes: list[tuple[bool, float | None, str]]) -> list[tuple[bool, str]]:
    """(migrate, label suffix) for each comma-separated --migrate value."""
    values = []
    for text in (m.strip().lower() for m in migrate.split(",") if m.strip()):
        if text not in ("on", "off"):
            raise ValueError(f"--migrate: expected on or off, got {text!r}")
        values.append(text == "on")
    if any(values) and not all(on for on, _, _ in gang_modes):
        raise ValueError("--migrate: moves whole gangs; it applies to gang scheduling only (drop --gang off)")
    return [(on, "/migrate" if on else "") for on in dict.fromkeys(values or [False])]


def _modes(gang: str, partial_timeout: str) -> list[tuple[bool, float | None, str]]:
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


@app.command("run")
@guarded
def run(
    out: Annotated[Path, typer.Option("--out", help="Folder for summary.json, jobs.csv and plots.")] = Path(
        "runs/latest"),
    trace: TraceOpt = DEFAULT_TRACE,
    cluster: ClusterOpt = DEFAULT_CLUSTER,
    policy: Annotated[str, typer.Option("--policy", help=f"One of: {', '.join(POLICIES)}.")] = "fifo",
    placement: Annotated[str, typer.Option("--placement", help=f"One of: {', '.join(PLACERS)}.")] = "pack",
    fmt: FormatOpt = "auto",
    seed: SeedOpt = 0,
    retry: RetryOpt = RetryPolicy.TRACE,
    max_attempts: MaxAttemptsOpt = 3,
    quotas: QuotaOpt = None,
    until: UntilOpt = None,
    checkpoint_interval: CkptOpt = 900.0,
    restart_overhead: RestartOpt = 30.0,
    gang: Annotated[str, typer.Option("--gang", help=GANG_HELP)] = "on",
    partial_timeout: Annotated[str, typer.Option("--partial-timeout", help=TIMEOUT_HELP)] = "never",
    migrate: Annotated[str, typer.Option("--migrate", help=MIGRATE_HELP)] = "off",
    smoke_test: SmokeOpt = 0.0,
    plots: PlotsOpt = "svg",
    no_plots: NoPlotsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of a table.")] = False,
) -> None:
    """Replay a trace under one policy and placement; write summary.json, jobs.csv and plots to --out."""
    _check_names([policy], [placement])
    plots = _plot_format(plots, no_plots)
    if "," in gang or "," in partial_timeout or "," in migrate:
        raise ValueError("--gang/--partial-timeout/--migrate: one value each for sim run (lists are for sim compare)")
    [(gang_on, timeout, suffix)] = _modes(gang, partial_timeout)
    [(migrate_on, moved)] = _migrate_modes(migrate, [(gang_on, timeout, suffix)])
    if smoke_test and not gang_on:
        raise ValueError("--smoke-test: applies to gang scheduling only (drop --gang off)")
    suffix += moved
    if not gang_on:
        check_supported(make_policy(policy), make_placer(placement))
    workload, clu = _inputs(trace, fmt, cluster)
    opts = _options(policy, placement, retry, max_attempts, seed, quotas, until, checkpoint_interval,
                    restart_overhead, gang_on, timeout, migrate_on, smoke_test)
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
    console.print(f"{len(workload)} jobs on {clu.describe()}", highlight=False)
    console.print(_summary_table([outcome]))
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}", highlight=False)


@app.command("compare")
@guarded
def compare(
    out: Annotated[Path, typer.Option("--out", help="Folder for the comparison table and plots.")] = Path(
        "runs/compare"),
    trace: TraceOpt = DEFAULT_TRACE,
    cluster: ClusterOpt = DEFAULT_CLUSTER,
    policy: Annotated[str, typer.Option("--policy", help="Comma-separated policies.")] = "fifo,fair",
    placement: Annotated[str, typer.Option("--placement", help="Comma-separated placements.")] = "pack",
    fmt: FormatOpt = "auto",
    seed: SeedOpt = 0,
    retry: Annotated[str, typer.Option("--retry", help="Comma-separated retry policies.")] = "trace",
    max_attempts: MaxAttemptsOpt = 3,
    quotas: QuotaOpt = None,
    until: UntilOpt = None,
    checkpoint_interval: CkptOpt = 900.0,
    restart_overhead: RestartOpt = 30.0,
    gang: Annotated[str, typer.Option("--gang", help="Comma-separated: on, off. " + GANG_HELP)] = "on",
    partial_timeout: Annotated[str, typer.Option("--partial-timeout", help="Comma-separated. " + TIMEOUT_HELP)
                               ] = "never",
    migrate: Annotated[str, typer.Option("--migrate", help="Comma-separated: off, on. " + MIGRATE_HELP)] = "off",
    smoke_test: SmokeOpt = 0.0,
    plots: PlotsOpt = "svg",
    no_plots: NoPlotsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
) -> None:
    """Run several policies (x placements x retry policies x gang modes) on one workload; one table, overlaid
    plots."""
    policies = [p.strip() for p in policy.split(",") if p.strip()]
    placements = [p.strip() for p in placement.split(",") if p.strip()]
    try:
        retries = [RetryPolicy(r.strip()) for r in retry.split(",") if r.strip()]
    except ValueError:
        raise ValueError(f"--retry: choose from {', '.join(r.value for r in RetryPolicy)}") from None
    _check_names(policies, placements)
    plots = _plot_format(plots, no_plots)
    modes = _modes(gang, partial_timeout)
    moves = _migrate_modes(migrate, modes)
    if smoke_test and not all(on for on, _, _ in modes):
        raise ValueError("--smoke-test: applies to gang scheduling only (drop --gang off)")
    if not all(on for on, _, _ in modes):
        for pol in policies:
            for pl in placements:
                check_supported(make_policy(pol), make_placer(pl))
    workload, clu = _inputs(trace, fmt, cluster)
    runs = []
    for pol in policies:
        for pl in placements:
            for rt in retries:
                for (gang_on, timeout, suffix), (migrate_on, moved) in itertools.product(modes, moves):
                    label = f"{pol}/{pl}" + (f"/{rt.value}" if len(retries) > 1 else "") + suffix + moved
                    opts = _options(pol, pl, rt, max_attempts, seed, quotas, until, checkpoint_interval,
                                    restart_overhead, gang_on, timeout, migrate_on, smoke_test)
                    bar = SimProgress(workload.jobs[-1].submit_time_s, label, enabled=not as_json)
                    try:
                        runs.append(simulate(workload, clu, opts, bar, label=label))
                    finally:
                        bar.close()
    written = write_comparison(out, runs, plots)
    if as_json:
        print_json({r.label: r.summary for r in runs})
        return
    console.print(f"{len(workload)} jobs on {clu.describe()}", highlight=False)
    console.print(_summary_table(runs))
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}", highlight=False)
