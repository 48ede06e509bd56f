"""report(): progress lines the platform reads (one JSON object per line, one file per rank).

Each call appends {"time": <unix seconds>, "step": ..., "rank": ..., <metrics>} to LOADMASTER_REPORT_FILE
with one write(2) on a file opened O_APPEND, so the line reaches the file (and the executor polling it)
at once and whole. Outside the platform (the variable unset) report() does nothing.

Metric values may be JSON values or numbers of other libraries (numpy scalars, 0-d tensors: anything with
.item() or __float__). Non-finite floats are written as the strings "nan", "inf", "-inf": NaN is not
JSON, and a NaN loss is worth seeing rather than dropping.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from loadmaster.runtime.context import current, whole_step

RESERVED_KEYS = frozenset({"time", "step", "rank"})


def report(*, step: int, **metrics: Any) -> None:
    """Append one progress line for `step` with `metrics` to this learner's report file."""
    step = whole_step(step, "report(step=...)")
    clash = RESERVED_KEYS.intersection(metrics)
    if clash:
        raise ValueError(f"report(): {sorted(clash)} are written by the runtime itself; rename those metrics")
    context = current()
    if context.report_file is None:
        return
    record: dict[str, Any] = {"time": time.time(), "step": step, "rank": context.rank}
    for name, value in metrics.items():
        record[name] = _json_value(name, value)
    line = (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode()
    context.report_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(context.report_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = 0
        while written < len(line):  # a regular file takes it all at once; the loop covers an interrupted write
            written += os.write(descriptor, line[written:])
    finally:
        os.close(descriptor)


def _json_value(name: str, value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_json_value(name, item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_value(name, item) for key, item in value.items()}
    item = getattr(value, "item", None)
    if callable(item):  # numpy scalars, 0-d arrays and tensors
        try:
            scalar = item()
        except (ValueError, RuntimeError):  # an array or tensor of more than one element
            raise TypeError(
                f"report(): metric {name!r} is a {type(value).__name__} of more than one element; "
                "report a single number (e.g. .mean().item()) or a list"
            ) from None
        return _json_value(name, scalar)
    if hasattr(value, "__float__"):
        return _json_value(name, float(value))
    raise TypeError(
        f"report(): metric {name!r} is a {type(value).__name__}, which cannot be written as JSON; "
        "pass a number, string, bool, None, or a list/dict of those"
    )
