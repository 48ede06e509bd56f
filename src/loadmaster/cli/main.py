"""The `loadmaster` command."""

from __future__ import annotations

import importlib

import typer
from typer import _click  # typer vendors click: its Context and Command are the types TyperGroup uses
from typer.core import TyperGroup

from loadmaster.cli import cluster, demo, job, queue, server, tenant, usage

# Command groups whose modules pull in NumPy, the scheduling core and the trace loaders: imported when one
# of their commands runs (or the top-level help lists them), so that `loadmaster job list` and friends
# start without them. name -> module with a Typer `app`.
LAZY_GROUPS = {"sim": "loadmaster.cli.sim", "trace": "loadmaster.cli.trace"}


class _Commands(TyperGroup):
    def list_commands(self, ctx: _click.Context) -> list[str]:
        return [*super().list_commands(ctx), *LAZY_GROUPS]

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        module = LAZY_GROUPS.get(cmd_name)
        if module is None:
            return super().get_command(ctx, cmd_name)
        group = typer.main.get_command(importlib.import_module(module).app)
        group.name = cmd_name
        return group


app = typer.Typer(
    name="loadmaster",
    help="Multi-tenant GPU cluster scheduler for deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_Commands,
)
# The platform: the server, and the verbs that talk to it over HTTP.
app.command("server")(server.server)
app.add_typer(job.app, name="job")
app.command("queue")(queue.queue)
app.command("usage")(usage.usage)
app.add_typer(cluster.app, name="cluster")
app.add_typer(tenant.app, name="tenant")
# The platform and the simulator together: a bundled trace replayed live, beside its simulation.
app.command("demo")(demo.demo)


if __name__ == "__main__":
    app()
