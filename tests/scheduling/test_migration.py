"""Migration (defragmentation): decide() moves smaller running jobs so a gang waiting on fragmentation fits,
and the simulator charges each move its restart overhead and the work since the last checkpoint."""

from __future__ import annotations

import pytest

from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling.decide import MAX_MOVES
from loadmaster.scheduling.session import Session
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, Simulator
from tests.helpers import cluster, job, queued, workload


def running(spec: JobSpec, *nodes: int) -> JobView:
    return JobView(spec, 0, allocation=Allocation(spec.job_id, nodes, spec.gpus_per_learner, 0, 0), rate=1.0)


def scattered() -> Snapshot:
    """Two 8-GPU servers, each half taken by a 4-GPU job: 8 GPUs free, none of them on one server."""
    c = cluster(8, 8)
    a, b = running(job("a", gpus=4), 0), running(job("b", gpus=4), 1)
    return Snapshot.build(10, c, [4, 4], c.cpu_capacity, c.mem_capacity, (queued(job("wide", gpus=8)),), (a, b))


@pytest.mark.parametrize("policy", ["fifo", "fifo-strict", "fair", "las"])
def test_a_wide_gang_waiting_on_fragmentation_starts_after_one_move(policy: str) -> None:
    snap = scattered()
    plain = decide(snap, make_policy(policy), make_placer("pack"))
    assert plain.starts == () and plain.migrations == ()
    assert plain.waits[0].reason is WaitReason.FRAGMENTATION
    plan = decide(snap, make_policy(policy), make_placer("pack"), migrate=True)
    assert [s.job_id for s in plan.starts] == ["wide"]
    [move] = plan.migrations
    assert move.for_job == "wide" and plan.preempts == ()
    # The moved job joined the other one's server; the wide gang has a server to itself.
    wide = plan.starts[0].allocation
    assert set(wide.learner_nodes).isdisjoint(move.allocation.learner_nodes)
    assert not plan.empty


def test_the_session_moves_as_decide_does() -> None:
    snap = scattered()
    session = Session(make_policy("fifo"), make_placer("pack"), migrate=True)
    for view in snap.queued:
        session.add(view)
    assert session.decide(snap) == decide(snap, make_policy("fifo"), make_placer("pack"), migrate=True)


def test_nothing_moves_when_the_gang_cannot_fit_anyway() -> None:
    c = cluster(8, 8)
    a, b = running(job("a", gpus=6), 0), running(job("b", gpus=6), 1)
    snap = Snapshot.build(10, c, [2, 2], c.cpu_capacity, c.mem_capacity, (queued(job("wide", gpus=4)),), (a, b))
    plan = decide(snap, make_policy("fifo"), make_placer("pack"), migrate=True)
    assert plan.migrations == () and plan.starts == ()
    # Jobs as wide as the waiting one never move for it either.
    snap2 = Snapshot.build(10, c, [4, 4], c.cpu_capacity, c.mem_capacity, (queued(job("w", gpus=4, learners=2)),),
                           (running(job("a", gpus=4, learners=2), 0, 1),))
    assert decide(snap2, make_policy("fifo"), make_placer("pack"), migrate=True).migrations == ()


def test_moves_are_bounded() -> None:
    # Two 32-GPU servers half full of one-GPU jobs: a 32-GPU gang needs 16 of them moved, more than MAX_MOVES.
    c = cluster(32, 32)
    jobs = tuple(running(job(f"s{i}"), i % 2) for i in range(32))
    snap = Snapshot.build(10, c, [16, 16], c.cpu_capacity, c.mem_capacity, (queued(job("wide", gpus=32)),), jobs)
    plan = decide(snap, make_policy("fifo"), make_placer("pack"), migrate=True)
    assert plan.migrations == () and plan.starts == ()
    assert MAX_MOVES < 16


def test_capacity_is_never_exceeded_and_moved_jobs_are_not_also_preempted() -> None:
    c = cluster(8, 8, 8)
    run_ = (running(job("a", gpus=4), 0), running(job("b", gpus=4), 1), running(job("c", gpus=2), 2))
    q = (queued(job("wide", gpus=8, submit=1)), queued(job("wide2", gpus=8, submit=2)))
    snap = Snapshot.build(10, c, [4, 4, 6], c.cpu_capacity, c.mem_capacity, q, run_)
    plan = decide(snap, make_policy("las"), make_placer("pack"), migrate=True)
    free = [4.0, 4.0, 6.0]
    for m in plan.migrations:
        assert m.job_id not in {p.job_id for p in plan.preempts}
        old = next(v for v in run_ if v.job_id == m.job_id).allocation
        assert old is not None
        for n in old.learner_nodes:
            free[n] += old.gpus_per_learner
    for p in plan.preempts:
        old = next(v for v in run_ if v.job_id == p.job_id).allocation
        assert old is not None
        for n in old.learner_nodes:
            free[n] += old.gpus_per_learner
    for alloc in [m.allocation for m in plan.migrations] + [s.allocation for s in plan.starts]:
        for n in alloc.learner_nodes:
            free[n] -= alloc.gpus_per_learner
    assert min(free) >= 0


def test_the_simulator_charges_restart_overhead_and_work_since_the_checkpoint() -> None:
    c = cluster(8, 8)
    jobs = [job("a", gpus=4, duration=5000), job("filler", gpus=4, duration=100),
            job("b", gpus=4, duration=5000, submit=1), job("wide", gpus=8, duration=100, submit=1000)]

    def sim(migrate: bool) -> dict[str, object]:
        res = Simulator(c, make_policy("fifo"), make_placer("pack"), FailureModel(seed=0),
                        PerformanceModel(c, locality=False),
                        SimConfig(checkpoint_interval_s=600, restart_overhead_s=30, migrate=migrate)).run(
            workload(*jobs))
        return {"res": res, **{r.spec.job_id: r for r in res.records}}

    # a and filler fill server 0 and b takes half of server 1... then filler ends at 100: 4 + 4 free GPUs,
    # scattered. Without moves the wide gang waits for a (5000 s); with one, it starts at once.
    plain, moved = sim(False), sim(True)
    assert plain["wide"].first_start_s == pytest.approx(5000)  # type: ignore[attr-defined]
    assert moved["wide"].first_start_s == pytest.approx(1000)  # type: ignore[attr-defined]
    mover = next(r for r in moved["res"].records if r.migrations)  # type: ignore[attr-defined]
    assert mover.spec.job_id in ("a", "b") and mover.preemptions == 0
    # Moved at 1000 s (or 999 s of work for b) with a checkpoint at 600 s: the work since is lost, 30 s restart.
    began = mover.spec.submit_time_s
    lost = 1000 - began - 600
    assert mover.finish_s == pytest.approx(1000 + 30 + 5000 - 600)
    assert mover.gpu_s_lost == pytest.approx(lost * 4)
    assert mover.gpu_s_lost_migrating == pytest.approx(lost * 4)
    assert moved["res"].mode_metrics["migrations"] == 1  # type: ignore[attr-defined]
    assert "migrations" not in plain["res"].mode_metrics  # type: ignore[attr-defined]
