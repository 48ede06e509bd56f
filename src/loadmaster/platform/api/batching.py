"""Group commit for submissions: concurrent submissions share one transaction.

A submission is answered only once its job is committed (a 201 means the job survives a crash). While one
batch is being written in a worker thread, new submissions wait in the next batch, so under load the cost
of a commit (and of the ORM's flush) is paid once per batch instead of once per job, and with no load a
batch is one job and adds no delay. If a batch fails as a whole, its jobs are retried one by one so that
one bad row fails only its own request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from loadmaster.platform.api.actions import in_transaction
from loadmaster.platform.store.db import Store

T = TypeVar("T")
Write = Callable[[Session], T]


@dataclass
class _Pending(Generic[T]):
    write: Write[T]
    future: asyncio.Future[T]


class Throttled:
    """Calls `fn` at most once per `interval_s`; a call inside the interval is deferred to its end (never
    dropped). Used from the event loop: submissions arrive by the hundred per second, and each wake of the
    control loop costs a round over the whole queue, so a burst wakes it a few times a second, not per batch."""

    def __init__(self, fn: Callable[[], None], interval_s: float) -> None:
        self.fn = fn
        self.interval_s = interval_s
        self._last = -float("inf")
        self._pending = False

    def __call__(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._last >= self.interval_s:
            self._fire()
        elif not self._pending:
            self._pending = True
            loop.call_later(self._last + self.interval_s - now, self._fire)

    def _fire(self) -> None:
        self._pending = False
        self._last = asyncio.get_running_loop().time()
        self.fn()


class GroupCommit(Generic[T]):
    def __init__(self, store: Store, after_commit: Callable[[], None], max_batch: int = 512) -> None:
        self.store = store
        self.after_commit = after_commit
        self.max_batch = max_batch
        self._pending: list[_Pending[T]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, write: Write[T]) -> T:
        """Run `write` in a shared transaction; its result once committed (or its exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        item = _Pending(write, future)
        self._pending.append(item)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        return await item.future

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
            outcomes = await run_in_threadpool(self._write, [p.write for p in batch])
            self.after_commit()
            for p, (ok, value) in zip(batch, outcomes, strict=True):
                if p.future.done():  # the client went away; its job is committed all the same
                    continue
                if ok:
                    p.future.set_result(cast(T, value))
                else:
                    assert isinstance(value, BaseException)
                    p.future.set_exception(value)

    def _write(self, writes: list[Write[T]]) -> list[tuple[bool, T | BaseException]]:
        # for_update: on SQLite the write lock is taken at BEGIN, waiting for it up to the busy timeout. A
        # deferred transaction that reads first (a manifest's dependencies) and writes at commit fails at once
        # with "database is locked" when the control loop committed in between, which under load turned
        # into 503s for submissions with `after`. No effect on PostgreSQL.
        if len(writes) > 1:
            try:
                results = in_transaction(self.store, lambda s: [w(s) for w in writes], for_update=True)
                return [(True, r) for r in results]
            except Exception:  # retried one by one below, each failing on its own
                pass
        out: list[tuple[bool, T | BaseException]] = []
        for w in writes:
            try:
                out.append((True, in_transaction(self.store, w, for_update=True)))
            except Exception as err:
                out.append((False, err))
        return out
