"""The wait after a busy round (ControlLoop._coalesce): at most coalesce_s, and no longer than the launches
the round left under way (their results, a tiny job's end with them, are what the next round is for)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from loadmaster.platform.control.launcher import Launcher
from loadmaster.platform.executors.base import AttemptSpec
from tests.platform.control_fixtures import Env


class HeldExecutor:
    """launch() returns once its gate opens."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        assert self.gate.wait(30)
        return {"job": spec.job_id}


def spec(job_id: str) -> AttemptSpec:
    return cast(AttemptSpec, SimpleNamespace(job_id=job_id, attempt=1, code_archive=None, code_dir=None))


def held_launcher(loop_wake: Any) -> tuple[Launcher, HeldExecutor]:
    executor = HeldExecutor()
    return Launcher(cast(Any, executor), loop_wake), executor


def waits(loop: Any, ended: str) -> float:
    return loop.metrics.registry.get_sample_value("loadmaster_coalesce_waits_total", {"ended": ended}) or 0.0


def timed_coalesce(loop: Any) -> float:
    t = time.monotonic()
    loop._coalesce()
    return time.monotonic() - t


def test_the_wait_ends_when_the_last_launch_under_way_finishes(lite: Env) -> None:
    loop = lite.new_loop(coalesce_s=5.0, tick_s=30.0)
    launcher, executor = held_launcher(loop.wake)
    loop.ctx.launcher = launcher
    try:
        launcher.launch(spec("a"))
        launcher.launch(spec("b"))
        assert launcher.under_way() == 2
        threading.Timer(0.2, executor.gate.set).start()
        took = timed_coalesce(loop)
        assert 0.15 < took < 2.0  # not the 5 s of coalesce_s: the launches' end ended it
        assert launcher.under_way() == 0 and launcher.pending() == 2  # finished, not collected yet
        assert (waits(loop, "launches"), waits(loop, "full")) == (1, 0)
    finally:
        executor.gate.set()
        launcher.close()


def test_a_wake_with_launches_still_under_way_does_not_end_the_wait(lite: Env) -> None:
    loop = lite.new_loop(coalesce_s=0.6, tick_s=30.0)
    launcher, executor = held_launcher(loop.wake)
    loop.ctx.launcher = launcher
    try:
        launcher.launch(spec("a"))
        threading.Timer(0.1, loop.wake).start()  # a submission, say
        took = timed_coalesce(loop)
        assert 0.55 < took < 3.0  # coalesce_s, the launch still under way
        assert launcher.under_way() == 1
        assert (waits(loop, "launches"), waits(loop, "full")) == (0, 1)
    finally:
        executor.gate.set()
        launcher.close()


def test_without_launches_under_way_the_wait_is_coalesce_s_whatever_wakes_the_loop(lite: Env) -> None:
    loop = lite.new_loop(coalesce_s=0.4, tick_s=30.0)
    threading.Timer(0.05, loop.wake).start()
    took = timed_coalesce(loop)
    assert 0.35 < took < 3.0
    assert (waits(loop, "launches"), waits(loop, "full")) == (0, 1)


def test_stop_ends_the_wait(lite: Env) -> None:
    loop = lite.new_loop(coalesce_s=20.0, tick_s=30.0)
    launcher, executor = held_launcher(loop.wake)
    loop.ctx.launcher = launcher
    try:
        launcher.launch(spec("a"))
        stopper = threading.Timer(0.1, lambda: (loop._stopping.set(), loop._event.set()))
        stopper.start()
        took = timed_coalesce(loop)
        assert took < 5.0
        assert (waits(loop, "launches"), waits(loop, "full")) == (0, 0)  # a stop is neither
    finally:
        executor.gate.set()
        launcher.close()
