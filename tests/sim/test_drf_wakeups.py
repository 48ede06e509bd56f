"""DRF's timer wake-ups (DrfPolicy.next_change_s) skip the checkpoint windows that cannot let anyone start: a
window whose jobs, released with every other job in its window then, leave no server room for a gang that
may displace. A skipped round must be one that would have changed nothing: a run that wakes at every window
of a job above its tenant's entitlement (what next_change_s answered before), or that makes every round,
must write exactly what the filtered run writes (every job's record, the decisions counted, the summary)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.policies.drf import DrfPolicy
from loadmaster.scheduling.policies.windows import next_window_s
from loadmaster.scheduling.snapshot import JobView, Snapshot
from loadmaster.sim.experiment import RunOptions
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize
from tests.sim.decisions_made import simulate_counting


def every_window(policy: DrfPolicy, snap: Snapshot, heads: Sequence[JobView]) -> float:
    """next_change_s without the filter: the next window of any running job of a tenant above its
    entitlement, while some waiting class may displace."""
    gate = policy.gate(snap)
    policy._current = None
    if not any(gate.within_entitlement(h) for h in heads):
        return math.inf
    by_tenant = snap.running_by_tenant
    victims = [v for t in gate.running_tenants if gate.above_entitlement(t) for v in by_tenant.get(t, ())]
    return next_window_s(victims, snap.clock, policy.checkpoint_interval_s, policy.max_loss_s)


def every_round(policy: DrfPolicy, snap: Snapshot, heads: Sequence[JobView]) -> float:
    return snap.clock


def _run(seed: int, placement: str, cluster: str, jobs: int) -> tuple[dict[str, object], list[str], int]:
    gpus = load_cluster(cluster).total_gpus
    workload = synthesize("philly", jobs, seed, cluster_gpus=gpus, load=1.6, cpu_demands=bool(seed % 2))
    return simulate_counting(workload, load_cluster(cluster), RunOptions(policy="drf", placement=placement))


@settings(max_examples=14, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["pack", "spread", "locality"]), st.sampled_from(["4x4", "4x8", "8x2"]),
       st.sampled_from([every_window, every_round]))
def test_the_wake_ups_skipped_would_have_changed_nothing(seed: int, placement: str, cluster: str,
                                                         unfiltered: object) -> None:
    filtered = _run(seed, placement, cluster, 60)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DrfPolicy, "next_change_s", unfiltered)
        made = _run(seed, placement, cluster, 60)
    assert filtered[:2] == made[:2]
    if unfiltered is every_round:
        assert filtered[2] <= made[2]


def test_the_filter_skips_rounds_on_an_overload() -> None:
    # Or the test above compares a run with itself.
    filtered = _run(1, "pack", "4x8", 300)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DrfPolicy, "next_change_s", every_window)
        made = _run(1, "pack", "4x8", 300)
    assert filtered[:2] == made[:2]
    assert filtered[2] < 0.7 * made[2]  # 1,035 rounds made against 1,862 when written
