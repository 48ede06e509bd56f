"""A stand-in training job: `python -m loadmaster.runtime.synthetic --work-s 4.5 [--fail]`.

It does `--work-s` seconds of "training" in steps of `--step-s`, the way a real script under the platform
does: it resumes from its latest checkpoint (the checkpoint holds the work done so far), reports progress
every step, checkpoints every `--checkpoint-every-s` of work and whenever it is asked to stop
(`should_preempt()`), and then leaves with 0 so that the platform requeues it. With `--fail` it ends its work
with a Python traceback and exit status 1, as a job the trace records as failed did.

`loadmaster demo` replays a trace's jobs as these learners, so a replay runs real processes through the real
scheduler, store and executor, at a pace a laptop can take. Every rank runs the same work; rank 0 keeps the
checkpoints.
"""

from __future__ import annotations

import argparse
import sys
import time

import loadmaster.runtime as runtime


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadmaster.runtime.synthetic",
                                     description="A stand-in training job for demos and trace replays.")
    parser.add_argument("--work-s", type=float, required=True, help="seconds of work the job needs in all")
    parser.add_argument("--step-s", type=float, default=0.25, help="seconds per step (progress is reported each)")
    parser.add_argument("--checkpoint-every-s", type=float, default=1.0, help="seconds of work between checkpoints")
    parser.add_argument("--fail", action="store_true", help="fail with a traceback once the work is done")
    args = parser.parse_args(argv)
    for name in ("work_s", "step_s", "checkpoint_every_s"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be more than 0")
    return args


def _checkpoint(done_s: float, step: int) -> None:
    if runtime.rank() == 0:
        runtime.save_checkpoint(f"{done_s:.6f}".encode(), step)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    context = runtime.init()
    latest = runtime.latest_checkpoint()
    done = float(latest.read_text()) if latest is not None else 0.0
    step = runtime.checkpoint_step(latest) if latest is not None else 0
    total_steps = max(1, round(args.work_s / args.step_s))
    print(f"rank {context.rank}/{context.world_size} attempt {context.attempt}: {done:.2f} of {args.work_s:.2f} s "
          "of work done", flush=True)
    last_checkpoint = done
    while done < args.work_s:
        if runtime.should_preempt():
            _checkpoint(done, step)
            print(f"rank {context.rank}: asked to stop after {done:.2f} s of work; checkpointed", flush=True)
            return 0
        pause = min(args.step_s, args.work_s - done)
        time.sleep(pause)
        done += pause
        step += 1
        runtime.report(step=step, total_steps=total_steps, work_done_s=round(done, 3))
        if done - last_checkpoint >= args.checkpoint_every_s:
            _checkpoint(done, step)
            last_checkpoint = done
    if args.fail:
        raise RuntimeError(f"rank {context.rank}: this job fails as its trace recorded it (after {done:.2f} s)")
    print(f"rank {context.rank}: done after {done:.2f} s of work", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
