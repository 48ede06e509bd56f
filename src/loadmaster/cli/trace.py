"""`loadmaster trace analyze|synth|convert`: look at, generate and convert workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from loadmaster.cli.common import console, guarded, print_json
from loadmaster.traces import load_cluster, load_workload, write_csv
from loadmaster.traces.stats import describe
from loadmaster.traces.synth import LIKES, synthesize

app = typer.Typer(help="Workload traces: analyze, synthesize, convert.", no_args_is_help=True)

FormatOpt = Annotated[str, typer.Option("--format", help="auto, canonical, philly, gavel, gavel-vc, alibaba.")]


def _flat(prefix: str, value: Any, rows: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and len(value) <= 12:
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, rows)
    elif isinstance(value, float):
        rows.append((prefix, f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"))
    else:
        rows.append((prefix, str(value)))


@app.command("analyze")
@guarded
def analyze(
    path: Annotated[str, typer.Argument(help="Trace file or folder, or sample:NAME.")],
    fmt: FormatOpt = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Statistics of a workload: sizes, durations, arrivals, tenants, statuses, attempts."""
    workload = load_workload(path, fmt)
    stats = describe(workload)
    if as_json:
        print_json(stats)
        return
    console.print(workload.report.summary(), highlight=False)
    table = Table(title=f"workload {path}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = []
    for k, v in stats.items():
        if k not in ("source", "jobs_per_tenant"):
            _flat(k, v, rows)
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


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
    shaped_for = load_cluster(cluster) if cluster is not None else None
    workload = synthesize(like, jobs, seed, cluster_gpus=cluster_gpus, load=load, cpu_demands=cpu_demands,
                          cluster=shaped_for)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = write_csv(workload.jobs, out)
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
