"""Timer rounds after a plan of new reasons alone are counted, not made (simulator._Run.quiet_until): carrying
out such a plan changes no job's resources and no queue, so the rounds after it repeat it until time alone
can change an answer. A run that makes every one of those rounds must write exactly what a run that skips
them writes: every job's record (times, attempts, waits by reason), the decisions counted, the summary."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.plan import Plan
from loadmaster.sim import simulator
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize


def _summary_and_records(policy: str, placement: str, seed: int) -> tuple[dict[str, object], list[str]]:
    workload = synthesize("philly", 60, seed, cluster_gpus=16, load=1.6, cpu_demands=bool(seed % 2))
    run = simulate(workload, load_cluster("4x4"), RunOptions(policy=policy, placement=placement))
    summary = {k: v for k, v in run.summary.items() if k != "wall_time_s"}
    return summary, [repr(r) for r in run.result.records]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["drf", "las", "las-het"]), st.sampled_from(["pack", "spread"]))
def test_skipping_the_rounds_after_a_plan_of_reasons_alone_changes_no_result(seed: int, policy: str,
                                                                             placement: str) -> None:
    skipped = _summary_and_records(policy, placement, seed)
    quiet_until = simulator._Run.quiet_until

    def every_round_after_new_reasons(run: simulator._Run, plan: Plan) -> float:
        if plan.waits:
            return -math.inf  # what quiet_until answered before: the next round is made
        return quiet_until(run, plan)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulator._Run, "quiet_until", every_round_after_new_reasons)
        made = _summary_and_records(policy, placement, seed)
    assert skipped == made


def test_a_plan_of_reasons_alone_lets_the_rounds_after_it_be_skipped() -> None:
    # The skip must actually happen on an overloaded DRF run, or the test above compares a run with itself.
    made = []
    quiet_until = simulator._Run.quiet_until

    def watch(run: simulator._Run, plan: Plan) -> float:
        at = quiet_until(run, plan)
        if plan.waits and not (plan.starts or plan.preempts or plan.resizes or plan.rejects) and at > run.clock:
            made.append(at)
        return at

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulator._Run, "quiet_until", watch)
        _summary_and_records("drf", "pack", 3)
    assert made
