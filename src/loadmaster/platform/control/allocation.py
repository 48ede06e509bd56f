"""From a scheduler's Allocation (a node per learner) to concrete GPUs and a rendezvous port, and back.

The scheduler counts GPUs; learners need GPU indices (CUDA_VISIBLE_DEVICES). Each learner gets the lowest
indices free on its node, free meaning held by no attempt whose learners may still run (a preempted job
keeps its GPUs until its learners have exited). Job.allocation in the store holds the result:

    {"learners": [{"rank": 0, "node": "n0", "gpu_ids": [0, 1], "cpus": 4.0, "mem_gb": 16.0}, ...],
     "master_port": 29500}

Bookings is the loop's count of what its attempts hold, changed only as attempts start and end; the store's
allocations say the same (reconciliation checks it). Rendezvous ports are booked in pairs (a learner's
store on MASTER_PORT and whatever its framework opens next to it, as torch's agent does on MASTER_PORT + 1),
never two gangs on one, and a port given back waits PORT_COOLDOWN_S before it is given again: learners that
exited may leave it in TIME_WAIT, and a late one may still be closing it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation
from loadmaster.platform.executors.base import LearnerSpec

PORT_BASE = 29500  # torch.distributed's customary MASTER_PORT, and the ports after it
PORT_SPAN = 10_000  # 5,000 gangs at once on one machine
PORT_STRIDE = 2  # MASTER_PORT and MASTER_PORT + 1 belong to one gang
PORT_COOLDOWN_S = 30.0

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
        ids = tuple(int(g) for g in old[rank]["gpu_ids"]) if rank < len(old) else ()
        # A learner stays where it was if its GPUs are still free (another start may have taken them while
        # the job was between two attempts): it is given others then.
        if rank < len(old) and old[rank]["node"] == name and len(ids) == alloc.gpus_per_learner and \
                not set(ids) & taken.get(name, set()):
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


def _bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_master_port(used: Container[int], host: str = "127.0.0.1", after: int = PORT_BASE - PORT_STRIDE) -> int:
    """A port pair (port, port + 1) no other job of ours uses and that nothing on this machine listens on,
    looking from the pair after `after` on (round the range): a port just given back is tried last."""
    count = PORT_SPAN // PORT_STRIDE
    first = ((after - PORT_BASE) // PORT_STRIDE + 1) % count
    for i in range(count):
        port = PORT_BASE + ((first + i) % count) * PORT_STRIDE
        if port in used or port - 1 in used or port + 1 in used:
            continue
        if _bindable(port, host) and _bindable(port + 1, host):
            return port
    raise NoPort(f"no free rendezvous port in {PORT_BASE}-{PORT_BASE + PORT_SPAN - 1}: more gangs than ports "
                 "run on this machine")


class NoPort(RuntimeError):
    """Every rendezvous port is taken: a start must wait, as for GPUs."""


class Bookings:
    """GPU indices and rendezvous ports held by the loop's attempts, per node; a start takes from it and an
    end gives back. `cooling` maps a port given back to when it may be given again."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.owners: dict[str, dict[int, str]] = {}  # node -> GPU index -> the job holding it
        self.ports: dict[int, str] = {}  # port -> job id
        self.cooling: dict[int, float] = {}
        self.last_port = PORT_BASE - PORT_STRIDE  # ports are handed out in turn, round the range

    def book(self, job_id: str, doc: Mapping[str, Any]) -> list[tuple[str, int, str]]:
        """Hold the allocation's GPUs and port for `job_id`; the GPUs some other job held already (a double
        booking: the caller must not have made it) as (node, GPU, other job)."""
        clashes = []
        for learner in learners_of(doc):
            owned = self.owners.setdefault(learner.node, {})
            for gpu in learner.gpu_ids:
                other = owned.setdefault(gpu, job_id)
                if other != job_id:
                    clashes.append((learner.node, gpu, other))
        port = int(doc.get("master_port", 0))
        if port:
            self.ports[port] = job_id
            self.cooling.pop(port, None)
        return clashes

    def release(self, job_id: str, doc: Mapping[str, Any]) -> None:
        for learner in learners_of(doc):
            owned = self.owners.get(learner.node, {})
            for gpu in learner.gpu_ids:
                if owned.get(gpu) == job_id:
                    del owned[gpu]
        port = int(doc.get("master_port", 0))
        if port and self.ports.get(port) == job_id:
            del self.ports[port]
            self.cooling.pop(port, None)  # to the back: `cooling` stays in the order of cooling down
            self.cooling[port] = self.clock() + PORT_COOLDOWN_S

    def pick_port(self, also: set[int]) -> int:
        """A free port pair for a new gang (not one of `also`, taken by the same statement)."""
        self._cool_down()
        port = pick_master_port(_InUse((self.ports, self.cooling, also)), after=self.last_port)
        self.last_port = port
        return port

    def busy_ports(self) -> set[int]:
        self._cool_down()
        return set(self.ports) | set(self.cooling)

    def _cool_down(self) -> None:
        """Ports whose cool-down is over are free again. `cooling` is in the order ports were given back, so
        in the order they cool down (a clock stepping back keeps some a little longer): the expired ones are
        at its front, and a start looks at those alone, not at the thousands a stream of short jobs leaves."""
        cooling = self.cooling
        for port in list(_cooled(cooling, self.clock())):
            del cooling[port]

    def held(self) -> HeldGpus:
        return {node: set(owned) for node, owned in self.owners.items()}

    def held_by(self) -> dict[str, int]:
        """GPUs held per job."""
        count: dict[str, int] = {}
        for owned in self.owners.values():
            for job in owned.values():
                count[job] = count.get(job, 0) + 1
        return count


def _cooled(cooling: dict[int, float], now: float) -> Iterable[int]:
    """The ports at the front of `cooling` whose cool-down is over."""
    for port, until in cooling.items():
        if until > now:
            return
        yield port


class _InUse:
    """Ports taken in any of several collections, looked up in place (no set made of them all)."""

    def __init__(self, parts: tuple[Container[int], ...]) -> None:
        self.parts = parts

    def __contains__(self, port: object) -> bool:
        return any(port in part for part in self.parts)


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
