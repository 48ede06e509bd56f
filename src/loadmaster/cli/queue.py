"""`loadmaster queue`: queued jobs in scheduling order, why each waits, and when it may start."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import console, print_json
from loadmaster.cli.remote import client, in_, remote


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
    for col in ("pos", "job", "name", "tenant", "waiting because", "estimated start"):
        table.add_column(col)
    for e in entries:
        table.add_row(str(e["position"]), e["job_id"], e["name"], e["tenant"], e["wait_reason"].replace("_", " "),
                      in_(e["estimated_start_at"]))
    console.print(table)
