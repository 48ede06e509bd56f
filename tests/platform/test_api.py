"""The HTTP API over real HTTP (uvicorn on a free port) on SQLite and on PostgreSQL: submission, listing,
showing, isolation between tenants, user requests on queued and running jobs, and tenant management."""

from __future__ import annotations

import time

from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Attempt, Job
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api, manifest

# The served API, as fixtures of this module.
api = api_fixtures.api
sqlite_api = api_fixtures.sqlite_api

YAML = {"content-type": "application/yaml"}


def _running(a: Api, job_id: str) -> None:
    """Move a job to PROCESSING in the store, as the control loop does when its learners start."""
    with a.store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobStatus.PROCESSING, time.time(), "started on n0")
        job.attempts = 1
        job.allocation = {"learners": [{"rank": 0, "node": "n0", "gpu_ids": [0, 1], "cpus": 2.0, "mem_gb": 4.0}],
                          "master_port": 29500}
        s.add(Attempt(job_id=job_id, number=1, started_at=time.time(), allocation=job.allocation,
                      log_dir=str(a.ctx.dirs.logs(job_id, 1))))


def test_submit_json_and_yaml_then_show_and_list(api: Api) -> None:
    with api.client(api.tenant("vision")) as c:
        r = c.post("/api/v1/jobs", json=manifest(learners=2, resources={"gpus": 2}, priority=5))
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["status"] == "QUEUED" and job["tenant"] == "vision" and job["gpus"] == 4
        text = "name: from-yaml\ncommand: python train.py --epochs 3\nenv:\n  SEED: '1'\n"
        r = c.post("/api/v1/jobs", content=text, headers=YAML)
        assert r.status_code == 201, r.text
        yaml_id = r.json()["id"]

        shown = c.get(f"/api/v1/jobs/{job['id']}").json()
        assert shown["manifest"]["resources"]["gpus"] == 2 and shown["priority"] == 5
        assert [(h["from_status"], h["to_status"], h["reason"]) for h in shown["history"]] == \
            [(None, "QUEUED", "submitted")]
        assert shown["attempt_history"] == [] and shown["allocation"] is None
        assert shown["progress"]["work_done_s"] == 0.0
        assert c.get(f"/api/v1/jobs/{yaml_id}").json()["manifest"]["env"] == {"SEED": "1"}

        listed = c.get("/api/v1/jobs").json()["jobs"]
        assert [j["id"] for j in listed] == [yaml_id, job["id"]]  # newest first
        assert [j["id"] for j in c.get("/api/v1/jobs", params={"name": "from-yaml"}).json()["jobs"]] == [yaml_id]
        assert c.get("/api/v1/jobs", params={"status": ["HALTED", "FAILED"]}).json()["jobs"] == []
        assert len(c.get("/api/v1/jobs", params={"limit": 1}).json()["jobs"]) == 1


def test_a_tenant_sees_only_its_own_jobs_and_the_admin_sees_all(api: Api) -> None:
    mine, theirs = api.tenant("vision"), api.tenant("speech")
    with api.client(mine) as a, api.client(theirs) as b, api.admin() as admin:
        job_id = a.post("/api/v1/jobs", json=manifest()).json()["id"]
        for method, path in [("GET", ""), ("GET", "/logs"), ("GET", "/logs/stream"), ("POST", "/cancel"),
                             ("POST", "/halt"), ("POST", "/resume")]:
            r = b.request(method, f"/api/v1/jobs/{job_id}{path}")
            assert r.status_code == 404, (path, r.text)
            assert r.json()["problems"][0]["field"] == "job_id"
        assert b.post(f"/api/v1/jobs/{job_id}/scale", json={"learners": 2}).status_code == 404
        # the same answer as for a job that does not exist: nothing leaks
        assert b.get("/api/v1/jobs/j-000000000000").json()["error"].startswith("no job 'j-000000000000'")
        assert b.get("/api/v1/jobs").json()["jobs"] == []
        assert b.get("/api/v1/queue").json()["entries"] == []
        assert a.get(f"/api/v1/jobs/{job_id}").json()["status"] == "QUEUED"  # untouched by the other tenant

        assert [j["id"] for j in admin.get("/api/v1/jobs").json()["jobs"]] == [job_id]
        assert admin.get("/api/v1/jobs", params={"tenant": "speech"}).json()["jobs"] == []
        assert admin.get(f"/api/v1/jobs/{job_id}").json()["tenant"] == "vision"
        # the admin submits for a tenant by name, and must name one
        assert admin.post("/api/v1/jobs", json=manifest(), params={"tenant": "speech"}).json()["tenant"] == "speech"
        r = admin.post("/api/v1/jobs", json=manifest())
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "tenant"
        assert a.post("/api/v1/jobs", json=manifest(), params={"tenant": "speech"}).status_code == 403


def test_cancel_halt_resume_of_a_queued_job_are_direct_transitions(api: Api) -> None:
    with api.client(api.tenant("vision")) as c:
        job_id = c.post("/api/v1/jobs", json=manifest()).json()["id"]
        assert c.post(f"/api/v1/jobs/{job_id}/halt").json()["status"] == "HALTED"
        assert c.post(f"/api/v1/jobs/{job_id}/halt").json()["status"] == "HALTED"  # idempotent
        assert c.post(f"/api/v1/jobs/{job_id}/resume").json()["status"] == "QUEUED"
        r = c.post(f"/api/v1/jobs/{job_id}/resume")
        assert r.status_code == 409 and "only a HALTED job" in r.json()["error"]
        assert c.post(f"/api/v1/jobs/{job_id}/cancel").json()["status"] == "CANCELLED"
        assert c.post(f"/api/v1/jobs/{job_id}/cancel").json()["status"] == "CANCELLED"
        for verb in ("halt", "resume"):
            assert c.post(f"/api/v1/jobs/{job_id}/{verb}").status_code == 409
        history = c.get(f"/api/v1/jobs/{job_id}").json()["history"]
        assert [(h["to_status"], h["reason"]) for h in history] == [
            ("QUEUED", "submitted"), ("HALTED", "halted by the user"), ("QUEUED", "resumed by the user"),
            ("CANCELLED", "cancelled by the user")]
        assert all(h["at"] > 0 for h in history)


def test_requests_on_a_running_job_are_flags_for_the_control_loop(api: Api) -> None:
    with api.client(api.tenant("vision")) as c:
        job_id = c.post("/api/v1/jobs", json=manifest(
            learners=2, elastic={"min_learners": 1, "max_learners": 4})).json()["id"]
        _running(api, job_id)
        r = c.post(f"/api/v1/jobs/{job_id}/halt").json()
        assert (r["status"], r["halt_requested"]) == ("PROCESSING", True)
        r = c.post(f"/api/v1/jobs/{job_id}/resume")
        assert r.status_code == 409 and "halt is still in progress" in r.json()["error"]
        r = c.post(f"/api/v1/jobs/{job_id}/scale", json={"learners": 3}).json()
        assert (r["status"], r["learners"], r["target_learners"]) == ("PROCESSING", 2, 3)
        r = c.post(f"/api/v1/jobs/{job_id}/cancel").json()
        assert (r["status"], r["cancel_requested"]) == ("PROCESSING", True)
        shown = c.get(f"/api/v1/jobs/{job_id}").json()
        assert shown["allocation"]["learners"][0]["node"] == "n0"
        assert shown["attempt_history"][0]["outcome"] == "running"
        cluster = c.get("/api/v1/cluster").json()
        n0 = next(n for n in cluster["nodes"] if n["name"] == "n0")
        assert (n0["gpus_used"], n0["gpus_free"], n0["jobs"]) == (2, 2, [job_id])
        assert cluster["gpus_used"] == 2 and cluster["running"][0]["id"] == job_id
    with api.client(api.tenant("speech")) as other:
        cluster = other.get("/api/v1/cluster").json()
        assert cluster["gpus_used"] == 2 and cluster["running"] == [] and cluster["other_running"] == 1


def test_scale_checks_elastic_bounds(sqlite_api: Api) -> None:
    a = sqlite_api
    with a.client(a.tenant("vision")) as c:
        # A well-formed size the job cannot take conflicts with the job (the schema cannot say): 409.
        fixed = c.post("/api/v1/jobs", json=manifest()).json()["id"]
        r = c.post(f"/api/v1/jobs/{fixed}/scale", json={"learners": 2})
        assert r.status_code == 409 and r.json()["problems"][0]["field"] == "learners"
        assert "not elastic" in r.json()["error"]
        elastic = c.post("/api/v1/jobs", json=manifest(learners=2, elastic={"min_learners": 1,
                                                                            "max_learners": 4})).json()["id"]
        r = c.post(f"/api/v1/jobs/{elastic}/scale", json={"learners": 5})
        assert r.status_code == 409 and "between elastic.min_learners (1) and elastic.max_learners (4)" in \
            r.json()["error"]
        scaled = c.post(f"/api/v1/jobs/{elastic}/scale", json={"learners": 4}).json()
        assert scaled["learners"] == 4 and scaled["target_learners"] == 4  # pinned: the scheduler starts it so
        for bad in ("many", "3", True, 2.5):  # what the schema calls an integer, strictly
            r = c.post(f"/api/v1/jobs/{elastic}/scale", json={"learners": bad})
            assert r.status_code == 422 and r.json()["problems"][0]["field"] == "learners", bad


def test_tenant_management_is_the_admins(api: Api) -> None:
    with api.admin() as admin:
        r = admin.post("/api/v1/tenants", json={"name": "vision", "gpus": 4, "borrow": 2})
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        assert r.json()["tenant"] == {"name": "vision", "gpu_quota": 4, "borrow_limit": 2,
                                      "created_at": r.json()["tenant"]["created_at"], "gpus_in_use": 0,
                                      "jobs_queued": 0, "jobs_running": 0, "roots": [], "os_user": None}
        r = admin.post("/api/v1/tenants", json={"name": "vision", "gpus": 1})
        assert r.status_code == 409 and r.json()["problems"][0]["field"] == "name"
        r = admin.post("/api/v1/tenants", json={"name": "Bad Name", "gpus": 1})
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "name"
        with api.client(token) as tenant:
            assert tenant.get("/api/v1/whoami").json() == {"admin": False, "tenant": "vision", "gpu_quota": 4,
                                                           "borrow_limit": 2, "user": "default"}
            # 4 + 2 GPUs at most: 8 never fits
            r = tenant.post("/api/v1/jobs", json=manifest(learners=2, resources={"gpus": 4}))
            assert r.status_code == 422 and "may hold at most 6 GPUs" in r.json()["error"]
            assert tenant.post("/api/v1/tenants", json={"name": "x", "gpus": 1}).status_code == 403
            assert tenant.patch("/api/v1/tenants/vision", json={"gpus": 100}).status_code == 403
            assert [t["name"] for t in tenant.get("/api/v1/tenants").json()["tenants"]] == ["vision"]
            r = admin.patch("/api/v1/tenants/vision", json={"gpus": 8, "borrow": None})
            assert (r.json()["gpu_quota"], r.json()["borrow_limit"]) == (8, None)
            # the new limits hold at once (no stale memo of the old ones)
            r = tenant.post("/api/v1/jobs", json=manifest(learners=2, resources={"gpus": 4}))
            assert r.status_code == 201, r.text
            listed = admin.get("/api/v1/tenants").json()["tenants"]
            assert [(t["name"], t["jobs_queued"]) for t in listed] == [("vision", 1)]
        second = admin.post("/api/v1/tenants/vision/tokens")
        assert second.status_code == 201
        with api.client(second.json()["token"]) as again:
            assert again.get("/api/v1/whoami").json()["tenant"] == "vision"
        assert admin.patch("/api/v1/tenants/ghost", json={"gpus": 1}).status_code == 404
        assert admin.get("/api/v1/whoami").json()["admin"] is True


def test_queue_without_a_scheduler_lists_queued_jobs_in_submission_order(sqlite_api: Api) -> None:
    a = sqlite_api
    with a.client(a.tenant("vision")) as c:
        ids = [c.post("/api/v1/jobs", json=manifest(name=f"j{i}")).json()["id"] for i in range(3)]
        c.post(f"/api/v1/jobs/{ids[1]}/halt")
        entries = c.get("/api/v1/queue").json()["entries"]
        assert [(e["job_id"], e["position"]) for e in entries] == [(ids[0], 1), (ids[2], 2)]
        assert all(e["estimated_start_at"] is None and e["wait_reason"] for e in entries)


def test_health_needs_no_token(sqlite_api: Api) -> None:
    with sqlite_api.client() as c:
        assert c.get("/health").json()["status"] == "ok"
        with sqlite_api.store.session() as s:  # and the API never wrote a job for it
            assert s.scalars(select(Job)).all() == []
