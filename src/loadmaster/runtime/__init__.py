"""What a learner imports: who it is, where its files go, whether to stop, and how to report progress.

    from loadmaster import runtime

    runtime.init()                                # parse the environment, watch SIGTERM
    done = 0                                      # steps completed
    if (ckpt := runtime.latest_checkpoint()) is not None:
        state = load(ckpt)
        done = runtime.checkpoint_step(ckpt)
    while done < total:
        train_one_step(state)
        done += 1
        runtime.report(step=done, loss=loss)
        if runtime.should_preempt():              # the platform wants the resources back
            runtime.save_checkpoint(lambda path: save(state, path), done)
            raise SystemExit(0)                   # the next attempt resumes from this checkpoint

Stdlib only, and nothing of the server: a learner installs loadmaster for this package alone. Outside the
platform everything has the defaults of a learner running alone (rank 0 of 1, ./checkpoints, ./results,
report() writes nothing). The environment contract is in runtime/env.py.
"""

from __future__ import annotations

from loadmaster.runtime.checkpoints import (
    CheckpointWriter,
    checkpoint_dir,
    checkpoint_name,
    checkpoint_step,
    latest_checkpoint,
    list_checkpoints,
    save_checkpoint,
)
from loadmaster.runtime.context import RuntimeContext, RuntimeEnvError, current
from loadmaster.runtime.paths import data_dir, results_dir
from loadmaster.runtime.preempt import should_preempt, watch_sigterm
from loadmaster.runtime.reporting import report

__all__ = [
    "CheckpointWriter",
    "RuntimeContext",
    "RuntimeEnvError",
    "attempt",
    "checkpoint_dir",
    "checkpoint_name",
    "checkpoint_step",
    "current",
    "data_dir",
    "init",
    "job_id",
    "latest_checkpoint",
    "list_checkpoints",
    "local_rank",
    "rank",
    "report",
    "results_dir",
    "save_checkpoint",
    "should_preempt",
    "world_size",
]


def init() -> RuntimeContext:
    """Call once at start-up, from the main thread: check the environment (a bad variable raises
    RuntimeEnvError naming it) and catch SIGTERM from now on, so a stop request cannot kill the learner
    before it checkpoints. Returns the parsed context."""
    context = current()
    watch_sigterm()
    return context


def rank() -> int:
    """This learner's rank, 0..world_size()-1 (RANK; 0 alone)."""
    return current().rank


def world_size() -> int:
    """How many learners the job has (WORLD_SIZE; 1 alone)."""
    return current().world_size


def local_rank() -> int:
    """This learner's index among those on its machine (LOCAL_RANK; 0 alone)."""
    return current().local_rank


def job_id() -> str | None:
    """The platform's id of the job; None outside the platform."""
    return current().job_id


def attempt() -> int:
    """Which attempt of the job this is, from 1; a resume after preemption is a new attempt."""
    return current().attempt
