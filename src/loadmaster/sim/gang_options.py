"""`--gang` and `--partial-timeout` as `sim run` and `sim compare` read them: apart from the learner-at-a-time
simulator (sim/learner_at_a_time.py), which a gang-scheduled run never imports."""

from __future__ import annotations

import math


def parse_gang(text: str) -> bool:
    """`--gang on|off` -> True for gang scheduling, False for learner-at-a-time."""
    value = text.strip().lower()
    if value in ("on", "true", "yes"):
        return True
    if value in ("off", "false", "no"):
        return False
    raise ValueError(f"--gang: expected on or off, got {text!r}")


def parse_timeout(text: str) -> float | None:
    """`--partial-timeout never|SECONDS` -> None (never) or seconds > 0."""
    value = text.strip().lower()
    if value in ("never", "none", "inf"):
        return None
    try:
        seconds = float(value.removesuffix("s"))
    except ValueError:
        raise ValueError(f"--partial-timeout: expected 'never' or seconds like 3600, got {text!r}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--partial-timeout: must be 'never' or a number of seconds > 0, got {text!r}")
    return seconds


def timeout_label(timeout_s: float | None) -> str:
    return "never" if timeout_s is None else f"{timeout_s:g}s"
