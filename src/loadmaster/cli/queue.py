"""`loadmaster queue`: queued jobs in scheduling order, why each waits, and when it may start."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, err_console, print_json
from loadmaster.cli.remote import client, duration, id_column, in_, remote


@remote
def queue(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Admin: one tenant's jobs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Queued jobs: position, waiting reason, estimated start (the simulator run forward from now)."""
    entries = client().queue(tenant)
    if as_json:
        print_json(entries)
        return
    table = Table(title=f"{len(entries)} queued job(s)")
    table.add_column("pos")
    id_column(table)
    for col in ("name", "tenant", "waiting because"):
        table.add_column(col)
    table.add_column("run time", no_wrap=True)
    table.add_column("estimated start")
    for e in entries:
        run_time = "-" if e.get("expected_duration_s") is None else duration(e["expected_duration_s"])
        add_row(table, e["position"], e["job_id"], e["name"], e["tenant"], e["wait_reason"].replace("_", " "),
                f"{run_time} (guess)" if e.get("duration_guessed") else run_time, in_(e["estimated_start_at"]))
    console.print(table)
    if any(e.get("duration_guessed") for e in entries):
        err_console.print("[dim](guess): the job gave no expected_duration_s or max_runtime_s and has reported no "
                          "progress yet, so the estimates assume 1 h for it; set expected_duration_s in its "
                          "manifest for better ones[/]", highlight=False, soft_wrap=True)
