"""`loadmaster cluster`: the server's nodes (state, labels, last heartbeat), GPUs used and free, and the
running jobs; `loadmaster cluster drain NODE` / `undrain NODE` (admin token)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, esc, print_json
from loadmaster.cli.remote import client, id_column, remote

app = typer.Typer(help="Nodes with their state, GPUs used/free, and running jobs; drain and undrain nodes.",
                  no_args_is_help=False, invoke_without_command=True)


def _age(at: float | None) -> str:
    return "-" if at is None else f"{max(0.0, time.time() - at):.0f} s ago"


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Nodes with their state (alive, dead, draining), labels, last heartbeat, GPUs used/free, and running jobs."""
    if ctx.invoked_subcommand is None:
        cluster(as_json)


@app.command("drain")
@remote
def drain(node: Annotated[str, typer.Argument(help="The node's name, as `loadmaster cluster` shows it.")]) -> None:
    """Drain NODE: nothing new lands there; elastic jobs shrink off it, others checkpoint and move."""
    out = client(admin=True).drain(node)
    console.print(f"node {esc(out['node'])} draining (drained: {esc(', '.join(out['draining']))})", highlight=False)


@app.command("undrain")
@remote
def undrain(node: Annotated[str, typer.Argument(help="The node's name.")]) -> None:
    """Undrain NODE: it takes work again."""
    out = client(admin=True).drain(node, undo=True)
    console.print(f"node {esc(out['node'])} takes work again", highlight=False)


@remote
def cluster(as_json: bool = False) -> None:
    c = client().cluster()
    if as_json:
        print_json(c)
        return
    console.print(f"[bold]{esc(c['name'])}[/]: {esc(c['description'])}; GPUs {c['gpus_used']} used, "
                  f"{c['gpus_free']} free of {c['total_gpus']}", highlight=False)
    nodes = Table(title="nodes")
    for col in ("node", "state", "type", "GPUs used/total", "CPUs used/total", "memory GB used/total", "jobs",
                "labels", "heartbeat"):
        nodes.add_column(col)
    for n in c["nodes"]:
        labels = ", ".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items()))
        add_row(nodes, n["name"], n.get("state", "alive"), n["gpu_type"], f"{n['gpus_used']}/{n['gpus']}",
                f"{n['cpus_used']:g}/{n['cpus']:g}", f"{n['mem_used_gb']:g}/{n['mem_gb']:g}", ", ".join(n["jobs"]),
                labels, _age(n.get("last_heartbeat_at")))
    console.print(nodes)
    if c["running"] or c["other_running"]:
        running = Table(title="running jobs" + (f" (and {c['other_running']} of other tenants)"
                                                if c["other_running"] else ""))
        id_column(running)
        for col in ("name", "tenant", "status", "learners", "GPUs", "nodes"):
            running.add_column(col)
        for j in c["running"]:
            add_row(running, j["id"], j["name"], j["tenant"], j["status"], j["learners"], j["gpus"],
                    ", ".join(j["nodes"]))
        console.print(running)
