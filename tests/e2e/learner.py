"""A learner for the end-to-end tests, written the way a training script is (loadmaster.runtime only, stdlib).

    python learner.py STEPS STEP_S CHECKPOINT_EVERY [HOLD_AT RELEASE_FILE]

Counts to STEPS, one step every STEP_S seconds, resuming from the latest checkpoint; reports every step;
rank 0 checkpoints every CHECKPOINT_EVERY steps and when asked to stop (then every rank exits 0). With
HOLD_AT, it waits after step HOLD_AT until RELEASE_FILE exists (still obeying a stop request): the test
decides when the job may end, so nothing depends on how fast a loaded machine runs it. At the end rank 0
writes results/out.json: {"first_step": where this attempt began, "last_step", "attempt", "world_size"}.
The checkpoint's content is its step, so a resumed attempt can be checked against the name.
"""

from __future__ import annotations

import json
import os
import sys
import time

from loadmaster import runtime


def stop(step: int) -> int:
    """Asked to stop: rank 0 checkpoints where the learners are; every rank leaves with 0."""
    context = runtime.current()
    if context.rank == 0:
        runtime.save_checkpoint(str(step).encode(), step)
    print(f"rank {context.rank}: asked to stop at step {step}", flush=True)
    return 0


def main(steps: int, step_s: float, every: int, hold_at: int | None, release: str | None) -> int:
    context = runtime.init()
    latest = runtime.latest_checkpoint()
    first = 0
    if latest is not None:
        first = int(latest.read_text())
        assert first == runtime.checkpoint_step(latest), f"checkpoint {latest} holds step {first}"
    print(f"rank {context.rank}/{context.world_size} attempt {context.attempt}: starting at step {first}", flush=True)
    step = first
    while step < steps:
        while hold_at is not None and release is not None and step >= hold_at and not os.path.exists(release):
            if runtime.should_preempt():
                return stop(step)
            time.sleep(0.02)
        time.sleep(step_s)
        step += 1
        runtime.report(step=step, total_steps=steps)
        if runtime.should_preempt():
            return stop(step)
        if context.rank == 0 and step % every == 0:
            runtime.save_checkpoint(str(step).encode(), step)
    if context.rank == 0:
        out = {"first_step": first, "last_step": step, "attempt": context.attempt, "world_size": context.world_size}
        (runtime.results_dir() / "out.json").write_text(json.dumps(out))
    print(f"rank {context.rank}: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    held = (int(args[3]), args[4]) if len(args) == 5 else (None, None)
    sys.exit(main(int(args[0]), float(args[1]), int(args[2]), *held))
