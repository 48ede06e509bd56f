"""LAS's timer wake-ups (LasPolicy.next_change_spans) skip the rounds that fall between two spans of
overlapping checkpoint windows: a round after the windows open from a span's first clock on fell short of a
waiting gang again, and before the next opening that holds enough, sees too few GPUs displaceable. A skipped
round must be one that would have changed nothing: a run woken at every opening that holds enough (one span
from next_change_s() on, what the simulator asked before), or that makes every round, must write exactly what
the run with spans writes (every job's record, the decisions counted, the summary)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.snapshot import JobView, Snapshot
from loadmaster.sim.experiment import RunOptions
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize
from tests.sim.decisions_made import simulate_counting

_SPANS = LasPolicy.next_change_spans


def from_the_first(policy: LasPolicy, snap: Snapshot, heads: Sequence[JobView]) -> Sequence[tuple[float, float]]:
    """One span from next_change_s()'s clock on: every round from the first opening that holds enough is made."""
    return ((_SPANS(policy, snap, heads)[0][0], math.inf),)


def every_round(policy: LasPolicy, snap: Snapshot, heads: Sequence[JobView]) -> Sequence[tuple[float, float]]:
    return ((snap.clock, math.inf),)


def _run(seed: int, policy: str, cluster: str, jobs: int, load: float = 1.6
         ) -> tuple[dict[str, object], list[str], int]:
    workload = synthesize("philly", jobs, seed, load=load, cpu_demands=bool(seed % 2), cluster=load_cluster(cluster))
    return simulate_counting(workload, load_cluster(cluster), RunOptions(policy=policy))


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["las", "las-het"]), st.sampled_from(["4x4", "4x8", "8x2"]),
       st.sampled_from([from_the_first, every_round]))
def test_the_rounds_skipped_between_spans_would_have_changed_nothing(seed: int, policy: str, cluster: str,
                                                                     unfiltered: object) -> None:
    spans = _run(seed, policy, cluster, 80)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LasPolicy, "next_change_spans", unfiltered)
        mp.setattr(HetLasPolicy, "next_change_spans", unfiltered)
        made = _run(seed, policy, cluster, 80)
    assert spans[:2] == made[:2]
    assert spans[2] <= made[2]


def test_spans_skip_rounds_on_an_overload() -> None:
    # Or the test above compares a run with itself.
    spans = _run(5, "las", "8x4", 300, load=1.3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LasPolicy, "next_change_spans", from_the_first)
        made = _run(5, "las", "8x4", 300, load=1.3)
    assert spans[:2] == made[:2]
    assert spans[2] < 0.9 * made[2]  # 2,509 rounds made against 2,856 when written
