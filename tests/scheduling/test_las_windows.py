"""LAS's next_change_s follows checkpoint windows that open and close: a waiting gang that needs the GPUs
of several running jobs at once waits for their windows to overlap, not merely to have opened once each."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer
from loadmaster.scheduling.policies.las import WINDOWS_FOLLOWED, LasPolicy
from loadmaster.scheduling.policies.windows import enough_at
from tests.helpers import cluster, job, queued


def _running(spec: JobSpec, node: int, work: float, clock: float) -> JobView:
    """A job of LAS's second queue (10,000 GPU-seconds attained) running on `node` since `clock` with `work`
    work-seconds done, at full speed."""
    alloc = Allocation(spec.job_id, (node,), spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner)
    return JobView(spec, clock, allocation=alloc, work_done_s=work, rate=1.0, as_of=clock, attained_gpu_s=10_000.0,
                   started_at=clock)


def test_a_gang_waits_for_windows_that_overlap_and_every_round_before_changes_nothing() -> None:
    # Two servers of 4 GPUs, each held by a job of the second queue whose checkpoint windows (the 60 s of
    # work after each 900 s checkpoint) come 450 s apart: they never overlap. A first-queue gang of 8 GPUs
    # needs both at once, so it can never displace them; the old rule (windows that only open) woke it
    # when the second had opened once, at clock + 800.
    c = cluster(4, 4)
    clock = 50_000.0
    a = _running(job("a", gpus=4, duration=10**6), 0, 1000.0, clock)  # next checkpoint at work 1800: +800
    b = _running(job("b", gpus=4, duration=10**6), 1, 1450.0, clock)  # +350
    gang = queued(job("gang", learners=2, gpus=4, duration=100.0, submit=clock))
    policy = LasPolicy()
    snap = Snapshot.of_running(clock, c, (gang,), (a, b))
    assert not decide(snap, policy, make_placer("pack")).starts
    at = policy.next_change_s(snap, [gang])
    # b's windows open at +350 + 900 k: the horizon is the one after the windows followed.
    assert at == np.float64(clock + 350 + 900 * WINDOWS_FOLLOWED) - np.abs(clock + 350 + 900 * WINDOWS_FOLLOWED) \
        * 1e-12 - 1e-9
    for t in range(int(clock), int(at), 30):  # every window of both, opened and closed, changes nothing
        plan = decide(Snapshot.of_running(float(t), c, (gang,), (a, b)), LasPolicy(), make_placer("pack"))
        assert not plan.starts and not plan.preempts


def test_a_gang_wakes_when_windows_overlap() -> None:
    # The same, with b's windows 30 s after a's: they overlap for 30 s from a + 30 s, and the gang
    # displaces both there.
    c = cluster(4, 4)
    clock = 50_000.0
    a = _running(job("a", gpus=4, duration=10**6), 0, 1000.0, clock)  # window +800 .. +860
    b = _running(job("b", gpus=4, duration=10**6), 1, 970.0, clock)  # window +830 .. +890
    gang = queued(job("gang", learners=2, gpus=4, duration=100.0, submit=clock))
    policy = LasPolicy()
    snap = Snapshot.of_running(clock, c, (gang,), (a, b))
    at = policy.next_change_s(snap, [gang])
    assert clock + 829 < at <= clock + 830
    assert not decide(Snapshot.of_running(at - 1, c, (gang,), (a, b)), LasPolicy(), make_placer("pack")).starts
    plan = decide(Snapshot.of_running(clock + 831, c, (gang,), (a, b)), LasPolicy(), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["gang"] and len(plan.preempts) == 2
    # Asked again later in the same quiet state (the same running views and free GPUs), the answer found
    # for the earlier clock is reused, and is the same as a fresh one's.
    again = policy.next_change_s(Snapshot.of_running(clock + 400, c, (gang,), (a, b)), [gang])
    assert again == at == LasPolicy().next_change_s(Snapshot.of_running(clock + 400, c, (gang,), (a, b)), [gang])


windows = st.lists(st.tuples(st.integers(0, 20), st.integers(-3, 10), st.integers(1, 4), st.booleans()),
                   min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(windows, st.integers(-2, 12))
def test_enough_at_gives_every_opening_where_the_open_windows_hold_enough(ws: list[tuple[int, int, int, bool]],
                                                                          deficit: int) -> None:
    # (opening, length, GPUs, joins): a window that does not join is open now (its opening is -inf) until it
    # closes; one that joins with a negative length closes before it opens, and is never open.
    opens = np.array([float(o) if j else -math.inf for o, _, _, j in ws])
    closes = np.array([float(o + d) for o, d, _, _ in ws])
    gpus = np.array([float(g) for _, _, g, _ in ws])
    found, until = enough_at(opens, closes, gpus, float(deficit))
    assert list(found) == sorted(found)
    counted = [(o, d, g, j) for o, d, g, j in ws if not j or d >= 0]

    def held(t: float) -> float:  # a window that has not joined is open now: it counts until it closes
        return sum(g for (o, d, g, j) in counted if (not j or o <= t) and t <= o + d)

    expected = sorted({float(o) for o, d, _, j in counted if j and held(float(o)) >= deficit})
    assert sorted(set(found.tolist())) == expected
    assert math.inf not in found

    def held_after(t: float) -> float:  # once every window closing at t has closed
        return sum(g for (o, d, g, j) in counted if (not j or o <= t) and t < o + d)

    # Each opening found holds until the first closing from it on after which the open windows fall short.
    for o, u in zip(found.tolist(), until.tolist(), strict=True):
        shorts = [float(c) for c in sorted({o_ + d for o_, d, _, _ in counted}) if c >= o and held_after(c) < deficit]
        assert u == (shorts[0] if shorts else math.inf)
