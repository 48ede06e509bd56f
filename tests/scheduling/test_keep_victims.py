"""A displacement that found room keeps every victim that still fits beside the new gang
(_Round._keep_victims). It re-takes one by one only the victims on the gang's servers; the plans must be
those of taking every released victim back one by one, the most valuable first."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import SavedCapacity
from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.snapshot import JobView, Snapshot
from tests.scheduling.test_displacement_bounds import _running_world

decide_module = sys.modules[decide.__module__]  # the module: the package exports the function by its name


def _keep_victims_one_by_one(self: decide_module._Round, job: JobView, alloc: Allocation,
                             released: list[JobView], shrunk: dict[str, Allocation], saved: SavedCapacity) -> None:
    """The reference: every released victim taken back one by one (what place_by_preempting did before)."""
    self.free.take(alloc)
    for victim in reversed(released):
        kept = shrunk.get(victim.job_id)
        try:
            self._unrelease(victim, kept)
        except ValueError:
            if kept is not None:
                self.resizes.append(decide_module.Resize(victim.job_id, kept))
                self.resized.add(victim.job_id)
            else:
                self.preempted.add(victim.job_id)
                self.preempts.append(decide_module.Preempt(victim.job_id, "preempted", for_job=job.job_id))
    self.free.give(alloc, grow=False)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)), st.sampled_from(("srtf", "las", "themis")),
       st.sampled_from(((1, 4), (2, 4), (1, 2), (3, 1), (2, 2), (1, 8))))
def test_keeping_victims_plans_as_taking_each_back(seed: int, placement: str, policy: str,
                                                   shape: tuple[int, int]) -> None:
    from tests.helpers import job, queued

    world, _ = _running_world(seed)
    learners, per = shape
    waiting = queued(job("w", learners=learners, gpus=per, duration=1.0))
    snap = Snapshot.build(world.clock, world.cluster, world.free_gpus, world.free_cpus, world.free_mem,
                          (waiting,), world.running)
    got = decide(snap, make_policy(policy), make_placer(placement))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module._Round, "_keep_victims", _keep_victims_one_by_one)
        want = decide(snap, make_policy(policy), make_placer(placement))
    assert got.starts == want.starts
    assert [p.job_id for p in got.preempts] == [p.job_id for p in want.preempts]
    assert got.resizes == want.resizes
