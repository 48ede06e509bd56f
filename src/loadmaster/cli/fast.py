"""A plain `loadmaster sim run` or `loadmaster queue` without building the Typer app.

Typer, Click's machinery and pydantic cost more to import and to parse with than a short simulation takes
to run, and three times what `queue` does besides (~0.7 s of CPU: Typer coerces every option through a
pydantic TypeAdapter it builds at start). For those two commands, when every option is one this parser knows,
with a value of the plainest form (digits for an integer, a decimal for a float, a member of the choice), it
runs the command itself; anything else (--help, an unknown option, a value Typer would have to judge, a value
out of range) returns None and the Typer app handles the whole command line as before, errors and help text
included.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], Any]:
    def parse(text: str) -> int | None:
        if not _INT.fullmatch(text):
            return None
        value = int(text)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            return None
        return value

    return parse


def _float(minimum: float | None = None) -> Callable[[str], Any]:
    def parse(text: str) -> float | None:
        if not _FLOAT.fullmatch(text):
            return None
        value = float(text)
        return None if minimum is not None and value < minimum else value

    return parse


def _retry(text: str) -> Any:
    from loadmaster.sim.failures import RetryPolicy

    return RetryPolicy(text) if text in {r.value for r in RetryPolicy} else None


# `sim run`'s options (cli/sim.py): the parameter each sets, and how its text becomes a value (None: not
# plain enough, Typer decides). Flags take no value.
_VALUED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--out": ("out", Path), "--trace": ("trace", str), "--cluster": ("cluster", str), "--policy": ("policy", str),
    "--placement": ("placement", str), "--format": ("fmt", str), "--seed": ("seed", _int()),
    "--retry": ("retry", _retry), "--max-attempts": ("max_attempts", _int(1)), "--quotas": ("quotas", Path),
    "--until": ("until", _float(0)), "--checkpoint-interval": ("checkpoint_interval", _float(0)),
    "--restart-overhead": ("restart_overhead", _float(0)), "--gang": ("gang", str),
    "--partial-timeout": ("partial_timeout", str), "--migrate": ("migrate", str),
    "--smoke-test": ("smoke_test", _float(0)), "--plots": ("plots", str), "--vc-queue": ("vc_queue", _int(1)),
}
_FLAGS = {"--no-plots": "no_plots", "--json": "as_json"}
# `queue`'s (cli/queue.py), likewise.
_QUEUE_VALUED: dict[str, tuple[str, Callable[[str], Any]]] = {"--tenant": ("tenant", str),
                                                              "--limit": ("limit", _int(1, 10_000))}
_QUEUE_FLAGS = {"--all": "show_all", "--json": "as_json"}
QUEUE_DEFAULTS: dict[str, Any] = {"tenant": None, "limit": 50, "show_all": False, "as_json": False}


def parse_sim_run(argv: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of run_sim() for `argv` (the words after `sim run`), or None if Typer must
    parse them."""
    return _parse(argv, _VALUED, _FLAGS)


def parse_queue(argv: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of cli.queue.queue() for `argv` (the words after `queue`), or None."""
    return _parse(argv, _QUEUE_VALUED, _QUEUE_FLAGS)


def _parse(argv: list[str], valued: dict[str, tuple[str, Callable[[str], Any]]], flags: dict[str, str]
           ) -> dict[str, Any] | None:
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, inline = word.partition("=")
        if name in flags and not eq:
            values[flags[name]] = True
            i += 1
            continue
        if name not in valued:
            return None
        if eq:
            text = inline
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            text = argv[i + 1]
            i += 2
        else:
            return None  # a missing value, or one that looks like an option: Click's rules decide
        param, convert = valued[name]
        value = convert(text)
        if value is None:
            return None
        values[param] = value  # a repeated option: the last one counts, as in Click
    return values


def run_defaults() -> dict[str, Any]:
    """run_sim()'s arguments for options left out: the Typer command's defaults (tests/cli compares them)."""
    from loadmaster.cli.sim_run import DEFAULT_CLUSTER, DEFAULT_TRACE
    from loadmaster.sim.failures import RetryPolicy

    return {
        "out": Path("runs/latest"), "trace": DEFAULT_TRACE, "cluster": DEFAULT_CLUSTER, "policy": "fifo",
        "placement": "pack", "fmt": "auto", "seed": 0, "retry": RetryPolicy.TRACE, "max_attempts": 3,
        "quotas": None, "until": None, "checkpoint_interval": 900.0, "restart_overhead": 30.0, "gang": "on",
        "partial_timeout": "never", "migrate": "off", "smoke_test": 0.0, "plots": "svg", "no_plots": False,
        "as_json": False, "vc_queue": None,
    }


def run_fast(argv: list[str]) -> int | None:
    """Run `loadmaster sim run ...` or `loadmaster queue ...` from `argv` (the words after the program name)
    if it is plain enough; returns the exit status, or None if the Typer app must run the command line
    instead."""
    if argv[:2] == ["sim", "run"]:
        values, command = parse_sim_run(argv[2:]), _sim_run
    elif argv[:1] == ["queue"]:
        values, command = parse_queue(argv[1:]), _queue
    else:
        return None
    if values is None:
        return None
    try:
        command(values)
    except Exception as exc:
        import typer  # only on the way out of an error: user_errors() and fail() end with typer.Exit

        if isinstance(exc, typer.Exit):
            return int(exc.exit_code)
        raise
    return 0


def _sim_run(values: dict[str, Any]) -> None:
    from loadmaster.cli.common import user_errors
    from loadmaster.cli.sim_run import run_sim

    with user_errors():
        run_sim(**{**run_defaults(), **values})


def _queue(values: dict[str, Any]) -> None:
    # httpx pulls in, when they are installed, trio (httpcore's async backend) and its own command line
    # (click, pygments): this process's synchronous requests use neither, and they are ~70 ms of its ~250 ms
    # of CPU. Marked absent, httpx and httpcore go without them, as they are written to.
    for optional in ("trio", "httpx._main"):
        sys.modules.setdefault(optional, None)  # type: ignore[arg-type]
    from loadmaster.cli.queue import queue

    queue(**{**QUEUE_DEFAULTS, **values})
