"""Tenant A's learner in the cross-tenant matrix (test_isolation.py): every way it tries to reach tenant B,
the server or the machine's secrets. Standard library only, run by /usr/bin/python3 (the test's own Python
may live where a tenant's user cannot read it). One JSON line per attempt: {"attempt", "reached", "detail"};
`reached` is true when the attempt got anything it must not.

TARGETS (JSON in the environment): b_checkpoint_file, b_checkpoint_dir, b_results_dir, b_job_dir, b_work_dir,
b_home_file, b_home, b_log_file, server_pid, db_file, b_pids (B's learner and its shim).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable


def report(attempt: str, reached: bool, detail: str) -> None:
    print(json.dumps({"attempt": attempt, "reached": reached, "detail": detail[:200]}), flush=True)


def attempt(name: str, action: Callable[[], object]) -> None:
    try:
        got = action()
    except OSError as err:
        report(name, False, f"{err.__class__.__name__}: {err.strerror}")
        return
    reached = bool(got) or got == b"" or got == []  # the call itself succeeded
    report(name, reached, repr(got)[:200])


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4096) or b"(empty file, but opened)"


def write(path: str) -> bool:
    with open(path, "wb") as f:
        f.write(b"tenant A was here")
    return True


def overwrite(path: str) -> bool:
    """Change the file that is there (a new file in the sandbox's private /tmp or /var is not the server's)."""
    with open(path, "r+b") as f:
        f.write(b"tenant A was here")
    return True


def main() -> None:
    t = json.loads(os.environ["TARGETS"])
    attempt("read B's checkpoint file", lambda: read(t["b_checkpoint_file"]))
    attempt("list B's checkpoint dir", lambda: os.listdir(t["b_checkpoint_dir"]))
    attempt("write into B's checkpoint dir", lambda: write(os.path.join(t["b_checkpoint_dir"], "evil.pt")))
    attempt("overwrite B's checkpoint file", lambda: overwrite(t["b_checkpoint_file"]))
    attempt("list B's results dir", lambda: os.listdir(t["b_results_dir"]))
    attempt("write into B's results dir", lambda: write(os.path.join(t["b_results_dir"], "evil.txt")))
    attempt("list B's job dir", lambda: os.listdir(t["b_job_dir"]))
    attempt("write into B's work dir", lambda: write(os.path.join(t["b_work_dir"], "evil.py")))
    attempt("read B's home file", lambda: read(t["b_home_file"]))
    attempt("write into B's home", lambda: write(os.path.join(t["b_home"], "evil")))
    attempt("read B's log", lambda: read(t["b_log_file"]))
    attempt("read the server's environ", lambda: read(f"/proc/{t['server_pid']}/environ"))
    attempt("read the server's cmdline", lambda: read(f"/proc/{t['server_pid']}/cmdline"))
    attempt("read the database file", lambda: read(t["db_file"]))
    attempt("write the database file", lambda: overwrite(t["db_file"]))
    attempt("read /etc/shadow", lambda: read("/etc/shadow"))
    for pid in t["b_pids"]:
        attempt(f"signal B's process {pid} (0)", lambda pid=pid: os.kill(pid, 0) is None)
        attempt(f"kill B's process {pid}", lambda pid=pid: os.kill(pid, signal.SIGKILL) is None)
    attempt("kill B's process group", lambda: os.killpg(t["b_pids"][0], signal.SIGKILL) is None)
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) == t["server_pid"]]
    report("see the server in /proc", bool(others), f"{len(others)} entries")
    # Leave traps for the server's copies (followed up by the test through the API): a link to B's checkpoint
    # as a data source, a tree holding one, and a results target holding one.
    home = os.environ["HOME"]
    os.symlink(t["b_checkpoint_dir"], os.path.join(home, "b-link"))
    os.makedirs(os.path.join(home, "tree"), exist_ok=True)
    os.symlink(t["b_checkpoint_file"], os.path.join(home, "tree", "stolen.pt"))
    os.makedirs(os.path.join(home, "out"), exist_ok=True)
    os.symlink(t["b_checkpoint_file"], os.path.join(home, "out", "model.pt"))
    os.makedirs(os.environ["LOADMASTER_RESULTS_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["LOADMASTER_RESULTS_DIR"], "model.pt"), "wb") as f:
        f.write(b"A's results")
    print("attacks done", flush=True)


if __name__ == "__main__":
    main()
