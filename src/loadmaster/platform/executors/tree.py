"""A learner's whole process tree: found, signalled and killed, including processes in sessions of their own.

Signalling the learner's process group is not enough: torchrun starts its workers with
start_new_session=True, and a daemonising helper leaves the group too. So the shim makes itself a *child
subreaper* (Linux prctl): whatever its learner leaves orphaned is re-parented to the shim rather than to
init, and every process the learner ever started stays a descendant of the shim until it exits. The
descendants are read from /proc (one scan, shared by every learner a stop touches); where there is no
/proc, or the shim is gone, the learner's process group is what is signalled (the behaviour before).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadmaster.platform.executors.procs import is_running, signal_group

_PROC = Path("/proc")
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux 3.4+); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True, slots=True)
class ProcessTable:
    """One scan of /proc: the live (not zombie) processes' children, and their process groups."""

    children: dict[int, tuple[int, ...]]
    groups: dict[int, int]  # pid -> process group id

    @staticmethod
    def scan() -> ProcessTable:
        kids: dict[int, list[int]] = {}
        groups: dict[int, int] = {}
        if _PROC.is_dir():
            for entry in _PROC.iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue  # exited meanwhile
                if fields[0] in ("Z", "X"):
                    continue
                kids.setdefault(int(fields[1]), []).append(int(entry.name))
                groups[int(entry.name)] = int(fields[2])
        return ProcessTable({ppid: tuple(pids) for ppid, pids in kids.items()}, groups)

    def descendants(self, pid: int) -> list[int]:
        """Every live process below `pid`, parents before their children."""
        out: list[int] = []
        frontier = [pid]
        while frontier:
            parent = frontier.pop()
            for child in self.children.get(parent, ()):
                out.append(child)
                frontier.append(child)
        return out

    def outside_group(self, pid: int, pgid: int) -> list[int]:
        """The descendants of `pid` that a signal to process group `pgid` does not reach."""
        return [p for p in self.descendants(pid) if self.groups.get(p) != pgid]


def send(pids: Iterable[int], signum: int) -> int:
    """Signal each pid that still exists; how many were signalled."""
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            sent += 1
    return sent


def signal_trees(learners: Sequence[tuple[tuple[int, str], tuple[int, str]]], signum: int) -> None:
    """Send `signum` to the whole process tree of each (leader, shim) given by (pid, start token): first to
    each leader's process group at once (the usual tree: a learner that polls its preempt file must get
    SIGTERM as soon after it as before), then, after one /proc scan for them all, to the descendants of each
    shim that the group signal missed (sessions of their own, adopted orphans). Each process is signalled
    once: a second SIGTERM could reach a learner already exiting after the first, when Python has put the
    default action back, and kill it. A shim that no longer runs has killed what was left itself, so then
    only the group is signalled, and only if its leader still runs."""
    for leader, _ in learners:
        signal_group(leader[0], leader[1], signum)
    running = [(leader, shim) for leader, shim in learners if is_running(*shim)]
    if running:
        table = ProcessTable.scan()
        for leader, shim in running:
            send(table.outside_group(shim[0], leader[0]), signum)


def children(pid: int) -> list[int] | None:
    """The children of `pid`, zombies included, from its threads' /proc children lists (Linux 3.5+ built with
    CONFIG_PROC_CHILDREN): no scan of every process. None where that list is not offered."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            found = [int(p) for p in f.read().split()]
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        if tid != str(pid):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]  # a thread that exited meanwhile has none
    return found


def kill_descendants(pid: int) -> list[int]:
    """SIGKILL every live descendant of `pid`; the pids signalled."""
    victims = ProcessTable.scan().descendants(pid)
    send(victims, signal.SIGKILL)
    return victims
