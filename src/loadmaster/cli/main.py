"""The `loadmaster` command."""

from __future__ import annotations

import typer

from loadmaster.cli import sim, trace

app = typer.Typer(
    name="loadmaster",
    help="Multi-tenant GPU cluster scheduler for deep-learning training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(sim.app, name="sim")
app.add_typer(trace.app, name="trace")


if __name__ == "__main__":
    app()
