"""A learner's confinement: a clean environment and, where bubblewrap is installed, a filesystem sandbox.

The environment a learner starts from holds nothing of the server's (its tokens, database URL, cloud
credentials): a fixed PATH (the server's Python first, so `python` is the one that has loadmaster), HOME
(the tenant's area), LANG, TMPDIR; the runtime contract and the manifest's env go over it.

The sandbox (bwrap, one per learner) shows the system directories read-only (/usr, /etc without its
secrets, the Python installation and loadmaster's package), the job's own directories read-write (work,
checkpoints, results, data, this attempt's reports), its logs directory read-only (the preempt file), the
tenant's area and roots as the admin set them, a private /tmp, and a /proc of its own PID namespace: no
other process of the machine, the server's included, can be seen or signalled. Everything else, the server's
data directory and database among it, does not exist inside. The network is shared (a gang's rendezvous).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from loadmaster.platform.executors.base import AttemptSpec

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys")
SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/ssh")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])  # the directory holding the loadmaster package


def find_bwrap(choice: str = "auto") -> str | None:
    """The bubblewrap binary if it is installed and can make a sandbox here (user namespaces may be off),
    None otherwise. choice: "auto", "none", or a path."""
    if choice == "none":
        return None
    path = shutil.which("bwrap") if choice in ("auto", "bwrap") else choice
    if path is None:
        return None
    try:
        probe = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--", "/bin/true"],
                               capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if probe.returncode == 0 else None


def clean_env(home: str | None) -> dict[str, str]:
    """What a learner's environment starts from: nothing of the server's."""
    python_bin = os.path.dirname(sys.executable)
    return {"PATH": f"{python_bin}:{DEFAULT_PATH}", "HOME": home or "/", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def _python_dirs() -> list[str]:
    return sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, _PACKAGE_PARENT,
                                                 os.path.dirname(os.path.realpath(sys.executable)))})


def reachable(path: str, run_as: tuple[int, int] | None) -> bool:
    """Whether the user can pass through every directory down to `path` (bwrap, run as that user, fails on a
    directory it may not enter: such a path is left out of the sandbox, as it is out of the user's reach)."""
    if run_as is None:
        return True
    uid, gid = run_as
    current = Path(path)
    for part in (current, *current.parents):
        try:
            st = part.stat()
        except OSError:
            return False
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return False
    return True


def bwrap_argv(bwrap: str, spec: AttemptSpec, workdir: str, job_dirs: Sequence[str],
               run_as: tuple[int, int] | None = None) -> list[str]:
    """The bwrap command line that runs the learner (the attempt's command follows it). job_dirs: the job's
    own directories it may write; run_as: the user bwrap runs as (None: the server's)."""
    argv = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    for d in SYSTEM_DIRS:
        argv += ["--ro-bind-try", d, d]
    for secret in SECRETS:
        if os.path.exists(secret):
            argv += ["--tmpfs", secret] if os.path.isdir(secret) else ["--ro-bind", "/dev/null", secret]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/var"]
    for dev in sorted(Path("/dev").glob("nvidia*")):  # the GPUs (CUDA_VISIBLE_DEVICES picks among them)
        argv += ["--dev-bind", str(dev), str(dev)]
    for d in _python_dirs():
        if reachable(d, run_as):
            argv += ["--ro-bind-try", d, d]
    for path, writable in spec.binds:
        if reachable(path, run_as):
            argv += ["--bind-try" if writable else "--ro-bind-try", path, path]
    for d in job_dirs:
        argv += ["--bind", d, d]
    # The directories made to hold those mount points live in the sandbox's own root: read-only too, so a
    # path outside them (the server's database) cannot even be created there.
    argv += ["--ro-bind", spec.log_dir, spec.log_dir, "--remount-ro", "/", "--chdir", workdir, "--"]
    return argv


def confined_argv(bwrap: str | None, spec: AttemptSpec, run_as: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The attempt's command, inside a sandbox when there is one. The sandbox's own process ignores SIGTERM
    (it would die at once and take the learner's grace period with it) and the learner gets SIGTERM's
    default back: `env` from coreutils does both."""
    if bwrap is None:
        return spec.command
    job = os.path.dirname(spec.checkpoint_dir)
    own = [spec.checkpoint_dir, spec.results_dir, spec.report_dir, os.path.join(job, "work")]
    if spec.data_dir is not None:
        own.append(spec.data_dir)
    if spec.code_dir is not None:  # the attempt's copy of the uploaded code (its workdir lies inside)
        own.append(spec.code_dir)
    box = bwrap_argv(bwrap, spec, spec.workdir, [d for d in own if os.path.isdir(d)], run_as)
    return ("env", "--ignore-signal=TERM", *box, "env", "--default-signal=TERM", *spec.command)
