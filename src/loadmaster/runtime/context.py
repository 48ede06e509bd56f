"""What the environment says about this learner, parsed once per call into a frozen RuntimeContext.

Nothing is cached: the environment is the single source of truth, so a test (or a launcher) that changes
it sees the change at once, and there is no module state to reset. Parsing is a few dict lookups.
Unset or empty variables take the defaults of a learner running alone: rank 0 of a world of 1, attempt 1.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsIndex

from loadmaster.runtime import env


class RuntimeEnvError(ValueError):
    """A runtime variable is set to something unusable; the message names the variable and the fix."""


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int | None = None  # None when the launcher does not say
    job_id: str | None = None  # None outside the platform
    attempt: int = 1
    checkpoint_dir: Path | None = None  # None: not set by the platform (the caller picks a default)
    data_dir: Path | None = None
    results_dir: Path | None = None
    report_file: Path | None = None  # None: report() writes nothing
    preempt_file: Path | None = None

    @property
    def on_platform(self) -> bool:
        return self.job_id is not None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RuntimeContext:
        """Parse the runtime contract (see runtime/env.py) from `environ` (default: os.environ)."""
        source: Mapping[str, str] = os.environ if environ is None else environ
        world_size = _integer(source, env.WORLD_SIZE, 1, minimum=1,
                              fix="set it to the number of learners (>= 1), or unset it to run alone")
        rank = _integer(source, env.RANK, 0, minimum=0,
                        fix="set it to this learner's rank (0..WORLD_SIZE-1), or unset it to run alone")
        if rank >= world_size:
            raise RuntimeEnvError(
                f"{env.RANK}={rank} is not below {env.WORLD_SIZE}={world_size}; ranks run from 0 to "
                f"{env.WORLD_SIZE}-1: fix one of the two"
            )
        local_rank = _integer(source, env.LOCAL_RANK, 0, minimum=0,
                              fix="set it to this learner's index on its machine (>= 0), or unset it")
        local_world_size: int | None = None
        if _text(source, env.LOCAL_WORLD_SIZE) is not None:
            local_world_size = _integer(source, env.LOCAL_WORLD_SIZE, 1, minimum=1,
                                        fix="set it to the number of learners on this machine, or unset it")
            if local_rank >= local_world_size:
                raise RuntimeEnvError(
                    f"{env.LOCAL_RANK}={local_rank} is not below {env.LOCAL_WORLD_SIZE}={local_world_size}; "
                    "fix one of the two"
                )
        attempt = _integer(source, env.ATTEMPT, 1, minimum=1,
                           fix="it counts attempts from 1; unset it outside the platform")
        return cls(
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            job_id=_text(source, env.JOB_ID),
            attempt=attempt,
            checkpoint_dir=_path(source, env.CHECKPOINT_DIR),
            data_dir=_path(source, env.DATA_DIR),
            results_dir=_path(source, env.RESULTS_DIR),
            report_file=_path(source, env.REPORT_FILE),
            preempt_file=_path(source, env.PREEMPT_FILE),
        )


def current() -> RuntimeContext:
    """The context of this process, from os.environ as it is now."""
    return RuntimeContext.from_environ()


def whole_step(step: object, what: str) -> int:
    """`step` as an int >= 0; numpy and torch integers pass (operator.index), floats and bools do not."""
    value = operator.index(step) if isinstance(step, SupportsIndex) and not isinstance(step, bool) else -1
    if value < 0:
        raise ValueError(f"{what}: step={step!r} must be a whole number >= 0 (a training step)")
    return value


def _text(source: Mapping[str, str], name: str) -> str | None:
    # An empty value counts as unset: launchers and templates often write NAME= for "nothing".
    value = source.get(name, "").strip()
    return value or None


def _path(source: Mapping[str, str], name: str) -> Path | None:
    value = _text(source, name)
    return None if value is None else Path(value).expanduser()


def _integer(source: Mapping[str, str], name: str, default: int, *, minimum: int, fix: str) -> int:
    raw = _text(source, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeEnvError(f"{name}={raw!r} is not a whole number; {fix}") from None
    if value < minimum:
        raise RuntimeEnvError(f"{name}={value} is below {minimum}; {fix}")
    return value
