"""themis_floors: the running jobs kept by a floor under their rho if preempted must lose no job below a rho."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling import JobView
from loadmaster.scheduling.policies.themis import _rho_if_preempted
from loadmaster.scheduling.policies.themis_floors import VictimFloors
from tests.helpers import job

CKPT, RESTART = 900.0, 30.0


@st.composite
def view(draw: st.DrawFn, name: str, clock: float) -> JobView:
    """A running job at `clock`: some past their duration, some slow or stalled, some paying a restart
    (as_of ahead of the clock)."""
    submit = draw(st.floats(0, clock))
    as_of = draw(st.floats(submit, clock + 100.0))
    spec = job(name, gpus=draw(st.sampled_from([0, 1, 2, 4, 8])), learners=draw(st.integers(1, 3)), submit=submit,
               duration=draw(st.floats(100, 50_000)))
    alloc = Allocation(name, (0,) * spec.learners, spec.gpus_per_learner, 0, 0)
    return JobView(spec, submit, allocation=alloc, work_done_s=draw(st.floats(0, 60_000)),
                   rate=draw(st.sampled_from([0.0, 1e-12, 0.05, 0.5, 1.0, 2.0])), as_of=as_of, started_at=as_of)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(40, 120), st.floats(0.5, 20.0))
def test_candidates_hold_every_job_below_the_rho_across_changing_running_sets(data: st.DataObject, n: int,
                                                                             share: float) -> None:
    floors = VictimFloors()
    clock = 10_000.0
    run = [data.draw(view(f"r{i}", clock)) for i in range(n)]
    served = 0
    made = n
    for _ in range(8):
        clock += data.draw(st.floats(0, 2_000))
        # A few views replaced (an end and a start, or a job's new state), the rest kept as they are.
        for _ in range(data.draw(st.integers(0, 2))):
            k = data.draw(st.integers(0, len(run) - 1))
            run[k] = data.draw(view(f"r{made}", clock))
            made += 1
        running = tuple(run)
        # Cuts just above some job's own value: that job, and every one below, must be among the candidates.
        values = sorted(_rho_if_preempted(v, clock, share, CKPT, RESTART) for v in running)
        for top in (math.nextafter(values[data.draw(st.integers(0, n - 1))], math.inf), data.draw(st.floats(0, 50))):
            got = floors.candidates(running, clock, share, top, CKPT, RESTART)
            if got is None:
                continue
            served += 1
            ids = [v.job_id for v in got]
            assert len(ids) == len(set(ids)) and all(any(v is r for r in running) for v in got)
            below = {v.job_id for v in running if _rho_if_preempted(v, clock, share, CKPT, RESTART) < top}
            assert below <= set(ids)
    assert served > 0  # the first ask only remembers the running jobs; the later ones use the floors
