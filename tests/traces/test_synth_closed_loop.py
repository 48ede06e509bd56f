"""Closed-loop submissions (`trace synth --vcs --vc-queue Q`, traces/closed_loop.py)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from loadmaster.scheduling.snapshot import TenantQuota
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.traces import load_cluster
from loadmaster.traces.closed_loop import close_loop
from loadmaster.traces.synth import synthesize, vc_quotas


def _singles(n: int) -> list[np.ndarray]:
    return [np.array([j]) for j in range(n)]


def test_a_full_vc_takes_a_new_job_only_when_its_queue_is_short() -> None:
    # Quota 2, six 1-GPU jobs of 100 s all intended at 0, at most one job queued.
    submit, start = close_loop(np.zeros(6), _singles(6), np.ones(6, dtype=np.int64), np.full(6, 100.0), 2, 1)
    # Two start at once, the third queues and closes the gate; each end starts the queued job and lets one in.
    assert submit.tolist() == [0, 0, 0, 100, 100, 200]
    assert start.tolist() == [0, 0, 100, 100, 200, 200]
    # With room for two queued jobs the fourth gets in at 0 too.
    submit2, _ = close_loop(np.zeros(6), _singles(6), np.ones(6, dtype=np.int64), np.full(6, 100.0), 2, 2)
    assert submit2.tolist() == [0, 0, 0, 0, 100, 100]


def test_intended_times_hold_while_the_vc_has_room_and_a_burst_keeps_its_spread() -> None:
    intended = np.array([0.0, 100.0, 500.0, 520.0, 560.0, 5000.0])
    gpus = np.array([4, 1, 1, 1, 1, 2], dtype=np.int64)
    occupancy = np.array([1000.0, 50.0, 50.0, 50.0, 50.0, 10.0])
    units = [np.array([0]), np.array([1]), np.array([2, 3, 4]), np.array([5])]
    # Quota 4: job 1 queues behind the 4-GPU job and closes the gate, so the burst is held until job 1 starts at
    # 1,000 s; its later jobs keep their offsets from its first.
    submit, start = close_loop(intended, units, gpus, occupancy, 4, 1)
    assert submit.tolist() == [0, 100, 1000, 1020, 1060, 5000]
    assert start.tolist() == [0, 1000, 1000, 1020, 1060, 5000]
    # Quota 8: nothing is full, so nothing moves.
    submit, start = close_loop(intended, units, gpus, occupancy, 8, 1)
    assert submit.tolist() == intended.tolist() and start.tolist() == intended.tolist()


def test_the_queue_never_exceeds_the_gate_for_single_jobs() -> None:
    rng = np.random.default_rng(4)
    n = 400
    intended = np.sort(np.floor(rng.random(n) * 20_000))
    gpus = rng.choice([1, 2, 4, 8], size=n).astype(np.int64)
    occupancy = np.floor(rng.exponential(3000.0, size=n)) + 1
    for queue in (1, 3):
        submit, start = close_loop(intended, _singles(n), gpus, occupancy, 16, queue)
        assert (submit >= intended).all() and (start >= submit).all()
        for j in range(n):
            ahead = sum(1 for i in range(j) if submit[i] <= submit[j] < start[i])
            assert ahead < queue, (queue, j)
        # The quota is never exceeded.
        events = sorted([(t, g) for t, g in zip(start, gpus, strict=True)]
                        + [(t + o, -g) for t, o, g in zip(start, occupancy, gpus, strict=True)],
                        key=lambda e: (e[0], e[1]))
        assert max(np.cumsum([g for _, g in events])) <= 16


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="vc_queue"):
        close_loop(np.zeros(1), _singles(1), np.ones(1, dtype=np.int64), np.ones(1), 4, 0)
    with pytest.raises(ValueError, match="cannot fit a VC quota of 4"):
        close_loop(np.zeros(1), _singles(1), np.array([8]), np.ones(1), 4, 1)
    with pytest.raises(ValueError, match=r"vc_queue.*needs vcs"):
        synthesize("philly", 10, seed=0, vc_queue=2)


def test_synth_with_a_closed_loop_keeps_the_jobs_and_only_delays_submissions() -> None:
    c = load_cluster("32x8")
    key = lambda w: sorted((j.tenant, j.user, j.gpus, j.duration_s, j.failed_attempts_s) for j in w.jobs)  # noqa: E731
    open_loop = synthesize("philly", 3000, seed=1, cluster=c, load=1.5, vcs=True)
    closed = synthesize("philly", 3000, seed=1, cluster=c, load=1.5, vcs=True, vc_queue=2)
    assert closed.jobs == synthesize("philly", 3000, seed=1, cluster=c, load=1.5, vcs=True, vc_queue=2).jobs
    assert key(closed) == key(open_loop)
    assert max(j.submit_time_s for j in closed.jobs) > max(j.submit_time_s for j in open_loop.jobs)
    assert any("closed loop" in note for note in closed.report.notes)


def test_fair_on_fixed_quotas_holds_the_vcs_full_with_a_short_queue() -> None:
    # What the loop is for: under open-loop arrivals most jobs never wait (median 0) or the backlog drifts;
    # closed-loop users keep most jobs waiting a little, the wide ones longer.
    c = load_cluster("32x8")
    quotas = {vc: TenantQuota(vc, g, 0) for vc, g in vc_quotas("philly", c).items()}
    w = synthesize("philly", 2000, seed=0, cluster=c, load=1.5, vcs=True, vc_queue=2)
    records = simulate(w, c, RunOptions(policy="fair", placement="locality", quotas=quotas)).result.records
    delays = [r.first_start_s - r.spec.submit_time_s for r in records if r.first_start_s is not None]
    assert len(delays) == 2000
    assert sum(d > 0 for d in delays) > 0.5 * len(delays)
    assert statistics.median(delays) > 0
    one = statistics.median(r.first_start_s - r.spec.submit_time_s for r in records if r.spec.gpus == 1
                            and r.first_start_s is not None)
    wide = statistics.median(r.first_start_s - r.spec.submit_time_s for r in records if r.spec.gpus >= 8
                             and r.first_start_s is not None)
    assert wide > one


def test_gangs_wider_than_a_server_are_pre_simulated_as_the_simulator_runs_them_spread() -> None:
    from loadmaster.core.profiles import family_of
    from loadmaster.traces.synth import PHILLY, _spread_factor

    family = np.array([0, 0, 0, 0], dtype=np.int64)
    factor = _spread_factor(PHILLY, family, np.array([1, 8, 16, 32], dtype=np.int64), 8)
    rack = 1.0 + family_of(PHILLY.models[0].name).cross_rack_slowdown
    assert rack > 1.0
    assert factor.tolist() == [1.0, 1.0, rack, rack]
