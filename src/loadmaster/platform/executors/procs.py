"""Process identity and signals for learners that outlive the server that started them.

A pid alone does not name a process across a server restart: the learner may have exited and the pid been
given to something else. A process is therefore named by (pid, start time), and the boot id tells whether
the machine rebooted since (then none of the recorded processes can exist). Linux reads /proc; other
Unixes ask `ps` (slower, used only where /proc is missing).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcState:
    state: str  # one letter, as ps/proc show it: R, S, D, Z (zombie), ...
    start: str  # an opaque start-time token: equal tokens for one pid mean the same process

    @property
    def exited(self) -> bool:
        # A zombie has exited; only its parent's wait() is missing.
        return self.state[:1] in ("Z", "X")


def boot_id() -> str:
    """An id that changes when the machine reboots ("" where the system offers none)."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["sysctl", "-n", "kern.boottime"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def proc_state(pid: int) -> ProcState | None:
    """The state and start token of `pid`, or None when no such process exists."""
    if pid <= 0:
        return None
    if _PROC.is_dir():
        try:
            stat = (_PROC / str(pid) / "stat").read_text()
        except OSError:
            return None
        # The command name (field 2) is in parentheses and may itself hold spaces and ')'.
        fields = stat.rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state); field 22 (start time in clock ticks since boot) is fields[19].
        return ProcState(state=fields[0], start=fields[19])
    try:
        out = subprocess.run(["ps", "-o", "stat=", "-o", "lstart=", "-p", str(pid)],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.stdout.strip()
    if out.returncode != 0 or not line:
        return None
    state, _, start = line.partition(" ")
    return ProcState(state=state, start=start.strip())


def start_token(pid: int) -> str | None:
    state = proc_state(pid)
    return None if state is None else state.start


def is_running(pid: int, start: str) -> bool:
    """True if the process started as (pid, start) still runs (a zombie does not count)."""
    state = proc_state(pid)
    return state is not None and state.start == start and not state.exited


def reap_zombie(pid: int, start: str) -> None:
    """Collect the exited process (pid, start) if it is our child nobody waits for (the shim of an executor
    that was dropped without close()), so it leaves no zombie. Only a zombie with the recorded start token
    is collected: a live pid could be another child of ours that someone else waits for."""
    state = proc_state(pid)
    if state is None or state.start != start or not state.exited:
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def signal_group(leader_pid: int, leader_start: str, signum: int) -> bool:
    """Send `signum` to the process group led by (leader_pid, leader_start), if that leader still runs.

    Once the leader has exited, its shim kills what is left of the group itself, so nothing is lost by
    not signalling then, and a group id that may have been recycled is never signalled.
    """
    if not is_running(leader_pid, leader_start):
        return False
    try:
        os.killpg(leader_pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True
