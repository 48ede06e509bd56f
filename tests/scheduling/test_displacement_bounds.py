"""SRTF's and Themis' displacement bounds and DRF's pruned classes change no plan.

SRTF gives up a displacement before releasing anyone when the gang cannot fit even with every victim it
may take released (SrtfPolicy._may_fit), Themis when the jobs it may displace hold too few GPUs
(ThemisPolicy.releasable_gpus) or too few where a learner could use them (releasable_by_server); DRF's walk
leaves out the classes that can only answer NO_CAPACITY or FRAGMENTATION and settles their answers
(drf._SkippingProgressiveOrder). World after world (test_session's worlds: overloaded small clusters,
elastic jobs, preemptions, the clock jumping), the Session's plans, waits included, must be those of
decide() run without them: SRTF with a gate that keeps no books (no bound), Themis without either bound, DRF
ranked by progressive filling over the whole queue (no class left out)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import srtf
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

    def releasable_by_server(self, snap: Snapshot, gate: Gate, job: JobView) -> None:
        return None


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)), st.booleans())
def test_themis_plans_are_those_of_walking_every_displacement(seed: int, placement: str, migrate: bool) -> None:
    _check(seed, "themis", placement, steps=30, migrate=migrate, reference=_ThemisWithoutBound())


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)))
def test_drf_plans_are_those_of_visiting_every_class(seed: int, placement: str) -> None:
    # decide() ranks by DrfPolicy.rank() (_ProgressiveOrder), which leaves out no class.
    _check(seed, "drf", placement, steps=30)


def _running_world(seed: int) -> tuple[Snapshot, list]:  # type: ignore[type-arg]
    """Random running jobs packed on a small cluster (some spanning servers, some started at the same
    time, some with equal gains), at a random clock."""
    import random

    from loadmaster.core.job import Allocation
    from loadmaster.scheduling.snapshot import JobView
    from tests.helpers import cluster, job

    rng = random.Random(seed)
    c = cluster(*([4] * rng.randint(1, 6)))
    free = c.gpu_capacity.astype(float)
    views = []
    for i in range(rng.randint(0, 14)):
        per = rng.choice((1, 1, 2, 4))
        learners = rng.choice((1, 1, 2))
        nodes = [n for n in range(len(free)) if free[n] >= per]
        if len(nodes) < learners:
            continue
        picked = tuple(rng.sample(nodes, learners))
        for n in picked:
            free[n] -= per
        spec = job(f"r{i}", learners=learners, gpus=per, duration=rng.choice((500.0, 2000.0, 9000.0)))
        started = rng.choice((0.0, 50.0, 300.0))
        alloc = Allocation(spec.job_id, picked, per, spec.cpus_per_learner, spec.mem_gb_per_learner)
        views.append(JobView(spec, 0.0, allocation=alloc, work_done_s=rng.choice((0.0, 100.0, 899.0)),
                             rate=rng.choice((0.5, 1.0)), as_of=started, started_at=started))
    clock = rng.choice((300.0, 1000.0, 1900.0))
    snap = Snapshot.build(clock, c, free, c.cpu_capacity, c.mem_capacity, (), tuple(views))
    return snap, views


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((0.0, 10.0, 400.0, 5000.0)))
def test_srtf_candidates_are_the_may_preempt_victims_in_victim_key_order(seed: int, remaining: float) -> None:
    # victim_candidates() answers from per-snapshot arrays (the running jobs' arrays kept while the tuple
    # is the same, the victim order sorted only when a displacement may fit): it must be the victims
    # may_preempt() allows, sorted by victim_key(), as Policy.victim_candidates would give them.
    from tests.helpers import job, queued

    snap, views = _running_world(seed)
    policy = SrtfPolicy()
    waiting = queued(job("w", duration=remaining))
    expected = [v.job_id for v in sorted(views, key=lambda v: policy.victim_key(snap, v))
                if policy.may_preempt(snap, Gate(snap), waiting, v)]
    for _ in range(2):  # asked twice: the second answer comes from the memo
        got = [v.job_id for v in policy.victim_candidates(snap, Gate(snap), waiting, lambda: ())]
        assert got == expected
    assert policy.preemptor(snap, Gate(snap), waiting) == bool(expected)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((0.0, 400.0, 5000.0)), st.sampled_from(((1, 4), (2, 4), (1, 2),
                                                                                       (3, 1), (2, 2))))
def test_srtf_bound_counts_the_learners_every_server_could_hold(seed: int, remaining: float,
                                                                shape: tuple[int, int]) -> None:
    # _may_fit() counts again only the servers of the released jobs and the candidates: its answer must
    # be that of counting every server with all of them released.
    from loadmaster.scheduling.policies.srtf import _DisplacementGate
    from tests.helpers import job, queued

    snap, views = _running_world(seed)
    learners, per = shape
    policy = SrtfPolicy()
    waiting = queued(job("w", learners=learners, gpus=per, duration=remaining))
    gate = _DisplacementGate(snap)
    if views and seed % 2:  # a victim released earlier in the call, not given back
        gate.remove(views[seed % len(views)])
    released = list(gate.released.values())
    candidates = [v for v in views if policy.may_preempt(snap, gate, waiting, v)]
    free = snap.free_gpus.tolist()
    for v in released + candidates:
        assert v.allocation is not None
        for n in v.allocation.learner_nodes:
            free[n] += v.allocation.gpus_per_learner
    fits = sum(free) + 1e-9 >= learners * per and sum(int((g + 1e-9) // per) for g in free) >= learners
    got = list(policy.victim_candidates(snap, gate, waiting, lambda: ()))
    assert (got != []) == (fits and candidates != [])


class _CountingThemis(ThemisPolicy):
    walks = 0

    def victim_candidates(self, snap, gate, job, victims):  # type: ignore[no-untyped-def]
        self.walks += 1
        return super().victim_candidates(snap, gate, job, victims)


def test_themis_gives_up_where_no_preferred_type_could_take_the_gang() -> None:
    """The job bids for V100s only (it runs 50x slower on a K80 and has waited little): the K80 server's free
    GPUs and its expired-lease victim free enough GPUs in all, and room for a learner, but not on a V100, so
    decide() gives up before releasing anyone, with the plan of walking the victim."""
    from loadmaster.core.cluster import Cluster, Node
    from loadmaster.core.job import Allocation
    from loadmaster.scheduling.decide import decide
    from loadmaster.scheduling.placement import make_placer
    from tests.helpers import job

    c = Cluster((Node("v0", 4, 32.0, 256.0, gpu_type="v100"), Node("k0", 4, 32.0, 256.0, gpu_type="k80")))
    speeds = (("k80", 0.02), ("v100", 1.0))
    # V100 server: a job within its lease. K80 server: 2 GPUs free, and a job whose lease expired and whose rho
    # if preempted (~1.0) is below the wide job's (~7.3): a victim.
    holder = JobView(job("v-run", gpus=4, duration=90_000.0, type_speed=speeds), 19_500.0,
                     allocation=Allocation("v-run", (0,), 4, 1.0, 1.0), rate=1.0, as_of=19_500.0, started_at=19_500.0)
    old = JobView(job("k-run", gpus=2, duration=30_000.0, type_speed=speeds), 0.0,
                  allocation=Allocation("k-run", (1,), 2, 1.0, 1.0), rate=1.0, as_of=0.0, started_at=0.0)
    wide = job("wide", gpus=4, duration=2_000.0, type_speed=speeds)
    snap = Snapshot.of_running(20_000.0, c, (JobView(wide, 0.0, as_of=0.0),), (holder, old), {})
    counting = _CountingThemis()
    plan = decide(snap, counting, make_placer("pack"))
    assert counting.type_preference(snap, snap.queued[0]) == ("v100",)
    assert counting.releasable_gpus(snap, counting.gate(snap), snap.queued[0]) == 2.0  # 2 free + 2: enough
    assert counting.walks == 0  # given up on the bound: no victim released
    reference = decide(snap, _ThemisWithoutBound(), make_placer("pack"))
    assert (plan.starts, plan.preempts, plan.waits) == (reference.starts, reference.preempts, reference.waits)
    assert not plan.starts and not plan.preempts


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((0, 10**9)))
def test_srtf_counts_the_jobs_gaining_more_alike_from_a_list_or_the_array(seed: int, array_from: int) -> None:
    # _Gains.above() bisects the sorted gains as a list for a few dozen running jobs and compares the unsorted
    # array from _UNSORTED_FROM on: both must count the jobs whose gain exceeds the remaining work asked about,
    # a gain equal to it (a tie) included in neither.
    snap, _ = _running_world(seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(srtf, "_UNSORTED_FROM", array_from)
        memo = srtf.SrtfPolicy()._by_snapshot(snap)
    gains = memo.gains.tolist()
    assert memo.most == max(gains, default=-math.inf)
    for want in [*gains, -1e9, 0.0, 1e9, *(g + 0.5 for g in gains), *(g - 0.5 for g in gains)]:
        assert memo.above(want) == sum(g > want for g in gains)
