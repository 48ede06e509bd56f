"""LocalExecutor: a job's learners as processes on this machine, one shim (shim.py) per learner.

Nodes are virtual: the control loop may schedule on several nodes (`--nodes 2x4`), and every learner of
every node runs here. `gpu_map` says which physical GPUs a node's GPU indices are (nodes.local_gpu_map);
without it a learner's gpu_ids are used as they are.

State lives in the files of base.py's contract and in the handle launch() returns, so a new instance can
take over from a crashed one: reattach() names each learner by (pid, start token) from the shims' pid
files, reads the exit files of those that ended meanwhile, and the preempt file of a stop that was under
way. A launch that a crash cut short is settled by the ranks' lock files: a shim holds its rank's lock for
its whole life, so a rank whose lock is free and that left no pid file never started, and the fence
written then keeps its shim from starting later (files.py).

An ended attempt stays here, reported by every poll(), until the control loop has committed its end and
calls release(). A watcher thread waits on the shims' pidfds and wakes the loop when one exits, so that an
end is collected at once rather than at the next timed round.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster.platform.executors.base import (
    AttemptEnded,
    AttemptSpec,
    LaunchError,
    LearnerSpec,
    LiveAttempt,
    PollResult,
    Progress,
)
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
from loadmaster.platform.executors.forked import ShimSupervisor
from loadmaster.platform.executors.gang import (
    GANG_FAILURE,
    STOP,
    Gang,
    StopRequest,
    check_spec,
    grace_for,
)
from loadmaster.platform.executors.jsonlines import JsonLines
from loadmaster.platform.executors.procs import boot_id, is_running, proc_state, reap_zombie, signal_group
from loadmaster.platform.executors.registry import AttemptRegistry
from loadmaster.platform.executors.sandbox import clean_env, confined_argv
from loadmaster.platform.executors.shim import CANNOT_START, ShimRequest
from loadmaster.platform.executors.spawn import (
    ShimProcess,
    ShimRecord,
    abort,
    await_started,
    final_exit_code,
    signal_learners,
    spawn_shim,
)
from loadmaster.runtime import env as contract

EXECUTOR_NAME = "local"
_READ_CHUNK = 1 << 20


@dataclass
class _Learner:
    rank: int
    record: ShimRecord
    popen: ShimProcess | None  # None after reattach: the shim is neither our child nor our supervisor's then
    report_offset: int
    reports: JsonLines


@dataclass
class _Attempt:
    spec: AttemptSpec
    files: AttemptFiles
    learners: dict[int, _Learner]
    gang: Gang
    ended: AttemptEnded | None = None  # set once every learner exited; reported until released


class LocalExecutor:
    """Runs learners as local processes. Thread-safe: the API may call stop() while the loop polls.

    survey_root: the data directory whose learners survey() may report (learners of another server on the
    same machine are never touched); None: survey() cannot tell."""

    name = EXECUTOR_NAME

    def __init__(
        self,
        *,
        gpu_map: Mapping[str, Sequence[int]] | None = None,
        failure_grace_s: float = 10.0,
        start_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        survey_root: Path | None = None,
        sandbox: str | None = None,
        end_linger_s: float = 0.01,
    ) -> None:
        self.gpu_map = None if gpu_map is None else {node: tuple(ids) for node, ids in gpu_map.items()}
        self.failure_grace_s = failure_grace_s
        self.start_timeout_s = start_timeout_s
        self.survey_root = None if survey_root is None else str(survey_root.resolve())
        self._clock = clock  # unix time: SIGKILL deadlines are written to the preempt file and outlive us
        self._registry: AttemptRegistry[_Attempt] = AttemptRegistry()
        self._attempts = self._registry.attempts
        self._lock = self._registry.lock
        self._watcher = _ExitWatcher()
        self.supervisor = ShimSupervisor(start_timeout_s)  # forks the shims (supervisor.py)
        self.sandbox = sandbox  # the bwrap binary (sandbox.find_bwrap); None: learners run unconfined
        if not 0.0 <= end_linger_s <= 1.0:
            raise ValueError(f"end_linger_s must be between 0 and 1 s, not {end_linger_s!r}")
        # How long launch() waits, once every learner runs, for a gang that ends at once (`true`, a command
        # that fails on its first line): its end then comes with the launch's handle, and the control loop
        # confirms the launch and records the end in one round instead of two.
        self.end_linger_s = end_linger_s

    # ------------------------------------------------------------------------------------------- launch

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        check_spec(spec)
        if not Path(spec.workdir).is_dir():
            raise LaunchError(f"job {spec.job_id}: workdir {spec.workdir!r} is not a directory on this machine; "
                              "create it or point the job's workdir at one", user_error=True)
        places = placements(spec)
        cuda = {learner.rank: self._cuda_devices(spec, learner, places[learner.rank].visible_gpus)
                for learner in spec.learners}
        run_as = spec.run_as if spec.run_as is not None and os.geteuid() == 0 else None
        with self._registry.reserve(spec.job_id, spec.attempt):
            files = _prepare_files(spec, run_as)
            argv = confined_argv(self.sandbox, spec, run_as)  # after the directories it binds exist
            requests = {
                learner.rank: ShimRequest(
                    argv=argv, workdir=spec.workdir, log=str(files.log(learner.rank)),
                    exit=str(files.exit(learner.rank)), pid=str(files.pid(learner.rank)),
                    env=clean_env(spec.home) | learner_env(
                        spec, learner, places[learner.rank], master_addr="127.0.0.1",
                        cuda_visible_devices=cuda[learner.rank], report_file=str(files.report(learner.rank)),
                        preempt_file=str(files.preempt)),
                    lock=str(files.lock(learner.rank)), fence=str(files.fence), clean=True,
                    uid=None if run_as is None else run_as[0], gid=None if run_as is None else run_as[1],
                    sandboxed=self.sandbox is not None,
                ) for learner in spec.learners
            }
            offsets = {rank: size_of(files.report(rank)) for rank in requests}
            records = _start_gang(spec, requests, self.start_timeout_s, self.supervisor)
            _linger([popen for popen, _ in records.values()], self.end_linger_s)
            learners = {
                rank: _Learner(rank, record, popen, offsets[rank], JsonLines(str(files.report(rank))))
                for rank, (popen, record) in records.items()
            }
            ranks = tuple(sorted(learners))
            self._registry.add(spec.job_id, spec.attempt,
                               _Attempt(spec, files, learners, Gang(spec.job_id, spec.attempt, ranks)))
            for learner in learners.values():
                # A shim that ended during the linger needs no watching: its end comes with the launch, whose
                # completion wakes the loop (a watch would only wake it once more, for nothing).
                if learner.popen is None or learner.popen.poll() is None:
                    self._watcher.watch(learner.record.shim_pid, learner.record.shim_start)
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
            if att is not None and att.ended is None:
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
            for att in list(self._attempts.values()):
                if att.ended is not None:  # reported again until the loop has committed it
                    ended.append(att.ended)
                    continue
                self._collect_exits(att)
                if att.gang.kill_due(self._clock()):
                    _signal_alive(att, signal.SIGKILL)
                    att.gang.killed = True
                progress.extend(_read_reports(att, final=att.gang.done))
                if att.gang.done:
                    att.ended = att.gang.ended()
                    ended.append(att.ended)
            return PollResult(ended=tuple(ended), progress=tuple(progress))

    def release(self, job_id: str, attempt: int) -> None:
        with self._lock:
            self._attempts.pop((job_id, attempt), None)

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

    def reattach(self, spec: AttemptSpec, handle: Mapping[str, Any] | None) -> bool:
        offsets: dict[int, int] = {}
        given: dict[int, ShimRecord] = {}
        if handle is not None:
            if handle.get("executor") != EXECUTOR_NAME or handle.get("job_id") != spec.job_id \
                    or handle.get("attempt") != spec.attempt:
                return False
            for entry in handle.get("learners", ()):
                record = ShimRecord.from_dict(entry if isinstance(entry, dict) else None)
                if record is None or not isinstance(entry.get("rank"), int):
                    return False
                given[entry["rank"]] = record
                offsets[entry["rank"]] = int(entry.get("report_offset", 0))
            if sorted(given) != sorted(learner.rank for learner in spec.learners):
                return False
        with self._lock:
            if (spec.job_id, spec.attempt) in self._attempts:
                return True
            files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
            ranks = tuple(sorted(learner.rank for learner in spec.learners))
            records = self._discover(spec, files, ranks) if handle is None else _handle_records(files, given)
            if records is None:
                return False
            same_boot = all(rec.boot_id == boot_id() for rec in records.values())
            alive = {r for r, rec in records.items() if same_boot and (is_running(rec.shim_pid, rec.shim_start)
                                                                         or is_running(rec.pid, rec.start))}
            if not alive and any(read_exit_code(files.exit(r)) is None for r in records):
                return False
            learners = {r: _Learner(r, rec, None, offsets.get(r, 0), JsonLines(str(files.report(r))))
                        for r, rec in records.items()}
            att = _Attempt(spec, files, learners, Gang(spec.job_id, spec.attempt, ranks))
            self._replay(att)
            self._attempts[(spec.job_id, spec.attempt)] = att
            for r in alive:
                self._watcher.watch(records[r].shim_pid, records[r].shim_start)
            return True

    def _discover(self, spec: AttemptSpec, files: AttemptFiles, ranks: tuple[int, ...]) -> dict[int, ShimRecord] | None:
        """The learners of an attempt whose launch a crash cut short, from its files alone: each rank's pid
        file once its shim ran the command. Ranks whose shim is alive but not that far yet are waited for;
        ranks that never started are fenced. None (and nothing of the attempt left running) unless every
        rank started."""
        if not files.log_dir.is_dir():
            return None  # the launch never began: nothing can start for it (the shims need this directory)
        unsettled = [r for r in ranks if ShimRecord.from_dict(read_json(files.pid(r))) is None]
        if unsettled:
            with _ranks_locked(files, unsettled) as free:
                if free:
                    write_atomic(files.fence, "fenced by a server that found ranks never started\n")
            busy = [r for r in unsettled if r not in free]
            deadline = time.monotonic() + self.start_timeout_s
            while busy and time.monotonic() < deadline:  # a shim is starting its command: let it say how
                busy = [r for r in busy if ShimRecord.from_dict(read_json(files.pid(r))) is None
                        and _lock_held(files, r)]
                time.sleep(0.01)
        records = {r: rec for r in ranks if (rec := ShimRecord.from_dict(read_json(files.pid(r)))) is not None}
        if len(records) == len(ranks):
            return records
        # A partial gang can do nothing useful: nothing of it may stay, its learners' trees included.
        signal_learners(records.values(), signal.SIGKILL)
        write_atomic(files.fence, "fenced: the gang never started whole\n")
        return None

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

    # ------------------------------------------------------------------------------- what runs, really

    def watching(self) -> frozenset[tuple[str, int]]:
        with self._lock:
            return frozenset(self._attempts)

    def survey(self) -> list[LiveAttempt] | None:
        """Learners of this data directory alive on this machine, from /proc: each learner's environment
        names its job, attempt and checkpoint directory (runtime/env.py)."""
        if self.survey_root is None or not Path("/proc").is_dir():
            return None
        prefix = f"{contract.CHECKPOINT_DIR}={self.survey_root}{os.sep}".encode()
        found: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if prefix not in environ:
                continue
            values = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
            try:
                key = (values[contract.JOB_ID.encode()].decode(), int(values[contract.ATTEMPT.encode()]))
            except (KeyError, ValueError, UnicodeDecodeError):
                continue
            state = proc_state(pid)
            try:
                leads = state is not None and not state.exited and os.getpgid(pid) == pid
            except OSError:  # exited meanwhile
                continue
            group = found.setdefault(key, [])
            if leads and state is not None:  # the learner's command; its children share its group
                group.append((pid, state.start))
        return [LiveAttempt(job, attempt, tuple(leaders)) for (job, attempt), leaders in found.items() if leaders]

    def terminate(self, found: LiveAttempt) -> None:
        for pid, start in found.processes:
            signal_group(pid, start, signal.SIGKILL)

    def notify(self, wake: Callable[[], None]) -> None:
        self._watcher.start(wake)

    def close(self) -> None:
        with self._lock:
            self._attempts.clear()
        self._watcher.stop()
        self.supervisor.close()


def _handle_records(files: AttemptFiles, given: Mapping[int, ShimRecord]) -> dict[int, ShimRecord] | None:
    """The handle's learners, if the pid files agree (a handle naming other processes is not this attempt's)."""
    for rank, record in given.items():
        written = ShimRecord.from_dict(read_json(files.pid(rank)))
        if written is not None and written != record:
            return None
    return dict(given)


@contextlib.contextmanager
def _ranks_locked(files: AttemptFiles, ranks: list[int]) -> Iterator[list[int]]:
    """Lock the ranks whose shim does not hold its lock; yields those (a live shim holds its own)."""
    held: list[tuple[int, list[int]]] = []
    try:
        for rank in ranks:
            fds: list[int] = []
            paths = [files.lock(rank)]
            if files.legacy_lock(rank).exists():  # a shim of an earlier version may hold this one
                paths.append(files.legacy_lock(rank))
            try:
                for path in paths:
                    fds.append(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
                    fcntl.flock(fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                for fd in fds:
                    os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                continue
            held.append((rank, fds))
        yield [rank for rank, _ in held]
    finally:
        for _, fds in held:
            for fd in fds:
                os.close(fd)  # closing releases the lock


def _lock_held(files: AttemptFiles, rank: int) -> bool:
    with _ranks_locked(files, [rank]) as free:
        return not free


def _signal_alive(att: _Attempt, signum: int) -> None:
    """Signal the whole process tree of every learner still alive."""
    signal_learners([att.learners[rank].record for rank in att.gang.alive], signum)


def _prepare_files(spec: AttemptSpec, run_as: tuple[int, int] | None = None) -> AttemptFiles:
    files = AttemptFiles(Path(spec.log_dir), Path(spec.report_dir))
    if files.fence.exists():
        raise LaunchError(f"job {spec.job_id} attempt {spec.attempt} was given up by a server restart (fenced); "
                          "it is never launched again")
    try:
        files.make_dirs()
        for directory in (spec.checkpoint_dir, spec.results_dir):
            Path(directory).mkdir(parents=True, exist_ok=True)
        # The logs and control files stay the server's (the learner may pass, not change them); the reports
        # directory is the learner's own.
        for server_own in (files.log_dir.parent, files.log_dir):
            os.chmod(server_own, 0o711)
        if run_as is not None:
            os.chown(files.report_dir, *run_as)
        os.chmod(files.report_dir, 0o700)
        # Leftovers of an earlier launch of this same attempt would read as this launch's outcome.
        for learner in spec.learners:
            files.exit(learner.rank).unlink(missing_ok=True)
            files.pid(learner.rank).unlink(missing_ok=True)
        files.preempt.unlink(missing_ok=True)
    except OSError as exc:
        raise LaunchError(f"job {spec.job_id}: cannot prepare the attempt's directories: {exc}") from None
    return files


def _start_gang(
    spec: AttemptSpec, requests: Mapping[int, ShimRequest], timeout_s: float, supervisor: ShimSupervisor,
) -> dict[int, tuple[ShimProcess, ShimRecord]]:
    """Start every learner or none: on the first one that cannot start, kill those that did. Each shim is
    forked by the supervisor, or started afresh where the supervisor cannot."""
    popens: dict[int, ShimProcess] = {}
    for rank, request in requests.items():
        try:
            popens[rank] = supervisor.spawn(request) or spawn_shim(request)
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
    # The shim says CANNOT_START when the command itself cannot be run (not found, not executable): the
    # job's input, not the machine.
    raise LaunchError(f"job {spec.job_id} attempt {spec.attempt}: learner {rank} could not start: {reason}",
                      user_error=popens[rank].returncode == CANNOT_START)


def _linger(popens: Sequence[ShimProcess], linger_s: float) -> None:
    """Wait up to `linger_s` for every shim of a gang that just started to end (a learner as short as its
    launch); return as soon as one is still running then, or at once when all have ended. A shim forked by the
    supervisor ends on its status pipe (one select), one of our own on its exit."""
    deadline = time.monotonic() + linger_s
    for popen in popens:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                if popen.poll() is None:
                    return
            else:
                popen.wait(timeout=left)
        except subprocess.TimeoutExpired:
            return


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


class _ExitWatcher:
    """One thread waiting on the pidfds of the shims (Linux 5.3+) and calling `wake` when one exits. Where
    pidfds are not available it does nothing: the loop's timed rounds notice the ends instead. A byte on the
    control pipe makes the thread poll again (a pidfd registered meanwhile) or stop."""

    def __init__(self) -> None:
        self._wake: Callable[[], None] | None = None
        self._poller: Any = None
        self._fds: dict[int, int] = {}  # pidfd -> pid
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._control_r, self._control_w = -1, -1

    def start(self, wake: Callable[[], None]) -> None:
        if not hasattr(os, "pidfd_open") or not hasattr(select, "poll"):
            return
        with self._lock:
            self._wake = wake
            if self._thread is not None:
                return
            self._stopping = False
            self._poller = select.poll()
            self._control_r, self._control_w = os.pipe()
            self._poller.register(self._control_r, select.POLLIN)
            self._thread = threading.Thread(target=self._run, name="loadmaster-exits", daemon=True)
            self._thread.start()

    def watch(self, pid: int, start: str) -> None:
        with self._lock:
            if self._poller is None:
                return
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return
            state = proc_state(pid)
            if state is None or state.start != start:  # not the process we mean (its pid was reused)
                os.close(fd)
                return
            self._fds[fd] = pid
            self._poller.register(fd, select.POLLIN)
            os.write(self._control_w, b"w")

    def _run(self) -> None:
        while True:
            events = self._poller.poll()
            woke = False
            with self._lock:
                for fd, _ in events:
                    if fd == self._control_r:
                        os.read(self._control_r, 4096)
                        if self._stopping:
                            return
                    elif self._fds.pop(fd, None) is not None:
                        self._poller.unregister(fd)
                        os.close(fd)
                        woke = True
                wake = self._wake
            if woke and wake is not None:
                wake()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._stopping = True
            os.write(self._control_w, b"s")
        thread.join(timeout=10)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
            os.close(self._control_r)
            os.close(self._control_w)
            self._poller = None
