"""Shims forked by the node's supervisor (executors/supervisor.py, forked.py) with real processes: each in a
session of its own, the supervisor replaced when it was killed, given up (and the shim started afresh) when
it is stuck, and outliving its executor until the shims it forked have ended."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadmaster.platform.executors.base import LaunchError
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.executors.procs import proc_state
from tests.platform.executor_helpers import attempt_spec, kill_leftovers, learners, wait_for_end, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the tests inspect processes through /proc")

WAIT_FOR_GO = ("sh", "-c", "while [ ! -e go ]; do sleep 0.02; done")


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers()


def _parent(pid: int) -> int | None:
    """The parent's pid; None once the process is reaped (a quick one may be, between two reads of /proc)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def _gone(pid: int) -> bool:
    state = proc_state(pid)
    return state is None or state.exited


def _shim_pids(handle: dict[str, object]) -> list[int]:
    learners = handle["learners"]
    assert isinstance(learners, list)
    return [int(entry["shim_pid"]) for entry in learners]


def test_learners_are_forked_by_the_supervisor_each_in_a_session_of_its_own(tmp_path: Path) -> None:
    ex = LocalExecutor()
    spec = attempt_spec(tmp_path, command=WAIT_FOR_GO)
    handle = ex.launch(spec)
    supervisor = ex.supervisor.pid
    assert supervisor is not None and os.getsid(supervisor) == supervisor != os.getsid(0)
    for shim in _shim_pids(handle):
        assert _parent(shim) == supervisor
        assert os.getsid(shim) == shim
    (tmp_path / "go").touch()
    ended, _ = wait_for_end(ex)
    assert ended.succeeded and [e.exit_code for e in ended.exits] == [0, 0]
    ex.close()


def test_a_killed_supervisor_is_replaced_and_the_shims_it_forked_run_on(tmp_path: Path) -> None:
    ex = LocalExecutor()
    first = ex.launch(attempt_spec(tmp_path, command=WAIT_FOR_GO))
    old = ex.supervisor.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: _gone(old), what="the supervisor's death")
    second = ex.launch(attempt_spec(tmp_path, command=("true",)))
    new = ex.supervisor.pid
    assert new is not None and new != old
    # A shim still running is the new supervisor's child (`true`'s may end, and be reaped, at any moment: one
    # read as running and gone from /proc by the next read failed this under two workers at load 10)
    assert all(parent == new for shim in _shim_pids(second)
               if (parent := _parent(shim)) is not None and not _gone(shim))
    ended, _ = wait_for_end(ex)
    assert ended.job_id == second["job_id"] and ended.succeeded
    (tmp_path / "go").touch()
    ended, _ = wait_for_end(ex)
    assert ended.job_id == first["job_id"] and ended.succeeded
    ex.close()


def test_a_stuck_supervisor_is_given_up_and_the_shim_started_afresh(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ex.launch(attempt_spec(tmp_path, command=("true",)))
    wait_for_end(ex)
    stuck = ex.supervisor.pid
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)
    ex.supervisor.pid_timeout_s = 0.5
    try:
        handle = ex.launch(attempt_spec(tmp_path, command=WAIT_FOR_GO, gang=learners(("n0", (0,)))))
    finally:
        with contextlib.suppress(ProcessLookupError):  # not left stopped, should it have survived
            os.kill(stuck, signal.SIGCONT)
    assert _gone(stuck)
    assert [_parent(shim) for shim in _shim_pids(handle)] == [os.getpid()]  # started as before: our child
    (tmp_path / "go").touch()
    ended, _ = wait_for_end(ex)
    assert ended.succeeded
    ex.close()


def test_the_supervisor_outlives_its_executor_until_the_shims_it_forked_have_ended(tmp_path: Path) -> None:
    ex = LocalExecutor()
    spec = attempt_spec(tmp_path, command=WAIT_FOR_GO)
    handle = ex.launch(spec)
    supervisor = ex.supervisor.pid
    assert supervisor is not None
    ex.close()  # as a server that exits, or dies: the supervisor's socket ends
    shims = _shim_pids(handle)
    assert not _gone(supervisor) and not any(_gone(shim) for shim in shims)
    (tmp_path / "go").touch()
    wait_until(lambda: _gone(supervisor), what="the supervisor to exit after its shims")
    assert all(_gone(shim) for shim in shims)
    assert [(Path(spec.log_dir) / f"rank-{r}.exit").read_text().strip() for r in (0, 1)] == ["0", "0"]


def test_a_command_that_cannot_start_under_a_forked_shim_is_the_jobs_error(tmp_path: Path) -> None:
    ex = LocalExecutor()
    with pytest.raises(LaunchError) as caught:
        ex.launch(attempt_spec(tmp_path, command=(str(tmp_path / "missing"),)))
    assert caught.value.user_error and "cannot start" in str(caught.value)
    assert ex.supervisor.pid is not None
    ex.close()


def test_a_gang_that_ends_at_once_brings_its_end_with_the_launch(tmp_path: Path) -> None:
    # The control loop then confirms the launch and records the end in one round (two rounds a tiny job was
    # the issue-10 regression: the launch returned at STARTED, before `true` had ended).
    ex = LocalExecutor(end_linger_s=1.0)
    spec = attempt_spec(tmp_path, command=("true",))
    ex.launch(spec)
    ended = ex.poll().ended
    assert [(e.job_id, e.succeeded) for e in ended] == [(spec.job_id, True)]
    ex.close()


def test_a_gang_that_runs_on_is_not_held_past_the_linger_and_launches_linger_side_by_side(tmp_path: Path) -> None:
    ex = LocalExecutor(end_linger_s=0.5)
    specs = [attempt_spec(tmp_path, command=WAIT_FOR_GO, gang=learners(("n0", (i,)))) for i in range(4)]
    ex.launch(specs[0])  # the supervisor is started by the first launch
    took: list[float] = []

    def launch(spec: object) -> None:
        started = time.monotonic()
        ex.launch(spec)  # type: ignore[arg-type]
        took.append(time.monotonic() - started)

    started = time.monotonic()
    threads = [threading.Thread(target=launch, args=(spec,)) for spec in specs[1:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    assert len(took) == 3 and all(0.5 <= t < 5 for t in took)  # each lingered, for its linger only
    assert wall < 1.4, wall  # three lingers side by side, not one after another (1.5 s)
    assert ex.poll().ended == ()
    (tmp_path / "go").touch()
    wait_until(lambda: len(ex.poll().ended) == 4, what="the four gangs' ends")
    ex.close()


def test_the_linger_is_checked() -> None:
    with pytest.raises(ValueError, match="end_linger_s"):
        LocalExecutor(end_linger_s=-0.1)
    with pytest.raises(ValueError, match="end_linger_s"):
        LocalExecutor(end_linger_s=5.0)


def test_the_loop_is_woken_for_an_end_that_did_not_come_with_its_launch_only(tmp_path: Path) -> None:
    ex = LocalExecutor(end_linger_s=1.0)
    wakes: list[float] = []
    ex.notify(lambda: wakes.append(time.monotonic()))
    ex.launch(attempt_spec(tmp_path, command=("true",)))  # ended within the linger: the launch carries it
    time.sleep(0.3)
    assert wakes == []
    assert len(ex.poll().ended) == 1
    ex.close()
    ex = LocalExecutor(end_linger_s=0.05)
    ex.notify(lambda: wakes.append(time.monotonic()))
    ex.launch(attempt_spec(tmp_path, command=WAIT_FOR_GO))
    assert wakes == []
    (tmp_path / "go").touch()
    wait_until(lambda: len(wakes) >= 1, what="the watcher's wake for the end")
    wait_until(lambda: len(ex.poll().ended) == 1, what="the end")
    ex.close()
