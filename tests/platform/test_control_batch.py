"""control/batch.py on a real store: a batch's items are flushed together, and a batch whose flush fails is
made again item by item, so that only the item at fault is rolled back (with its effects) and the others
commit."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event, select, text

from loadmaster.core.job import JobStatus
from loadmaster.platform.control.batch import ATTEMPTS, Batch, commit
from loadmaster.platform.control.table import JobTable
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job
from loadmaster.platform.store.models import Attempt, Job, Tenant, Transition
from loadmaster.platform.store.writes import update_changed


def _add_tenant(b: Batch, name: str) -> None:
    b.s.add(Tenant(name=name, gpu_quota=1, created_at=b.now))  # a name taken fails only when written
    b.after(lambda: ran.append(name))


ran: list[str] = []


def test_a_batch_whose_flush_fails_is_made_again_item_by_item(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'batch.db'}")
    try:
        commit(store, 0.0, lambda b: _add_tenant(b, "taken"))
        ran.clear()
        batch = commit(store, 1.0, lambda b: b.each(["x", "taken", "y"], _add_tenant))
        assert batch.careful and batch.failed == ["taken"]
        assert ran == ["x", "y"]  # the failed item's effect is dropped with it
        with store.session() as s:
            names = sorted(s.execute(select(Tenant.name)).scalars())
        assert names == ["taken", "x", "y"]
    finally:
        store.close()


def test_a_batch_of_good_items_is_made_once_without_savepoints(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'batch.db'}")
    try:
        ran.clear()
        batch = commit(store, 1.0, lambda b: b.each(["x", "y"], _add_tenant))
        assert not batch.careful and batch.failed == [] and ran == ["x", "y"]
    finally:
        store.close()


# -- the batch's own writes (store/writes.py): one UPDATE per table, one INSERT per table ------------------------

def _store_with_jobs(tmp_path: Path, n: int) -> tuple[Store, list[str]]:
    store = Store.open(f"sqlite:///{tmp_path / 'writes.db'}")
    manifest = parse_manifest({"name": "w", "command": ["true"], "resources": {"gpus": 1}})
    with store.session() as s:
        tenant = Tenant(name="t", gpu_quota=1, created_at=0.0)
        s.add(tenant)
        s.flush()
        ids = [add_job(s, tenant.id, manifest, 0.0).id for _ in range(n)]
    return store, ids


class _Statements:
    def __init__(self, store: Store) -> None:
        self.seen: list[str] = []
        event.listen(store.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: object, _cursor: object, statement: str, *_: object) -> None:
        self.seen.append(" ".join(statement.split()[:3]))

    def count(self, head: str) -> int:
        return sum(1 for s in self.seen if s.startswith(head))


def _move(b: Batch, job_id: str, what: str) -> None:
    job = b.job(job_id)
    assert job is not None
    if what == "cancel":
        b.transition(job, JobStatus.CANCELLED, "by test")
    elif what == "start":
        job.attempts = 1
        job.allocation = {"learners": [], "master_port": 1}
        b.insert(ATTEMPTS, {"job_id": job_id, "number": 1, "started_at": b.now, "ended_at": None,
                            "allocation": {"learners": [], "master_port": 1}, "exit_codes": None,
                            "outcome": "launching", "failure_category": None, "retry_decision": None,
                            "log_dir": "/x", "lost_s": None, "smoke_test_s": None})
        b.transition(job, JobStatus.PROCESSING, "started by test")
    elif what == "same":
        job.wait_reason = job.wait_reason  # no net change: neither written nor numbered
    elif what == "fail":
        b.transition(job, JobStatus.CANCELLED, "never committed")
        raise RuntimeError("a bug in this hand-off")


def test_a_batch_writes_each_table_once_whatever_columns_its_items_changed(tmp_path: Path) -> None:
    store, ids = _store_with_jobs(tmp_path, 5)
    table = JobTable(store)
    try:
        table.sync()
        seq = table.seq
        seen = _Statements(store)
        items = list(zip(ids, ["cancel", "start", "cancel", "start", "same"], strict=True))
        batch = commit(store, 5.0, lambda b: (b.prefetch(ids), b.each(items, lambda bb, it: _move(bb, *it))))
        assert not batch.careful and batch.failed == []
        # Cancels and starts change different columns of jobs: still one UPDATE of jobs, one INSERT per table,
        # no UPDATE of attempts (none read was changed).
        assert seen.count("UPDATE jobs") == 1 and seen.count("INSERT INTO transitions") == 1
        assert seen.count("INSERT INTO attempts") == 1 and seen.count("UPDATE attempts") == 0
        with store.session() as s:
            jobs = {j.id: j for j in s.execute(select(Job)).scalars()}
            history = s.execute(select(Transition.job_id, Transition.to_status).where(Transition.at == 5.0)).all()
            attempts = s.execute(select(Attempt.job_id, Attempt.outcome)).all()
        assert [jobs[i].status for i in ids] == ["CANCELLED", "PROCESSING", "CANCELLED", "PROCESSING", "QUEUED"]
        assert jobs[ids[0]].finished_at == 5.0 and jobs[ids[1]].allocation == {"learners": [], "master_port": 1}
        assert sorted(history) == sorted([(ids[0], "CANCELLED"), (ids[1], "PROCESSING"), (ids[2], "CANCELLED"),
                                          (ids[3], "PROCESSING")])
        assert sorted(attempts) == sorted([(ids[1], "launching"), (ids[3], "launching")])
        # Every written row carries the batch's change number; the unchanged one is not re-read.
        delta = table.sync()
        assert sorted(delta.changed) == sorted([ids[1], ids[3]]) and sorted(delta.gone) == sorted([ids[0], ids[2]])
        assert table.seq == seq + 1 and {jobs[i].change_seq for i in ids[:4]} == {seq + 1}
        assert jobs[ids[4]].change_seq < seq + 1
    finally:
        store.close()


def test_a_failed_item_writes_nothing_of_its_own_and_the_others_commit(tmp_path: Path) -> None:
    store, ids = _store_with_jobs(tmp_path, 3)
    try:
        items = list(zip(ids, ["cancel", "fail", "start"], strict=True))
        batch = commit(store, 5.0, lambda b: (b.prefetch(ids), b.each(items, lambda bb, it: _move(bb, *it),
                                                                      lambda it: it[0])))
        assert batch.careful and batch.failed == [ids[1]]
        with store.session() as s:
            status = {i: st for i, st in s.execute(select(Job.id, Job.status))}
            history = s.execute(select(Transition.job_id).where(Transition.at == 5.0)).scalars().all()
        assert [status[i] for i in ids] == ["CANCELLED", "QUEUED", "PROCESSING"]
        assert sorted(history) == sorted([ids[0], ids[2]])  # the failed item's history row went with it
    finally:
        store.close()


def test_update_changed_writes_the_changed_columns_and_leaves_the_session(tmp_path: Path) -> None:
    store, ids = _store_with_jobs(tmp_path, 2)
    try:
        with store.session() as s:
            s.get_one(Job, ids[0]).allocation = {"learners": [], "master_port": 1}
        with store.session() as s:
            a, b = (s.get_one(Job, i) for i in ids)
            a.priority = 7
            a.allocation = None  # SQL NULL, not JSON null: "allocation IS NULL" says a job books nothing
            b.wait_reason = "quota"
            b.priority = b.priority  # not a change
            assert update_changed(s, [a, b], {"change_seq": 99}) == 2
            assert a not in s and b not in s
            assert update_changed(s, [], {"change_seq": 99}) == 0
        with store.session() as s:
            rows = {j.id: (j.priority, j.wait_reason, j.change_seq) for j in s.execute(select(Job)).scalars()}
        assert rows == {ids[0]: (7, "", 99), ids[1]: (0, "quota", 99)}
        with store.session() as s:
            unbooked = s.execute(text("SELECT id FROM jobs WHERE allocation IS NULL")).scalars()
            assert sorted(unbooked) == sorted(ids)
    finally:
        store.close()
