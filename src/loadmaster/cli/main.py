"""The `loadmaster` command.

The Typer app is built on first use (`app`, a module attribute made by __getattr__): `main()` first lets
cli/fast.py run a plain `sim run` or `queue` without building it, and hands everything else to the app.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

# Command groups whose modules pull in NumPy, the scheduling core and the trace loaders: imported when one
# of their commands runs (or the top-level help lists them), so that `loadmaster job list` and friends
# start without them. name -> module with a Typer `app`.
LAZY_GROUPS = {"sim": "loadmaster.cli.sim", "trace": "loadmaster.cli.trace"}


def _build() -> typer.Typer:
    import typer
    from typer import _click  # typer vendors click: its Context and Command are the types TyperGroup uses
    from typer.core import TyperGroup

    from loadmaster.cli import cluster, demo, job, queue, server, tenant, usage

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

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        built = globals()["app"] = _build()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> Any:
    """The console script: a plain `sim run` or `queue` without the app (cli/fast.py), anything else through it."""
    from loadmaster.cli.fast import run_fast

    if sys.argv[1:2] == ["sim"]:
        # A simulation's process makes objects that live to its end, and exits (sim/collector.py): the collector
        # stays off for good, so that nothing walks them, not even once after the run as a pause's end would.
        gc.disable()
    status = run_fast(sys.argv[1:])
    if status is not None:
        sys.exit(status)
    return __getattr__("app")()


def script() -> None:
    """The console script and `python -m loadmaster.cli.main`: main(), and after a simulation that succeeded,
    the end of the process without the interpreter's teardown. A simulation keeps its records, specs and
    views to its end, and freeing them one by one at exit cost ~0.35 s of CPU on 117,000 jobs (as much as
    loading them); its outputs are written and closed by then, and the standard streams are flushed here.
    Anything else, and a failure, exits as usual."""
    simulating = sys.argv[1:2] == ["sim"]
    try:
        main()
    except SystemExit as exc:
        if not (simulating and exc.code in (0, None)):
            raise
    else:
        if not simulating:
            return
    if "logging" in sys.modules:  # handlers may buffer (nothing in a simulation logs today)
        sys.modules["logging"].shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    script()
