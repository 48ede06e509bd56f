"""A learner that behaves like a launcher (torchrun, a daemonising helper), for the process-tree tests (stdlib).

`python tree_learner.py MODE DIR`:
  launcher   start two workers in sessions of their own (as torchrun does) and wait for them; every process
             writes DIR/pid-NAME, and a line to DIR/term-NAME each time SIGTERM reaches it, then keeps running
             (a worker that needs the grace period to checkpoint); prints "ready" once every pid file is there
  orphan     start one worker in a session of its own that ignores SIGTERM, and exit 0 at once (its worker is
             orphaned: it left the learner's process group)
  worker     (internal) the workers above
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType


def mark(directory: Path, name: str, what: str) -> None:
    (directory / f"{what}-{name}").write_text(str(os.getpid()))


def arm(directory: Path, name: str, ignore: bool) -> None:
    def on_term(signum: int, frame: FrameType | None) -> None:
        with (directory / f"term-{name}").open("a") as f:  # one line per SIGTERM received
            f.write(f"{os.getpid()}\n")

    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else on_term)
    mark(directory, name, "pid")


def spawn_worker(directory: Path, name: str, ignore: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "worker", str(directory), name, "ignore" if ignore else "trap"],
                            start_new_session=True)


def main(mode: str, where: str, *rest: str) -> int:
    directory = Path(where)
    if mode == "worker":
        arm(directory, rest[0], rest[1] == "ignore")
        while True:
            time.sleep(1)
    if mode == "launcher":
        arm(directory, "launcher", ignore=False)
        workers = [spawn_worker(directory, f"worker{i}", ignore=False) for i in range(2)]
        while not all((directory / f"pid-worker{i}").exists() for i in range(2)):
            time.sleep(0.01)
        print("ready", flush=True)
        for w in workers:
            while w.poll() is None:  # SIGTERM interrupts the wait; a launcher in its grace keeps waiting
                time.sleep(0.05)
        return 0
    if mode == "orphan":
        spawn_worker(directory, "orphan", ignore=True)
        while not (directory / "pid-orphan").exists():
            time.sleep(0.01)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
