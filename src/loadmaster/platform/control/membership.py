"""The cluster as a living thing: the nodes the loop schedules on follow the executor's node table.

An executor whose nodes come and go (Ray: executors/base.MembershipSource) is read every `every_s`
seconds from the loop's round (one call to Ray's node table, a few ms). What that changes:
- a node that joins is appended to the Cluster (indices of the others never move, so allocations and the
  snapshot's arrays stay valid) and is schedulable in the same round;
- a node that dies, and a node an operator drained (store table node_drains), stays in the Cluster but is
  *down*: its free capacity is zero in every snapshot, so nothing new lands there. A node that comes back
  (same name) is up again. What ran on a dead node ends as Lost (the executor reports it); what runs on
  a drained node moves off it (drain_moves()).
The local executor has no source: its cluster is fixed, though drains still apply.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import select

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation
from loadmaster.platform.control import events as ev
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.state import Phase, StopIntent, StopKind
from loadmaster.platform.executors.base import Member, MembershipSource
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import NodeDrain

ALIVE, DEAD, DRAINING = "alive", "dead", "draining"


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as `loadmaster cluster` shows it."""

    name: str
    state: str  # alive, dead or draining
    node_id: str
    address: str
    labels: dict[str, str]
    last_seen_at: float | None  # when the executor last found it alive (its heartbeat as we see it)


class Membership:
    def __init__(self, cluster: Cluster, source: MembershipSource | None, store: Store, *,
                 every_s: float = 1.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster  # replaced (never mutated) when a node joins: readers hold a consistent one
        self.source = source
        self.store = store
        self.every_s = every_s
        self.monotonic = monotonic
        self.members: dict[str, Member] = {}
        self.drained: frozenset[str] = frozenset()
        self.down: frozenset[str] = frozenset()  # names nothing may be placed on: dead or drained
        self._at = -math.inf

    def refresh(self, *, force: bool = False) -> bool:
        """Read the executor's nodes and the drains (at most every every_s); True if the cluster or the
        down set changed (then the loop decides again)."""
        now = self.monotonic()
        if not force and now - self._at < self.every_s:
            return False
        self._at = now
        with self.store.reading() as conn:
            drained = frozenset(conn.scalars(select(NodeDrain.node)).all())
        if self.source is not None:
            self.members = {m.name: m for m in self.source.members()}
        grown = self._grow(m for m in self.members.values() if m.alive)
        dead = frozenset(n.name for n in self.cluster.nodes
                         if self.source is not None and not (n.name in self.members and self.members[n.name].alive))
        down = dead | (drained & {n.name for n in self.cluster.nodes})
        changed = grown or down != self.down or drained != self.drained
        self.drained, self.down = drained, down
        return changed

    def _grow(self, alive: Iterable[Member]) -> bool:
        known = {n.name for n in self.cluster.nodes}
        joined = [Node(m.name, m.gpus, m.cpus, m.mem_gb, gpu_type=m.gpu_type, rack=m.name)
                  for m in sorted(alive, key=lambda m: m.name) if m.name not in known]
        if not joined:
            return False
        self.cluster = Cluster(self.cluster.nodes + tuple(joined), name=self.cluster.name)
        return True

    def states(self) -> dict[str, NodeState]:
        """Every node of the cluster by name, with its state."""
        out = {}
        for node in self.cluster.nodes:
            m = self.members.get(node.name)
            if self.source is not None and (m is None or not m.alive):
                state = DEAD
            else:
                state = DRAINING if node.name in self.drained else ALIVE
            out[node.name] = NodeState(node.name, state, m.node_id if m else "", m.address if m else "",
                                       dict(m.labels) if m else {}, m.last_seen_at if m else None)
        return out


def drain_moves(ctx: Context, drained: frozenset[str]) -> list[ev.Event]:
    """Move running jobs off drained nodes, once each: an elastic job that keeps at least its minimum
    elsewhere shrinks to the learners off the node (a RESIZE, which keeps their GPUs); any other job is
    stopped to be requeued (PREEMPT: the learner checkpoints in its grace period and resumes elsewhere,
    since its node is down for the scheduler)."""
    if not drained:
        return []
    out: list[ev.Event] = []
    names = [n.name for n in ctx.cluster.nodes]
    for run in ctx.runs.values():
        if run.stop is not None or run.phase is not Phase.RUNNING or run.job_id in ctx.pending:
            continue
        alloc = run.allocation
        on = sorted({names[i] for i in alloc.learner_nodes if names[i] in drained})
        if not on:
            continue
        keep = tuple(i for i in alloc.learner_nodes if names[i] not in drained)
        elastic = ctx.manifest(run.job_id).elastic
        where = ", ".join(on)
        if elastic is not None and keep and len(keep) >= elastic.min_learners:
            new = Allocation(run.job_id, keep, alloc.gpus_per_learner, alloc.cpus_per_learner, alloc.mem_gb_per_learner)
            why = f"shrunk from {alloc.learners} to {len(keep)} learners: node {where} is drained"
            out.append(ev.Stop(run.job_id, StopIntent(StopKind.RESIZE, why), new))
        else:
            out.append(ev.Stop(run.job_id, StopIntent(StopKind.PREEMPT, f"node {where} is drained")))
    return out
