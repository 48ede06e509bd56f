"""What every CLI verb shares: the console, clean errors, and the progress bar."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.text import Text

# Typer and Rich's progress bar and tables are imported where used: a plain `sim run` (cli/fast.py) starts
# without them.
if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

# No emoji codes: a job's reason or a log line with ":zzz:" is printed as written. Text from users, logs and
# the server goes through esc() (inside markup) or Text (table cells), so "[a-z]+" in an error is not a tag.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

T = TypeVar("T")


def esc(value: object) -> str:
    """`value` as literal text inside a Rich markup string."""
    return escape(str(value))


def add_row(table: Table, *cells: object) -> None:
    """A table row of literal text (cells are never read as markup)."""
    table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells))


def fail(message: str, code: int = 2) -> NoReturn:
    """One line, however narrow the terminal (soft wrap): an error a script can grep. The message is literal
    text (it often quotes the user's input)."""
    import typer

    err_console.print(Text.assemble(("error:", "bold red"), " ", str(message)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad input into one clear line and exit status 2, never a traceback."""
    try:
        yield
    except (ValueError, KeyError, OSError) as exc:
        if isinstance(exc, KeyError):
            text = f"unknown name {exc}"
        elif isinstance(exc, FileNotFoundError) and exc.filename:
            text = f"no such file: {exc.filename}"
        elif isinstance(exc, OSError) and exc.filename:  # --out naming a file, a read-only folder...
            text = f"{exc.filename}: {exc.strerror or exc}"
        else:
            text = str(exc)
        fail(text)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


class SimProgress:
    """A Rich progress bar over simulated time that appears only once a run has taken a second."""

    def __init__(self, horizon_s: float, label: str, enabled: bool = True) -> None:
        self.horizon = max(horizon_s, 1.0)
        self.label = label
        self.enabled = enabled and console.is_terminal
        self.started = time.perf_counter()
        self.progress: Progress | None = None
        self.task: Any = None

    def __call__(self, clock_s: float, finished_jobs: int) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            if time.perf_counter() - self.started < 1.0:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("sim time {task.fields[sim_h]:.1f} h, {task.fields[done]} jobs done"),
                TimeElapsedColumn(), console=console, transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=self.horizon, sim_h=0.0, done=0)
        self.progress.update(self.task, completed=min(clock_s, self.horizon), sim_h=clock_s / 3600,
                             done=finished_jobs)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: run a command body under user_errors()."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with user_errors():
            return fn(*args, **kwargs)
        raise AssertionError("unreachable")

    return wrapper
