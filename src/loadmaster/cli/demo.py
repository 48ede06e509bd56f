"""`loadmaster demo`: the platform on its embedded defaults replaying a bundled trace, beside the simulator.

A server runs in this process (SQLite in --out, the local executor, virtual GPUs); the trace's first jobs are
submitted as their tenants at their arrival times, compressed, each a real learner process; when every one
has ended, the simulator replays the same jobs with the same policy on the same cluster, and both are
written and shown side by side.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from loadmaster.cli.common import add_row, console, fail

if TYPE_CHECKING:
    from loadmaster.platform.replay import LiveJob, Replay


def demo(
    trace: Annotated[str, typer.Option("--trace", help="A trace file, folder or bundled sample.")] = "sample:philly",
    jobs: Annotated[int, typer.Option("--jobs", min=1, max=500, help="How many of the trace's first jobs.")] = 20,
    nodes: Annotated[str, typer.Option("--nodes", help="Virtual nodes of this machine, e.g. 2x8.")] = "2x8",
    policy: Annotated[str, typer.Option("--policy", help="Scheduling policy (as in `sim run`).")] = "fair",
    placement: Annotated[str, typer.Option("--placement", help="Placement (as in `sim run`).")] = "pack",
    median_work: Annotated[float, typer.Option("--median-work", min=0.1, max=600,
                                               help="Seconds the median job runs once time is compressed.")] = 3.0,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds before what is left is "
                                                                    "cancelled.")] = 600.0,
    out: Annotated[Path, typer.Option("--out", help="Folder for summary.json, jobs.csv and the server's "
                                                    "data (server/, replaced at each run).")] = Path("runs/demo"),
) -> None:
    """Replay a trace as real jobs on a local server (SQLite, local executor) and compare with the simulator."""
    from loadmaster.platform.client import Client, ClientError
    from loadmaster.platform.replay import ReplayError, plan_replay, run_replay
    from loadmaster.platform.server import Platform, ServerError, ServerOptions
    from loadmaster.traces import load_workload
    from loadmaster.traces.errors import TraceFormatError

    if out.exists() and not out.is_dir():
        fail(f"--out {out}: a file of that name exists; give a folder")
    server_dir = out / "server"
    try:
        workload = load_workload(trace)
        shutil.rmtree(server_dir, ignore_errors=True)  # the previous demo's store and learners' files
        server_dir.mkdir(parents=True, exist_ok=True)
        platform = Platform.build(ServerOptions(nodes=nodes, port=0, data_dir=server_dir, policy=policy,
                                                placement=placement, tick_s=0.1, grace_s=5.0,
                                                checkpoint_interval_s=1.0, tenant_users=False,
                                                # one tenant per virtual cluster of the trace, all the demo's
                                                insecure_shared_user=True))
    except (TraceFormatError, ServerError, OSError) as err:
        fail(str(err))
    try:
        replay = plan_replay(trace, workload, platform.cluster, jobs=jobs, median_work_s=median_work)
    except ReplayError as err:
        platform.shutdown()
        fail(str(err))
    url = platform.serve_in_thread()
    assert platform.admin_token is not None  # a fresh data directory: this start made the admin token
    console.print(f"replaying {len(replay.workload.jobs)} jobs of {trace} ({len(replay.tenants)} tenants, time "
                  f"compressed {replay.speedup:,.0f}x) on {platform.cluster.total_gpus} virtual GPUs ({nodes}), "
                  f"policy {policy}, placement {placement}", highlight=False)
    console.print(f"server {url}: dashboard {url}/ui (admin token {platform.admin_token})", highlight=False)
    admin = Client(url, platform.admin_token)
    started = time.monotonic()
    try:
        with console.status("starting") as status:
            def progress(now: float, counts: Mapping[str, int]) -> None:
                status.update(f"{now:5.1f} s  " + "  ".join(f"{k} {v}" for k, v in counts.items()))

            epoch, live = run_replay(replay, admin, lambda token: Client(url, token), timeout_s=timeout,
                                     progress=progress)
    except ClientError as err:
        fail(f"the server refused the replay: {err}")
    finally:
        admin.close()
        platform.shutdown()
    console.print(f"all {len(live)} jobs ended after {time.monotonic() - started:.1f} s (a job the trace records as "
                  "failed fails here too, at the end of its run)", highlight=False)
    _report(replay, live, epoch, platform, policy, placement, out)


def _report(replay: Replay, live: list[LiveJob], epoch: float, platform: Any, policy: str, placement: str,
            out: Path) -> None:
    from rich.table import Table

    from loadmaster.platform.replay import COMPARED, live_summary
    from loadmaster.scheduling.snapshot import TenantQuota
    from loadmaster.sim.experiment import RunOptions, simulate
    from loadmaster.sim.failures import RetryPolicy

    measured = live_summary(live, platform.cluster.total_gpus)
    quotas = {t: TenantQuota(t, gpus) for t, gpus in replay.tenants.items()}
    sim = simulate(replay.workload, platform.cluster,
                   RunOptions(policy=policy, placement=placement, retry=RetryPolicy.TRACE, checkpoint_interval_s=1.0,
                              restart_overhead_s=0.5, quotas=quotas, cpu_model=False))
    simulated = {k: sim.summary[k] for k in COMPARED}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({
        "trace": replay.source, "speedup": replay.speedup, "skipped_jobs": replay.skipped,
        "cluster_gpus": platform.cluster.total_gpus, "policy": policy, "placement": placement,
        "tenants": dict(replay.tenants), "live": measured, "simulated": simulated,
    }, indent=2) + "\n")
    records = {r.spec.job_id: r for r in sim.result.records}
    with open(out / "jobs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trace_job", "job_id", "tenant", "gpus", "work_s", "submit_s", "status", "start_s", "end_s",
                    "attempts", "preemptions", "sim_status", "sim_start_s", "sim_end_s"])
        for job in live:
            s, r = job.summary, records[job.spec.job_id]
            w.writerow([job.spec.job_id, job.job_id, job.spec.tenant, job.spec.gpus, f"{job.spec.duration_s:.3f}",
                        f"{job.submitted_at - epoch:.3f}", s["status"], _rel(s["first_started_at"], epoch),
                        _rel(s["finished_at"], epoch), s["attempts"], s["preemptions"], r.status.value,
                        _rel(r.first_start_s, 0.0), _rel(r.finish_s, 0.0)])
    table = Table(title="live platform vs simulator, same jobs")
    for col in ("", "live", "simulated", "live / simulated"):
        table.add_column(col, justify="right" if col else "left")
    for key in COMPARED:
        a, b = measured[key], simulated[key]
        ratio = f"{a / b:.2f}" if isinstance(a, int | float) and isinstance(b, int | float) and b else "-"
        add_row(table, key, _fmt(a), _fmt(b), ratio)
    console.print(table)
    console.print(f"written: {out / 'summary.json'}, {out / 'jobs.csv'}", highlight=False)


def _rel(t: float | None, epoch: float) -> str:
    return "" if t is None else f"{t - epoch:.3f}"


def _fmt(v: object) -> str:
    return f"{v:,.2f}" if isinstance(v, float) else str(v)
