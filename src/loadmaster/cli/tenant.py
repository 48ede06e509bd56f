"""`loadmaster tenant create|list|set-quota|token`: the admin's verbs (LOADMASTER_ADMIN_TOKEN)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, esc, fail, print_json
from loadmaster.cli.remote import client, remote

app = typer.Typer(help="Tenants and their GPU quotas (the admin token: LOADMASTER_ADMIN_TOKEN).",
                  no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The tenant's name (lower-case letters, digits, '.', '_', '-').")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.command("create")
@remote
def create(
    name: NameArg,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="Nominal GPU quota (guaranteed).")],
    borrow: Annotated[int | None, typer.Option("--borrow", min=0, help="Borrowing limit: idle GPUs beyond the "
                                                                       "quota (default: no limit).")] = None,
    as_json: Json = False,
) -> None:
    """Create a tenant and print its API token (shown once)."""
    out = client(admin=True).create_tenant(name, gpus, borrow)
    if as_json:
        print_json(out)
        return
    t = out["tenant"]
    limit = "no borrowing limit" if t["borrow_limit"] is None else f"may borrow {t['borrow_limit']} more"
    console.print(f"tenant {esc(t['name'])}: quota {t['gpu_quota']} GPUs, {limit}", highlight=False)
    console.print("API token (shown once; the server keeps only its hash):", highlight=False)
    console.print(esc(out["token"]), highlight=False, soft_wrap=True)
    console.print(f"Give it to the tenant as LOADMASTER_TOKEN={esc(out['token'])}", highlight=False, soft_wrap=True)


@app.command("list")
@remote
def list_tenants(as_json: Json = False) -> None:
    """Tenants with quotas and what they use now."""
    tenants = client(admin=True).tenants()
    if as_json:
        print_json(tenants)
        return
    table = Table(title=f"{len(tenants)} tenant(s)")
    for col in ("tenant", "quota GPUs", "borrowing limit", "GPUs in use", "queued", "running"):
        table.add_column(col)
    for t in tenants:
        add_row(table, t["name"], t["gpu_quota"], "none" if t["borrow_limit"] is None else t["borrow_limit"],
                t["gpus_in_use"], t["jobs_queued"], t["jobs_running"])
    console.print(table)


@app.command("set-quota")
@remote
def set_quota(
    name: NameArg,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="New nominal quota.")] = None,
    borrow: Annotated[int | None, typer.Option("--borrow", min=0, help="New borrowing limit.")] = None,
    no_borrow_limit: Annotated[bool, typer.Option("--no-borrow-limit", help="Borrow idle GPUs without "
                                                                            "limit.")] = False,
    as_json: Json = False,
) -> None:
    """Change a tenant's quota or borrowing limit."""
    if gpus is None and borrow is None and not no_borrow_limit:
        fail("give --gpus N, --borrow N or --no-borrow-limit")
    if borrow is not None and no_borrow_limit:
        fail("--borrow and --no-borrow-limit contradict each other: give one")
    t = client(admin=True).set_quota(name, gpus=gpus, borrow=borrow, unlimited_borrowing=no_borrow_limit)
    if as_json:
        print_json(t)
        return
    limit = "none" if t["borrow_limit"] is None else t["borrow_limit"]
    console.print(f"tenant {esc(t['name'])}: quota {t['gpu_quota']} GPUs, borrowing limit {esc(limit)}",
                  highlight=False)


@app.command("token")
@remote
def token(name: NameArg, as_json: Json = False) -> None:
    """Issue another API token for a tenant (shown once)."""
    out = client(admin=True).new_token(name)
    if as_json:
        print_json(out)
        return
    console.print(esc(out["token"]), highlight=False, soft_wrap=True)
