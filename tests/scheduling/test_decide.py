from loadmaster.core.job import Allocation
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, WaitReason, decide, make_placer, make_policy
from tests.helpers import cluster, job, queued


def test_classic_gang_two_run_two_wait_no_deadlock() -> None:
    # 8 GPUs, four jobs of 4 learners x 1 GPU arriving together: two run whole, two wait whole.
    snap = Snapshot.idle(0, cluster(4, 4), tuple(queued(job(f"j{i}", learners=4)) for i in range(4)))
    for placement in ("pack", "spread"):
        plan = decide(snap, make_policy("fifo"), make_placer(placement))
        assert [s.job_id for s in plan.starts] == ["j0", "j1"]
        assert all(s.allocation.learners == 4 for s in plan.starts)
        assert {w.job_id: w.reason for w in plan.waits} == {"j2": WaitReason.NO_CAPACITY,
                                                           "j3": WaitReason.NO_CAPACITY}


def test_fragmentation_is_told_apart_from_lack_of_capacity() -> None:
    # Two nodes with 2 free GPUs each: a 1-learner 4-GPU job fits nowhere though 4 GPUs are free.
    c = cluster(4, 4)
    busy = JobView(job("busy", learners=2, gpus=2), 0, allocation=Allocation("busy", (0, 1), 2, 0, 0),
                   rate=1.0)
    snap = Snapshot.build(0, c, [2, 2], c.cpu_capacity, c.mem_capacity, (queued(job("big", gpus=4)),), (busy,))
    plan = decide(snap, make_policy("fifo"), make_placer("pack"))
    assert plan.waits[0].reason is WaitReason.FRAGMENTATION


def test_cpu_shortage_is_its_own_reason() -> None:
    c = cluster(4, cpus=8)
    snap = Snapshot.idle(0, c, (queued(job("cpu-hungry", gpus=1, cpus_per_learner=16)),))
    plan = decide(snap, make_policy("fifo"), make_placer("pack"))
    assert plan.rejects and "CPUs" in plan.rejects[0].reason
    c2 = cluster(4, cpus=16)
    busy = JobView(job("b"), 0, allocation=Allocation("b", (0,), 1, 12, 0), rate=1.0)
    snap2 = Snapshot.build(0, c2, [3], [4], c2.mem_capacity, (queued(job("x", cpus_per_learner=8)),), (busy,))
    assert decide(snap2, make_policy("fifo"), make_placer("pack")).waits[0].reason is WaitReason.CPU_MEMORY


def test_job_larger_than_cluster_is_rejected_with_reason() -> None:
    snap = Snapshot.idle(0, cluster(4, 4), (queued(job("huge", learners=3, gpus=4)),
                                            queued(job("wide", gpus=8))))
    plan = decide(snap, make_policy("fifo"), make_placer("pack"))
    reasons = {r.job_id: r.reason for r in plan.rejects}
    assert "cluster has 8" in reasons["huge"]
    assert "largest server has 4" in reasons["wide"]


def test_fifo_backfills_but_strict_fifo_blocks() -> None:
    c = cluster(4)
    jobs = (queued(job("a", gpus=2, submit=0)), queued(job("big", gpus=4, submit=1)),
            queued(job("small", gpus=2, submit=2)))
    busy = JobView(job("b", gpus=2), 0, allocation=Allocation("b", (0,), 2, 0, 0), rate=1.0)
    snap = Snapshot.build(5, c, [2], c.cpu_capacity, c.mem_capacity, jobs, (busy,))
    assert [s.job_id for s in decide(snap, make_policy("fifo"), make_placer("pack")).starts] == ["a"]
    free4 = Snapshot.build(5, c, [4], c.cpu_capacity, c.mem_capacity, jobs[1:], ())
    assert [s.job_id for s in decide(free4, make_policy("fifo"), make_placer("pack")).starts] == ["big"]
    snap_hol = Snapshot.build(5, c, [2], c.cpu_capacity, c.mem_capacity, jobs[1:], (busy,))
    strict = decide(snap_hol, make_policy("fifo-strict"), make_placer("pack"))
    assert strict.starts == ()
    assert {w.job_id: w.reason for w in strict.waits}["small"] is WaitReason.LOWER_PRIORITY
    relaxed = decide(snap_hol, make_policy("fifo"), make_placer("pack"))
    assert [s.job_id for s in relaxed.starts] == ["small"]


def test_fair_lends_idle_quota_and_reclaims_it() -> None:
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4), "B": TenantQuota("B", 4)}
    # B borrows all 8 GPUs while A is idle.
    snap = Snapshot.idle(0, c, tuple(queued(job(f"b{i}", gpus=4, tenant="B")) for i in range(2)), quotas)
    plan = decide(snap, make_policy("fair"), make_placer("pack"))
    assert len(plan.starts) == 2
    running = tuple(JobView(j.spec, 0, allocation=s.allocation, rate=1.0,
                            started_at=float(i))
                    for i, (j, s) in enumerate(zip(snap.queued, plan.starts, strict=True)))
    # A comes back: it reclaims its quota by preempting one of B's borrowed jobs (the newest).
    snap2 = Snapshot.build(10, c, [0, 0], [32, 32], [256, 256], (queued(job("a0", gpus=4, tenant="A")),),
                           running, quotas)
    plan2 = decide(snap2, make_policy("fair"), make_placer("pack"))
    assert [p.job_id for p in plan2.preempts] == ["b1"]
    assert [s.job_id for s in plan2.starts] == ["a0"]


def test_fair_does_not_preempt_a_tenant_within_its_quota() -> None:
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4), "B": TenantQuota("B", 4)}
    b = JobView(job("b0", gpus=4, tenant="B"), 0, allocation=Allocation("b0", (0,), 4, 0, 0), rate=1.0)
    a = JobView(job("a0", gpus=4, tenant="A"), 0, allocation=Allocation("a0", (1,), 4, 0, 0), rate=1.0)
    snap = Snapshot.build(1, c, [0, 0], [32, 32], [256, 256], (queued(job("a1", gpus=4, tenant="A")),),
                          (a, b), quotas)
    plan = decide(snap, make_policy("fair"), make_placer("pack"))
    assert plan.preempts == () and plan.starts == ()
    assert plan.waits[0].reason in (WaitReason.OVER_QUOTA, WaitReason.NO_CAPACITY)


def test_borrow_limit_denies_and_rejects() -> None:
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 2, borrow_limit=2)}
    snap = Snapshot.idle(0, c, (queued(job("a0", gpus=4, tenant="A")), queued(job("a1", gpus=2, tenant="A")),
                                queued(job("a2", learners=2, gpus=4, tenant="A"))), quotas)
    plan = decide(snap, make_policy("fair"), make_placer("pack"))
    # a1 fits in A's quota, so it goes before a0 (which would borrow); then a0 would pass the limit.
    assert [s.job_id for s in plan.starts] == ["a1"]
    assert {w.job_id: w.reason for w in plan.waits} == {"a0": WaitReason.OVER_QUOTA}
    assert [r.job_id for r in plan.rejects] == ["a2"]


def test_decide_is_pure() -> None:
    snap = Snapshot.idle(0, cluster(4, 4), tuple(queued(job(f"j{i}", learners=2)) for i in range(5)))
    before = snap.free_gpus.copy()
    p1 = decide(snap, make_policy("fifo"), make_placer("pack"))
    p2 = decide(snap, make_policy("fifo"), make_placer("pack"))
    assert p1 == p2
    assert (snap.free_gpus == before).all()


def test_a_gang_that_fits_no_single_gpu_type_is_rejected() -> None:
    # Two 4-GPU servers of different types: a 2 x 3-GPU gang fits the GPU count, but no one type.
    from loadmaster.core.cluster import Cluster, Node

    c = Cluster((Node("v", 4, 32, 256, "v100"), Node("k", 4, 32, 256, "k80")))
    snap = Snapshot.idle(0, c, (queued(job("wide", learners=2, gpus=3)),))
    plan = decide(snap, make_policy("las"), make_placer("pack"))
    assert [r.job_id for r in plan.rejects] == ["wide"] and "one GPU type" in plan.rejects[0].reason
