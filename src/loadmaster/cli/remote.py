"""What the platform verbs share (job, queue, cluster, tenant): a client from the environment, errors as one
line, times for people. httpx is imported only when a verb runs, so `loadmaster sim ...` starts as fast as
before."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from loadmaster.cli.common import err_console

if TYPE_CHECKING:
    from loadmaster.platform.client import Client

T = TypeVar("T")

JsonOpt = typer.Option("--json", help="Print JSON.")


def fail(message: str, code: int = 2) -> NoReturn:
    """One line, however narrow the terminal (soft wrap): an error a script can grep."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def client(admin: bool = False) -> Client:
    from loadmaster.platform.client import Client, ClientError

    try:
        return Client.from_env(admin=admin)
    except ClientError as err:
        fail(str(err))


@contextmanager
def remote_errors() -> Iterator[None]:
    """A server that is down, a bad token, an error the API answered: one line, exit status 2."""
    from loadmaster.platform.client import ClientError

    try:
        yield
    except ClientError as err:
        fail(str(err))


def remote(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run a verb's body under remote_errors()."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with remote_errors():
            return fn(*args, **kwargs)
        raise AssertionError("unreachable")

    return wrapper


def when(t: float | None, now: float | None = None) -> str:
    """A UNIX time as local clock time, with how long ago or ahead it is."""
    if t is None:
        return "-"
    now = time.time() if now is None else now
    clock = datetime.fromtimestamp(t).strftime("%H:%M:%S" if abs(now - t) < 86400 else "%Y-%m-%d %H:%M")
    return f"{clock} ({duration(t - now)})" if t > now + 1 else f"{clock} ({duration(now - t)} ago)"


def duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def in_(t: float | None, now: float | None = None) -> str:
    """An estimated time ahead: 'in 5m00s (12:34:56)'."""
    if t is None:
        return "beyond horizon"
    now = time.time() if now is None else now
    if t <= now + 1:
        return "now"
    return f"in {duration(t - now)} ({datetime.fromtimestamp(t).strftime('%H:%M:%S')})"
