"""SRTF's and Themis' displacement bounds and DRF's pruned classes change no plan.

SRTF gives up a displacement before releasing anyone when the gang cannot fit even with every victim it
may take released (SrtfPolicy._may_fit), Themis when the jobs it may displace hold too few GPUs
(ThemisPolicy.releasable_gpus); DRF's walk leaves out the classes that can only answer
NO_CAPACITY or FRAGMENTATION and settles their answers (drf._SkippingProgressiveOrder). World after world
(test_session's worlds: overloaded small clusters, elastic jobs, preemptions, the clock jumping), the
Session's plans, waits included, must be those of decide() run without them: SRTF with a gate that keeps
no books (no bound), Themis without releasable_gpus, DRF ranked by progressive filling over the whole
queue (no class left out)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.srtf import SrtfPolicy
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.scheduling.snapshot import JobView, Snapshot
from tests.scheduling.test_session import _check


class _SrtfWithoutBound(SrtfPolicy):
    def gate(self, snap: Snapshot) -> Gate:
        return Gate(snap)  # a gate that keeps no books: every displacement is walked to its end


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)))
def test_srtf_plans_are_those_of_walking_every_displacement(seed: int, placement: str) -> None:
    _check(seed, "srtf", placement, steps=30, reference=_SrtfWithoutBound())


class _ThemisWithoutBound(ThemisPolicy):
    def releasable_gpus(self, snap: Snapshot, gate: Gate, job: JobView) -> float | None:
        return None  # every displacement is walked to its end


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)), st.booleans())
def test_themis_plans_are_those_of_walking_every_displacement(seed: int, placement: str, migrate: bool) -> None:
    _check(seed, "themis", placement, steps=30, migrate=migrate, reference=_ThemisWithoutBound())


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)))
def test_drf_plans_are_those_of_visiting_every_class(seed: int, placement: str) -> None:
    # decide() ranks by DrfPolicy.rank() (_ProgressiveOrder), which leaves out no class.
    _check(seed, "drf", placement, steps=30)
