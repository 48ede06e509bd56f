"""LocalExecutor: a job's learners as processes on this machine, one shim (shim.py) per learner.

Nodes are virtual: the control loop may schedule on several nodes (`--nodes 2x4`), and every learner of
every node runs here. `gpu_map` says which physical GPUs a node's GPU indices are (nodes.local_gpu_map);
without it a learner's gpu_ids are used as they are.

State lives in the files of base.py's contract and in the handle launch() returns, so a new instance can
take over from a crashed one: reattach() names each learner by (pid, start token) from the handle, reads
the exit files of those that ended meanwhile, and the preempt file of a stop that was under way.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster.platform.executors.base import AttemptSpec, LaunchError, LearnerSpec, PollResult, Progress
from loadmaster.platform.executors.envvars import learner_env, placements
from loadmaster.platform.executors.files import (
    AttemptFiles,
    mtime_ns,
    read_exit_code,
    read_from,
    read_json,
    size_of,
    write_atomic,
)
from loadmaster.platform.executors.gang import (
    GANG_FAILURE,
    STOP,
    Gang,
    StopRequest,
    check_spec,
    grace_for,
)
from loadmaster.platform.executors.jsonlines import JsonLines
from loadmaster.platform.executors.procs import boot_id, is_running, reap_zombie
from loadmaster.platform.executors.registry import AttemptRegistry
from loadmaster.platform.executors.shim import ShimRequest
from loadmaster.platform.executors.spawn import (
    ShimRecord,
    abort,
    await_started,
    final_exit_code,
    signal_learners,
    spawn_shim,
)

EXECUTOR_NAME = "local"
_READ_CHUNK = 1 << 20


@dataclass
class _Learner:
    rank: int
    record: ShimRecord
    popen: subprocess.Popen[bytes] | None  # None after reattach: the shim is not our child then
    report_offset: int
    reports: JsonLines


@dataclass
class _Attempt:
    spec: AttemptSpec
    files: AttemptFiles
    learners: dict[int, _Learner]
    gang: Gang


class LocalExecutor:
    """Runs learners as local processes. Thread-safe: the API may call stop() while the loop polls."""

    name = EXECUTOR_NAME

    def __init__(
        self,
        *,
        gpu_map: Mapping[str, Sequence[int]] | None = None,
        failure_grace_s: float = 10.0,
        start_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gpu_map = None if gpu_map is None else {node: tuple(ids) for node, ids in gpu_map.items()}
        self.failure_grace_s = failure_grace_s
        self.start_timeout_s = start_timeout_s
        self._clock = clock  # unix time: SIGKILL deadlines are written to the preempt file and outlive us
        self._registry: AttemptRegistry[_Attempt] = AttemptRegistry()
        self._attempts = self._registry.attempts
        self._lock = self._registry.lock

    # ------------------------------------------------------------------------------------------- launch

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        check_spec(spec)
        if not Path(spec.workdir).is_dir():
            raise LaunchError(f"job {spec.job_id}: workdir {spec.workdir!r} is not a directory on this machine; "
                              "create it or point the job's workdir at one")
        places = placements(spec)
        cuda = {learner.rank: self._cuda_devices(spec, learner, places[learner.rank].visible_gpus)
                for learner in spec.learners}
        with self._registry.reserve(spec.job_id, spec.attempt):
            files = _prepare_files(spec)
            requests = {
                learner.rank: ShimRequest(
                    argv=spec.command, workdir=spec.workdir, log=str(files.log(learner.rank)),
                    exit=str(files.exit(learner.rank)), pid=str(files.pid(learner.rank)),
                    env=learner_env(spec, learner, places[learner.rank], master_addr="127.0.0.1",
                                    cuda_visible_devices=cuda[learner.rank],
                                    report_file=str(files.report(learner.rank)), preempt_file=str(files.preempt)),
                ) for learner in spec.learners
            }
            offsets = {rank: size_of(files.report(rank)) for rank in requests}
            records = _start_gang(spec, requests, self.start_timeout_s)
            learners = {
                rank: _Learner(rank, record, popen, offsets[rank], JsonLines(str(files.report(rank))))
                for rank, (popen, record) in records.items()
            }
            ranks = tuple(sorted(learners))
            self._registry.add(spec.job_id, spec.attempt,
                               _Attempt(spec, files, learners, Gang(spec.job_id, spec.attempt, ranks)))
        return {
            "executor": EXECUTOR_NAME, "job_id": spec.job_id, "attempt": spec.attempt,
            "host": socket.gethostname(), "boot_id": next(iter(records.values()))[1].boot_id,
            "learners": [{"rank": r, "report_offset": learners[r].report_offset, **learners[r].record.to_dict()}
                         for r in ranks],
        }

    def _cuda_devices(self, spec: AttemptSpec, learner: LearnerSpec, visible: tuple[int, ...]) -> str:
        """CUDA_VISIBLE_DEVICES for the node GPUs `visible` (envvars.placements), after checking the
        learner's own GPUs against the map."""
        if self.gpu_map is None:
            return ",".join(str(g) for g in visible)
        physical = self.gpu_map.get(learner.node)
        if physical is None:
            raise LaunchError(f"job {spec.job_id}: learner {learner.rank} is placed on node {learner.node!r}, which "
                              f"this executor does not have (nodes: {', '.join(sorted(self.gpu_map))})")
        bad = [g for g in learner.gpu_ids if not 0 <= g < len(physical)]
        if bad:
            raise LaunchError(f"job {spec.job_id}: learner {learner.rank} asks for GPUs {bad} of node "
                              f"{learner.node!r}, which has GPUs 0..{len(physical) - 1}")
        return ",".join(str(physical[g]) for g in visible)

    # --------------------------------------------------------------------------------------------- stop

    def stop(self, job_id: str, attempt: int, grace_s: float) -> None:
        with self._lock:
            att = self._attempts.get((job_id, attempt))
            if att is not None:
                self._begin_stop(att, STOP, grace_for(att.spec, grace_s))

    def _begin_stop(self, att: _Attempt, reason: str, grace_s: float) -> None:
        first = att.gang.stop_reason is None
        request = att.gang.request_stop(reason, grace_s, self._clock())
        # The file comes first: a learner woken by SIGTERM finds why it was asked to stop.
        write_atomic(att.files.preempt, request.to_json())
        if first:
            _signal_alive(att, signal.SIGTERM)

    # --------------------------------------------------------------------------------------------- poll

    def poll(self) -> PollResult:
        with self._lock:
            ended = []
            progress: list[Progress] = []
            for key, att in list(self._attempts.items()):
                self._collect_exits(att)
                if att.gang.kill_due(self._clock()):
                    _signal_alive(att, signal.SIGKILL)
                    att.gang.killed = True
                progress.extend(_read_reports(att, final=att.gang.done))
                if att.gang.done:
                    ended.append(att.gang.ended())
                    del self._attempts[key]
            return PollResult(ended=tuple(ended), progress=tuple(progress))

    def _collect_exits(self, att: _Attempt) -> None:
        found: list[tuple[int, int, int]] = []  # (exit file mtime, rank, code): failures in the order they came
        for rank in att.gang.alive:
            code = self._exit_code(att, att.learners[rank])
            if code is not None:
                found.append((mtime_ns(att.files.exit(rank)), rank, code))
        for _, rank, code in sorted(found):
            if att.gang.record_exit(rank, code):
                self._begin_stop(att, GANG_FAILURE, grace_for(att.spec, self.failure_grace_s))

    def _exit_code(self, att: _Attempt, learner: _Learner) -> int | None:
        record = learner.record
        # A learner has ended once its shim has: the shim writes the exit file just before it exits, and
        # waiting for the exit as well means our own shims are collected (no zombies) when poll() says so.
        if learner.popen is not None:
            if learner.popen.poll() is None:
                return None
        elif is_running(record.shim_pid, record.shim_start):
            return None
        else:
            reap_zombie(record.shim_pid, record.shim_start)
        return final_exit_code(att.files, learner.rank, record)

    # ----------------------------------------------------------------------------------------- reattach

    def reattach(self, spec: AttemptSpec, handle: Mapping[str, Any]) -> bool:
        if handle.get("executor") != EXECUTOR_NAME or handle.get("job_id") != spec.job_id \
                or handle.get("attempt") != spec.attempt:
            return False
        records: dict[int, tuple[ShimRecord, int]] = {}
        for entry in handle.get("learners", ()):
            record = ShimRecord.from_dict(entry if isinstance(entry, dict) else None)
            if record is None or not isinstance(entry.get("rank"), int):
                return False
            records[entry["rank"]] = (record, int(entry.get("report_offset", 0)))
        if sorted(records) != sorted(learner.rank for learner in spec.learners):
            return False
        with self._lock:
            if (spec.job_id, spec.attempt) in self._attempts:
                return True
            files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
            same_boot = handle.get("boot_id") == boot_id()
            alive = {r for r, (rec, _) in records.items() if same_boot and is_running(rec.shim_pid, rec.shim_start)}
            if not alive and any(read_exit_code(files.exit(r)) is None for r in records):
                return False
            learners = {r: _Learner(r, rec, None, offset, JsonLines(str(files.report(r))))
                        for r, (rec, offset) in records.items()}
            att = _Attempt(spec, files, learners, Gang(spec.job_id, spec.attempt, tuple(sorted(records))))
            self._replay(att)
            self._attempts[(spec.job_id, spec.attempt)] = att
            return True

    def _replay(self, att: _Attempt) -> None:
        exits = {}
        for rank in att.gang.ranks:
            code = read_exit_code(att.files.exit(rank))
            if code is not None:
                exits[rank] = (mtime_ns(att.files.exit(rank)), code)
        request = StopRequest.from_json(read_json(att.files.preempt))
        stop = None if request is None else (mtime_ns(att.files.preempt), request)
        if att.gang.replay(exits, stop):
            self._begin_stop(att, GANG_FAILURE, grace_for(att.spec, self.failure_grace_s))

    def close(self) -> None:
        with self._lock:
            self._attempts.clear()


def _signal_alive(att: _Attempt, signum: int) -> None:
    """Signal the whole process tree of every learner still alive."""
    signal_learners([att.learners[rank].record for rank in att.gang.alive], signum)


def _prepare_files(spec: AttemptSpec) -> AttemptFiles:
    files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
    try:
        files.make_dirs()
        for directory in (spec.checkpoint_dir, spec.results_dir):
            Path(directory).mkdir(parents=True, exist_ok=True)
        # Leftovers of an earlier launch of this same attempt would read as this launch's outcome.
        for learner in spec.learners:
            files.exit(learner.rank).unlink(missing_ok=True)
            files.pid(learner.rank).unlink(missing_ok=True)
        files.preempt.unlink(missing_ok=True)
    except OSError as exc:
        raise LaunchError(f"job {spec.job_id}: cannot prepare the attempt's directories: {exc}") from None
    return files


def _start_gang(
    spec: AttemptSpec, requests: Mapping[int, ShimRequest], timeout_s: float,
) -> dict[int, tuple[subprocess.Popen[bytes], ShimRecord]]:
    """Start every learner or none: on the first one that cannot start, kill those that did."""
    popens: dict[int, subprocess.Popen[bytes]] = {}
    for rank, request in requests.items():
        try:
            popens[rank] = spawn_shim(request)
        except OSError as exc:
            for started, popen in popens.items():
                abort(popen, requests[started], None)
            raise LaunchError(f"job {spec.job_id} attempt {spec.attempt}: learner {rank} could not start: "
                              f"cannot start its shim: {exc}") from None
    deadline = time.monotonic() + timeout_s
    results = {rank: await_started(popen, requests[rank], deadline) for rank, popen in popens.items()}
    records = {rank: result for rank, result in results.items() if isinstance(result, ShimRecord)}
    if len(records) == len(results):
        return {rank: (popens[rank], record) for rank, record in records.items()}
    for rank, popen in popens.items():
        abort(popen, requests[rank], records.get(rank))
    rank, reason = next((r, res) for r, res in results.items() if isinstance(res, str))
    raise LaunchError(f"job {spec.job_id} attempt {spec.attempt}: learner {rank} could not start: {reason}")


def _read_reports(att: _Attempt, *, final: bool) -> list[Progress]:
    progress: list[Progress] = []
    job_id, attempt = att.spec.job_id, att.spec.attempt
    for rank, learner in att.learners.items():
        path = att.files.report(rank)
        while data := read_from(path, learner.report_offset, _READ_CHUNK):
            learner.report_offset += len(data)
            progress.extend(Progress(job_id, attempt, rank, obj) for obj in learner.reports.feed(data))
            if len(data) < _READ_CHUNK:
                break
        if final:  # the learner is gone: a last line without its newline is complete after all
            progress.extend(Progress(job_id, attempt, rank, obj) for obj in learner.reports.flush())
    return progress

