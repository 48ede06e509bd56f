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
- otherwise it is named by its hostname, or by its IP where hostnames repeat;
- `node_map` overrides both: {node name: Ray node id, IP, hostname or label value}.
Paths: checkpoint, results and data directories are passed to the learners as they are, so they must be on
storage every node sees at the same path (NFS, a bucket mount); the workdir must exist on every node, and
loadmaster must be installed on every node (the host actor imports it). Logs and reports live in a scratch
directory on the node ($LOADMASTER_RAY_SCRATCH or the temp dir) until they are copied back.

`import ray` takes a while, so this module imports it only when a RayExecutor is used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadmaster.core.cluster import Cluster, Node
from loadmaster.platform.executors.base import AttemptEnded, AttemptSpec, LaunchError, LiveAttempt, PollResult, Progress
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

log = logging.getLogger(__name__)

EXECUTOR_NAME = "ray"
NAMESPACE = "loadmaster"
NODE_LABEL = "loadmaster/node"
_CHUNK = 1 << 20  # bytes of each file per learner per poll: a chatty learner cannot stall the loop
_PLACEHOLDER = "-"  # REPORT_FILE/PREEMPT_FILE: the host sets its node's own paths


@dataclass(frozen=True, slots=True)
class RayNode:
    node_id: str
    ip: str
    hostname: str
    label: str | None  # the loadmaster/node label, if the node was started with one
    resources: Mapping[str, float]


def ray_nodes() -> list[RayNode]:
    """The alive nodes of the Ray cluster this process is connected to."""
    import ray

    listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [
        RayNode(n["NodeID"], n["NodeManagerAddress"], n.get("NodeManagerHostname", ""),
                (n.get("Labels") or {}).get(NODE_LABEL), n.get("Resources") or {})
        for n in listed if n.get("Alive")
    ]


def node_names(nodes: Sequence[RayNode]) -> dict[str, RayNode]:
    """loadmaster's name for each Ray node: its label, else its hostname, else (hostnames repeat) its IP."""
    hostnames = [n.hostname for n in nodes]
    named: dict[str, RayNode] = {}
    for n in nodes:
        name = n.label or (n.hostname if n.hostname and hostnames.count(n.hostname) == 1 else n.ip)
        named[name] = n
    return named


def ray_cluster(nodes: Sequence[RayNode] | None = None) -> Cluster:
    """The Ray cluster as the Cluster the control loop schedules on (GPU type from accelerator_type)."""
    nodes = ray_nodes() if nodes is None else nodes
    built = []
    for name, n in node_names(nodes).items():
        types = [k.split(":", 1)[1].lower() for k in n.resources if k.startswith("accelerator_type:")]
        built.append(Node(name, int(n.resources.get("GPU", 0)), float(n.resources.get("CPU", 0)),
                          round(float(n.resources.get("memory", 0)) / 2**30, 1),
                          gpu_type=types[0] if types else "gpu", rack=name))
    return Cluster(tuple(built), name="ray")


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
    ) -> None:
        self.address = address
        self.node_map = dict(node_map or {})
        self.failure_grace_s = failure_grace_s
        self.start_timeout_s = start_timeout_s
        self.poll_timeout_s = poll_timeout_s
        self.scratch_root = scratch_root
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

    def resolve(self, node: str, nodes: Sequence[RayNode]) -> RayNode | None:
        target = self.node_map.get(node, node)
        named = node_names(nodes)
        if target in named:
            return named[target]
        return next((n for n in nodes if target in (n.node_id, n.ip, n.hostname, n.label)), None)

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        check_spec(spec)
        ray = self._ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from loadmaster.platform.executors.ray_host import LearnerHost

        nodes = ray_nodes()
        placed = {}
        for learner in spec.learners:
            found = self.resolve(learner.node, nodes)
            if found is None:
                known = ", ".join(sorted(node_names(nodes))) or "none"
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
                    place = places[learner.rank]
                    env = learner_env(spec, learner, place, master_addr=master_addr,
                                      cuda_visible_devices=",".join(str(g) for g in place.visible_gpus),
                                      report_file=_PLACEHOLDER, preempt_file=_PLACEHOLDER)
                    refs[learner.rank] = actors[learner.rank].start.remote(
                        list(spec.command), spec.workdir, env, [spec.checkpoint_dir, spec.results_dir],
                        self.start_timeout_s)
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
                "namespace": NAMESPACE, "master_addr": master_addr,
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
            for learner in learners.values():
                if learner.actor is None and learner.exit_code is None:
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
        """Kill the hosts (and through them their learners) of an attempt nobody accounts for."""
        ray = self._ray()
        rank = 0
        while True:
            try:
                actor = ray.get_actor(actor_name(found.job_id, found.attempt, rank), namespace=NAMESPACE)
            except ValueError:
                break
            try:
                ray.get(actor.kill.remote(), timeout=10)
            except Exception as exc:  # a host that is gone already
                log.debug("terminate: %s", exc)
            ray.kill(actor)
            rank += 1

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

