"""What the API's routes share: the store, the live cluster, the job layout, and the control loop's face.

The API never schedules. It writes user requests into the store and wakes the loop (the seam in
docs/platform.md); the only thing it reads from the loop is the latest round's queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry

from loadmaster.core.cluster import Cluster
from loadmaster.platform.api.batching import GroupCommit, Throttled
from loadmaster.platform.api.models import JobSummary
from loadmaster.platform.code import DEFAULT_MAX_MB
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.tenants import Principal, authenticate_by, authenticate_digest, hash_token, token_reader
from loadmaster.platform.tenancy import Isolation


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
    def nodes_changed(self) -> None: ...


class NodesLink(Protocol):
    """The live cluster (control/membership.Membership): nodes that joined, and the state of each."""

    @property
    def cluster(self) -> Cluster: ...
    def states(self) -> Mapping[str, NodeStateLike]: ...


class NodeStateLike(Protocol):
    @property
    def state(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def last_seen_at(self) -> float | None: ...


class Authenticator:
    """Token -> Principal: an indexed read of the store made after the request arrived, deliberately without
    a memo, so that a token revoked, rotated, expired or deleted by hand fails at its very next request (and
    changed limits apply at once).

    From the event loop (shared()), the requests that arrive together share that read: the first one to ask
    schedules it for when the loop has run the callbacks already due, which include the other requests read
    from the network meanwhile (20 clients' submissions arrive in waves, one per group commit). Each waiting
    request gets the answer of a read that began after it asked, which is all "its very next request" needs;
    one read per distinct token instead of one per request (on PostgreSQL a round trip the loop waits for)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        # A driver connection of its own (store/plain_read.py): a sixth of an Engine connection's cost.
        self.reader = store.plain_read(token_reader)
        self._asked: dict[str, list[asyncio.Future[Principal | None]]] | None = None  # digest -> who waits

    def principal(self, token: str) -> Principal | None:
        return authenticate_by(self.reader, token, self.clock())

    async def shared(self, token: str) -> Principal | None:
        """principal(), from the event loop, in a read shared with the requests that asked meanwhile."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Principal | None] = loop.create_future()
        if self._asked is None:
            self._asked = {}
            loop.call_soon(self._read_asked)
        self._asked.setdefault(hash_token(token), []).append(answer)
        return await answer

    def _read_asked(self) -> None:
        asked, self._asked = self._asked or {}, None
        now = self.clock()
        for digest, answers in asked.items():
            try:
                found = authenticate_digest(self.reader, digest, now)
            except Exception as err:  # a store error: each waiting request answers it (503) as it would alone
                for answer in answers:
                    if not answer.done():
                        answer.set_exception(err)
                continue
            for answer in answers:
                if not answer.done():  # a request cancelled meanwhile (its client went away)
                    answer.set_result(found)


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
    # The server's isolation (reported by /health; without a sandbox a second tenant needs the admin's
    # --insecure-shared-user); None: an API without a server (tools, tests of the API alone).
    isolation: Isolation | None = None
    nodes: NodesLink | None = None  # the live cluster; None: `cluster` as given, every node alive

    submissions: GroupCommit[JobSummary] = field(init=False)

    def __post_init__(self) -> None:
        self.auth = Authenticator(self.store, self.clock)
        self.submissions = GroupCommit(self.store, Throttled(self.wake, self.submit_wake_interval_s))

    def wake(self) -> None:
        if self.loop is not None:
            self.loop.wake()

    def live_cluster(self) -> Cluster:
        """The cluster as it is now (nodes join a Ray cluster while the server runs)."""
        return self.nodes.cluster if self.nodes is not None else self.cluster
