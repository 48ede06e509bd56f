"""Themis' timer rounds skipped (ThemisPolicy.next_change_s, policies/themis_quiet.py) are rounds that would have
changed nothing: a run that makes every round (next_change_s answering the clock, what the base Policy answers)
must write exactly what the run that skips writes (every job's record, the decisions counted, the summary),
on uniform clusters and on mixed GPU types (where bids change with the time waited)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.workload import Workload
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.scheduling.policies.themis_quiet import stays_above
from loadmaster.scheduling.snapshot import JobView, Snapshot
from loadmaster.sim.experiment import RunOptions
from loadmaster.traces import load_cluster, load_workload
from loadmaster.traces.synth import synthesize
from tests.sim.decisions_made import simulate_counting


def every_round(policy: ThemisPolicy, snap: Snapshot, heads: Sequence[JobView]) -> float:
    return snap.clock


def _run(workload: object, cluster: str, placement: str, migrate: bool = False) -> tuple[object, list[str], int]:
    return simulate_counting(workload, load_cluster(cluster),  # type: ignore[arg-type]
                             RunOptions(policy="themis", placement=placement, migrate=migrate))


def _both(workload: object, cluster: str, placement: str, migrate: bool = False) -> tuple[int, int]:
    skipped = _run(workload, cluster, placement, migrate)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ThemisPolicy, "next_change_s", every_round)
        made = _run(workload, cluster, placement, migrate)
    assert skipped[:2] == made[:2]
    assert skipped[2] <= made[2]
    return skipped[2], made[2]


@settings(max_examples=14, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["pack", "spread", "locality"]),
       st.sampled_from(["4x4", "4x8", "2x4:v100,2x4:p100,2x4:k80", "1x8:v100,2x8:k80"]),
       st.sampled_from([1.3, 1.8]))
def test_the_rounds_skipped_would_have_changed_nothing(seed: int, placement: str, cluster: str, load: float) -> None:
    workload = synthesize("philly", 80, seed, cluster=load_cluster(cluster), load=load, cpu_demands=bool(seed % 2))
    _both(workload, cluster, placement)


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 800))
def test_gavel_jobs_with_their_speeds_on_three_gpu_types(start: int) -> None:
    # Jobs with speeds of their own on three GPU types: bids, and their slower types accepted with time.
    sample = load_workload("sample:gavel")
    workload = Workload(sample.jobs[start:start + 120], sample.report)
    _both(workload, "2x4:v100,2x4:p100,2x4:k80", "pack")


def test_rounds_are_skipped_on_an_overload() -> None:
    # Or the tests above compare a run with itself.
    workload = synthesize("philly", 400, 5, cluster=load_cluster("8x4"), load=1.3)
    skipped, made = _both(workload, "8x4", "pack")
    assert skipped < 0.5 * made  # 1,422 rounds made against 5,363 when written


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 10**6))
def test_migration_runs_are_the_same(seed: int) -> None:
    # With migration on, a decision that asked about running jobs (their bids, moves) makes every round
    # after it: next_change_s does not follow those answers.
    workload = synthesize("philly", 80, seed, cluster=load_cluster("2x4:v100,2x4:k80"), load=1.6)
    _both(workload, "2x4:v100,2x4:k80", "pack", migrate=True)


@given(st.floats(0, 1e3), st.floats(1e-6, 1.0), st.floats(0, 1e3), st.floats(1e-6, 1.0), st.floats(0, 1e7))
def test_stays_above_is_never_late(upper: float, s_upper: float, lower: float, s_lower: float, clock: float) -> None:
    dt = stays_above(upper, s_upper, lower, s_lower, clock)
    assert dt >= 0.0
    if dt == 0.0:
        return
    assert upper > lower
    if dt == math.inf:
        assert s_lower <= s_upper
        return
    # At the answer the real gap still exceeds the margin's scale: the lines have not met.
    assert (upper + s_upper * dt) - (lower + s_lower * dt) > 0.0
