"""The timer round after a plan that acted is skipped where the Session knows, without deciding, that a decision
on the state the plan left would change nothing (Session.changes_nothing, Policy.settles_every_class: DRF when
every class is pruned with the reason its jobs have). Two checks: wherever changes_nothing() says so, actually
deciding on that snapshot gives an empty plan; and a run that makes every such round writes exactly what a run
that skips them writes (every job's record, the decisions counted, the summary), with fewer decisions made."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.session import Session
from loadmaster.scheduling.snapshot import Snapshot
from loadmaster.sim.experiment import RunOptions
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize
from tests.sim.decisions_made import simulate_counting


def _run(policy: str, seed: int, placement: str, cluster: str, jobs: int = 60
         ) -> tuple[dict[str, object], list[str], int]:
    gpus = load_cluster(cluster).total_gpus
    workload = synthesize("philly", jobs, seed, cluster_gpus=gpus, load=1.6, cpu_demands=bool(seed % 2))
    return simulate_counting(workload, load_cluster(cluster), RunOptions(policy=policy, placement=placement))


@settings(max_examples=14, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["pack", "spread"]), st.sampled_from(["4x4", "4x8", "8x2"]),
       st.sampled_from(["drf", "las", "fifo"]))
def test_skipping_the_round_after_a_plan_that_acted_changes_no_result(seed: int, placement: str, cluster: str,
                                                                      policy: str) -> None:
    skipped = _run(policy, seed, placement, cluster)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "changes_nothing", lambda session, snap: False)
        made = _run(policy, seed, placement, cluster)
    assert skipped[:2] == made[:2]
    assert skipped[2] <= made[2]


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["pack", "spread"]), st.sampled_from(["4x4", "4x8", "8x2"]))
def test_where_changes_nothing_says_so_deciding_gives_an_empty_plan(seed: int, placement: str, cluster: str) -> None:
    changes_nothing = Session.changes_nothing
    said = [0]

    def checked(session: Session, snap: Snapshot) -> bool:
        answer = changes_nothing(session, snap)
        if answer:
            said[0] += 1
            plan = session.decide(snap)  # what the skipped round would have done on this state
            assert not (plan.starts or plan.preempts or plan.resizes or plan.rejects or plan.migrations
                        or plan.waits), plan
        return answer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "changes_nothing", checked)
        _run("drf", seed, placement, cluster)


def test_drf_skips_rounds_after_plans_that_acted() -> None:
    # The skip must happen on an overloaded DRF run, or the tests above compare a run with itself.
    changes_nothing = Session.changes_nothing
    said = [0]

    def count(session: Session, snap: Snapshot) -> bool:
        answer = changes_nothing(session, snap)
        said[0] += answer
        return answer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "changes_nothing", count)
        skipped = _run("drf", 3, "pack", "4x4", 120)
    assert said[0] > 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "changes_nothing", lambda session, snap: False)
        made = _run("drf", 3, "pack", "4x4", 120)
    assert skipped[:2] == made[:2]
    assert skipped[2] < made[2]
