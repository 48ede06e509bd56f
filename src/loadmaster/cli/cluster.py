"""`loadmaster cluster`: the server's nodes, GPUs used and free, and the running jobs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, esc, print_json
from loadmaster.cli.remote import client, id_column, remote


@remote
def cluster(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Nodes with GPUs used/free, and running jobs."""
    c = client().cluster()
    if as_json:
        print_json(c)
        return
    console.print(f"[bold]{esc(c['name'])}[/]: {esc(c['description'])}; GPUs {c['gpus_used']} used, "
                  f"{c['gpus_free']} free of {c['total_gpus']}", highlight=False)
    nodes = Table(title="nodes")
    for col in ("node", "type", "rack", "GPUs used/total", "CPUs used/total", "memory GB used/total", "jobs"):
        nodes.add_column(col)
    for n in c["nodes"]:
        add_row(nodes, n["name"], n["gpu_type"], n["rack"], f"{n['gpus_used']}/{n['gpus']}",
                f"{n['cpus_used']:g}/{n['cpus']:g}", f"{n['mem_used_gb']:g}/{n['mem_gb']:g}", ", ".join(n["jobs"]))
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
