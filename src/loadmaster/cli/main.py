"""The `loadmaster` command."""

from __future__ import annotations

import typer

from loadmaster.cli import cluster, job, queue, server, sim, tenant, trace

app = typer.Typer(
    name="loadmaster",
    help="Multi-tenant GPU cluster scheduler for deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(sim.app, name="sim")
app.add_typer(trace.app, name="trace")
# The platform: the server, and the verbs that talk to it over HTTP.
app.command("server")(server.server)
app.add_typer(job.app, name="job")
app.command("queue")(queue.queue)
app.command("cluster")(cluster.cluster)
app.add_typer(tenant.app, name="tenant")


if __name__ == "__main__":
    app()
