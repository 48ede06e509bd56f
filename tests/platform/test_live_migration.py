"""Migration on the live platform (`loadmaster server --migrate`): a real server (store, local executor, control
loop, HTTP API) with real learners that checkpoint and resume."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from sqlalchemy import select

from loadmaster.core.job import Allocation
from loadmaster.platform.control.loop import _move_reason
from loadmaster.platform.store.models import Attempt
from loadmaster.scheduling.plan import Migrate
from tests.platform.api_fixtures import Live, manifest, start_platform
from tests.platform.control_fixtures import learner
from tests.platform.invariants import check_store


def gpu_overlaps(live: Live) -> list[str]:
    """GPUs two attempts held at the same time (each attempt holds its GPUs from its start to its end)."""
    held: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    with live.platform.store.session() as s:
        for a in s.scalars(select(Attempt)):
            for lr in (a.allocation or {}).get("learners", ()):
                for gpu in lr["gpu_ids"]:
                    held[(lr["node"], int(gpu))].append((a.started_at, a.ended_at or float("inf"), a.job_id))
    out = []
    for gpu, spans in held.items():
        spans.sort()
        out += [f"{gpu}: {a[2]} and {b[2]}" for a, b in pairwise(spans) if b[0] < a[1] - 1e-6]
    return out


def test_a_wide_gang_waiting_on_fragmentation_starts_once_a_small_job_is_moved(db_url: str, tmp_path: Path) -> None:
    """Two servers of 4 GPUs: `filler` (2 GPUs) and `small` (1 GPU) are spread over both, so 5 GPUs are free but
    neither server has 4. `wide` (one learner of 4 GPUs) waits on fragmentation; with --migrate the loop moves
    `small` (the job on the server closest to empty) to the other server, `wide` starts on the emptied one,
    and `small` resumes from its checkpoint and completes."""
    live = start_platform(db_url, tmp_path / "data", migrate=True)
    try:
        token = live.tenant("vision", gpus=8)
        spread = {"strategy": "spread"}
        with live.client(token) as c:
            filler = c.post("/api/v1/jobs", json=manifest(name="filler", resources={"gpus": 2}, placement=spread,
                                                          command=learner("train", 300, 0.05))).json()["id"]
            live.wait(token, filler, "PROCESSING")
            small = c.post("/api/v1/jobs", json=manifest(name="small", placement=spread,
                                                         command=learner("train", 200, 0.05))).json()["id"]
            live.wait(token, small, "PROCESSING")
            first_node = c.get(f"/api/v1/jobs/{small}").json()["allocation"]["learners"][0]["node"]
            filler_node = c.get(f"/api/v1/jobs/{filler}").json()["allocation"]["learners"][0]["node"]
            assert first_node != filler_node  # fragmented: 2 + 3 GPUs free
            # Let `small` make progress (and checkpoint when stopped) before the gang arrives.
            live.wait_for(lambda: (c.get(f"/api/v1/jobs/{small}").json()["progress"]["last_step"] or 0) >= 5,
                          "small's progress")
            wide = c.post("/api/v1/jobs", json=manifest(name="wide", resources={"gpus": 4},
                                                        command=learner("train", 10, 0.05))).json()["id"]
            done = live.wait(token, wide, "COMPLETED", timeout_s=60)
            assert done["attempts"] == 1
            moved = c.get(f"/api/v1/jobs/{small}").json()
            assert [h["reason"] for h in moved["history"]].count(f"moved for {wide}") == 1, moved["history"]
            assert moved["preemptions"] == 1
            small_done = live.wait(token, small, "COMPLETED", timeout_s=60)
            assert small_done["attempts"] == 2 and small_done["failures"] == 0
            filler_job = c.get(f"/api/v1/jobs/{filler}").json()
            assert filler_job["preemptions"] == 0 and filler_job["attempts"] == 1  # the filler never moved
        start, end, attempt = (live.platform.loop.ctx.dirs.results(small) / "out.txt").read_text().split()
        assert int(start) >= 5 and end == "200" and attempt == "2"  # resumed from its checkpoint
        with live.platform.store.session() as s:
            tries = {a.number: a for a in s.scalars(select(Attempt).where(Attempt.job_id == small))}
            [wide_try] = s.scalars(select(Attempt).where(Attempt.job_id == wide))
        assert tries[2].allocation["learners"][0]["node"] == filler_node  # moved next to the filler
        assert wide_try.allocation["learners"][0]["node"] == first_node  # the gang got the emptied server
        assert tries[1].ended_at is not None and wide_try.started_at >= tries[1].ended_at - 1e-6
        assert gpu_overlaps(live) == []
        assert check_store(live.platform.store, settled=True) == []
    finally:
        live.platform.shutdown()


def test_without_migrate_the_wide_gang_waits_on_fragmentation(sqlite_url: str, tmp_path: Path) -> None:
    live = start_platform(sqlite_url, tmp_path / "data")
    try:
        token = live.tenant("vision", gpus=8)
        spread = {"strategy": "spread"}
        with live.client(token) as c:
            ids = [c.post("/api/v1/jobs", json=manifest(name=n, resources={"gpus": g}, placement=spread,
                                                        command=["sleep", "60"])).json()["id"]
                   for n, g in (("filler", 2), ("small", 1))]
            for job_id in ids:
                live.wait(token, job_id, "PROCESSING")
            wide = c.post("/api/v1/jobs", json=manifest(name="wide", resources={"gpus": 4},
                                                        command=["true"])).json()["id"]
            live.wait_for(lambda: c.get(f"/api/v1/jobs/{wide}").json()["wait_reason"] != "", "a wait reason")
            job = c.get(f"/api/v1/jobs/{wide}").json()
            assert job["status"] == "QUEUED" and "fragment" in job["wait_reason"], job["wait_reason"]
            assert all(c.get(f"/api/v1/jobs/{j}").json()["preemptions"] == 0 for j in ids)
    finally:
        live.platform.shutdown()


def test_a_move_says_whom_it_is_for() -> None:
    # A defragmenting move names the job it makes room for; a re-auction's move (no for_job) says why it moved
    # instead of "moved for " with nothing after it.
    where = Allocation("a", (0,), 1, 1.0, 1.0)
    assert _move_reason(Migrate("a", where, for_job="wide")) == "moved for wide"
    assert _move_reason(Migrate("a", where)) == "moved to GPUs it runs faster on (re-auction)"
