"""RayExecutor: the executor contract on a Ray cluster, for learners on many machines.

Each learner is hosted by a detached, named Ray actor (ray_host.LearnerHost; namespace `loadmaster`, name
`JOB:ATTEMPT:RANK`) pinned to the Ray node its LearnerSpec.node names. The host runs the same shim as the
local executor on its machine; poll() brings the log, report and exit files back to the spec's paths here,
incrementally. A restarted server finds the hosts again by name (reattach).

Ray only carries the processes: loadmaster does the accounting of GPUs, CPUs and memory, so the actors ask
Ray for nothing (num_cpus=0) and CUDA_VISIBLE_DEVICES names GPUs of the learner's machine by their
indices there (which ones a learner sees: envvars.py, as for the local executor).

How a Ray cluster maps to the nodes the control loop schedules on (ray_cluster() builds that Cluster):
- a Ray node started with the label `loadmaster/node=NAME` (`ray start --labels=loadmaster/node=NAME`) is
  node NAME;
- otherwise it is named by its hostname, or by its IP where hostnames repeat, or HOST-NODEID where both
  repeat (raylets on one machine): two Ray nodes are never one;
- `node_map` overrides both: {node name: Ray node id, IP, hostname or label value}.
The cluster is alive: members() lists every node Ray knows, alive or dead, under names that stay while
Ray lists the node (NodeNames), and the control loop follows it (control/membership.py). A learner whose
node dies is reported lost (AttemptEnded.lost), which the loop counts as the platform's loss, not the job's.
Paths: checkpoint, results and data directories are passed to the learners as they are, so they must be on
storage every node sees at the same path (NFS, a bucket mount); the workdir must exist on every node, and
loadmaster must be installed on every node (the host actor imports it). Logs and reports live in a scratch
directory on the node ($LOADMASTER_RAY_SCRATCH or the temp dir) until they are copied back.

`import ray` takes a while, so this module imports it only when a RayExecutor is used.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadmaster.core.cluster import Cluster, Node
from loadmaster.platform.executors.base import (
    AttemptEnded,
    AttemptSpec,
    LaunchError,
    LiveAttempt,
    Member,
    PollResult,
    Progress,
)
from loadmaster.platform.executors.envvars import learner_env, placements
from loadmaster.platform.executors.files import (
    AttemptFiles,
    append_bytes,
    mtime_ns,
    read_exit_code,
    read_from,
    read_json,
    size_of,
    write_atomic,
)
from loadmaster.platform.executors.gang import (
    GANG_FAILURE,
    LOST_EXIT_CODE,
    STOP,
    Gang,
    StopRequest,
    check_spec,
    grace_for,
)
from loadmaster.platform.executors.jsonlines import JsonLines
from loadmaster.platform.executors.registry import AttemptRegistry
from loadmaster.runtime import env as contract

log = logging.getLogger(__name__)

EXECUTOR_NAME = "ray"
NAMESPACE = "loadmaster"
NODE_LABEL = "loadmaster/node"
_CHUNK = 1 << 20  # bytes of each file per learner per poll: a chatty learner cannot stall the loop
_PLACEHOLDER = "-"  # REPORT_FILE/PREEMPT_FILE: the host sets its node's own paths
SUSPECT_S = 60.0  # a node whose learner saw its raylet die counts as dead this long, unless Ray says so first
MASTER_PORTS = (29500, 30000)  # where rank 0's host looks for a free rendezvous port pair on its node


@dataclass(frozen=True, slots=True)
class RayNode:
    node_id: str
    ip: str
    hostname: str
    label: str | None  # the loadmaster/node label, if the node was started with one
    resources: Mapping[str, float]
    alive: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)


def ray_nodes(*, include_dead: bool = False) -> list[RayNode]:
    """The nodes of the Ray cluster this process is connected to (the alive ones, or all Ray still lists)."""
    import ray

    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [
        RayNode(n["NodeID"], n["NodeManagerAddress"], n.get("NodeManagerHostname", ""),
                (n.get("Labels") or {}).get(NODE_LABEL), n.get("Resources") or {}, bool(n.get("Alive")),
                {str(k): str(v) for k, v in (n.get("Labels") or {}).items()})
        for n in listed if include_dead or n.get("Alive")
    ]


def _wanted_name(n: RayNode, hostnames: Sequence[str], ips: Sequence[str]) -> str:
    """A node's name by the rules above; unlabelled nodes that share hostname and IP (raylets on one
    machine) get their node id's head as well: two nodes are never one."""
    if n.label:
        return n.label
    if n.hostname and hostnames.count(n.hostname) == 1:
        return n.hostname
    if ips.count(n.ip) == 1:
        return n.ip
    return f"{n.hostname or n.ip}-{n.node_id[:8]}"


def node_names(nodes: Sequence[RayNode]) -> dict[str, RayNode]:
    """loadmaster's name for each Ray node: its label, else its hostname, else (hostnames repeat) its IP,
    else (both repeat) hostname-NODEID. Two nodes with one label: the second gets -NODEID too."""
    unlabelled = [n for n in nodes if not n.label]  # a labelled node leaves its hostname to the others
    hostnames = [n.hostname for n in unlabelled]
    ips = [n.ip for n in unlabelled]
    named: dict[str, RayNode] = {}
    for n in sorted(nodes, key=lambda n: n.node_id):
        name = _wanted_name(n, hostnames, ips)
        named[name if name not in named else f"{name}-{n.node_id[:8]}"] = n
    return named


class NodeNames:
    """Names that stay: a node keeps the name it was first given while Ray lists it, so an allocation that
    names it keeps meaning it when other nodes join (node_names() alone would rename a hostname that
    starts repeating). A node that comes back (same label, new Ray node id) takes its name again once the
    old one is dead; a name is never held by two alive nodes."""

    def __init__(self) -> None:
        self.by_id: dict[str, str] = {}
        self.nodes: dict[str, RayNode] = {}  # node id -> the node as last listed

    def update(self, listed: Sequence[RayNode]) -> None:
        alive_ids = {n.node_id for n in listed if n.alive}
        self.nodes = {n.node_id: n for n in listed}
        for gone in [i for i in self.by_id if i not in self.nodes]:
            del self.by_id[gone]
        new = [n for n in listed if n.node_id not in self.by_id]
        if not new:
            return
        held = {name for i, name in self.by_id.items() if i in alive_ids}
        alive = [n for n in listed if n.alive]
        for n in sorted(new, key=lambda n: (not n.alive, n.node_id)):
            peers = [p for p in (alive if n.alive else [*alive, n]) if not p.label]
            wanted = _wanted_name(n, [p.hostname for p in peers], [p.ip for p in peers])
            if not n.alive:
                if wanted not in held and wanted not in self.by_id.values():
                    self.by_id[n.node_id] = wanted  # died before we knew it: its attempts can still be found
                continue
            name = wanted if wanted not in held else f"{wanted}-{n.node_id[:8]}"
            for i in [i for i, other in self.by_id.items() if other == name and i not in alive_ids]:
                del self.by_id[i]  # the node's previous life gives its name up
            held.add(name)
            self.by_id[n.node_id] = name

    def alive(self) -> dict[str, RayNode]:
        """name -> the alive node holding it."""
        return {self.by_id[i]: n for i, n in self.nodes.items() if n.alive and i in self.by_id}

    def named(self) -> dict[str, RayNode]:
        """name -> its node: the alive holder, else the dead one that had it."""
        out = {self.by_id[i]: n for i, n in self.nodes.items() if not n.alive and i in self.by_id}
        out.update(self.alive())
        return out


def to_node(name: str, n: RayNode) -> Node:
    """The scheduler's Node for a Ray node (GPU type from accelerator_type)."""
    types = [k.split(":", 1)[1].lower() for k in n.resources if k.startswith("accelerator_type:")]
    return Node(name, int(n.resources.get("GPU", 0)), float(n.resources.get("CPU", 0)),
                round(float(n.resources.get("memory", 0)) / 2**30, 1), gpu_type=types[0] if types else "gpu",
                rack=name)


def ray_cluster(nodes: Sequence[RayNode] | None = None) -> Cluster:
    """The Ray cluster as the Cluster the control loop schedules on (at start; it then follows members())."""
    nodes = ray_nodes() if nodes is None else nodes
    return Cluster(tuple(to_node(name, n) for name, n in node_names(nodes).items()), name="ray")


@dataclass
class _Learner:
    rank: int
    actor: Any  # a ray ActorHandle of LearnerHost; None after a reattach that found no host
    node_id: str  # the Ray node it runs on
    log_offset: int  # bytes of the host's log already copied here
    report_offset: int
    reports: JsonLines
    exit_code: int | None = None
    drained: bool = False  # exited and every byte copied
    inflight: Any = None  # the state() call under way (one at a time per learner)


@dataclass
class _Attempt:
    spec: AttemptSpec
    files: AttemptFiles
    learners: dict[int, _Learner]
    gang: Gang
    bases: dict[int, tuple[int, int]]  # sizes of the local copies at launch: (log, report)
    backlog: list[Progress] = field(default_factory=list)  # reports to hand out at the next poll
    ended: AttemptEnded | None = None  # reported by every poll until released


def actor_name(job_id: str, attempt: int, rank: int) -> str:
    return f"{job_id}:{attempt}:{rank}"


class RayExecutor:
    """Runs learners through Ray actors. `address` is passed to ray.init() when this process is not
    connected yet (None: RAY_ADDRESS or a running local cluster, else a new local instance)."""

    name = EXECUTOR_NAME

    def __init__(
        self,
        *,
        address: str | None = None,
        node_map: Mapping[str, str] | None = None,
        failure_grace_s: float = 10.0,
        start_timeout_s: float = 120.0,
        poll_timeout_s: float = 2.0,
        scratch_root: str | None = None,
        master_ports: tuple[int, int] = MASTER_PORTS,
        python_dir: str | None = os.path.dirname(sys.executable),
        nodes_every_s: float = 1.0,
    ) -> None:
        self.address = address
        self.node_map = dict(node_map or {})
        self.failure_grace_s = failure_grace_s
        self.start_timeout_s = start_timeout_s
        self.poll_timeout_s = poll_timeout_s
        self.scratch_root = scratch_root
        self.master_ports = master_ports
        self.python_dir = python_dir  # first on the learners' PATH where the node has it (ray_host.on_path)
        self.nodes_every_s = nodes_every_s
        self._names = NodeNames()
        self._nodes_lock = threading.Lock()
        self._nodes_at = -1.0  # monotonic time of the last read of Ray's node table
        self._last_seen: dict[str, float] = {}  # node id -> when it was last listed alive
        # Node ids a learner's shim saw lose their raylet (ray_host: the lost marker): dead for us at once,
        # seconds before Ray's health check says so, so nothing is relaunched there meanwhile.
        self._suspect: dict[str, float] = {}  # node id -> monotonic time the suspicion ends
        self._registry: AttemptRegistry[_Attempt] = AttemptRegistry()
        self._attempts = self._registry.attempts
        self._lock = self._registry.lock
        self._connected = False
        self._initialized_here = False  # close() disconnects only a connection this executor made

    def _ray(self) -> Any:
        import ray

        if not self._connected:
            if not ray.is_initialized():
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False)
                self._initialized_here = True
            self._connected = True
        return ray

    # ------------------------------------------------------------------------------------------- launch

    # ---------------------------------------------------------------------------------------- membership

    def _refresh(self, *, force: bool = False) -> NodeNames:
        """Read Ray's node table (at most every nodes_every_s unless forced): one GCS call, a few ms."""
        self._ray()
        with self._nodes_lock:
            now = time.monotonic()
            if force or now - self._nodes_at >= self.nodes_every_s:
                listed = ray_nodes(include_dead=True)
                self._names.update(listed)
                wall = time.time()
                for n in listed:
                    if n.alive:
                        self._last_seen[n.node_id] = wall
                self._nodes_at = now
            return self._names

    def members(self) -> list[Member]:
        """Ray's nodes as the control loop's cluster members (NodeNames: stable names, none collapsed)."""
        names = self._refresh()
        with self._nodes_lock:
            out = []
            for name, n in sorted(names.named().items()):
                node = to_node(name, n)
                alive = n.alive and not self._suspected(n.node_id)
                out.append(Member(name, n.node_id, alive, n.ip, dict(n.labels), node.gpus, node.cpus, node.mem_gb,
                                  node.gpu_type, self._last_seen.get(n.node_id)))
            return out

    def _dead(self) -> set[str]:
        """Ray node ids of watched learners that Ray lists as dead, or no longer lists (as of the last read)."""
        watched = {lr.node_id for att in self._attempts.values() for lr in att.learners.values() if lr.node_id}
        return {i for i in watched if self._is_dead(i)}

    def _is_dead(self, node_id: str) -> bool:
        with self._nodes_lock:
            found = self._names.nodes.get(node_id)
            suspected = self._suspected(node_id)
        return bool(node_id) and (found is None or not found.alive or suspected)

    def _suspected(self, node_id: str) -> bool:
        until = self._suspect.get(node_id)
        if until is None:
            return False
        if until < time.monotonic():
            del self._suspect[node_id]
            return False
        return True

    def resolve(self, node: str, nodes: Sequence[RayNode] | None = None) -> RayNode | None:
        """The alive Ray node a learner placed on `node` goes to (by node_map, name, id, IP, hostname)."""
        target = self.node_map.get(node, node)
        if nodes is None:
            names = self._refresh(force=True)
            with self._nodes_lock:
                named = {k: n for k, n in names.alive().items() if not self._suspected(n.node_id)}
            nodes = list(named.values())
        else:
            named = node_names(nodes)
        if target in named:
            return named[target]
        return next((n for n in nodes if target in (n.node_id, n.ip, n.hostname, n.label)), None)

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        check_spec(spec)
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from loadmaster.platform.executors.ray_host import LearnerHost

        placed = {}
        for learner in spec.learners:
            found = self.resolve(learner.node)
            if found is None:
                known = ", ".join(sorted(self._names.alive())) or "none"
                raise LaunchError(f"job {spec.job_id}: learner {learner.rank} is placed on node {learner.node!r}, "
                                  f"which matches no alive Ray node (known: {known}); label the Ray node "
                                  f"{NODE_LABEL}={learner.node} or map it with node_map")
            placed[learner.rank] = found
        master_addr = placed[0].ip
        places = placements(spec)
        with self._registry.reserve(spec.job_id, spec.attempt):
            files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
            try:
                files.make_dirs()
                for learner in spec.learners:
                    files.exit(learner.rank).unlink(missing_ok=True)
                files.preempt.unlink(missing_ok=True)
            except OSError as exc:
                raise LaunchError(f"job {spec.job_id}: cannot prepare the attempt's directories: {exc}") from None
            bases = {r.rank: (size_of(files.log(r.rank)), size_of(files.report(r.rank))) for r in spec.learners}
            host_class = ray.remote(LearnerHost)
            actors: dict[int, Any] = {}
            refs = {}
            try:
                for learner in spec.learners:
                    name = actor_name(spec.job_id, spec.attempt, learner.rank)
                    actors[learner.rank] = host_class.options(
                        name=name, namespace=NAMESPACE, lifetime="detached", num_cpus=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(placed[learner.rank].node_id, soft=False),
                    ).remote(spec.job_id, spec.attempt, learner.rank, self.scratch_root)
                # The port must be free where MASTER_ADDR points, not here: rank 0's host picks it.
                low, high = self.master_ports
                port = ray.get(actors[0].pick_port.remote(low, high, spec.master_port), timeout=self.start_timeout_s)
                if port is None:
                    raise LaunchError(f"no free port pair in {low}..{high - 1} on {placed[0].ip} for MASTER_PORT")
                for learner in spec.learners:
                    place = places[learner.rank]
                    env = learner_env(spec, learner, place, master_addr=master_addr,
                                      cuda_visible_devices=",".join(str(g) for g in place.visible_gpus),
                                      report_file=_PLACEHOLDER, preempt_file=_PLACEHOLDER)
                    env[contract.MASTER_PORT] = str(port)
                    refs[learner.rank] = actors[learner.rank].start.remote(
                        list(spec.command), spec.workdir, env, [spec.checkpoint_dir, spec.results_dir],
                        self.start_timeout_s, self.python_dir)
                results = dict(zip(refs, ray.get(list(refs.values()), timeout=self.start_timeout_s + 30), strict=True))
            except Exception as exc:  # a name taken, an actor that died, a timeout: nothing may stay
                self._abort(actors)
                raise LaunchError(f"job {spec.job_id} attempt {spec.attempt}: the learners could not start on "
                                  f"Ray: {type(exc).__name__}: {exc}") from None
            failed = [(rank, res["error"]) for rank, res in sorted(results.items()) if not res["ok"]]
            if failed:
                self._abort(actors)
                rank, reason = failed[0]
                raise LaunchError(f"job {spec.job_id} attempt {spec.attempt}: learner {rank} could not start on "
                                  f"{placed[rank].hostname or placed[rank].ip}: {reason}")
            learners = {rank: _Learner(rank, actor, placed[rank].node_id, 0, 0, JsonLines(str(files.report(rank))))
                        for rank, actor in actors.items()}
            self._registry.add(spec.job_id, spec.attempt, _Attempt(
                spec, files, learners, Gang(spec.job_id, spec.attempt, tuple(sorted(learners))), bases))
            return {
                "executor": EXECUTOR_NAME, "job_id": spec.job_id, "attempt": spec.attempt,
                "namespace": NAMESPACE, "master_addr": master_addr, "master_port": port,
                "learners": [{"rank": rank, "actor": actor_name(spec.job_id, spec.attempt, rank),
                              "node_id": placed[rank].node_id, "log_base": bases[rank][0],
                              "report_base": bases[rank][1]} for rank in sorted(learners)],
            }

    def _abort(self, actors: Mapping[int, Any]) -> None:
        """Kill the learners of a launch that failed, and their hosts."""
        ray = self._ray()
        kills = [actor.kill.remote() for actor in actors.values()]
        try:
            ray.wait(kills, num_returns=len(kills), timeout=30)
        finally:
            for actor in actors.values():
                try:
                    ray.kill(actor)
                except Exception as exc:  # an actor that never came up: nothing to kill
                    log.debug("ray.kill: %s", exc)

    # --------------------------------------------------------------------------------------------- stop

    def stop(self, job_id: str, attempt: int, grace_s: float) -> None:
        with self._lock:
            att = self._attempts.get((job_id, attempt))
            if att is not None and att.ended is None:
                self._begin_stop(att, STOP, grace_for(att.spec, grace_s))

    def _begin_stop(self, att: _Attempt, reason: str, grace_s: float) -> None:
        first = att.gang.stop_reason is None
        request = att.gang.request_stop(reason, grace_s, time.time())
        write_atomic(att.files.preempt, request.to_json())  # the local copy: how a restarted server knows
        for rank in att.gang.alive:
            if att.learners[rank].actor is not None:
                att.learners[rank].actor.stop.remote(request.to_json(), first)

    # --------------------------------------------------------------------------------------------- poll

    def poll(self) -> PollResult:
        with self._lock:
            if not self._attempts:
                return PollResult()
            done_before = tuple(att.ended for att in self._attempts.values() if att.ended is not None)
            ray = self._ray()
            from ray.exceptions import ActorUnavailableError, RayActorError, RayError

            self._refresh()
            dead = self._dead()
            for att in self._attempts.values():
                for learner in att.learners.values():
                    if att.ended is None and learner.node_id in dead and learner.exit_code is None:
                        # Its node left the cluster: the host cannot answer any more (its call would hang
                        # until Ray gives up on the node), and the shim has stopped the learner.
                        att.gang.lost.add(learner.rank)
                        learner.inflight = None
                        self._absorb(att, learner, self._lost(att, learner, ConnectionError("its node is gone")))
                        if att.gang.record_exit(learner.rank, learner.exit_code or LOST_EXIT_CODE):
                            self._begin_stop(att, GANG_FAILURE, grace_for(att.spec, self.failure_grace_s))
            for att in self._attempts.values():
                for learner in att.learners.values():
                    if att.ended is None and not learner.drained and learner.inflight is None \
                            and learner.actor is not None:
                        learner.inflight = learner.actor.state.remote(learner.log_offset, learner.report_offset, _CHUNK)
            pending = [lr.inflight for att in self._attempts.values() for lr in att.learners.values()
                       if lr.inflight is not None]
            ready = ray.wait(pending, num_returns=len(pending), timeout=self.poll_timeout_s)[0] if pending else []
            done = {ref.hex() for ref in ready}
            ended = list(done_before)
            progress: list[Progress] = []
            for key, att in list(self._attempts.items()):
                if att.ended is not None:
                    continue
                progress.extend(att.backlog)
                att.backlog.clear()
                exits: list[tuple[int, int]] = []
                for learner in att.learners.values():
                    if learner.inflight is None or learner.inflight.hex() not in done:
                        continue
                    ref, learner.inflight = learner.inflight, None
                    try:
                        state = ray.get(ref)
                    except ActorUnavailableError:
                        continue  # a transient network or restart problem: ask again next time
                    except RayActorError as exc:
                        if learner.node_id in self._dead_now():
                            att.gang.lost.add(learner.rank)
                        state = self._lost(att, learner, exc)
                    except RayError as exc:
                        log.warning("job %s: reading learner %d's state failed: %s", key[0], learner.rank, exc)
                        continue
                    progress.extend(self._absorb(att, learner, state))
                    if learner.exit_code is not None and learner.rank not in att.gang.exits:
                        exits.append((learner.rank, learner.exit_code))
                for rank, code in exits:
                    if att.gang.record_exit(rank, code):
                        self._begin_stop(att, GANG_FAILURE, grace_for(att.spec, self.failure_grace_s))
                if att.gang.kill_due(time.time()):
                    for rank in att.gang.alive:
                        if att.learners[rank].actor is not None:
                            att.learners[rank].actor.kill.remote()
                    att.gang.killed = True
                if att.gang.done and all(lr.drained for lr in att.learners.values()):
                    for learner in att.learners.values():
                        progress.extend(Progress(att.spec.job_id, att.spec.attempt, learner.rank, obj)
                                        for obj in learner.reports.flush())
                    att.ended = att.gang.ended()
                    ended.append(att.ended)
                    self._release(att)
            return PollResult(ended=tuple(ended), progress=tuple(progress))

    def release(self, job_id: str, attempt: int) -> None:
        with self._lock:
            self._attempts.pop((job_id, attempt), None)

    def _absorb(self, att: _Attempt, learner: _Learner, state: Mapping[str, Any]) -> list[Progress]:
        """Copy the new bytes here and note the exit once everything is copied."""
        rank = learner.rank
        if state.get("lost"):
            att.gang.lost.add(rank)
            with self._nodes_lock:
                self._suspect[learner.node_id] = time.monotonic() + SUSPECT_S
        if state["log"]:
            append_bytes(att.files.log(rank), state["log"])
            learner.log_offset += len(state["log"])
        reports = []
        if state["report"]:
            append_bytes(att.files.report(rank), state["report"])
            learner.report_offset += len(state["report"])
            reports = learner.reports.feed(state["report"])
        if state["exit_code"] is not None:
            learner.exit_code = int(state["exit_code"])
            if state["drained"]:
                learner.drained = True
                write_atomic(att.files.exit(rank), f"{learner.exit_code}\n")
        return [Progress(att.spec.job_id, att.spec.attempt, rank, obj) for obj in reports]

    def _dead_now(self) -> set[str]:
        """Dead node ids after a fresh read: a host that died may have died with its node."""
        self._refresh(force=True)
        return self._dead()

    def _lost(self, att: _Attempt, learner: _Learner, exc: Exception) -> dict[str, Any]:
        """The host actor died (its node failed, or someone killed it): the learner counts as killed."""
        log.warning("job %s attempt %d: the Ray host of learner %d is gone (%s)", att.spec.job_id,
                    att.spec.attempt, learner.rank, exc)
        self._kill_orphan(att, learner)
        note = (f"\nloadmaster: the Ray actor hosting this learner is gone ({type(exc).__name__}); "
                f"counted as killed ({LOST_EXIT_CODE})\n").encode()
        return {"log": note, "report": b"", "exit_code": LOST_EXIT_CODE, "drained": True}

    def _kill_orphan(self, att: _Attempt, learner: _Learner) -> None:
        """Best effort: a task on the learner's node kills what its lost host left running (if the node
        itself is gone, so is the learner, and the task simply never runs)."""
        if not learner.node_id:
            return
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from loadmaster.platform.executors.ray_host import kill_orphan

        ray.remote(num_cpus=0, max_retries=0)(kill_orphan).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(learner.node_id, soft=False, _fail_on_unavailable=True),
        ).remote(att.spec.job_id, att.spec.attempt, learner.rank, self.scratch_root)

    def _release(self, att: _Attempt) -> None:
        """Remove the hosts' scratch files and the hosts themselves (calls run in order on each actor)."""
        for learner in att.learners.values():
            if learner.actor is not None:
                learner.actor.cleanup.remote()
                learner.actor.__ray_terminate__.remote()

    # ----------------------------------------------------------------------------------------- reattach

    def reattach(self, spec: AttemptSpec, handle: Mapping[str, Any] | None) -> bool:
        if handle is None:  # a launch cut short: the hosts are found by their names, bases are the start
            handle = {"executor": EXECUTOR_NAME, "job_id": spec.job_id, "attempt": spec.attempt,
                      "learners": [{"rank": ls.rank, "actor": actor_name(spec.job_id, spec.attempt, ls.rank)}
                                   for ls in spec.learners]}
        if handle.get("executor") != EXECUTOR_NAME or handle.get("job_id") != spec.job_id \
                or handle.get("attempt") != spec.attempt:
            return False
        entries: dict[int, Mapping[str, Any]] = {
            e["rank"]: e for e in handle.get("learners", ()) if isinstance(e, dict) and isinstance(e.get("rank"), int)}
        if sorted(entries) != sorted(learner.rank for learner in spec.learners):
            return False
        ray = self._ray()
        with self._lock:
            if (spec.job_id, spec.attempt) in self._attempts:
                return True
            files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
            actors: dict[int, Any] = {}
            for rank, entry in entries.items():
                try:
                    actors[rank] = ray.get_actor(str(entry.get("actor")), namespace=NAMESPACE)
                except ValueError:
                    actors[rank] = None
            copied = {rank: read_exit_code(files.exit(rank)) for rank in entries}
            if all(a is None for a in actors.values()) and any(c is None for c in copied.values()):
                return False
            learners: dict[int, _Learner] = {}
            bases: dict[int, tuple[int, int]] = {}
            for rank, entry in entries.items():
                base = (int(entry.get("log_base", 0)), int(entry.get("report_base", 0)))
                bases[rank] = base
                learners[rank] = _Learner(
                    rank, actors[rank], str(entry.get("node_id", "")),
                    size_of(files.log(rank)) - base[0], size_of(files.report(rank)) - base[1],
                    JsonLines(str(files.report(rank))), exit_code=copied[rank], drained=copied[rank] is not None)
            att = _Attempt(spec, files, learners, Gang(spec.job_id, spec.attempt, tuple(sorted(learners))), bases)
            self._refresh(force=True)
            for learner in learners.values():
                if learner.actor is None and learner.exit_code is None:
                    if self._is_dead(learner.node_id):  # its node left while no server watched
                        att.gang.lost.add(learner.rank)
                    self._absorb(att, learner, self._lost(att, learner, LookupError("no actor of that name")))
            self._replay(att)
            self._attempts[(spec.job_id, spec.attempt)] = att
            return True

    def _replay(self, att: _Attempt) -> None:
        """Rebuild the gang from the local copies (see LocalExecutor) and queue every report line of the
        attempt copied so far, to be reported again by the next poll (as the local executor does)."""
        exits = {rank: (mtime_ns(att.files.exit(rank)), lr.exit_code)
                 for rank, lr in att.learners.items() if lr.exit_code is not None}
        request = StopRequest.from_json(read_json(att.files.preempt))
        stop = None if request is None else (mtime_ns(att.files.preempt), request)
        for rank, learner in att.learners.items():
            copied = read_from(att.files.report(rank), att.bases[rank][1], size_of(att.files.report(rank)))
            att.backlog.extend(Progress(att.spec.job_id, att.spec.attempt, rank, obj)
                               for obj in learner.reports.feed(copied))
        if att.gang.replay(exits, stop):
            self._begin_stop(att, GANG_FAILURE, grace_for(att.spec, self.failure_grace_s))

    def watching(self) -> frozenset[tuple[str, int]]:
        with self._lock:
            return frozenset(self._attempts)

    def survey(self) -> list[LiveAttempt] | None:
        """The attempts whose host actors exist in the namespace (named JOB:ATTEMPT:RANK)."""
        if not self._connected:
            return None
        import ray

        found: set[tuple[str, int]] = set()
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry.get("name", "") if isinstance(entry, dict) else str(entry)
            if isinstance(entry, dict) and entry.get("namespace") != NAMESPACE:
                continue
            job, _, rest = name.partition(":")
            number, _, rank = rest.partition(":")
            if job and number.isdigit() and rank.isdigit():
                found.add((job, int(number)))
        return [LiveAttempt(job, number) for job, number in sorted(found)]

    def terminate(self, found: LiveAttempt) -> None:
        """Kill the hosts (and through them their learners) of an attempt nobody accounts for: every rank
        still named, whichever ranks are gone with their node."""
        ray = self._ray()
        prefix = actor_name(found.job_id, found.attempt, 0)[:-1]
        listed = [e for e in ray.util.list_named_actors(all_namespaces=True) if isinstance(e, dict)]
        names = [str(e.get("name", "")) for e in listed
                 if e.get("namespace") == NAMESPACE and str(e.get("name", "")).startswith(prefix)]
        actors = []
        for name in names:
            try:
                actors.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:
                continue
        kills = [actor.kill.remote() for actor in actors]
        if kills:
            ray.wait(kills, num_returns=len(kills), timeout=10)
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception as exc:  # a host that is gone already
                log.debug("terminate: %s", exc)

    def notify(self, wake: Callable[[], None]) -> None:
        """Ray reports ends only through poll(): the loop's timed rounds collect them."""

    def close(self) -> None:
        """Forget the attempts and disconnect from Ray if this executor connected; the detached hosts and
        their learners keep running for the next server to reattach."""
        with self._lock:
            self._attempts.clear()
            if self._initialized_here:
                import ray

                ray.shutdown()
                self._connected = self._initialized_here = False

