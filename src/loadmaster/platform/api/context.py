"""What the API's routes share: the store, the live cluster, the job layout, and the control loop's face.

The API never schedules. It writes user requests into the store and wakes the loop (the seam in
docs/platform.md); the only thing it reads from the loop is the latest round's queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry

from loadmaster.core.cluster import Cluster
from loadmaster.platform.api.batching import GroupCommit, Throttled
from loadmaster.platform.api.models import JobSummary
from loadmaster.platform.code import DEFAULT_MAX_MB
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.tenants import Principal, authenticate, hash_token


class QueueEntryLike(Protocol):
    @property
    def job_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def wait_reason(self) -> str: ...
    @property
    def estimated_start_at(self) -> float | None: ...


class LoopLink(Protocol):
    """The part of ControlLoop the API uses."""

    def wake(self) -> None: ...
    def queue(self) -> Sequence[QueueEntryLike]: ...
    def queue_entry(self, job_id: str) -> QueueEntryLike | None: ...
    def queue_made_at(self) -> float: ...
    def health(self) -> tuple[bool, float | None]: ...


class Authenticator:
    """Token -> Principal, with a short-lived memo so that a burst of submissions costs no lookups.

    Tokens are never revoked while a server runs, and quotas change only through this API, which calls
    forget_tenants(): so the memo never answers with stale limits. The TTL bounds its size and the time a
    token deleted from the database by hand keeps working.
    """

    def __init__(self, store: Store, ttl_s: float = 30.0, max_entries: int = 10_000) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._memo: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def principal(self, token: str) -> Principal | None:
        key = hash_token(token)
        now = time.monotonic()
        with self._lock:
            hit = self._memo.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        with self.store.session() as s:
            found = authenticate(s, token)
        if found is not None:
            with self._lock:
                if len(self._memo) >= self.max_entries:
                    self._memo.clear()
                self._memo[key] = (now + self.ttl_s, found)
        return found

    def forget_tenants(self) -> None:
        with self._lock:
            self._memo.clear()


@dataclass
class ApiContext:
    store: Store
    cluster: Cluster
    dirs: JobDirs
    loop: LoopLink | None = None  # None: an API without a scheduler (tools, tests of the API alone)
    clock: Callable[[], float] = time.time
    auth: Authenticator = field(init=False)
    max_body_bytes: int = 1 << 20
    max_code_bytes: int = int(DEFAULT_MAX_MB * (1 << 20))  # a code package's files, unpacked (--max-upload-mb)
    stream_poll_s: float = 0.2  # how often a log stream looks for new lines
    closing: threading.Event = field(default_factory=threading.Event)  # set at shutdown: streams end
    # Submissions wake the control loop at most this often (a burst of them costs a few rounds, not one each).
    submit_wake_interval_s: float = 0.5
    metrics: CollectorRegistry | None = None  # the control loop's (GET /metrics)

    submissions: GroupCommit[JobSummary] = field(init=False)

    def __post_init__(self) -> None:
        self.auth = Authenticator(self.store)
        self.submissions = GroupCommit(self.store, Throttled(self.wake, self.submit_wake_interval_s))

    def wake(self) -> None:
        if self.loop is not None:
            self.loop.wake()
