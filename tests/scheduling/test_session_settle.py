"""A Session's walk answers NO_CAPACITY without a visit for classes whose gang exceeds the free GPUs and whose
first job may displace nobody, or for which no displacement can make room before someone is displaced
(Policy.room_by_displacing: SRTF's bound). A displacement lets them back in: the bound ones at once, the
others once the free GPUs fit their gang again (a displacement may release more GPUs than it takes).

The worlds of test_session are run for the preemptive policies that walk by class heads, and every plan is
compared with decide()'s there; here they are also counted, so that the comparison is known to have covered
each way of settling a class and of letting it back in (if a change stopped settling, or stopped letting
classes back in, these counts would fall to zero and the tests fail)."""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator

import pytest

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling import session as session_module
from loadmaster.scheduling.policies.base import Admission
from loadmaster.scheduling.session import Session, _HeadsOrder
from tests.scheduling.test_session import _check


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    seen: Counter[str] = Counter()
    init, let_in = _HeadsOrder.__init__, _HeadsOrder._let_in

    def counted_init(self: _HeadsOrder, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        seen["late"] += len(self.late)
        seen["bound"] += len(self.bound)

    def counted_let_in(self: _HeadsOrder, rank: tuple[object, ...], key: tuple[object, ...]) -> None:
        bound, late = len(self.bound), len(self.late)
        let_in(self, rank, key)
        seen["bound back"] += bound
        seen["late back"] += late - len(self.late)

    monkeypatch.setattr(session_module._HeadsOrder, "__init__", counted_init)
    monkeypatch.setattr(session_module._HeadsOrder, "_let_in", counted_let_in)
    yield seen


@pytest.mark.parametrize("policy", ["srtf", "priority", "las"])
def test_settled_classes_give_decides_plans(policy: str, counts: Counter[str]) -> None:
    for seed in range(40):
        _check(seed, policy, "pack", steps=40)
    assert counts["late"] > 0 and counts["late back"] > 0
    if policy == "srtf":
        assert counts["bound"] > 0 and counts["bound back"] > 0


def _running(job_id: str, nodes: tuple[int, ...], gpus: int, duration_s: float, work_s: float) -> JobView:
    spec = JobSpec(job_id=job_id, tenant="A", submit_time_s=0.0, learners=len(nodes), gpus_per_learner=gpus,
                   duration_s=duration_s)
    return JobView(spec, 0.0, 1, Allocation(job_id, nodes, gpus, 0.0, 0.0), work_s, 1.0, 0.0, 0.0, 0, 0.0)


def _queued(job_id: str, learners: int, gpus: int, duration_s: float, submit: float) -> JobView:
    spec = JobSpec(job_id=job_id, tenant="A", submit_time_s=submit, learners=learners, gpus_per_learner=gpus,
                   duration_s=duration_s)
    return JobView(spec, 0.0, as_of=0.0)


def test_a_displacement_that_frees_more_than_it_takes_lets_a_settled_gang_start() -> None:
    """Two servers of 4 GPUs, both busy with long jobs. A short 1-GPU job displaces the long 4-GPU job on
    server 0 (nothing smaller frees a GPU) and keeps 3 GPUs free; a 3-GPU gang that may displace nobody
    (its remaining work exceeds every gain) was settled NO_CAPACITY at the start of the walk and must now
    start in them, as decide() starts it."""
    cluster = Cluster((Node("n0", 4, 64.0, 256.0), Node("n1", 4, 64.0, 256.0)))
    running = (_running("long0", (0,), 4, 100_000.0, 0.0), _running("long1", (1,), 4, 100_000.0, 0.0))
    queued = (_queued("short", 1, 1, 10.0, 0.0), _queued("gang3", 1, 3, 1_000_000.0, 1.0))
    snap = Snapshot.of_running(0.0, cluster, queued, running, {})
    policy, placer = make_policy("srtf"), make_placer("pack")
    full = decide(snap, make_policy("srtf"), make_placer("pack"))
    assert [s.job_id for s in full.starts] == ["short", "gang3"] and [p.job_id for p in full.preempts] == ["long0"]
    session = Session(policy, placer)
    for view in queued:
        session.add(view)
    lazy = Snapshot.of_running(0.0, cluster, session.queued, running, {})
    plan = session.decide(lazy)
    assert (plan.starts, plan.preempts) == (full.starts, full.preempts)
    assert WaitReason.NO_CAPACITY not in {w.reason for w in plan.waits}


def test_gates_say_whether_they_may_refuse() -> None:
    from loadmaster.scheduling.policies.base import Gate
    from loadmaster.scheduling.policies.drf import DrfGate
    from loadmaster.scheduling.policies.fair import QuotaGate
    from loadmaster.scheduling.policies.srtf import _DisplacementGate

    assert not Gate.may_deny() and not DrfGate.may_deny() and not _DisplacementGate.may_deny()
    assert QuotaGate.may_deny()

    class Refusing(Gate):
        def admit(self, job: JobView, gpus: int) -> Admission:
            return Admission.DENIED

    assert Refusing.may_deny()  # overriding admit() is taken to refuse unless the gate says otherwise


@pytest.mark.parametrize("policy", ["drf", "srtf", "las", "fifo-strict", "fair-fifo"])
def test_visits_answered_without_an_attempt_give_the_same_plans(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk answers a gang larger than the free GPUs (or a learner larger than any server's) without
    attempt() where the job may displace nobody. The same worlds with that turned off (_Walk.quick_answers)
    make more attempts and the same plans (both checked against decide())."""
    from loadmaster.scheduling.session import _Walk

    decide_module = importlib.import_module("loadmaster.scheduling.decide")

    attempts = Counter[str]()
    attempt = decide_module._Round.attempt

    def counted(self: decide_module._Round, job: JobView) -> tuple[Allocation | WaitReason, bool]:
        attempts[mode] += 1
        return attempt(self, job)

    monkeypatch.setattr(decide_module._Round, "attempt", counted)
    mode = "quick"
    for seed in range(25):
        _check(seed, policy, "pack", steps=30)
    mode = "slow"
    monkeypatch.setattr(_Walk, "quick_answers", False)
    for seed in range(25):
        _check(seed, policy, "pack", steps=30)
    assert attempts["quick"] < attempts["slow"]
