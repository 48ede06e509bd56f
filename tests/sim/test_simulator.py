from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import FinalStatus, JobSpec, JobStatus
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, make_placer, make_policy
from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.priority import PriorityPolicy
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, SimResult, Simulator
from tests.helpers import cluster, job, workload


def run(c: Cluster, *jobs: JobSpec, policy: str = "fifo", placement: str = "pack",
        retry: RetryPolicy = RetryPolicy.TRACE, tenants: dict[str, TenantQuota] | None = None,
        **cfg: float) -> SimResult:
    sim = Simulator(c, make_policy(policy), make_placer(placement), FailureModel(retry, 3, 0),
                    PerformanceModel(c, locality=False), SimConfig(**cfg), tenants)  # type: ignore[arg-type]
    return sim.run(workload(*jobs))


def by_id(result: SimResult) -> dict[str, object]:
    return {r.spec.job_id: r for r in result.records}


def test_classic_gang_in_the_simulator() -> None:
    res = run(cluster(4, 4), *(job(f"j{i}", learners=4) for i in range(4)))
    jct = sorted(r.jct_s for r in res.records if r.jct_s is not None)
    assert jct == [100, 100, 200, 200]
    assert all(r.status is JobStatus.COMPLETED for r in res.records)
    assert res.busy_gpu_s == pytest.approx(8 * 200)


def test_failed_attempts_are_replayed_and_their_gpu_time_counted() -> None:
    spec = job("f", gpus=2, failed_attempts_s=(50.0, 30.0), duration=100)
    rec = run(cluster(4), spec).records[0]
    assert rec.status is JobStatus.COMPLETED
    assert rec.finish_s == pytest.approx(180)
    assert rec.attempts_run == 3
    assert rec.gpu_s_failed == pytest.approx(2 * 80)
    assert len(rec.failure_categories) == 2


def test_a_failed_attempt_counts_every_run_it_had_before_a_preemption() -> None:
    # "low" runs 40 s of its failing 100 s attempt, is preempted by "high" (no checkpoint yet: all lost),
    # waits 50 s, restarts (30 s overhead) and fails after 100 s more: 40 + 130 GPU-seconds were wasted.
    low = job("low", failed_attempts_s=(100.0,), duration=10)
    high = job("high", submit=40.0, duration=50, priority=5)
    rec = by_id(run(cluster(1), low, high, policy="priority", restart_overhead_s=30.0))["low"]
    assert rec.preemptions == 1  # type: ignore[attr-defined]
    assert rec.gpu_s_failed == pytest.approx(40 + 130)  # type: ignore[attr-defined]


def test_retry_policies_on_a_job_that_fails_for_good() -> None:
    spec = job("bad", failed_attempts_s=(40.0,), duration=60, final_status=FinalStatus.FAILED)
    trace = run(cluster(1), spec).records[0]
    assert trace.status is JobStatus.FAILED and trace.finish_s == pytest.approx(100)
    always = run(cluster(1), spec, retry=RetryPolicy.ALWAYS).records[0]
    assert always.attempts_run == 3 and always.gpu_s_failed == pytest.approx(40 + 60 + 40)
    never = run(cluster(1), spec, retry=RetryPolicy.NEVER).records[0]
    assert never.attempts_run == 1 and never.finish_s == pytest.approx(40)


def test_classified_retries_skip_deterministic_failures_and_save_gpu_time() -> None:
    specs = [job(f"bad{i}", failed_attempts_s=(40.0,), duration=60, final_status=FinalStatus.FAILED,
                 submit=float(i)) for i in range(40)]
    always = run(cluster(8), *specs, retry=RetryPolicy.ALWAYS)
    classified = run(cluster(8), *specs, retry=RetryPolicy.CLASSIFIED)
    spent_always = sum(r.gpu_s_failed for r in always.records)
    spent_classified = sum(r.gpu_s_failed for r in classified.records)
    assert spent_classified < spent_always
    for r in classified.records:
        if r.attempts_run > 1:
            assert r.failure_categories and r.failure_categories[0] in {
                "checkpoint_error", "mpi_runtime", "cuda_failure", "core_dump", "infrastructure"}


def test_fair_reclaims_borrowed_gpus_with_checkpoint_loss() -> None:
    quotas = {"A": TenantQuota("A", 4), "B": TenantQuota("B", 4)}
    b = [job(f"b{i}", gpus=4, tenant="B", duration=3600) for i in range(2)]
    a = job("a0", gpus=4, tenant="A", submit=1000, duration=100)
    res = run(cluster(4, 4), *b, a, policy="fair", tenants=quotas, checkpoint_interval_s=600,
              restart_overhead_s=30)
    recs = by_id(res)
    assert res.preemptions == 1
    a0 = recs["a0"]
    assert a0.first_start_s == pytest.approx(1000)  # type: ignore[attr-defined]
    victim = next(r for r in res.records if r.preemptions)
    # Preempted at 1000 s with a checkpoint at 600 s: 400 s lost, 30 s restart, resumes at 1100 s.
    assert victim.finish_s == pytest.approx(1100 + 30 + 3000)
    assert victim.gpu_s_lost == pytest.approx(400 * 4)


def test_fair_does_not_restart_a_reclaimed_borrowing_job_on_gpus_a_guaranteed_job_waits_for() -> None:
    # X may hold 1 GPU and has a 4-GPU job: it only ever runs on GPUs lent by Y. Y keeps a 3-GPU job waiting
    # within its quota. Whenever Y's running job ends, the waiting guaranteed job must get the GPUs: were x
    # started there (its tenant holds nothing, so its share is the lowest), Y would reclaim it at the next
    # event, and again after every end of Y's (reclaim thrash: one preemption per job of Y's).
    quotas = {"X": TenantQuota("X", 1), "Y": TenantQuota("Y", 3)}
    ys = [job(f"y{k}", gpus=3, tenant="Y", submit=0 if k == 0 else 100 * k + 1, duration=150) for k in range(10)]
    x = job("x", gpus=4, tenant="X", submit=0.5, duration=1000)
    res = run(cluster(4), *ys, x, policy="fair", tenants=quotas, checkpoint_interval_s=600,
              restart_overhead_s=30)
    recs = by_id(res)
    assert res.preemptions == 0
    last_y = max(recs[f"y{k}"].finish_s for k in range(10))  # type: ignore[attr-defined]
    assert recs["x"].first_start_s == pytest.approx(last_y)  # type: ignore[attr-defined]


def test_gpu_type_speed_and_locality_slow_jobs_down() -> None:
    c = Cluster((Node("v", 4, 32, 256, "v100"), Node("k", 4, 32, 256, "k80")))
    spec = job("j", gpus=4, duration=100, type_speed=(("k80", 0.25), ("v100", 1.0)))
    busy = job("first", gpus=4, duration=1000)
    res = run(c, busy, spec)
    j = by_id(res)["j"]
    # The only free node is the K80 one: a quarter of the speed, four times the time.
    assert j.jct_s == pytest.approx(400)  # type: ignore[attr-defined]
    perf = PerformanceModel(cluster(2, 2, racks=2))
    from loadmaster.core.job import Allocation
    spread = perf.rate(job("m", learners=2, model="Transformer"), Allocation("m", (0, 1), 1, 0, 0))
    packed = perf.rate(job("m", learners=2, model="Transformer"), Allocation("m", (0, 0), 1, 0, 0))
    assert packed == 1.0 and spread < packed


def test_same_seed_same_summary() -> None:
    specs = [job(f"j{i}", learners=1 + i % 3, submit=float(i * 7), duration=50.0 + i,
                 failed_attempts_s=(10.0,) if i % 4 == 0 else (),
                 final_status=FinalStatus.FAILED if i % 5 == 0 else FinalStatus.PASS) for i in range(60)]
    w = workload(*specs)
    opts = RunOptions(policy="fair", retry=RetryPolicy.CLASSIFIED, seed=7)
    a = simulate(w, cluster(4, 4), opts).summary
    b = simulate(w, cluster(4, 4), opts).summary
    a.pop("wall_time_s")
    b.pop("wall_time_s")
    assert a == b


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(1, 4), st.sampled_from([0, 1, 2, 4, 8]),
                       st.integers(1, 400), st.sampled_from(["A", "B"]), st.integers(0, 2),
                       st.sampled_from(list(FinalStatus))), min_size=1, max_size=30),
    st.sampled_from(["fifo", "fifo-strict", "fair"]),
    st.sampled_from(["pack", "spread"]),
    st.sampled_from(list(RetryPolicy)),
)
def test_every_job_is_accounted_for(raw: list[tuple[int, int, int, int, str, int, FinalStatus]], policy: str,
                                    placement: str, retry: RetryPolicy) -> None:
    specs = [job(f"j{i}", learners=n, gpus=g, submit=float(s), duration=float(d), tenant=t,
                 failed_attempts_s=(float(d) / 2,) * f, final_status=st_)
             for i, (s, n, g, d, t, f, st_) in enumerate(raw)]
    c = cluster(4, 4, 2)
    quotas = {"A": TenantQuota("A", 6), "B": TenantQuota("B", 4)}
    res = run(c, *specs, policy=policy, placement=placement, retry=retry, tenants=quotas)
    assert len(res.records) == len(specs)
    # Nothing is left behind: every job ends, and ends in a terminal status (fifo never starves forever
    # here because every job fits the cluster or is rejected).
    for r in res.records:
        assert r.status.terminal, (r.spec.job_id, r.status)
        if r.reject_reason:
            assert r.first_start_s is None
        else:
            assert r.first_start_s is not None and r.finish_s is not None and r.finish_s >= r.first_start_s
    assert res.busy_gpu_s <= c.total_gpus * res.end_s + 1e-6


class _CheckingPriority(PriorityPolicy):
    """Priority, checking at every preemptor() call the simulator's count of the classes running."""

    calls = 0

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        counted: dict[int, int] = {}
        for view in snap.running:
            counted[view.spec.priority] = counted.get(view.spec.priority, 0) + 1
        assert snap.running_priorities == counted
        _CheckingPriority.calls += 1
        return super().preemptor(snap, gate, job)


def test_the_running_jobs_per_priority_class_are_kept_through_starts_ends_and_preemptions() -> None:
    jobs = [job(f"j{i}", gpus=1 + i % 3, submit=7.0 * i, duration=40.0 + 13 * (i % 5), priority=i % 4,
                failed_attempts_s=(20.0,) if i % 6 == 0 else ()) for i in range(40)]
    c = cluster(4, 4)
    sim = Simulator(c, _CheckingPriority(), make_placer("pack"), FailureModel(RetryPolicy.TRACE, 3, 0),
                    PerformanceModel(c, locality=False), SimConfig(restart_overhead_s=5.0))
    res = sim.run(workload(*jobs))
    assert _CheckingPriority.calls > 20
    assert sum(r.preemptions for r in res.records) > 0
