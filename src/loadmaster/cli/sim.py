"""`loadmaster sim run|compare`: replay a workload and measure every job."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.common import SimProgress, console, guarded, print_json
from loadmaster.cli.sim_run import (
    DEFAULT_CLUSTER,
    DEFAULT_TRACE,
    check_names,
    inputs,
    migrate_modes,
    modes,
    options,
    plot_format,
    run_sim,
    summary_table,
)
from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import POLICIES, make_policy
from loadmaster.sim.experiment import simulate, write_comparison
from loadmaster.sim.failures import RetryPolicy
from loadmaster.sim.learner_at_a_time import check_supported

app = typer.Typer(help="Trace-driven simulation.", no_args_is_help=True)


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
                "checkpoint; themis also moves jobs whose lease ended to free GPUs they run faster on "
                "(its re-auction). off: never move a running job.")
SmokeOpt = Annotated[float, typer.Option("--smoke-test", min=0, help="Seconds each attempt of a multi-GPU job first "
                                       "runs on one GPU before its gang is placed; an attempt that ends within "
                                       "them (most failures come early) costs one GPU, not the gang (0: off).")]
VcQueueOpt = Annotated[int | None, typer.Option("--vc-queue", min=1, help="Closed-loop users: a job's submit time is "
                                              "when its user means to submit it; while its tenant (VC) has this "
                                              "many jobs queued the user holds it back, and submits it when the "
                                              "queue is shorter (queueing delay counts from then). Default: off.")]
TIMEOUT_HELP = ("With --gang off: seconds after its first learner is bound that a still-partial job gives its "
                "learners back and requeues, or 'never'.")


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
    vc_queue: VcQueueOpt = None,
    plots: PlotsOpt = "svg",
    no_plots: NoPlotsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of a table.")] = False,
) -> None:
    """Replay a trace under one policy and placement; write summary.json, jobs.csv and plots to --out."""
    run_sim(out, trace, cluster, policy, placement, fmt, seed, retry, max_attempts, quotas, until, checkpoint_interval,
            restart_overhead, gang, partial_timeout, migrate, smoke_test, plots, no_plots, as_json, vc_queue)


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
    vc_queue: VcQueueOpt = None,
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
    check_names(policies, placements)
    plots = plot_format(plots, no_plots)
    gang_modes = modes(gang, partial_timeout)
    moves = migrate_modes(migrate, gang_modes)
    if smoke_test and not all(on for on, _, _ in gang_modes):
        raise ValueError("--smoke-test: applies to gang scheduling only (drop --gang off)")
    if not all(on for on, _, _ in gang_modes):
        for pol in policies:
            for pl in placements:
                check_supported(make_policy(pol), make_placer(pl))
    workload, clu = inputs(trace, fmt, cluster)
    runs = []
    for pol in policies:
        for pl in placements:
            for rt in retries:
                for (gang_on, timeout, suffix), (migrate_on, moved) in itertools.product(gang_modes, moves):
                    label = f"{pol}/{pl}" + (f"/{rt.value}" if len(retries) > 1 else "") + suffix + moved
                    opts = options(pol, pl, rt, max_attempts, seed, quotas, until, checkpoint_interval,
                                   restart_overhead, gang_on, timeout, migrate_on, smoke_test, vc_queue)
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
    console.print(summary_table(runs))
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}", highlight=False)
