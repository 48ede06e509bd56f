"""Logs per attempt and rank: the tail, and following (server-sent events) until the attempt ends.

The log files are written where the executor writes them (layout.JobDirs) and the attempt is recorded in
the store as the control loop records it; the end-to-end run with real learners is in test_server_e2e.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

from loadmaster.core.job import JobStatus
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Attempt, Job
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api, manifest

# The served API, as fixtures of this module.
api = api_fixtures.api
sqlite_api = api_fixtures.sqlite_api


def _start_attempt(a: Api, job_id: str, number: int, ranks: int) -> Path:
    with a.store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        if job.status != JobStatus.PROCESSING:
            transition(s, job, JobStatus.PROCESSING, time.time(), "started")
        learners = [{"rank": r, "node": "n0", "gpu_ids": [r], "cpus": 1.0, "mem_gb": 1.0} for r in range(ranks)]
        log_dir = a.ctx.dirs.logs(job_id, number)
        s.add(Attempt(job_id=job_id, number=number, started_at=time.time(), allocation={"learners": learners},
                      log_dir=str(log_dir)))
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


def _end_attempt(a: Api, job_id: str, number: int, status: JobStatus) -> None:
    with a.store.session() as s:
        job = s.get(Job, job_id)
        attempt = s.query(Attempt).filter_by(job_id=job_id, number=number).one()
        assert job is not None
        attempt.ended_at, attempt.outcome, attempt.exit_codes = time.time(), "succeeded", [[0, 0], [1, 0]]
        transition(s, job, status, time.time(), "all learners exited 0")


def _events(response: httpx.Response) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    kind = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            out.append((kind, json.loads(line[6:])))
    return out


def test_logs_per_attempt_and_rank_with_tail(api: Api) -> None:
    with api.client(api.tenant("vision")) as c:
        job_id = c.post("/api/v1/jobs", json=manifest(learners=2)).json()["id"]
        assert c.get(f"/api/v1/jobs/{job_id}/logs").json() == {"job_id": job_id, "attempt": None, "ranks": []}
        logs = _start_attempt(api, job_id, 1, ranks=2)
        (logs / "rank-0.log").write_text("".join(f"r0 line {i}\n" for i in range(100)))
        (logs / "rank-1.log").write_text("r1 only line, no newline yet")
        out = c.get(f"/api/v1/jobs/{job_id}/logs").json()
        assert out["attempt"] == 1 and [r["rank"] for r in out["ranks"]] == [0, 1]
        assert len(out["ranks"][0]["lines"]) == 100 and out["ranks"][0]["truncated"] is False
        assert out["ranks"][1]["lines"] == ["r1 only line, no newline yet"]
        tail = c.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 0, "tail": 3}).json()
        assert tail["ranks"] == [{"rank": 0, "lines": ["r0 line 97", "r0 line 98", "r0 line 99"], "truncated": True}]
        r = c.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 5})
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "rank"
        r = c.get(f"/api/v1/jobs/{job_id}/logs", params={"attempt": 2})
        assert r.status_code == 404 and r.json()["problems"][0]["field"] == "attempt"
        # a second attempt: the default is the latest, --attempt reads an earlier one
        _start_attempt(api, job_id, 2, ranks=2)
        (api.ctx.dirs.logs(job_id, 2) / "rank-0.log").write_text("second attempt\n")
        assert c.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 0}).json()["ranks"][0]["lines"] == \
            ["second attempt"]
        assert c.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": 0, "attempt": 1,
                                                            "tail": 1}).json()["ranks"][0]["lines"] == ["r0 line 99"]


def test_follow_streams_new_lines_until_the_attempt_ends(sqlite_api: Api) -> None:
    a = sqlite_api
    with a.client(a.tenant("vision")) as c:
        job_id = c.post("/api/v1/jobs", json=manifest(learners=2)).json()["id"]
        events: list[tuple[str, object]] = []

        def follow() -> None:  # started before the attempt exists: it waits for it
            with c.stream("GET", f"/api/v1/jobs/{job_id}/logs/stream", params={"attempt": 1, "after": 0}) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                events.extend(_events(r))

        reader = threading.Thread(target=follow)
        reader.start()
        time.sleep(0.3)
        logs = _start_attempt(a, job_id, 1, ranks=2)
        with (logs / "rank-0.log").open("a") as r0, (logs / "rank-1.log").open("a") as r1:
            for i in range(5):
                r0.write(f"step {i}\n")
                r0.flush()
                r1.write(f"rank1 {i}\n")
                r1.flush()
                time.sleep(0.1)
            r0.write("last words without newline")
        _end_attempt(a, job_id, 1, JobStatus.COMPLETED)
        reader.join(timeout=10)
        assert not reader.is_alive(), "the stream did not end with the attempt"
    statuses = [(d["seq"], d["to_status"]) for k, d in events if k == "status"]  # type: ignore[index]
    assert statuses == [(1, "QUEUED"), (2, "PROCESSING"), (3, "COMPLETED")]  # after=0: the whole history
    events = [e for e in events if e[0] != "status"]
    assert events[0] == ("attempt", {"attempt": 1, "ranks": [0, 1]})
    assert events[-1] == ("end", {"attempt": 1, "outcome": "succeeded", "job_status": "COMPLETED",
                                  "transitions": 3})
    lines: dict[int, list[str]] = {0: [], 1: []}
    for kind, data in events:
        if kind == "log":
            assert isinstance(data, dict)
            lines[data["rank"]].extend(data["lines"])
    assert lines[0] == [f"step {i}" for i in range(5)] + ["last words without newline"]
    assert lines[1] == [f"rank1 {i}" for i in range(5)]


def test_follow_with_tail_and_rank_of_an_ended_attempt(sqlite_api: Api) -> None:
    a = sqlite_api
    with a.client(a.tenant("vision")) as c:
        job_id = c.post("/api/v1/jobs", json=manifest(learners=2)).json()["id"]
        logs = _start_attempt(a, job_id, 1, ranks=2)
        (logs / "rank-1.log").write_text("a\nb\nc\n")
        _end_attempt(a, job_id, 1, JobStatus.COMPLETED)
        with c.stream("GET", f"/api/v1/jobs/{job_id}/logs/stream", params={"rank": 1, "tail": 2}) as r:
            events = _events(r)
        assert events == [("attempt", {"attempt": 1, "ranks": [1]}), ("log", {"rank": 1, "lines": ["b", "c"]}),
                          ("end", {"attempt": 1, "outcome": "succeeded", "job_status": "COMPLETED",
                                   "transitions": 3})]
        # a job that ended without ever starting: the stream says so and ends
        other = c.post("/api/v1/jobs", json=manifest()).json()["id"]
        c.post(f"/api/v1/jobs/{other}/cancel")
        with c.stream("GET", f"/api/v1/jobs/{other}/logs/stream") as r:
            assert _events(r) == [("end", {"attempt": None, "outcome": "none", "job_status": "CANCELLED",
                                           "transitions": 2})]
        # resuming status events after the first one: the cancellation only
        with c.stream("GET", f"/api/v1/jobs/{other}/logs/stream", params={"after": 1}) as r:
            kinds = [(k, d.get("to_status") if isinstance(d, dict) else None) for k, d in _events(r)]
        assert kinds == [("status", "CANCELLED"), ("end", None)]


def test_tail_and_follower_on_files(tmp_path: Path) -> None:
    from loadmaster.platform.api.logfiles import Follower, tail

    log = tmp_path / "rank-0.log"
    assert tail(log, 5) == ([], False, 0)  # not written yet
    lines = [f"line {i} " + "x" * 100 for i in range(5000)]  # ~0.5 MB: several blocks read backwards
    log.write_text("\n".join(lines) + "\n")
    last, truncated, size = tail(log, 3)
    assert last == lines[-3:] and truncated and size == log.stat().st_size
    assert tail(log, 0)[0] == []
    assert tail(log, None)[0] == lines
    assert tail(log, 10_000) == (lines, False, size)

    f = Follower(log, size)
    assert f.read() == []
    with log.open("a") as out:
        out.write("partial")
        out.flush()
        assert f.read() == []  # a fragment waits for its newline
        out.write(" now whole\nnext")
    assert f.read() == ["partial now whole"]
    assert f.read(final=True) == ["next"]  # the writer exited: the fragment is a line
