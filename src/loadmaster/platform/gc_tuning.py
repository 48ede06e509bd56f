"""Garbage-collector settings for the long-lived server process.

CPython's defaults (a young collection every 700 net allocations, a full one every 100 of those) make a
process holding the control loop's caches, SQLAlchemy's and FastAPI's objects run full collections of its
whole heap every few rounds; measured on bench/bench_control.py (1,000 queued, 200 running), those pauses
were the whole tail of the round time: max 230-340 ms with the defaults, 93 ms with these settings, median
unchanged. Nothing here relies on prompt collection (no reference cycles hold files or processes), so
collecting less often only delays freeing memory that cycles hold.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 100)


def tune_for_serving() -> None:
    """Call once the server has built its objects: what exists now is frozen out of every later collection
    (imports, the app, the cluster), and collections run less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
