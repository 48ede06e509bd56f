import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, WaitReason, make_placer
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    best_spanning,
    fewest_servers,
    learner_slots,
    tightest_node,
    type_groups,
    whole_gang_nodes,
)
from tests.helpers import cluster, job, queued
from tests.scheduling.test_invariants import snapshots


def _place(placement: str, c: Cluster, spec_job: JobView, free_gpus: list[int] | None = None
           ) -> Allocation | WaitReason:
    g = c.gpu_capacity if free_gpus is None else np.array(free_gpus)
    snap = Snapshot.build(0, c, g, c.cpu_capacity, c.mem_capacity, (spec_job,), ())
    return make_placer(placement).place(spec_job, spec_job.spec.learners, FreeCapacity(snap), snap)


def test_pack_uses_one_server_when_it_can_and_picks_the_tightest() -> None:
    alloc = _place("pack", cluster(8, 8, 8), queued(job("j", learners=2, gpus=2)), [8, 5, 6])
    assert isinstance(alloc, Allocation)
    assert alloc.learner_nodes == (1, 1)


def test_pack_uses_fewest_servers() -> None:
    alloc = _place("pack", cluster(4, 4, 4, 4), queued(job("j", learners=6, gpus=1)), [1, 4, 2, 4])
    assert isinstance(alloc, Allocation)
    assert len(alloc.nodes) == 2 and alloc.learners == 6


def test_spread_puts_one_learner_per_server() -> None:
    alloc = _place("spread", cluster(4, 4, 4, 4), queued(job("j", learners=4, gpus=1)))
    assert isinstance(alloc, Allocation)
    assert sorted(alloc.learner_nodes) == [0, 1, 2, 3]


def test_spread_doubles_up_only_when_it_must() -> None:
    alloc = _place("spread", cluster(4, 4), queued(job("j", learners=3, gpus=1)))
    assert isinstance(alloc, Allocation)
    assert sorted(alloc.per_node().values()) == [1, 2]


@pytest.mark.parametrize("placement", ["pack", "spread"])
def test_gang_never_mixes_gpu_types(placement: str) -> None:
    c = Cluster((Node("v", 2, 32, 256, "v100"), Node("k", 2, 32, 256, "k80")))
    result = _place(placement, c, queued(job("j", learners=4, gpus=1)))
    assert result is WaitReason.FRAGMENTATION
    ok = _place(placement, c, queued(job("j2", learners=2, gpus=1)))
    assert isinstance(ok, Allocation) and len({c.nodes[n].gpu_type for n in ok.nodes}) == 1


@pytest.mark.parametrize("placement", ["pack", "spread"])
def test_zero_gpu_jobs_place_by_cpu(placement: str) -> None:
    c = cluster(0, 4, cpus=8)
    alloc = _place(placement, c, queued(job("cpu", gpus=0, cpus_per_learner=6)))
    assert isinstance(alloc, Allocation) and alloc.gpus == 0


@pytest.mark.parametrize("placement", ["pack", "spread"])
def test_type_preference_is_followed_in_order(placement: str) -> None:
    c = Cluster((Node("k", 4, 32, 256, "k80"), Node("v", 4, 32, 256, "v100"), Node("p", 4, 32, 256, "p100")))
    j = queued(job("j", learners=2, gpus=1))
    snap = Snapshot.build(0, c, c.gpu_capacity, c.cpu_capacity, c.mem_capacity, (j,), ())
    placer = make_placer(placement)
    alloc = placer.place(j, 2, FreeCapacity(snap), snap, prefer=("v100", "p100"))
    assert isinstance(alloc, Allocation) and alloc.nodes == {1}
    busy_v = Snapshot.build(0, c, np.array([4, 0, 4]), c.cpu_capacity, c.mem_capacity, (j,), ())
    alloc = placer.place(j, 2, FreeCapacity(busy_v), busy_v, prefer=("v100", "p100"))
    assert isinstance(alloc, Allocation) and alloc.nodes == {2}
    only_v = placer.place(j, 2, FreeCapacity(busy_v), busy_v, prefer=("v100",))
    assert isinstance(only_v, WaitReason)


def _fewest_servers_by_lists(slots: np.ndarray, learners: int) -> tuple[list[int], list[int]]:
    """fewest_servers() as it was written first: the last node chosen by min() over a list of candidates."""
    order = np.argsort(-slots, kind="stable")
    nodes: list[int] = []
    counts: list[int] = []
    remaining = learners
    for n in order:
        take = int(min(slots[n], remaining))
        if take <= 0:
            break
        nodes.append(int(n))
        counts.append(take)
        remaining -= take
        if remaining == 0:
            break
    used = set(nodes[:-1])
    candidates = [int(n) for n in np.flatnonzero(slots >= counts[-1]) if int(n) not in used]
    if candidates:
        nodes[-1] = min(candidates, key=lambda n: (int(slots[n]), n))
    return nodes, counts


@settings(max_examples=300, deadline=None)
@given(slots=st.lists(st.integers(0, 8), min_size=1, max_size=40), learners=st.integers(1, 40))
def test_fewest_servers_picks_the_last_node_as_the_list_version_did(slots: list[int], learners: int) -> None:
    array = np.array(slots, dtype=np.int64)
    if int(np.minimum(array, learners).sum()) < learners:
        return  # fewest_servers() is only asked when the slots hold the gang
    assert fewest_servers(array, learners) == _fewest_servers_by_lists(array, learners)


@settings(max_examples=200, deadline=None)
@given(snap=snapshots(), gpus=st.integers(1, 8), cpus=st.sampled_from([0.0, 6.0, 40.0]), prefer=st.booleans())
def test_a_one_learner_gang_no_server_takes_has_no_spread_placement(snap: Snapshot, gpus: int, cpus: float,
                                                                     prefer: bool) -> None:
    """pack answers a one-learner gang from the one-server search alone (no multi-server search after it): on
    every group it searches (each preferred type, or the types the job may use), the multi-server search
    finds nothing where no server of the group takes the learner."""
    one = JobView(JobSpec("j", "t", 0.0, 1, gpus, 10.0, cpus_per_learner=cpus), 0.0)
    free = FreeCapacity(snap)
    order = list(reversed(snap.cluster.gpu_types)) if prefer else None
    slots = learner_slots(one, free)
    for group in type_groups(snap, one, order):
        if tightest_node(whole_gang_nodes(one, 1, free, snap) & group, free) is None:
            assert best_spanning([group], slots, 1, free, gpus) is None
    placed = make_placer("pack").place(one, 1, free, snap, order)
    assert isinstance(placed, WaitReason) or len(set(placed.learner_nodes)) == 1
