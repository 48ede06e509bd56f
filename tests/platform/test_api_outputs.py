"""The jobs listing's filters and keyset pages (10,000 jobs), the reports and results of a job, and /docs served
without a CDN: real HTTP to a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.docs import ASSET_NAMES
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.jobs import add_job, transition
from loadmaster.platform.store.models import Attempt, Job
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api

api = api_fixtures.api
sqlite_api = api_fixtures.sqlite_api


def _fill(a: Api, tenant: str, count: int, *, start: float = 1_000_000.0, names: tuple[str, ...] = ("train",),
          same_time_every: int = 1) -> list[str]:
    """`count` jobs of `tenant` written to the store directly (as the API would, much faster); submitted one a
    second apart, `same_time_every` of them at the same second (ties the keyset must break by id)."""
    with a.store.session() as s:
        tenant_id = s.scalars(text("SELECT id FROM tenants WHERE name = :n").bindparams(n=tenant)).one()
        ids = []
        for i in range(count):
            manifest = parse_manifest({"name": names[i % len(names)], "command": "true"})
            job = add_job(s, tenant_id, manifest, start + i // same_time_every)
            if i % 3 == 0:
                transition(s, job, JobStatus.CANCELLED, start + i, "cancelled")
            ids.append(job.id)
        return ids


def _walk(c: httpx.Client, **params: object) -> list[dict[str, object]]:
    """Every page of the listing, following next_cursor."""
    seen: list[dict[str, object]] = []
    before = None
    while True:
        r = c.get("/api/v1/jobs", params={**params, **({"before": before} if before else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        seen += page["jobs"]
        before = page["next_cursor"]
        if before is None:
            return seen


def test_keyset_pages_visit_every_job_once_newest_first(api: Api) -> None:
    token = api.tenant("pages")
    ids = _fill(api, "pages", 257, same_time_every=4, names=("resnet", "bert-large", "Bert-small"))
    with api.client(token) as c:
        jobs = _walk(c, limit=50)
        assert len(jobs) == 257 and {j["id"] for j in jobs} == set(ids)
        keys = [(j["submitted_at"], j["id"]) for j in jobs]
        assert keys == sorted(keys, reverse=True)
        # filters compose with the pages: state, a name's part in any case, an id's prefix
        cancelled = _walk(c, limit=7, status="CANCELLED")
        assert {j["id"] for j in cancelled} == set(ids[::3])
        berts = _walk(c, limit=10, name_contains="BERT")
        assert {j["name"] for j in berts} == {"bert-large", "Bert-small"} and len(berts) == 171
        assert _walk(c, name_contains="%") == [] and _walk(c, name_contains="_") == []  # no wildcards
        assert [j["id"] for j in _walk(c, id_prefix=ids[5])] == [ids[5]]
        # the old callers' offset paging still works
        r = c.get("/api/v1/jobs", params={"limit": 10, "offset": 250}).json()
        assert [j["id"] for j in r["jobs"]] == [j["id"] for j in jobs[250:]] and r["next_cursor"] is None


def test_listing_filters_keep_tenants_apart(api: Api) -> None:
    mine = api.tenant("mine")
    api.tenant("theirs")
    _fill(api, "theirs", 5)
    with api.client(mine) as c:
        assert _walk(c) == [] and _walk(c, name_contains="train") == []
    with api.admin() as c:
        assert len(_walk(c, tenant="theirs", limit=2)) == 5


@pytest.mark.parametrize(("params", "field"), [
    ({"before": "garbage"}, "before"),
    ({"before": "1.5_"}, "before"),
    ({"id_prefix": "j-../x"}, "id_prefix"),
    ({"name_contains": "x" * 200}, "name_contains"),
])
def test_bad_listing_parameters_name_the_field(sqlite_api: Api, params: dict[str, str], field: str) -> None:
    with sqlite_api.client(sqlite_api.tenant("bad")) as c:
        r = c.get("/api/v1/jobs", params=params)
    assert r.status_code == 422, r.text
    assert field in [p["field"] for p in r.json()["problems"]]


def test_ten_thousand_jobs_a_page_costs_its_rows_on_the_index(sqlite_api: Api) -> None:
    token = sqlite_api.tenant("big")
    _fill(sqlite_api, "big", 10_000)
    with sqlite_api.client(token) as c:
        first = c.get("/api/v1/jobs", params={"limit": 50}).json()
        start = time.perf_counter()
        deep = first
        for _ in range(150):  # 150 pages in: as cheap as the first
            deep = c.get("/api/v1/jobs", params={"limit": 50, "before": deep["next_cursor"]}).json()
        assert len(deep["jobs"]) == 50 and time.perf_counter() - start < 60
    with sqlite_api.store.session() as s:
        tenant_id = s.scalars(text("SELECT id FROM tenants WHERE name = 'big'")).one()
        plan = " ".join(str(row[-1]) for row in s.execute(text(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE tenant_id = :t AND (submitted_at, id) < (:s, :i) "
            "ORDER BY submitted_at DESC, id DESC LIMIT 51"), {"t": tenant_id, "s": 1e9, "i": "j-z"}))
    assert "ix_jobs_tenant_submitted" in plan and "TEMP B-TREE" not in plan, plan


# ------------------------------------------------------------------------------------------- reports, results


def _started(a: Api, token: str, learners: int = 2) -> str:
    with a.client(token) as c:
        job_id = str(c.post("/api/v1/jobs", json={"name": "r", "command": "true", "learners": learners}).json()["id"])
    with a.store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobStatus.PROCESSING, time.time(), "started")
        job.attempts = 1
        job.allocation = {"learners": [{"rank": r, "node": "n0", "gpu_ids": [r]} for r in range(learners)],
                          "master_port": 29500}
        s.add(Attempt(job_id=job_id, number=1, started_at=time.time(), allocation=job.allocation,
                      log_dir=str(a.ctx.dirs.logs(job_id, 1))))
    return job_id


def test_reports_are_read_incrementally_and_a_partial_line_waits(api: Api) -> None:
    token = api.tenant("charts")
    job_id = _started(api, token)
    path = api.ctx.dirs.reports(job_id, 1) / "rank-0.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"time": 1, "step": 1, "loss": 2.5}\nnot json\n[1, 2]\n{"time": 2, "step": 2, "lo')
    with api.client(token) as c:
        r = c.get(f"/api/v1/jobs/{job_id}/reports").json()
        assert r["attempt"] == 1 and [rec["step"] for rec in r["records"]] == [1]
        offset = r["next_offset"]
        assert offset < r["size"]  # the last line is not complete yet
        with path.open("a") as f:
            f.write('ss": 2.0, "samples_per_s": 100}\n')
        again = c.get(f"/api/v1/jobs/{job_id}/reports", params={"offset": offset}).json()
        assert again["records"] == [{"time": 2, "step": 2, "loss": 2.0, "samples_per_s": 100}]
        assert again["next_offset"] == again["size"]
        assert c.get(f"/api/v1/jobs/{job_id}/reports", params={"rank": 1}).json()["records"] == []  # none yet
        r = c.get(f"/api/v1/jobs/{job_id}/reports", params={"rank": 2})
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "rank"
        r = c.get(f"/api/v1/jobs/{job_id}/reports", params={"offset": 10**9})
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "offset"
        r = c.get(f"/api/v1/jobs/{job_id}/reports", params={"attempt": 7})
        assert r.status_code == 404
    with api.client(api.tenant("nosy")) as c:
        assert c.get(f"/api/v1/jobs/{job_id}/reports").status_code == 404


def test_reports_of_a_job_not_started_yet_are_empty(sqlite_api: Api) -> None:
    token = sqlite_api.tenant("early")
    with sqlite_api.client(token) as c:
        job_id = c.post("/api/v1/jobs", json={"name": "q", "command": "true"}).json()["id"]
        r = c.get(f"/api/v1/jobs/{job_id}/reports").json()
    assert r["attempt"] is None and r["records"] == []


def test_results_are_listed_and_downloaded_and_nothing_outside_them(api: Api, tmp_path: Path) -> None:
    token = api.tenant("results")
    job_id = _started(api, token, learners=1)
    root = api.ctx.dirs.results(job_id)
    (root / "plots").mkdir(parents=True)
    (root / "metrics.json").write_text(json.dumps({"accuracy": 0.97}))
    (root / "plots" / "loss curve.png").write_bytes(b"\x89PNG" + bytes(range(256)))
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (root / "link").symlink_to(secret)
    with api.client(token) as c:
        listing = c.get(f"/api/v1/jobs/{job_id}/results").json()
        assert [(f["path"], f["size"]) for f in listing["files"]] == [("metrics.json", 18),
                                                                      ("plots/loss curve.png", 260)]
        r = c.get(f"/api/v1/jobs/{job_id}/results/plots/loss curve.png")
        assert r.status_code == 200 and r.content == b"\x89PNG" + bytes(range(256))
        assert r.headers["content-type"] == "application/octet-stream"
        assert "attachment" in r.headers["content-disposition"]
        for bad in ("link", "../../../../etc/passwd", "%2e%2e/%2e%2e/secret.txt", "plots", "missing.txt"):
            r = c.get(f"/api/v1/jobs/{job_id}/results/{bad}")
            assert r.status_code == 404, (bad, r.status_code)
    with api.client(api.tenant("other")) as c:
        assert c.get(f"/api/v1/jobs/{job_id}/results").status_code == 404
        assert c.get(f"/api/v1/jobs/{job_id}/results/metrics.json").status_code == 404
    with api.client(token) as c:
        empty = _started(api, token, learners=1)
        assert c.get(f"/api/v1/jobs/{empty}/results").json()["files"] == []


def test_docs_are_served_without_a_cdn(sqlite_api: Api) -> None:
    with httpx.Client(base_url=sqlite_api.url, timeout=10) as c:
        page = c.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        assert "cdn" not in page.text and "https://" not in page.text.split("<body>")[0]
        for name in ASSET_NAMES:
            asset = c.get(f"/docs/assets/{name}")
            assert asset.status_code == 200 and len(asset.content) > 1000, name
        assert c.get("/docs/assets/../../etc/passwd").status_code == 404


def test_the_migration_made_the_listing_indexes(api: Api) -> None:
    from sqlalchemy import inspect

    found = {ix["name"]: ix["column_names"] for ix in inspect(api.store.engine).get_indexes("jobs")}
    assert found["ix_jobs_submitted"] == ["submitted_at", "id"]
    assert found["ix_jobs_tenant_submitted"] == ["tenant_id", "submitted_at", "id"]
    assert {ix.name for ix in Job.__table__.indexes} >= set(found)  # the models say the same
