"""A loop pass that changed nothing since the last decision (it popped only stale attempt ends, of attempts
preempted or moved since, or it is a timer round) is counted, not decided, where quiet_until() bounds the last
plan as repeated until a later time (simulator._Run.run, counts_stale). A run that decides at every such pass
must write exactly what a run that counts them writes: every job's record, the summary (decisions counted
included) and the timeline, with fewer decisions made."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.plan import Plan
from loadmaster.sim.experiment import RunOptions
from loadmaster.sim.simulator import _Run
from loadmaster.traces import load_cluster, load_workload
from loadmaster.traces.synth import synthesize
from tests.sim.decisions_made import simulate_counting


def _run(policy: str, seed: int, placement: str, cluster: str, counts: bool, jobs: int = 60,
         options: dict[str, object] | None = None) -> tuple[object, int]:
    """Everything the run writes (records, summary without its wall time, timeline) and the decisions made."""
    gpus = load_cluster(cluster).total_gpus
    workload = synthesize("philly", jobs, seed, cluster_gpus=gpus, load=1.6, cpu_demands=bool(seed % 2))
    summary, written, made = simulate_counting(
        workload, load_cluster(cluster),
        RunOptions(policy=policy, placement=placement, **(options or {})),  # type: ignore[arg-type]
        {"counts_stale": counts}, timeline=True)
    return (summary, written), made


@settings(max_examples=16, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["pack", "spread"]), st.sampled_from(["4x4", "4x8", "8x2"]),
       st.sampled_from(["drf", "las", "themis", "srtf", "fifo", "fair-fifo"]),
       st.sampled_from([{}, {"smoke_test_s": 120.0}, {"vc_queue": 3}, {"until_s": 20_000.0}]))
def test_counting_passes_that_changed_nothing_changes_no_result(seed: int, placement: str, cluster: str,
                                                                policy: str, options: dict[str, object]) -> None:
    counted, made_counting = _run(policy, seed, placement, cluster, True, options=options)
    deciding, made_deciding = _run(policy, seed, placement, cluster, False, options=options)
    assert counted == deciding
    assert made_counting <= made_deciding


@pytest.mark.parametrize("policy", ["drf", "las", "themis", "srtf"])
def test_overloaded_runs_count_passes_that_changed_nothing(policy: str) -> None:
    # The count must happen on an overloaded run of each, or the test above compares a run with itself.
    counted, made_counting = _run(policy, 3, "pack", "4x4", True, jobs=120)
    deciding, made_deciding = _run(policy, 3, "pack", "4x4", False, jobs=120)
    assert counted == deciding
    assert made_counting < made_deciding


@pytest.mark.parametrize("policy", ["las", "las-het"])
def test_a_pass_inside_a_span_that_holds_no_round_is_decided(policy: str) -> None:
    # LAS' spans (Policy.next_change_spans) let rounds skip a span too short to hold one; a stale pass may fall
    # inside it, and must then decide (Gavel's jobs on 36 GPUs have such passes).
    cluster = load_cluster("3x4:v100,3x4:p100,3x4:k80")
    workload = load_workload("sample:gavel")
    options = RunOptions(policy=policy, placement="pack")
    counted = simulate_counting(workload, cluster, options, {"counts_stale": True}, timeline=True)
    deciding = simulate_counting(workload, cluster, options, {"counts_stale": False}, timeline=True)
    assert counted[:2] == deciding[:2]
    assert counted[2] < deciding[2]


def test_a_plan_that_acted_spends_no_bound_where_the_session_cannot_settle() -> None:
    # After a plan that acted, a pass is bounded only by Session.changes_nothing, which SRTF's Session never
    # answers (no settles_every_class): the pass is decided without asking quiet_at_pass(), so that the budget
    # of bounds that let nothing be counted is left to the plans that did not act (on the 3,000-job overload
    # SRTF's 1,504 passes after a plan that acted used it up before 652 passes its next_change_s bounds).
    asked: list[bool] = []
    real = _Run.quiet_at_pass

    def quiet_at_pass(self: _Run, plan: Plan) -> float:
        asked.append(plan.empty)
        return real(self, plan)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_Run, "quiet_at_pass", quiet_at_pass)
        _run("srtf", 3, "pack", "4x4", True, jobs=120)
    assert asked and all(asked)
