"""A learner for the control-loop tests, written as a training script would be (loadmaster.runtime only).

    python control_learner.py train STEPS STEP_S            count to STEPS (one step per STEP_S seconds),
                                                            resuming from the latest checkpoint
    python control_learner.py plateau STEPS STEP_S FLOOR    `train`, reporting loss = max(FLOOR, 5 - 0.5 * step): it
                                                            falls for a few steps, then stays flat
    python control_learner.py slow-stop STEPS STEP_S STOP_S `train`, taking STOP_S seconds to checkpoint once asked
                                                            to stop (a stop that is under way for a while)
    python control_learner.py fail RANK CODE MESSAGE        rank RANK prints a traceback ending in MESSAGE and
                                                            exits CODE; the other ranks wait to be stopped
    python control_learner.py fail-once RANK CODE MESSAGE STEPS STEP_S
                                                            `fail` on the first attempt, `train` afterwards
    python control_learner.py long-first FIRST STEPS STEP_S  `train` to FIRST steps on the first attempt (one that
                                                            must be stopped, not end on its own), to STEPS after

`train` checkpoints (rank 0) when asked to stop and exits 0, and at the end writes results/out.txt:
"<first step of this attempt> <last step> <attempt> <contents of DATA_DIR/input.txt, if any>".
"""

from __future__ import annotations

import sys
import time

from loadmaster import runtime


def train(steps: int, step_s: float, floor: float | None = None, stop_s: float = 0.0) -> int:
    context = runtime.init()
    latest = runtime.latest_checkpoint()
    first = runtime.checkpoint_step(latest) if latest is not None else 0
    step = first
    while step < steps:
        time.sleep(step_s)
        step += 1
        if floor is None:
            runtime.report(step=step, total_steps=steps)
        else:
            runtime.report(step=step, total_steps=steps, loss=max(floor, 5.0 - 0.5 * step))
        if runtime.should_preempt():
            time.sleep(stop_s)
            if context.rank == 0:
                runtime.save_checkpoint(str(step).encode(), step)
            return 0
    if context.rank == 0:
        data = runtime.data_dir()
        given = (data / "input.txt").read_text().strip() if data is not None and (data / "input.txt").exists() else ""
        (runtime.results_dir() / "out.txt").write_text(f"{first} {step} {context.attempt} {given}".strip())
    return 0


def fail(rank: int, code: int, message: str) -> int:
    context = runtime.init()
    if context.rank == rank:
        time.sleep(0.2)
        print("step 1 loss 2.3", flush=True)
        print('Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n    main()\n'
              + message, file=sys.stderr, flush=True)
        return code
    while not runtime.should_preempt():
        time.sleep(0.02)
    return 0


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "train":
        return train(int(argv[1]), float(argv[2]))
    if mode == "plateau":
        return train(int(argv[1]), float(argv[2]), float(argv[3]))
    if mode == "slow-stop":
        return train(int(argv[1]), float(argv[2]), stop_s=float(argv[3]))
    if mode == "fail":
        return fail(int(argv[1]), int(argv[2]), argv[3])
    if mode == "fail-once":
        if runtime.attempt() == 1:
            return fail(int(argv[1]), int(argv[2]), argv[3])
        return train(int(argv[4]), float(argv[5]))
    if mode == "long-first":
        return train(int(argv[1] if runtime.attempt() == 1 else argv[2]), float(argv[3]))
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
