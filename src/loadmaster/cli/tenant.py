"""`loadmaster tenant create|list|show|set-quota|set-roots|delete|audit|token issue|list|rotate|revoke`: the admin's
verbs (LOADMASTER_ADMIN_TOKEN)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.common import add_row, console, esc, fail, print_json
from loadmaster.cli.remote import client, remote

app = typer.Typer(help="Tenants and their GPU quotas (the admin token: LOADMASTER_ADMIN_TOKEN).",
                  no_args_is_help=True)

token_app = typer.Typer(help="A tenant's users and their API tokens: issue, list, rotate, revoke.",
                        no_args_is_help=True)
app.add_typer(token_app, name="token")

NameArg = Annotated[str, typer.Argument(help="The tenant's name (lower-case letters, digits, '.', '_', '-').")]
UserOpt = Annotated[str, typer.Option("--user", help="The tenant's named user (each has its own tokens; jobs "
                                                     "record who submitted).")]
ExpiresOpt = Annotated[float | None, typer.Option("--expires-in", min=1, help="Seconds the token lives (default: "
                                                                              "until revoked).")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.command("create")
@remote
def create(
    name: NameArg,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="Nominal GPU quota (guaranteed).")],
    borrow: Annotated[int | None, typer.Option("--borrow", min=0, help="Borrowing limit: idle GPUs beyond the "
                                                                       "quota (default: no limit).")] = None,
    user: UserOpt = "default",
    os_user: Annotated[str | None, typer.Option("--os-user", help="An existing OS user its learners run as (when "
                                                                   "the server runs as root; default: a uid of the "
                                                                   "server's range).")] = None,
    as_json: Json = False,
) -> None:
    """Create a tenant and print its first user's API token (shown once)."""
    out = client(admin=True).create_tenant(name, gpus, borrow, user=user, os_user=os_user)
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
    for col in ("tenant", "quota GPUs", "borrowing limit", "GPUs in use", "queued", "running", "roots", "OS user"):
        table.add_column(col)
    for t in tenants:
        roots = ", ".join(f"{r['path']} ({'rw' if r['writable'] else 'ro'})" for r in t.get("roots", ()))
        add_row(table, t["name"], t["gpu_quota"], "none" if t["borrow_limit"] is None else t["borrow_limit"],
                t["gpus_in_use"], t["jobs_queued"], t["jobs_running"], roots or "-", t.get("os_user") or "-")
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


def _print_token(out: dict[str, object], as_json: bool) -> None:
    if as_json:
        print_json(out)
        return
    expiry = "until revoked" if out.get("expires_at") is None else f"expires at unix time {out['expires_at']:.0f}"
    console.print(f"token of {esc(out['tenant'])}/{esc(out.get('user', 'default'))} ({expiry}; shown once):",
                  highlight=False)
    console.print(esc(out["token"]), highlight=False, soft_wrap=True)


@token_app.command("issue")
@remote
def token_issue(name: NameArg, user: UserOpt = "default", expires_in: ExpiresOpt = None, as_json: Json = False) -> None:
    """Issue a token for one of the tenant's users (a new user, or another token for one)."""
    _print_token(client(admin=True).new_token(name, user, expires_in), as_json)


@token_app.command("rotate")
@remote
def token_rotate(name: NameArg, user: UserOpt = "default", expires_in: ExpiresOpt = None,
                 as_json: Json = False) -> None:
    """Replace the user's tokens by a new one: the old ones fail from their next request."""
    _print_token(client(admin=True).rotate_token(name, user, expires_in), as_json)


@token_app.command("revoke")
@remote
def token_revoke(name: NameArg, user: UserOpt = "default", as_json: Json = False) -> None:
    """Revoke every token of the user: they fail from their next request."""
    out = client(admin=True).revoke_token(name, user)
    if as_json:
        print_json(out)
        return
    console.print(f"revoked {out['revoked']} token(s) of {esc(name)}/{esc(user)}", highlight=False)


@token_app.command("list")
@remote
def token_list(name: NameArg, as_json: Json = False) -> None:
    """The tenant's users and how many tokens each holds (never the tokens)."""
    out = client(admin=True).users(name)
    if as_json:
        print_json(out)
        return
    table = Table(title=f"users of {esc(name)}")
    for col in ("user", "tokens", "newest token made", "expires"):
        table.add_column(col)
    for u in out["users"]:
        add_row(table, u["user"], u["tokens"], _when(u["created_at"]),
                "never" if u["expires_at"] is None else _when(u["expires_at"]))
    console.print(table)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + " UTC"


@app.command("delete")
@remote
def delete(name: NameArg, as_json: Json = False) -> None:
    """Delete a tenant with its tokens and its finished jobs' records (refused while it has unfinished jobs)."""
    out = client(admin=True).delete_tenant(name)
    if as_json:
        print_json(out)
        return
    console.print(f"tenant {esc(name)} deleted ({out['jobs_deleted']} finished jobs' records)", highlight=False)


@app.command("set-roots")
@remote
def set_roots(
    name: NameArg,
    root: Annotated[list[str], typer.Option("--root", help="PATH:ro or PATH:rw, a directory its jobs may use beside "
                                                           "their own; repeat it; none clears them.")] = [],  # noqa: B006
    as_json: Json = False,
) -> None:
    """Set the directories a tenant's jobs may read (ro) or write (rw) beside their own and the tenant's area."""
    roots = []
    for item in root:
        path, _, mode = item.rpartition(":")
        if mode not in ("ro", "rw") or not path:
            fail(f"--root {item!r}: write PATH:ro or PATH:rw")
        roots.append({"path": path, "writable": mode == "rw"})
    t = client(admin=True).set_roots(name, roots)
    if as_json:
        print_json(t)
        return
    shown = ", ".join(f"{r['path']} ({'rw' if r['writable'] else 'ro'})" for r in t["roots"]) or "none"
    console.print(f"tenant {esc(t['name'])}: roots {esc(shown)}", highlight=False)


@app.command("audit")
@remote
def audit(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's entries.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="How many, newest first.")] = 50,
    as_json: Json = False,
) -> None:
    """The admin actions (tenants created, changed, deleted; tokens issued, rotated, revoked), newest first."""
    entries = client(admin=True).audit(tenant, limit)
    if as_json:
        print_json(entries)
        return
    table = Table(title=f"{len(entries)} admin action(s)")
    for col in ("when", "actor", "action", "tenant", "detail"):
        table.add_column(col)
    for e in entries:
        add_row(table, _when(e["at"]), e["actor"], e["action"], e["tenant"], e["detail"])
    console.print(table)
