"""How an attempt ended, as a type: the one input of ending.end(), and the only thing that decides what the
job does next.

| outcome       | attempt row     | counts against max_attempts | the job                                       |
|---------------|-----------------|-----------------------------|-----------------------------------------------|
| Succeeded     | succeeded       | -                           | STORING (results to copy) or COMPLETED        |
| Failed        | failed + class  | yes                         | retried (QUEUED) or FAILED, by its retry policy |
| Stopped       | stopped         | no                          | what the stop was for: preempted -> QUEUED,   |
|               |                 |                             | halted, cancelled, resized, out of time       |
| Lost          | lost            | no                          | QUEUED; resumes from its checkpoint           |
| NotLaunched   | not_launched    | no                          | QUEUED with the reason, tried again later     |

Lost is the platform's loss (learners on a node that died, learners a restart could not account for):
the job did nothing wrong, so it is requeued whatever its retry policy. NotLaunched is a launch that could
not be made (the machine, the executor): no learner of the attempt ran, and the job waits in the queue
with the reason until the launch is tried again (`launch_failed`, with a backoff).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.core.job import FailureCategory
from loadmaster.platform.control.state import StopIntent
from loadmaster.platform.executors.base import AttemptEnded, LaunchError, LearnerExit
from loadmaster.platform.failures import Classification, classify

C = FailureCategory


@dataclass(frozen=True, slots=True)
class Succeeded:
    exits: tuple[LearnerExit, ...]


@dataclass(frozen=True, slots=True)
class Failed:
    failure: Classification
    exits: tuple[LearnerExit, ...] = ()


@dataclass(frozen=True, slots=True)
class Stopped:
    intent: StopIntent
    exits: tuple[LearnerExit, ...] = ()


@dataclass(frozen=True, slots=True)
class Lost:
    why: str
    exits: tuple[LearnerExit, ...] = ()


@dataclass(frozen=True, slots=True)
class NotLaunched:
    why: str


Outcome = Succeeded | Failed | Stopped | Lost | NotLaunched


def stored_outcome(outcome: Outcome) -> str:
    """The attempt row's outcome column for an ended attempt."""
    match outcome:
        case Succeeded():
            return "succeeded"
        case Failed():
            return "failed"
        case Stopped():
            return "stopped"
        case Lost():
            return "lost"
        case NotLaunched():
            return "not_launched"


def exits_of(outcome: Outcome) -> tuple[LearnerExit, ...]:
    return () if isinstance(outcome, NotLaunched) else outcome.exits


def of_end(ended: AttemptEnded, stop: StopIntent | None, log_tail: str) -> Outcome:
    """What an attempt the executor reports as over (every learner exited) amounts to. A stop the loop asked
    for explains the exit, whatever the codes (the runtime's convention: checkpoint, then exit 0)."""
    if stop is not None:
        return Stopped(stop, ended.exits)
    if ended.succeeded:
        return Succeeded(ended.exits)
    failing = failing_learner(ended)
    if ended.lost and (failing is None or failing.rank in ended.lost):
        ranks = ", ".join(str(r) for r in ended.lost)
        return Lost(f"learner(s) {ranks} lost with their node", ended.exits)
    if ended.stopped and failing is None:
        return Failed(Classification(C.INFRASTRUCTURE, "stopped from outside the control loop"), ended.exits)
    return Failed(classify(ended, log_tail), ended.exits)


def failing_learner(ended: AttemptEnded) -> LearnerExit | None:
    """The learner whose log explains a failure: the first to fail, else any with a non-zero exit."""
    return ended.first_failure or next((e for e in ended.exits if e.exit_code != 0), None)


def of_launch_error(err: LaunchError | str) -> Outcome:
    """A launch that failed: the job's own input (its command cannot run) fails the attempt; anything else
    is a launch that could not be made."""
    message = str(err)
    if not isinstance(err, LaunchError) or not err.user_error:
        return NotLaunched(f"the learners could not be started: {message}")
    lowered = message.lower()
    category = C.PERMISSION_ERROR if "permission denied" in lowered else C.INCORRECT_INPUT
    return Failed(Classification(category, f"the learners could not be started: {message}"))
