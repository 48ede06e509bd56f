"""A Migrate carried out by the control loop (driven by hand, real learners): the job restarts at the move's target
unless the target went stale or the scheduler changed its mind while the job stopped. The plans are given to the
loop directly, so that each case is exactly the one named (tests/platform/test_live_migration.py has the moves
decide() makes by itself on a real server)."""

from __future__ import annotations

from loadmaster.core.job import Allocation
from loadmaster.core.job import JobStatus as S
from loadmaster.scheduling.plan import Migrate, Plan, Preempt, Start
from tests.platform.control_fixtures import Env, learner


def _moving(env: Env) -> str:
    """A one-GPU job on n0 (pack), taking 1.5 s to stop, asked to move to n1."""
    mover = env.submit(name="mover", command=learner("slow-stop", 400, 0.05, 1.5))
    env.until_running(mover)
    assert env.job(mover).allocation["learners"][0]["node"] == "n0"
    _apply(env, Plan(migrations=(Migrate(mover, Allocation(mover, (1,), 1, 1.0, 1.0)),)))
    env.drive(lambda: env.attempts(mover)[0].outcome == "stopping", what="the move to begin")
    return mover


def _apply(env: Env, plan: Plan) -> None:
    loop = env.loop
    with loop._lock:
        loop._apply(plan)


def _nodes(env: Env, job_id: str) -> list[str]:
    return [a.allocation["learners"][0]["node"] for a in env.attempts(job_id)]


def test_a_moved_job_whose_target_gpus_were_taken_is_placed_anew_at_once(env: Env) -> None:
    mover = _moving(env)
    # Meanwhile a start lands on the target's server, all four GPUs (a job that is not stopping): stale.
    taker = env.submit(name="taker", resources={"gpus": 4, "cpus": 1, "memory_gb": 1},
                       command=learner("train", 400, 0.05))
    _apply(env, Plan(starts=(Start(taker, Allocation(taker, (1,), 4, 1.0, 1.0)),)))
    env.until_running(taker)
    # Placed anew by decide() (its old GPUs on n0 are free), not held for the start patience (60 s).
    env.drive(lambda: len(env.attempts(mover)) == 2 and env.status(mover) is S.PROCESSING, timeout_s=20,
              what="the mover to start again")
    assert _nodes(env, mover) == ["n0", "n0"] and _nodes(env, taker) == ["n1"]
    reasons = [reason for _, _, reason in env.history(mover)]
    assert "restarting on n1, where it was moved" in reasons
    assert mover not in env.loop.ctx.pending


def test_a_job_preempted_while_it_moves_is_requeued_not_restarted_at_the_target(env: Env) -> None:
    mover = _moving(env)
    _apply(env, Plan(preempts=(Preempt(mover, "preempted by someone"),)))
    assert env.loop.ctx.runs[mover].move_to is None  # the target is given up at once
    env.drive(lambda: len(env.attempts(mover)) == 2, timeout_s=20, what="the mover to start again")
    reasons = [reason for _, _, reason in env.history(mover)]
    assert "requeued after preemption" in reasons and not any(r.startswith("restarting on") for r in reasons)
    assert _nodes(env, mover) == ["n0", "n0"]  # placed by the scheduler (pack), not at the move's target


def test_a_moved_job_restarts_on_its_target(env: Env) -> None:
    mover = _moving(env)
    assert env.loop.ctx.runs[mover].move_to == Allocation(mover, (1,), 1, 1.0, 1.0)
    env.drive(lambda: len(env.attempts(mover)) == 2, timeout_s=20, what="the mover to start again")
    assert _nodes(env, mover) == ["n0", "n1"]
    assert env.job(mover).preemptions == 1
