"""`loadmaster usage`: GPU-hours used, failed and lost to preemption, by day, tenant, user or job (Slurm's sacct),
from the server's store."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, fail, print_json
from loadmaster.cli.remote import client, remote

BY = ("day", "tenant", "user", "job")
_AGO = re.compile(r"^(?P<n>[0-9]+(\.[0-9]+)?)(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, option: str, now: float | None = None) -> float:
    """7d / 24h / 90m ago, an ISO date or date-time (local time), or UNIX seconds."""
    now = time.time() if now is None else now
    m = _AGO.match(text.strip())
    if m:
        return now - float(m["n"]) * _UNIT_S[m["unit"]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        fail(f"{option} {text!r}: give a time ago (7d, 24h, 90m), a date (2026-11-01), a date and time "
             "(2026-11-01T08:00) or UNIX seconds")


def _hours(h: float) -> str:
    return f"{h:,.2f}"


@remote
def usage(
    since: Annotated[str, typer.Option("--since", help="From: 7d, 24h, 90m ago, a date (2026-11-01) or "
                                                       "date-time, or UNIX seconds.")] = "7d",
    until: Annotated[str | None, typer.Option("--until", help="To (same forms; default: now).")] = None,
    by: Annotated[str, typer.Option("--by", help="Group by day (UTC), tenant, user (tenant/user) or job.")] = "day",
    tenant: Annotated[str | None, typer.Option("--tenant", help="Admin: one tenant's (a tenant's token sees "
                                                                "its own).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """GPU-hours used, failed (failed or lost attempts), preempted (attempts a preemption ended) and lost to
    preemption (their time after the last checkpoint), from the store. With LOADMASTER_ADMIN_TOKEN set: every
    tenant's, or --tenant's."""
    if by not in BY:
        fail(f"--by {by!r}: choose one of {', '.join(BY)}")
    now = time.time()
    start = parse_when(since, "--since", now)
    end = parse_when(until, "--until", now) if until is not None else None
    if end is not None and start >= end:
        fail("--since must come before --until")
    out: dict[str, Any] = client(admin=True).usage(since=start, until=end, by=by, tenant=tenant)
    if as_json:
        print_json(out)
        return
    first = datetime.fromtimestamp(out["since"]).strftime("%Y-%m-%d %H:%M")
    last = datetime.fromtimestamp(out["until"]).strftime("%Y-%m-%d %H:%M")
    who = f" tenant {out['tenant']}" if out["tenant"] else ""
    table = Table(title=f"GPU-hours{who}, {first} to {last}, by {by}")
    table.add_column(by, no_wrap=True)
    if by == "job":
        table.add_column("name")
    for col in ("used", "failed", "preempted", "lost", "attempts", "jobs"):
        table.add_column(col, justify="right")
    for r in [*out["rows"], out["total"]]:
        cells = [r["key"], *([r["name"] or ""] if by == "job" else []), _hours(r["gpu_hours"]),
                 _hours(r["failed_gpu_hours"]), _hours(r["preempted_gpu_hours"]), _hours(r["lost_gpu_hours"]),
                 str(r["attempts"]), str(r["jobs"])]
        add_row(table, *cells)
    console.print(table)
