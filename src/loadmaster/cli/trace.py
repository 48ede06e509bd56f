"""`loadmaster trace analyze|synth|convert`: look at, generate and convert workloads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from loadmaster.cli.common import console, guarded, print_json
from loadmaster.core.cluster import Cluster
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.sim.metrics import delay_classes
from loadmaster.sim.quotas import load_quota_file
from loadmaster.traces import analysis, load_cluster, load_workload, report, write_csv
from loadmaster.traces.formats import load_history
from loadmaster.traces.history import History, JobHistory, Times
from loadmaster.traces.synth import LIKES, synthesize, vc_quotas

app = typer.Typer(help="Workload traces: analyze, synthesize, convert.", no_args_is_help=True)

FormatOpt = Annotated[str, typer.Option("--format", help="auto, canonical, philly, gavel, gavel-vc, alibaba.")]


@app.command("analyze")
@guarded
def analyze(
    path: Annotated[str, typer.Argument(help="Trace file or folder, or sample:NAME.")],
    fmt: FormatOpt = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print every number of the analysis as JSON.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="The cluster the trace ran on (as for sim run); "
                                                "default: philly for Philly logs, alibaba for Alibaba.")] = None,
    quotas: Annotated[Path | None, typer.Option("--quotas", help="YAML quota file (VC shares); default: shares "
                                                "in proportion to each VC's GPU time.")] = None,
    replay: Annotated[str | None, typer.Option("--replay", help="Simulate start times with POLICY or POLICY/PLACEMENT "
                                               "on --cluster (for traces that record none).")] = None,
    min_delay: Annotated[float, typer.Option("--min-delay", min=0, help="Seconds of waiting that count a job "
                                             "as delayed in the fair-share/fragmentation table.")] = 60.0,
    gpu_util: Annotated[Path | None, typer.Option("--gpu-util", help="Philly's cluster_gpu_util log: per-GPU "
                                                  "utilisation of each job (read once, streamed).")] = None,
) -> None:
    """The Philly characterisation of a trace: job sizes, runtimes, queueing delay and its causes,
    utilisation, failures, retries."""
    if html is not None and html.is_dir():
        raise ValueError(f"--html: {html} is a folder; give the report's file name, e.g. {html / 'report.html'}")
    history = load_history(path, fmt)
    if not history.jobs:
        raise ValueError(f"{path}: the trace holds no jobs ({history.workload.report.summary()})")
    spec = cluster or history.cluster_hint
    machines = load_cluster(spec) if spec else None
    if replay is not None:
        if machines is None:
            raise ValueError("--replay needs --cluster: the cluster to simulate the trace on")
        history = _replayed(history, machines, replay, quotas)
    if gpu_util is not None and not gpu_util.is_file():
        raise ValueError(f"--gpu-util: no such file: {gpu_util}")
    result = analysis.analyze(history, machines, _shares(quotas, history), analysis.Options(min_delay_s=min_delay),
                              gpu_util)
    if html is not None:
        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(report.render(result))
    if as_json:
        print_json(result)
        return
    _print_analysis(result, cluster_defaulted=cluster is None and spec is not None)
    if html is not None:
        _say(f"wrote {html}")


def _shares(quotas: Path | None, history: History) -> Callable[[int], analysis.Shares] | None:
    if quotas is None:
        return None
    gpus = {t: float(q.gpus) for t, q in load_quota_file(quotas).items()}
    missing = sorted(set(history.workload.tenants) - set(gpus))
    if missing:
        raise ValueError(f"--quotas {quotas}: no share for VC(s) {', '.join(missing[:5])}; add them under tenants:")
    return lambda _capacity: analysis.Shares(gpus, f"from {quotas}")


def _replayed(history: History, machines: Cluster, replay: str, quotas: Path | None) -> History:
    """The trace run through the simulator: its start times, waits (by the scheduler's own reasons) and
    busy GPUs stand in for those the trace does not record. Attempts replay as recorded (retry=trace)."""
    policy, _, placement = replay.partition("/")
    for name, known, what in ((policy, POLICIES, "policy"), (placement or "pack", PLACERS, "placement")):
        if name not in known:
            raise ValueError(f"--replay: unknown {what} {name!r}; give POLICY[/PLACEMENT] with POLICY one of "
                             f"{', '.join(POLICIES)} and PLACEMENT one of {', '.join(PLACERS)}")
    opts = RunOptions(policy=policy, placement=placement or "pack",
                      quotas=load_quota_file(quotas) if quotas is not None else None)
    run = simulate(history.workload, machines, opts)
    records = {r.spec.job_id: r for r in run.result.records}
    jobs = [
        JobHistory(j.spec, first_start_s=records[j.spec.job_id].first_start_s,
                   end_s=records[j.spec.job_id].finish_s, wait_split_s=delay_classes(records[j.spec.job_id]))
        for j in history.jobs
    ]
    timeline = run.result.timeline
    how = (f"simulated: {opts.policy}/{opts.placement} on {machines.name} ({machines.total_gpus} GPUs), attempts "
           f"as the trace records them; runtimes as the simulator's performance model gives them")
    return History(history.workload, jobs, Times.SIMULATED, how, (list(timeline.times), list(timeline.busy_gpus)),
                   [f"start times simulated ({opts.policy}/{opts.placement}); the trace's own are not used"])


def _say(text: str) -> None:
    """Print plain text: names from a trace are not Rich markup."""
    console.print(text, highlight=False, markup=False)


_SHORT = {"fair_share": "fair-share", "fragmentation": "fragment.", "unexplained": "unexpl."}


def _print_analysis(a: dict[str, Any], cluster_defaulted: bool) -> None:
    """The headline numbers; --json and --html have every figure."""
    _say(f"{a['source']}: {a['jobs']:,} jobs, {a['tenants']} VCs, {a['users']} users; start times {a['times']}")
    if cluster_defaulted and a["cluster"]:
        _say(f"cluster: {a['cluster']['name']} (the default for this trace's format; --cluster to change it)")
    sizes, mix = a["job_sizes"], a["status_mix"]
    table = Table(title="job sizes and final status")
    table.add_column("")
    for col in ("jobs", "share of jobs", "share of GPU time"):
        table.add_column(col, justify="right")
    for label, n, js, gs in [
        *zip([f"{b} GPU" for b in sizes["buckets"]], sizes["jobs"], sizes["jobs_share"], sizes["gpu_time_share"],
             strict=True),
        *zip(mix["statuses"], mix["jobs"], mix["jobs_share"], mix["gpu_time_share"], strict=True),
    ]:
        table.add_row(label, f"{n:,}", f"{js:.1%}", f"{gs:.1%}")
    console.print(table)
    _print_queueing(a["queueing"])
    u, r = a["utilization"], a["retries"]
    if u.get("available"):
        _say(f"GPUs allocated: mean {u['allocated_mean']:.1%}, peak {u['allocated_max']:.1%} of "
             f"{u['capacity_gpus']:,}")
    _say(f"retries: {r['jobs_retried']:,} jobs ({r['jobs_retried_share']:.1%}) retried, {r['failed_attempts']:,} "
         f"failed attempts holding {r['gpu_time_share_failed_attempts']:.1%} of GPU time")
    for row in a["failures"]["rows"]:
        _say(f"failures, {row['label']}: {row['trials']:,} trials, median runtime to failure "
             f"{report.duration(row['rtf_s']['p50'])}, {row['gpu_time_share']:.1%} of GPU time")
    for note in a["notes"]:
        console.print(f"[dim]note: {escape(note)}[/]", highlight=False)


def _print_queueing(q: dict[str, Any]) -> None:
    if not q.get("available"):
        _say(f"queueing delay: not available ({q['why']})")
        return
    split = q["split"]
    classes = split.get("classes", []) if split.get("available") else []
    table = Table(title="queueing delay by job size (GPUs), and what the waiting was for")
    table.add_column("GPUs")
    for col in ("jobs", "median", "p90", *(_SHORT.get(c, c) for c in classes)):
        table.add_column(col, justify="right")
    for b, c in q["by_size"].items():
        shares = split["by_size"][b]["share_by_class"] if classes else {}
        table.add_row(b, f"{c['n']:,}", report.duration(c["p50"]), report.duration(c["p90"]),
                      *(f"{shares[k]:.1%}" for k in classes))
    console.print(table)
    if not split.get("available"):
        _say(f"fair-share/fragmentation split: not available ({split['why']})")
    elif split.get("caveat"):
        console.print(f"[yellow]caveat:[/] {escape(split['caveat'])}", highlight=False)


@app.command("synth")
@guarded
def synth(
    out: Annotated[Path, typer.Option("--out", help="Canonical CSV to write.")],
    like: Annotated[str, typer.Option("--like", help=f"Profile to follow: {', '.join(LIKES)}.")] = "philly",
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Number of jobs.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same file.")] = 0,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Shape the jobs for this cluster (any --cluster "
                                                "spec of sim run: 32x4, philly, a YAML file); --load refers to "
                                                "it.")] = None,
    load: Annotated[float | None, typer.Option("--load", min=0.01, help="Offered load: GPU-time demanded (every "
                                               "attempt) over the GPU-time of the cluster during the arrival "
                                               "window; above 1 the queue grows. Needs --cluster or "
                                               "--cluster-gpus.")] = None,
    cluster_gpus: Annotated[int | None, typer.Option("--cluster-gpus", min=1, help="GPUs --load refers to, "
                                                     "without shaping jobs for a cluster.")] = None,
    cpu_demands: Annotated[bool, typer.Option("--cpu-demands", help="Give each learner the CPU and memory "
                                              "request of its model family's profile (default: none, as "
                                              "in Philly).")] = False,
    vcs: Annotated[bool, typer.Option("--vcs", help="Queue like Philly: virtual clusters with fixed quotas (the "
                                      "profile's servers per VC, scaled to --cluster), each offering --load on its "
                                      "own quota, with bursts of jobs; also writes the quota file for sim "
                                      "--quotas. Needs --cluster and --load.")] = False,
    quotas_out: Annotated[Path | None, typer.Option("--quotas-out", help="With --vcs: where to write the quota "
                                                    "file (default: beside --out, NAME.quotas.yaml).")] = None,
    borrow_limit: Annotated[int | None, typer.Option("--borrow-limit", min=0, help="With --vcs: GPUs a VC may "
                                                     "borrow beyond its quota when they are idle (default 0: "
                                                     "fixed quotas, as Philly's VCs).")] = None,
    borrow_any: Annotated[bool, typer.Option("--borrow-any", help="With --vcs: VCs may borrow any idle GPUs "
                                             "(borrowed jobs are preempted when their owner needs them back), "
                                             "as Philly's VCs did.")] = False,
    shared_span: Annotated[bool, typer.Option("--shared-span", help="With --vcs: every VC submits over one span, "
                                              "so the whole cluster is offered --load and each VC what its draws "
                                              "add up to (for VCs that borrow).")] = False,
    vc_queue: Annotated[int | None, typer.Option("--vc-queue", min=1, help="With --vcs: closed-loop users. A VC's "
                                                 "next submission (a job or a whole burst) waits until the VC has "
                                                 "fewer than this many jobs queued, as pre-simulated for fair on "
                                                 "fixed quotas; --load is then what its users intend.")] = None,
) -> None:
    """Write a synthetic workload in the canonical CSV, following a published trace's statistics."""
    if like not in LIKES:
        raise ValueError(f"--like: unknown profile {like!r}; choose from {', '.join(LIKES)}")
    if cluster is not None and cluster_gpus is not None:
        raise ValueError("--cluster and --cluster-gpus: give one (--cluster-gpus only sizes --load)")
    if load is not None and cluster is None and cluster_gpus is None:
        raise ValueError("--load needs the cluster it refers to: add --cluster (e.g. --cluster 32x4) or "
                         "--cluster-gpus")
    if cluster_gpus is not None and load is None:
        raise ValueError("--cluster-gpus only sizes --load: add --load or leave it out")
    if vcs and (cluster is None or load is None):
        raise ValueError("--vcs: quotas are shares of a cluster and each VC offers a load on its own: add "
                         "--cluster (e.g. --cluster philly) and --load (e.g. --load 0.9)")
    if not vcs and (quotas_out is not None or borrow_limit is not None or borrow_any or shared_span
                    or vc_queue is not None):
        raise ValueError("--quotas-out/--borrow-limit/--borrow-any/--shared-span/--vc-queue: these describe --vcs; "
                         "add --vcs or leave them out")
    if borrow_any and borrow_limit is not None:
        raise ValueError("--borrow-any and --borrow-limit contradict each other: give one")
    shaped_for = load_cluster(cluster) if cluster is not None else None
    workload = synthesize(like, jobs, seed, cluster_gpus=cluster_gpus, load=load, cpu_demands=cpu_demands,
                          cluster=shaped_for, vcs=vcs, shared_span=shared_span, vc_queue=vc_queue)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = write_csv(workload.jobs, out)
    if vcs:
        assert shaped_for is not None
        quota_path = quotas_out or out.with_name(out.stem + ".quotas.yaml")
        quota_path.parent.mkdir(parents=True, exist_ok=True)
        lines = ["# fixed VC quotas for `sim run --quotas`, written by `trace synth --vcs`", "tenants:"]
        limit = "null" if borrow_any else borrow_limit or 0
        lines += [f"  '{vc}': {{gpus: {g}, borrow_limit: {limit}}}"
                  for vc, g in vc_quotas(like, shaped_for).items()]
        quota_path.write_text("\n".join(lines) + "\n")
        console.print(f"wrote the VC quotas to {quota_path}", highlight=False)
    where = f" for {shaped_for.describe()}" if shaped_for is not None else ""
    at = f" at offered load {load:g}" if load is not None else ""
    console.print(f"wrote {n} jobs like {like} (seed {seed}){where}{at} to {out}", highlight=False)


@app.command("convert")
@guarded
def convert(
    path: Annotated[str, typer.Argument(help="Trace file or folder, or sample:NAME.")],
    out: Annotated[Path, typer.Option("--out", help="Canonical CSV to write.")],
    fmt: FormatOpt = "auto",
) -> None:
    """Write any supported trace as the canonical workload CSV."""
    workload = load_workload(path, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = write_csv(workload.jobs, out)
    console.print(workload.report.summary(), highlight=False)
    console.print(f"wrote {n} jobs to {out}", highlight=False)
