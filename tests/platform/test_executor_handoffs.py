"""The LocalExecutor's side of the hand-offs, with real processes: an end is reported until released; a
launch cut short by a crash is found from its files alone (or fenced, so it never runs late); learners
nobody accounts for are found and killed; an exiting learner wakes the loop."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadmaster.platform.executors.base import LaunchError
from loadmaster.platform.executors.files import AttemptFiles
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.executors.shim import FENCED, ShimRequest
from loadmaster.platform.executors.spawn import spawn_shim
from tests.platform.executor_helpers import (
    attempt_spec,
    kill_leftovers,
    learners,
    log_text,
    processes_of,
    wait_for_end,
    wait_until,
)

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the tests inspect processes through /proc")


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers()


def test_an_end_is_reported_until_it_is_released(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env", gang=learners(("n0", ())))
    ex = LocalExecutor()
    ex.launch(spec)
    wait_until(lambda: bool(ex.poll().ended), what="the end")
    again = ex.poll().ended
    assert [e.job_id for e in again] == [spec.job_id] and again[0].succeeded  # not forgotten
    assert ex.watching() == {(spec.job_id, 1)}
    ex.release(spec.job_id, 1)
    assert ex.poll().ended == () and ex.watching() == frozenset()
    ex.stop(spec.job_id, 1, 0.0)  # a stop of an attempt that ended: nothing to do


def test_a_launch_whose_handle_was_never_stored_is_found_from_its_files(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    first = LocalExecutor()
    first.launch(spec)  # the server dies before it stores the handle
    first.close()
    second = LocalExecutor()
    assert second.reattach(spec, None)
    assert sorted(p for p in processes_of(spec.job_id)) != []
    (tmp_path / "go-0").write_text("0")
    (tmp_path / "go-1").write_text("0")
    ended, _ = wait_for_end(second)
    assert ended.succeeded


def test_a_launch_cut_short_before_its_shims_ran_is_fenced_for_good(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env", gang=learners(("n0", ())))
    files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
    files.make_dirs()  # the crash came after the attempt's directories were made, before any shim ran
    ex = LocalExecutor()
    assert not ex.reattach(spec, None)
    assert files.fence.exists()
    # A shim that comes up now (spawned just before the crash) runs nothing.
    request = ShimRequest(argv=("/bin/sh", "-c", f"echo ran >> {tmp_path / 'ran'}"), workdir=str(tmp_path), env={},
                          log=str(files.log(0)), exit=str(files.exit(0)), pid=str(files.pid(0)),
                          lock=str(files.lock(0)), fence=str(files.fence))
    late = spawn_shim(request)
    assert late.wait(timeout=30) == FENCED
    assert not (tmp_path / "ran").exists() and "fenced" in log_text(spec, 0)
    with pytest.raises(LaunchError, match="fenced"):
        ex.launch(spec)  # and the attempt is never launched again


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
inode = os.fstat(fd).st_ino
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    with open("/proc/locks") as locks:  # "N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...": one waiting
        if any(f[1] == "->" and f[6].endswith(f":{inode}") for f in map(str.split, locks) if len(f) > 6):
            sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
"""


def test_a_shim_that_is_starting_is_waited_for_and_adopted(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners(("n0", ())))
    files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
    files.make_dirs()
    # A shim holding its lock but not yet running its command (a busy machine): recovery waits for it. It
    # hands the lock on only once the launch's own shim waits for it (/proc/locks lists a blocked flock on the
    # file): released any earlier, on a loaded machine, recovery would rightly find the rank never started.
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(files.lock(0))], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    first = LocalExecutor()
    launched = threading.Thread(target=lambda: time.sleep(0.5) or first.launch(spec))  # its shim comes after
    found: list[tuple[bool, bool]] = []  # (adopted, the starting shim had ended by then)
    discover = threading.Thread(
        target=lambda: found.append((LocalExecutor().reattach(spec, None), holder.poll() is not None)))
    discover.start()
    time.sleep(0.2)
    launched.start()
    discover.join(timeout=90)
    launched.join(timeout=90)
    assert holder.wait(timeout=30) == 0, "the launch's shim never waited for the lock"
    assert found == [(True, True)]  # waited for the starting shim, then adopted the one that came after
    (tmp_path / "go-0").write_text("0")
    first.close()


def test_a_gang_that_never_started_whole_is_killed_and_refused(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    first = LocalExecutor()
    first.launch(spec)
    first.close()
    pid_file = Path(spec.log_dir) / "rank-1.pid"
    record = json.loads(pid_file.read_text())
    import os
    import signal

    os.killpg(record["pid"], signal.SIGKILL)  # rank 1 and its shim vanish without a trace, as if never started
    os.kill(record["shim_pid"], signal.SIGKILL)
    wait_until(lambda: len(processes_of(spec.job_id)) == 1, what="rank 1 to be gone")
    pid_file.unlink()
    assert not LocalExecutor().reattach(spec, None)
    wait_until(lambda: processes_of(spec.job_id) == [], what="rank 0 to be killed")


def test_survey_finds_learners_of_its_data_directory_only_and_terminate_kills_them(tmp_path: Path) -> None:
    root = tmp_path / "data"
    mine = dataclasses.replace(attempt_spec(tmp_path, "go", str(tmp_path), gang=learners(("n0", ()))),
                               checkpoint_dir=str(root / "jobs" / "x" / "checkpoints"))
    other = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners(("n0", ())))  # another server's
    starter = LocalExecutor()
    starter.launch(mine)
    starter.launch(other)
    starter.close()
    ex = LocalExecutor(survey_root=root)
    [found] = ex.survey() or []
    assert (found.job_id, found.attempt) == (mine.job_id, 1) and len(found.processes) == 1
    ex.terminate(found)
    wait_until(lambda: processes_of(mine.job_id) == [], what="the orphan to be killed")
    assert processes_of(other.job_id) != [] and LocalExecutor().survey() is None


def test_a_learner_that_exits_wakes_the_loop(tmp_path: Path) -> None:
    woke = threading.Event()
    ex = LocalExecutor()
    ex.notify(woke.set)
    spec = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners(("n0", ())))
    ex.launch(spec)
    assert not woke.wait(0.3)
    (tmp_path / "go-0").write_text("0")
    assert woke.wait(10)
    wait_for_end(ex)
    ex.close()


def test_a_rank_lock_held_by_a_shim_of_an_earlier_version_still_counts(tmp_path: Path) -> None:
    """Shims lock their log now; one started before an upgrade holds rank-R.lock, a file of its own: a restarted
    server must see that rank as busy (not fence it) until that lock is free too."""
    from loadmaster.platform.executors.local import _lock_held

    files = AttemptFiles(tmp_path / "logs", tmp_path / "reports")
    files.make_dirs()
    assert files.lock(0) == files.log(0)
    assert not _lock_held(files, 0)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_CREAT | "
                               "os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); "
                               "sys.stdin.read()", str(files.legacy_lock(0))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert _lock_held(files, 0)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert not _lock_held(files, 0)
