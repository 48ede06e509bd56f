"""From a scheduler's Allocation (a node per learner) to concrete GPUs and a rendezvous port, and back.

The scheduler counts GPUs; learners need GPU indices (CUDA_VISIBLE_DEVICES). Each learner gets the lowest
indices free on its node, free meaning held by no job whose learners may still run (a preempted job keeps
its GPUs until its learners have exited). Job.allocation in the store holds the result:

    {"learners": [{"rank": 0, "node": "n0", "gpu_ids": [0, 1], "cpus": 4.0, "mem_gb": 16.0}, ...],
     "master_port": 29500}
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation
from loadmaster.platform.executors.base import LearnerSpec

PORT_BASE = 29500  # torch.distributed's customary MASTER_PORT, and the ports after it
PORT_SPAN = 2000

HeldGpus = dict[str, set[int]]  # node name -> GPU indices in use


def held_gpus(allocations: Iterable[Mapping[str, Any] | None]) -> HeldGpus:
    held: HeldGpus = {}
    for doc in allocations:
        for learner in (doc or {}).get("learners", ()):
            held.setdefault(str(learner["node"]), set()).update(int(g) for g in learner["gpu_ids"])
    return held


def assign_gpus(alloc: Allocation, cluster: Cluster, held: HeldGpus) -> list[LearnerSpec] | None:
    """Learners with concrete GPU indices (lowest free first), or None if some node lacks free GPUs now."""
    taken = {node: set(ids) for node, ids in held.items()}
    learners: list[LearnerSpec] = []
    for rank, node_index in enumerate(alloc.learner_nodes):
        node = cluster.nodes[node_index]
        busy = taken.setdefault(node.name, set())
        free = [g for g in range(node.gpus) if g not in busy][: alloc.gpus_per_learner]
        if len(free) < alloc.gpus_per_learner:
            return None
        busy.update(free)
        learners.append(LearnerSpec(rank, node.name, tuple(free), alloc.cpus_per_learner, alloc.mem_gb_per_learner))
    return learners


def keep_gpus(alloc: Allocation, cluster: Cluster, current: Mapping[str, Any], held: HeldGpus
              ) -> list[LearnerSpec] | None:
    """Like assign_gpus for a resized job: learners that stay on their node keep their GPUs (a shrink keeps
    the first ones, a grow adds learners after them); the job's own current GPUs do not count as held."""
    own = held_gpus([current])
    others = {n: ids - own.get(n, set()) for n, ids in held.items()}
    old = [dict(learner) for learner in current.get("learners", ())]
    learners: list[LearnerSpec] = []
    taken: HeldGpus = {n: set(ids) for n, ids in others.items()}
    kept = 0
    for rank, node_index in enumerate(alloc.learner_nodes):
        name = cluster.nodes[node_index].name
        if rank < len(old) and old[rank]["node"] == name and len(old[rank]["gpu_ids"]) == alloc.gpus_per_learner:
            ids = tuple(int(g) for g in old[rank]["gpu_ids"])
            taken.setdefault(name, set()).update(ids)
            learners.append(LearnerSpec(rank, name, ids, alloc.cpus_per_learner, alloc.mem_gb_per_learner))
            kept += 1
        else:
            break
    rest = Allocation(alloc.job_id, alloc.learner_nodes[kept:], alloc.gpus_per_learner, alloc.cpus_per_learner,
                      alloc.mem_gb_per_learner)
    more = assign_gpus(rest, cluster, taken) if rest.learner_nodes else []
    if more is None:
        return None
    return learners + [LearnerSpec(kept + i, m.node, m.gpu_ids, m.cpus, m.mem_gb) for i, m in enumerate(more)]


def pick_master_port(in_use: Iterable[int], host: str = "127.0.0.1") -> int:
    """A port no other job of ours uses and that nothing on this machine listens on now."""
    used = set(in_use)
    for port in range(PORT_BASE, PORT_BASE + PORT_SPAN):
        if port in used:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free rendezvous port in {PORT_BASE}-{PORT_BASE + PORT_SPAN - 1}")


def to_document(learners: list[LearnerSpec], master_port: int) -> dict[str, Any]:
    return {
        "learners": [{"rank": ls.rank, "node": ls.node, "gpu_ids": list(ls.gpu_ids), "cpus": ls.cpus,
                      "mem_gb": ls.mem_gb} for ls in learners],
        "master_port": master_port,
    }


def learners_of(doc: Mapping[str, Any]) -> tuple[LearnerSpec, ...]:
    return tuple(LearnerSpec(int(x["rank"]), str(x["node"]), tuple(int(g) for g in x["gpu_ids"]), float(x["cpus"]),
                             float(x["mem_gb"])) for x in doc.get("learners", ()))


def to_allocation(job_id: str, doc: Mapping[str, Any], node_index: Mapping[str, int]) -> Allocation | None:
    """The scheduler's view of a stored allocation (None if it names a node this cluster does not have)."""
    learners = learners_of(doc)
    if not learners or any(ls.node not in node_index for ls in learners):
        return None
    first = learners[0]
    return Allocation(job_id, tuple(node_index[ls.node] for ls in learners), len(first.gpu_ids), first.cpus,
                      first.mem_gb)
