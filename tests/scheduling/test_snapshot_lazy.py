"""The snapshot's shortcuts for a shell that decides at every event: the running jobs made only when read,
free arrays and quotas handed on without a copy, and the same plans as a snapshot given everything."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.snapshot import TenantQuota
from tests.scheduling.test_invariants import snapshots


def _cluster() -> Cluster:
    return Cluster(tuple(Node(f"n{i}", 4, 16.0, 64.0) for i in range(2)))


def _running() -> tuple[JobView, ...]:
    spec = JobSpec("r", "t", 0.0, 1, 2, 100.0)
    return (JobView(spec, 0.0, allocation=Allocation("r", (0,), 2, 0.0, 0.0), rate=1.0),)


def test_a_running_provider_is_called_once_and_only_when_read() -> None:
    calls: list[int] = []
    running = _running()

    def provider() -> tuple[JobView, ...]:
        calls.append(1)
        return running

    cluster = _cluster()
    snap = Snapshot.build(0.0, cluster, cluster.gpu_capacity, cluster.cpu_capacity, cluster.mem_capacity, (),
                          provider, tenant_gpus={"t": 2})
    assert calls == []
    assert snap.running is running
    assert snap.running is running
    assert calls == [1]


def test_a_running_provider_without_tenant_gpus_is_refused() -> None:
    cluster = _cluster()
    with pytest.raises(ValueError, match="tenant_gpus"):
        Snapshot.build(0.0, cluster, cluster.gpu_capacity, cluster.cpu_capacity, cluster.mem_capacity, (),
                       _running)


def test_read_only_arrays_and_quotas_are_handed_on_as_they_are() -> None:
    cluster = _cluster()
    gpus = cluster.gpu_capacity.astype(np.float64)
    view = gpus.view()
    view.flags.writeable = False
    quotas = MappingProxyType({"t": TenantQuota("t", 4)})
    snap = Snapshot.build(0.0, cluster, view, cluster.cpu_capacity, cluster.mem_capacity, (), (), quotas,
                          copy=False)
    assert snap.free_gpus is view and snap.tenants is quotas
    gpus[0] = 1.0  # the shell's own array: the view follows it
    assert snap.free_gpus[0] == 1.0
    # A writeable array is still never handed on writeable.
    writeable = cluster.gpu_capacity.astype(np.float64)
    other = Snapshot.build(0.0, cluster, writeable, cluster.cpu_capacity, cluster.mem_capacity, (), (),
                           {"t": TenantQuota("t", 4)}, copy=False)
    assert not other.free_gpus.flags.writeable and other.tenants is not quotas


def test_one_node_allocation_counts_its_learners() -> None:
    assert Allocation("a", (3,), 2, 0.0, 0.0).per_node() == {3: 1}
    assert Allocation("a", (3, 3, 1), 2, 0.0, 0.0).per_node() == {3: 2, 1: 1}


@settings(max_examples=150, deadline=None)
@given(snap=snapshots(), policy_name=st.sampled_from(sorted(POLICIES)), placement=st.sampled_from(sorted(PLACERS)))
def test_a_lazy_snapshot_decides_as_a_full_one(snap: Snapshot, policy_name: str, placement: str) -> None:
    """The running jobs given as a provider (the simulator's way) change no plan."""
    running = snap.running
    lazy = Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem, snap.queued,
                          lambda: running, snap.tenants, snap.tenant_gpus)
    expected = decide(snap, make_policy(policy_name), make_placer(placement))
    assert decide(lazy, make_policy(policy_name), make_placer(placement)) == expected
