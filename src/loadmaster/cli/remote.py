"""What the platform verbs share (job, queue, cluster, tenant): a client from the environment, errors as one
line, times for people. httpx is imported only when a verb runs, so `loadmaster sim ...` starts as fast as
before."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.table import Table

from loadmaster.cli.common import fail

if TYPE_CHECKING:
    from loadmaster.platform.client import Client

T = TypeVar("T")

JsonOpt = typer.Option("--json", help="Print JSON.")


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


FULL_ID = re.compile(r"^j-[0-9a-f]{12}$")  # store.jobs.new_job_id()
_PREFIX = re.compile(r"^[A-Za-z0-9-]{1,32}$")
AMBIGUOUS_SHOWN = 5


def resolve_job(c: Client, text: str) -> str:
    """A job's full id from its id or a unique prefix of it (`j-3f2a` or `3f2a`), among the jobs this token
    sees; one line and exit 2 when none or several match."""
    if FULL_ID.match(text):
        return text
    if not _PREFIX.match(text):
        fail(f"{text!r} is not a job id: ids look like j-3f2a9c01d4e7 (a unique prefix will do)")
    prefix = text if text.startswith("j-") or len(text) < 2 else f"j-{text}"
    found = [j["id"] for j in c.jobs(id_prefix=prefix, limit=AMBIGUOUS_SHOWN + 1)]
    if len(found) == 1:
        return str(found[0])
    if not found:
        fail(f"no job {text!r} for this token (no id starts with {prefix}); `loadmaster job list` shows your jobs")
    more = " and more" if len(found) > AMBIGUOUS_SHOWN else ""
    fail(f"{text!r} matches several jobs ({', '.join(found[:AMBIGUOUS_SHOWN])}{more}); give more of the id")


def id_column(table: Table, title: str = "id") -> None:
    """A job id column: never cut or wrapped, so an id can be copied whole from any terminal."""
    table.add_column(title, no_wrap=True, min_width=len("j-") + 12)


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
