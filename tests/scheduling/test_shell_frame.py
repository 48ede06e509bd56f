"""ShellFrame: the simulator's snapshots made with one dict copy must be build()'s, read the shell's state as it
is at each decision (never a copy frozen when the frame was made), and refuse inputs it would freeze."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling.snapshot import FreeLedger, JobView, LazyJobs, ShellFrame, Snapshot, TenantQuota
from tests.helpers import cluster, job


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


_FIELDS = ("clock", "cluster", "free_gpus", "free_cpus", "free_mem", "queued", "tenants", "tenant_gpus",
           "free_buckets", "free_gpu_total", "free_cpu_total", "free_mem_total", "max_free_gpus", "running",
           "running_by_tenant", "queued_tenants", "running_elastic", "running_priorities")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=6), st.floats(0, 1e6), st.integers(0, 5),
       st.booleans())
def test_a_frames_snapshot_is_builds(free: list[int], clock: float, n_queued: int, elastic_given: bool) -> None:
    c = cluster(*[8] * len(free))
    gpus = np.array(free, dtype=np.float64)
    cpus = c.cpu_capacity.astype(np.float64)
    mem = c.mem_capacity.astype(np.float64)
    views = tuple(_read_only(a) for a in (gpus, cpus, mem))
    ledger = FreeLedger(gpus, cpus, mem)
    quotas = MappingProxyType({"A": TenantQuota("A", 4)})
    holding: dict[str, int] = {"A": 3}
    running = (JobView(job("r"), 0.0),)
    by_tenant = {"A": running}
    queued = tuple(JobView(job(f"q{i}", tenant="B"), 0.0) for i in range(n_queued))
    elastic = () if elastic_given else (lambda: running)
    args = (views, lambda: running, quotas, MappingProxyType(holding), lambda: by_tenant, lambda: ["B"])
    priorities = {0: 1}
    frame = ShellFrame(c, *args[0], ledger, *args[1:], lambda: priorities)
    for step in range(2):  # the second time after the shell changed its state in place
        lazy = LazyJobs(lambda: queued, len(queued))
        made = frame.at(clock, lazy, elastic)  # the totals and buckets: the ledger's as they are now
        built = Snapshot.build(clock, c, *views, lazy, args[1], quotas, args[3], args[4], elastic, args[5],
                               copy=False, free_totals=ledger.totals(), free_buckets=ledger.buckets,
                               running_priorities=lambda: priorities)
        for name in _FIELDS:
            a, b = getattr(made, name), getattr(built, name)
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b), name
            elif name == "queued":
                assert tuple(a) == tuple(b)
            else:
                assert a == b, name
        assert made.tenant_gpus["A"] == 3 + step
        seen = made.running_priorities
        assert seen == {0: 1 + step}
        priorities[0] += 1
        assert made.running_priorities == seen  # a copy, read once: the shell's count changes after a decision
        holding["A"] += 1
        gpus[0] = 0.0
        ledger.reset(gpus, cpus, mem)
        assert made.free_gpus[0] == 0.0  # a view of the shell's array, as build(copy=False) gives


def test_a_frame_refuses_what_it_would_freeze() -> None:
    c = cluster(8)
    ro = _read_only(c.gpu_capacity.astype(np.float64))
    quotas = MappingProxyType({})
    ok = dict(ledger=FreeLedger(ro, ro, ro), running=lambda: (), tenants=quotas, tenant_gpus=MappingProxyType({}),
              running_by_tenant=dict, queued_tenants=list)
    with pytest.raises(ValueError, match="free_cpus"):
        ShellFrame(c, ro, c.cpu_capacity.astype(np.float64), ro, **ok)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tenant_gpus"):
        ShellFrame(c, ro, ro, ro, **{**ok, "tenant_gpus": {}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="running"):
        ShellFrame(c, ro, ro, ro, **{**ok, "running": ()})  # type: ignore[arg-type]
