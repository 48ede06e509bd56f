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


def _moving(live: Live, token: str) -> tuple[str, str, str, str, str]:
    """Two servers of 4 GPUs, fragmented as above: `filler` (2 GPUs) on one, `small` (1 GPU, taking 3 s to stop)
    on the other; `wide` (4 GPUs) arrives and `small` is being moved next to the filler. Returns (filler, small,
    wide, the filler's node, small's first node) once small's stop is under way."""
    spread = {"strategy": "spread"}
    with live.client(token) as c:
        filler = c.post("/api/v1/jobs", json=manifest(name="filler", resources={"gpus": 2}, placement=spread,
                                                      command=learner("train", 300, 0.05))).json()["id"]
        live.wait(token, filler, "PROCESSING")
        small = c.post("/api/v1/jobs", json=manifest(name="small", placement=spread,
                                                     command=learner("slow-stop", 200, 0.05, 3.0))).json()["id"]
        live.wait(token, small, "PROCESSING")
        filler_node = c.get(f"/api/v1/jobs/{filler}").json()["allocation"]["learners"][0]["node"]
        small_node = c.get(f"/api/v1/jobs/{small}").json()["allocation"]["learners"][0]["node"]
        assert small_node != filler_node
        live.wait_for(lambda: (c.get(f"/api/v1/jobs/{small}").json()["progress"]["last_step"] or 0) >= 5,
                      "small's progress")
        wide = c.post("/api/v1/jobs", json=manifest(name="wide", resources={"gpus": 4},
                                                    command=learner("train", 10, 0.05))).json()["id"]
        live.wait_for(lambda: c.get(f"/api/v1/jobs/{small}").json()["attempt_history"][0]["outcome"] == "stopping",
                      "small's move to begin")
    return filler, small, wide, filler_node, small_node


def _tries(live: Live) -> dict[str, list[Attempt]]:
    with live.platform.store.session() as s:
        out: dict[str, list[Attempt]] = defaultdict(list)
        for a in s.scalars(select(Attempt).order_by(Attempt.job_id, Attempt.number)):
            s.expunge(a)
            out[a.job_id].append(a)
    return out


def test_a_moved_job_restarts_on_its_moves_target_which_nobody_takes_meanwhile(db_url: str, tmp_path: Path) -> None:
    """While `small` stops (3 s), `late` (2 GPUs) arrives: the filler's server has just 2 GPUs free, but one of
    them is small's target, held for it. So `late` waits for the wide gang's server, and small restarts on the
    GPUs decide() moved it to (before: small was requeued and `late` could take its target)."""
    live = start_platform(db_url, tmp_path / "data", migrate=True, grace_s=8.0)
    try:
        token = live.tenant("vision", gpus=8)
        filler, small, wide, filler_node, first_node = _moving(live, token)
        with live.client(token) as c:
            late = c.post("/api/v1/jobs", json=manifest(name="late", resources={"gpus": 2},
                                                        command=learner("train", 10, 0.05))).json()["id"]
        for job_id in (wide, late, small):
            assert live.wait(token, job_id, "COMPLETED", timeout_s=60)["failures"] == 0
        with live.client(token) as c:
            history = [h["reason"] for h in c.get(f"/api/v1/jobs/{small}").json()["history"]]
            c.post(f"/api/v1/jobs/{filler}/cancel")
        assert f"moved for {wide}" in history and f"restarting on {filler_node}, where it was moved" in history
        tries = _tries(live)
        moved = tries[small][1]
        assert [lr["node"] for lr in moved.allocation["learners"]] == [filler_node]
        [late_try], [wide_try] = tries[late], tries[wide]
        assert late_try.allocation["learners"][0]["node"] == first_node  # it waited for the gang's server
        assert late_try.started_at >= wide_try.ended_at - 1e-6 and moved.started_at < late_try.started_at
        live.wait(token, filler, "CANCELLED", "COMPLETED")
        assert gpu_overlaps(live) == []
        assert check_store(live.platform.store, settled=True) == []
    finally:
        live.platform.shutdown()


def test_a_moved_job_whose_target_is_drained_meanwhile_is_placed_anew(db_url: str, tmp_path: Path) -> None:
    """The filler's server is drained while `small` is being moved there: its target is stale, so small is not
    restarted there but placed like any other job (on the wide gang's server once that is free)."""
    live = start_platform(db_url, tmp_path / "data", migrate=True, grace_s=8.0)
    try:
        token = live.tenant("vision", gpus=8)
        filler, small, wide, filler_node, first_node = _moving(live, token)
        with live.client(live.admin_token) as admin:
            assert admin.post(f"/api/v1/cluster/nodes/{filler_node}/drain").status_code == 200
        drained_at = live.platform.loop.ctx.clock()
        for job_id in (wide, small):
            assert live.wait(token, job_id, "COMPLETED", timeout_s=60)["failures"] == 0
        with live.client(token) as c:
            history = [h["reason"] for h in c.get(f"/api/v1/jobs/{small}").json()["history"]]
            c.post(f"/api/v1/jobs/{filler}/cancel")
        assert f"restarting on {filler_node}, where it was moved" in history
        tries = _tries(live)
        assert len(tries[small]) == 2 and tries[small][1].allocation["learners"][0]["node"] == first_node
        assert tries[small][1].started_at >= tries[wide][0].ended_at - 1e-6
        landed = [(job, a.number) for job, attempts in tries.items() for a in attempts
                  if a.started_at > drained_at and a.allocation["learners"][0]["node"] == filler_node]
        assert landed == []  # nothing started on the drained server
        live.wait(token, filler, "CANCELLED", "COMPLETED")
        assert gpu_overlaps(live) == []
        assert check_store(live.platform.store, settled=True) == []
    finally:
        live.platform.shutdown()
