"""`loadmaster server`: the API and the control loop in one process (SIGINT/SIGTERM stop it cleanly)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.common import fail


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
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", min=0.001, help="The most MiB a job's code "
                                                                                  "package (--working-dir) may "
                                                                                  "unpack to.")] = 100.0,
) -> None:
    """Run the platform: the API (docs at /docs, dashboard at /ui) and the control loop."""
    from loadmaster.platform.server import Platform, ServerError, ServerOptions
    from loadmaster.platform.store.db import StoreError
    from loadmaster.platform.store.tenants import TenantError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # "Context impl SQLiteImpl" at every start
    options = ServerOptions(db=db, executor=executor, nodes=nodes, host=host, port=port, policy=policy,
                            placement=placement, data_dir=data_dir, grace_s=grace, tick_s=tick,
                            checkpoint_interval_s=checkpoint_interval, max_upload_mb=max_upload_mb)
    try:
        platform = Platform.build(options)
    except (ServerError, StoreError, TenantError, OSError) as err:
        fail(str(err))
    try:
        platform.serve()
    except OSError as err:  # the port is taken, or not ours to bind
        fail(str(err))
