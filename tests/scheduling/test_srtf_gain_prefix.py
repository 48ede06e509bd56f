"""SRTF's per-snapshot gains with many jobs running (from _UNSORTED_FROM on): nothing sorted up front, the
jobs counted above a remaining work by comparing the array, and only the prefix by falling gain that the
bound's walks reach sorted, extended as they go further. The answers must be those of sorting every gain
(the few-dozen path), ties included; the worlds below have many equal gains."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling import make_placer
from loadmaster.scheduling.policies import srtf
from loadmaster.scheduling.policies.srtf import SrtfPolicy, _Gains
from loadmaster.scheduling.snapshot import Snapshot
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces.synth import synthesize
from tests.helpers import cluster
from tests.scheduling.test_displacement_bounds import _running_world


def _memo(snap: Snapshot, unsorted_from: int, first_sorted: int = 64) -> _Gains:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(srtf, "_UNSORTED_FROM", unsorted_from)
        mp.setattr(srtf, "_FIRST_SORTED", first_sorted)
        return SrtfPolicy()._by_snapshot(snap)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((1, 2, 3, 64)),
       st.lists(st.tuples(st.integers(0, 20), st.sampled_from((1, 2, 4)), st.sampled_from((1, 3, 8, 10**6))),
                min_size=1, max_size=8))
def test_the_prefix_sorted_as_asked_answers_as_every_gain_sorted(
        seed: int, first_sorted: int, asks: list[tuple[int, int, int]]) -> None:
    snap, _ = _running_world(seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(srtf, "_FIRST_SORTED", first_sorted)
        part = _memo(snap, 0, first_sorted)
        whole = _memo(snap, 10**9)
        gains = whole.gains.tolist()
        assert part.most == whole.most == max(gains, default=-math.inf)
        given_before: list[int] = []
        for pick, per, enough in asks:
            # A remaining work at a gain (a tie), between two, or below all: the first k are then the same jobs
            # in any order by falling gain.
            want = sorted(gains)[pick % len(gains)] - (0.5 if pick % 3 == 0 else 0.0) if gains else 0.0
            k = part.above(want)
            assert k == whole.above(want) == sum(g > want for g in gains)
            prefix = part.by_gain(k)
            assert len(prefix) >= k
            assert prefix[:len(given_before)] == given_before  # an extension keeps what was given
            assert sorted(prefix[:k]) == sorted(i for i, g in enumerate(gains) if g > want)
            assert all(gains[a] >= gains[b] for a, b in itertools.pairwise(prefix))
            assert max((gains[i] for i in range(len(gains)) if i not in set(prefix)), default=-math.inf) <= min(
                (gains[i] for i in prefix), default=math.inf)
            given_before = list(prefix)
            exact = whole.room_with_first(per, k)
            got = part.room_with_first(per, k, enough)
            assert got == exact if exact < enough else got >= enough
            gpus = whole.gpus_of_first(k)
            got_gpus = part.gpus_of_first(k, 2 * enough)
            assert got_gpus == gpus if gpus < 2 * enough else got_gpus >= 2 * enough


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6))
def test_simulations_with_every_gain_sorted_or_the_prefix_alone_are_the_same(seed: int) -> None:
    # Offered three times what the cluster holds, srtf asks the bound at most decisions; with _UNSORTED_FROM at 0
    # every snapshot takes the prefix path (a real run takes it from 192 running jobs on).
    c = cluster(4, 4, 4, 4, 2)
    w = synthesize("philly", 200, seed, cluster_gpus=18, load=3.0)

    def run(unsorted_from: int) -> tuple[int, list[tuple[str, float | None, float | None]]]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(srtf, "_UNSORTED_FROM", unsorted_from)
            mp.setattr(srtf, "_FIRST_SORTED", 1)
            sim = Simulator(c, SrtfPolicy(), make_placer("pack"), FailureModel(RetryPolicy.TRACE, 3, seed),
                            PerformanceModel(c, locality=False), SimConfig())
            res = sim.run(w)
        return res.preemptions, [(r.spec.job_id, r.first_start_s, r.finish_s) for r in res.records]

    assert run(0) == run(10**9)
