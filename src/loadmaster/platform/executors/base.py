"""The contract between the control loop and an executor.

The control loop decides; an executor only carries out: launch a whole gang, stop it, and report what
ended. One attempt of a job is one gang launch. Executors keep no state that the store cannot rebuild:
`launch()` returns a handle (JSON-serialisable) that the control loop persists, and after a server crash
`reattach()` adopts the learners that survived, from that handle or, when the crash came before the handle
was stored, from the attempt's identity alone (its directories, its actors' names).

Every hand-off is acknowledged, so that a crash or a store error at any moment loses nothing:
- an attempt's end is reported by every poll() until the control loop has committed it and calls
  release(); the end of an attempt is never reported once and then forgotten;
- reattach() without a handle settles a launch that a crash cut short for good: learners that started are
  adopted, and ranks that never started are fenced so that they never will (no attempt runs twice).

Gang semantics, which every executor guarantees:
- launch() starts every learner or none (if one cannot start, the ones started are killed and it raises
  LaunchError);
- when one learner exits with a non-zero code or is killed, the others are stopped (stop protocol below)
  and the attempt ends once all have exited; an attempt whose learners all exit 0 ends successfully;
- stop(): the preempt file is created, SIGTERM goes to every learner (its whole process tree, tree.py),
  and learners still alive after the grace period get SIGKILL. The grace period is the spec's
  stop_grace_s when the manifest set one, else stop()'s (the server's); a gang failure gives the others
  the spec's too, else the executor's own. stop() does not block; poll() reports the end.

Files, per attempt (the control loop chooses the directories; the executor creates them):
- log_dir/rank-{r}.log: the learner's stdout and stderr, interleaved as written;
- log_dir/rank-{r}.exit: its exit code as text, written when it exits (how a re-attached server that is
  not the learner's parent learns the code);
- report_dir/rank-{r}.jsonl: what runtime.report() appended.
For executors whose learners run on other machines, poll() copies these to the same paths here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class LearnerSpec:
    rank: int
    node: str  # the node's name in the cluster the control loop schedules on
    gpu_ids: tuple[int, ...]  # GPU indices on that node (-> CUDA_VISIBLE_DEVICES)
    cpus: float
    mem_gb: float


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    job_id: str
    attempt: int
    command: tuple[str, ...]  # argv; a manifest's shell string arrives as manifest.SHELL + (string,)
    workdir: str
    env: Mapping[str, str]  # the manifest's env; the executor adds the runtime contract (runtime/env.py)
    learners: tuple[LearnerSpec, ...]
    master_port: int
    checkpoint_dir: str
    results_dir: str
    log_dir: str
    report_dir: str
    data_dir: str | None = None
    stop_grace_s: float | None = None  # the manifest's; None: the grace the caller of stop() gives
    # The job's code package and where this attempt unpacks it (workdir lies inside): the launcher unpacks
    # it before the executor starts the gang (platform/code.py).
    code_archive: str | None = None
    code_dir: str | None = None
    # Isolation (platform/tenancy.py): the (uid, gid) the learners run as when the server runs as root (None:
    # the server's own); the directories beside the job's own a sandbox shows, (path, writable); why the job
    # may not run at all (its paths are refused now: a failed launch, the user's input); the tenant's area.
    run_as: tuple[int, int] | None = None
    binds: tuple[tuple[str, bool], ...] = ()
    refusal: str | None = None
    home: str | None = None


@dataclass(frozen=True, slots=True)
class LearnerExit:
    rank: int
    exit_code: int  # negative: killed by that signal (subprocess' convention)


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    job_id: str
    attempt: int
    exits: tuple[LearnerExit, ...]
    stopped: bool  # True if stop() was called for it (preemption, halt, cancel), whatever the codes
    first_failure: LearnerExit | None  # the first learner to fail, whose exit ended the gang
    lost: tuple[int, ...] = ()  # ranks whose node left the cluster under them (the platform's loss, not the job's)

    @property
    def succeeded(self) -> bool:
        return not self.stopped and all(e.exit_code == 0 for e in self.exits)


@dataclass(frozen=True, slots=True)
class Progress:
    job_id: str
    attempt: int
    rank: int
    report: Mapping[str, Any]  # one JSON object from runtime.report(): {"time": ..., "step": ..., ...}


@dataclass(frozen=True, slots=True)
class PollResult:
    ended: tuple[AttemptEnded, ...] = ()
    progress: tuple[Progress, ...] = field(default=())  # reports appended since the last poll


class LaunchError(RuntimeError):
    """The gang could not be started; nothing of it is left running.

    user_error: the job's own input cannot run (its command is not found or not executable, its workdir does
    not exist): a failed attempt, classified like any. Otherwise the launch could not be made (the machine,
    the executor, a node that is gone): not the job's failure, and it stays queued."""

    def __init__(self, message: str, *, user_error: bool = False) -> None:
        super().__init__(message)
        self.user_error = user_error


@dataclass(frozen=True, slots=True)
class LiveAttempt:
    """Learners an executor found running on its machines, whoever started them (survey())."""

    job_id: str
    attempt: int
    processes: tuple[tuple[int, str], ...] = ()  # (pid, start token) of each learner's process group leader


@dataclass(frozen=True, slots=True)
class Member:
    """One node of a cluster whose membership changes (nodes join, die, come back): an executor's view."""

    name: str  # the node's name in the cluster the loop schedules on (stable while the node lives)
    node_id: str  # the executor's own id of it (Ray's node id): two nodes are never one
    alive: bool
    address: str
    labels: Mapping[str, str]
    gpus: int
    cpus: float
    mem_gb: float
    gpu_type: str
    last_seen_at: float | None  # when the executor last found it alive (unix time)


@runtime_checkable
class MembershipSource(Protocol):
    """An executor whose nodes come and go (Ray): the control loop follows members() every round or two."""

    def members(self) -> list[Member]:
        """Every node known, alive or dead; at most one alive member per name."""


class Executor(Protocol):
    name: str

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        """Start every learner of the attempt; return a JSON-serialisable handle to persist."""

    def stop(self, job_id: str, attempt: int, grace_s: float) -> None:
        """Ask the attempt's learners to stop (preempt file, SIGTERM), SIGKILL after grace_s. Non-blocking."""

    def poll(self) -> PollResult:
        """What ended (every attempt ended and not yet released, again at each call) and what was reported
        since the last call. Also enforces pending SIGKILL deadlines."""

    def release(self, job_id: str, attempt: int) -> None:
        """The control loop has committed the attempt's end: forget it (a no-op for an unknown attempt)."""

    def reattach(self, spec: AttemptSpec, handle: Mapping[str, Any] | None) -> bool:
        """After a server restart: adopt the attempt. Learners still alive are watched again; those that
        exited meanwhile are known by their exit files; poll() then reports the attempt's end as usual.
        Without a handle (the crash came during the launch) the learners are found by the attempt's
        identity, and ranks that never started are fenced: they will not start later. False if the attempt
        cannot be accounted for (nothing of it runs or ran, or a handle of another executor): the control
        loop treats that as an infrastructure failure and relaunches from the checkpoint; nothing of this
        attempt is left running then."""

    def watching(self) -> frozenset[tuple[str, int]]:
        """The attempts (job id, attempt) this executor watches now, ended or not."""

    def survey(self) -> list[LiveAttempt] | None:
        """Learners alive on the executor's machines, watched or not (reconciliation looks for those nobody
        accounts for); None when the executor cannot tell."""

    def terminate(self, found: LiveAttempt) -> None:
        """Kill learners that survey() found and nobody accounts for."""

    def notify(self, wake: Callable[[], None]) -> None:
        """Call `wake` (from any thread) when a learner may have exited, so that the loop polls soon."""

    def close(self) -> None:
        """The server is stopping: release executor resources. Learners keep running (they are re-attached
        at the next start); the control loop stops them first when it wants them stopped."""
