"""`loadmaster server`: the API and the control loop in one process (SIGINT/SIGTERM stop it cleanly)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.common import fail

ADMIN_ENV = "LOADMASTER_ADMIN_TOKEN"


_SECRET_FD = "LOADMASTER_ADMIN_TOKEN_FD"


def _take_admin_secret() -> str | None:
    """LOADMASTER_ADMIN_TOKEN, out of this process' environment for good.

    Deleting a variable does not erase it from /proc/PID/environ (the kernel shows the environment the
    process was started with), so a server started with the token in its environment starts itself again
    without it, handing the token over through a pipe; the variable naming the pipe holds no secret."""
    if _SECRET_FD in os.environ:
        fd = int(os.environ.pop(_SECRET_FD))
        with os.fdopen(fd) as pipe:
            return pipe.read()
    secret = os.environ.pop(ADMIN_ENV, None)
    if secret is None or sys.argv[1:2] != ["server"]:  # in-process callers (tests) have no argv to start again
        return secret
    read, write = os.pipe()
    os.write(write, secret.encode())
    os.close(write)
    os.set_inheritable(read, True)
    env = {k: v for k, v in os.environ.items() if k != ADMIN_ENV} | {_SECRET_FD: str(read)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "loadmaster.cli.main", *sys.argv[1:]], env)


def server(
    db: Annotated[str | None, typer.Option("--db", help="Database URL: sqlite:///PATH or postgresql://HOST/DB "
                                                        "(default: SQLite in the data directory).")] = None,
    executor: Annotated[str, typer.Option("--executor", help="local (learners are processes here) or ray.")] = "local",
    nodes: Annotated[str | None, typer.Option("--nodes", help="This machine's nodes: auto (nvidia-smi) or "
                                                              "virtual ones like 2x4 or 1x2:8cpu:32gb.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")] = 8080,
    policy: Annotated[str, typer.Option("--policy", help="Scheduling policy (as in `sim run`).")] = "fair",
    placement: Annotated[str, typer.Option("--placement", help="Default placement (a manifest may choose "
                                                               "its own).")] = "pack",
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Where jobs' logs, checkpoints and results "
                                                                     "live (default: the user's data "
                                                                     "directory).")] = None,
    grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds a stopped learner has to checkpoint "
                                                                "before SIGKILL.")] = 10.0,
    tick: Annotated[float, typer.Option("--tick", min=0.01, help="Seconds between control-loop rounds when "
                                                                 "nothing happens.")] = 0.5,
    checkpoint_interval: Annotated[float | None, typer.Option(
        "--checkpoint-interval", help="Seconds between the jobs' checkpoints, as the policy weighs what a "
                                      "preemption loses (default: the policy's, 900).")] = None,
    migrate: Annotated[bool, typer.Option(
        "--migrate", help="Defragment: when a gang waits because its GPUs are scattered, move smaller running "
                          "jobs (checkpoint, stop, requeue) so that it starts; themis also re-auctions jobs "
                          "whose lease ended onto free GPUs they run faster on (live: a halt and a requeue).")] = False,
    smoke_test: Annotated[float, typer.Option(
        "--smoke-test", help="Seconds a new multi-GPU job first runs on one GPU before its gang is placed (a "
                             "failure there costs one GPU); 0: off.")] = 0.0,
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", min=0.001, help="The most MiB a job's code "
                                                                                  "package (--working-dir) may "
                                                                                  "unpack to.")] = 100.0,
    sandbox: Annotated[str, typer.Option("--sandbox", help="auto: confine each learner with bubblewrap where it "
                                                           "works; none; or the bwrap binary's path "
                                                           "(required then).")] = "auto",
    tenant_users: Annotated[bool, typer.Option("--tenant-users/--no-tenant-users",
                                               help="As root: run learners as each tenant's own OS user.")] = True,
    # 200_000 is tenancy.DEFAULT_UID_BASE (not imported: the CLI starts without the platform's modules).
    uid_base: Annotated[int, typer.Option("--uid-base", help="First uid (and gid) of the range tenants' users "
                                                             "get (tenant N: base + N), unless mapped with "
                                                             "`tenant create --os-user`.")] = 200_000,
    insecure_shared_user: Annotated[bool, typer.Option(
        "--insecure-shared-user", help="Allow more than one tenant without a sandbox (their jobs can then read "
                                       "and change each other's files).")] = False,
    admin_token_file: Annotated[Path | None, typer.Option(
        "--admin-token-file", help="Read the admin token from this file (mode 0600) instead of "
                                   "LOADMASTER_ADMIN_TOKEN.")] = None,
) -> None:
    """Run the platform: the API (docs at /docs, dashboard at /ui) and the control loop."""
    from loadmaster.platform.server import Platform, ServerError, ServerOptions
    from loadmaster.platform.store.db import StoreError
    from loadmaster.platform.store.tenants import TenantError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # "Context impl SQLiteImpl" at every start
    secret = _take_admin_secret()
    options = ServerOptions(db=db, executor=executor, nodes=nodes, host=host, port=port, policy=policy,
                            placement=placement, data_dir=data_dir, grace_s=grace, tick_s=tick,
                            checkpoint_interval_s=checkpoint_interval, sandbox=sandbox, tenant_users=tenant_users,
                            uid_base=uid_base, insecure_shared_user=insecure_shared_user,
                            admin_token_file=admin_token_file, max_upload_mb=max_upload_mb,
                            migrate=migrate, smoke_test_s=smoke_test)
    env = dict(os.environ)
    if secret is not None:
        env[ADMIN_ENV] = secret
    try:
        platform = Platform.build(options, env)
    except (ServerError, StoreError, TenantError, OSError) as err:
        fail(str(err))
    try:
        platform.serve()
    except OSError as err:  # the port is taken, or not ours to bind
        fail(str(err))
