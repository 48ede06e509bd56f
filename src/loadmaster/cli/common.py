"""What every CLI verb shares: the console, clean errors, and the progress bar."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

# Typer and Rich (its consoles, progress bar and tables) are imported where used: a plain `sim run --json`
# (cli/fast.py) runs without them (Rich's console was ~25 ms of the process).
if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    # No emoji codes: a job's reason or a log line with ":zzz:" is printed as written. Text from users, logs
    # and the server goes through esc() (inside markup) or Text (table cells), so "[a-z]+" in an error is not
    # a tag. Made on first use (module __getattr__ below).
    console: Console
    err_console: Console

T = TypeVar("T")


def __getattr__(name: str) -> Any:
    """`console` and `err_console`, made (and Rich imported) on first use."""
    if name in ("console", "err_console"):
        return _get(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _get(name: str) -> Console:
    made: Console | None = globals().get(name)
    if made is None:
        from rich.console import Console

        made = globals()[name] = Console(stderr=name == "err_console", emoji=False)
    return made


def err_console_if_terminal() -> Console | None:
    """Rich's stderr console where its styles show (a terminal, or FORCE_COLOR), else None: plain text is then
    written as is (not wrapped at 80 columns, no markup read in it), without importing Rich."""
    if "err_console" not in globals() and not (os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE")
                                               or sys.stderr.isatty()):
        return None
    err = _get("err_console")
    return err if err.is_terminal else None


def note(text: str) -> None:
    """A dim note on stderr (what loading skipped, ...): literal text, styled only where styles show."""
    err = err_console_if_terminal()
    if err is None:
        sys.stderr.write(text + "\n")
        return
    from rich.text import Text

    err.print(Text(text, style="dim"), highlight=False)


def esc(value: object) -> str:
    """`value` as literal text inside a Rich markup string."""
    from rich.markup import escape

    return escape(str(value))


def add_row(table: Table, *cells: object) -> None:
    """A table row of literal text (cells are never read as markup)."""
    from rich.text import Text

    table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells))


def fail(message: str, code: int = 2) -> NoReturn:
    """One line, however narrow the terminal (soft wrap): an error a script can grep. The message is literal
    text (it often quotes the user's input)."""
    import typer
    from rich.text import Text

    _get("err_console").print(Text.assemble(("error:", "bold red"), " ", str(message)), highlight=False, soft_wrap=True)
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
        self.enabled = enabled and _get("console").is_terminal
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
                TimeElapsedColumn(), console=_get("console"), transient=True,
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
