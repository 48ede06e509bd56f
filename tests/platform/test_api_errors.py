"""Bad input gets a 4xx JSON answer naming the field and the fix: never a 500, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api, manifest

# The served API, as fixtures of this module.
sqlite_api = api_fixtures.sqlite_api

YAML = {"content-type": "application/yaml"}


@pytest.mark.parametrize(("body", "status", "field", "words"), [
    (manifest(gpus=2), 422, "gpus", "unknown field"),
    (manifest(resources={"gpus": -1}), 422, "resources.gpus", "greater than or equal to 0"),
    (manifest(resources={"gpus": 65}), 422, "resources.gpus", "less than or equal to 64"),
    (manifest(resources={"memory_gb": 0}), 422, "resources.memory_gb", "greater than 0"),
    (manifest(learners=0), 422, "learners", "greater than or equal to 1"),
    ({"name": "no-command"}, 422, "command", "field required"),
    (manifest(command=""), 422, "command", "command is empty"),
    (manifest(env={"RANK": "3"}), 422, "env", "set by loadmaster"),
    (manifest(elastic={"min_learners": 3, "max_learners": 2}), 422, "elastic", "min_learners must be <="),
    # fits the manifest's limits, never fits the 2 x 4-GPU cluster: rejected at submission
    (manifest(resources={"gpus": 8}), 422, "resources.gpus", "largest server has 4"),
    (manifest(learners=3, resources={"gpus": 4}), 422, "learners", "the cluster has 8"),
    (manifest(resources={"cpus": 32}), 422, "resources.cpus", "at most 16 CPUs"),
    ([1, 2], 400, "body", "a manifest is a mapping"),
])
def test_manifest_problems_name_the_field(sqlite_api: Api, body: Any, status: int, field: str, words: str) -> None:
    with sqlite_api.client(sqlite_api.tenant("vision")) as c:
        r = c.post("/api/v1/jobs", json=body)
    assert r.status_code == status, r.text
    answer = r.json()
    assert answer["problems"][0]["field"] == field
    assert words in answer["problems"][0]["message"]
    assert field in answer["error"]


@pytest.mark.parametrize(("content", "headers", "status", "words"), [
    ("name: x\ncommand: [python\n", YAML, 400, "not valid YAML or JSON at line 3"),
    ("{\"name\": \"x\",", {"content-type": "application/json"}, 400, "not valid JSON at line 1"),
    ("", {"content-type": "application/json"}, 400, "the body is empty"),
    ("name: x", {"content-type": "text/csv"}, 415, "application/yaml"),
    ("name: x\ncommand: run\nresources: {gpu: 1}\n", YAML, 422, "resources.gpu: unknown field"),
    (b"\xff\xfe", {"content-type": "application/json"}, 400, "not UTF-8"),
])
def test_unreadable_bodies(sqlite_api: Api, content: str | bytes, headers: dict[str, str], status: int,
                           words: str) -> None:
    with sqlite_api.client(sqlite_api.tenant("vision")) as c:
        r = c.post("/api/v1/jobs", content=content, headers=headers)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_a_huge_body_is_refused(sqlite_api: Api) -> None:
    big = json.dumps(manifest(env={f"V{i}": "x" * 1000 for i in range(2000)}))
    with sqlite_api.client(sqlite_api.tenant("vision")) as c:
        r = c.post("/api/v1/jobs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than the limit" in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused once the limit is passed, not read whole
        yield b'{"name": "x", "command": "'
        for _ in range(4096):
            yield b"x" * 1024
        yield b'"}'

    with sqlite_api.client(sqlite_api.tenant("speech")) as c:
        r = c.post("/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_routes_methods_queries_and_tokens(sqlite_api: Api) -> None:
    with sqlite_api.client(sqlite_api.tenant("vision")) as c, sqlite_api.client() as anonymous:
        r = c.get("/api/v1/nothing")
        assert r.status_code == 404 and "no such endpoint" in r.json()["error"]
        r = c.delete("/api/v1/jobs")
        assert r.status_code == 405 and r.headers["allow"] == "GET, POST" and "it takes GET, POST" in r.json()["error"]
        r = c.get("/api/v1/jobs", params={"limit": "lots"})
        assert r.status_code == 422 and r.json()["problems"][0]["field"] == "limit"
        r = c.get("/api/v1/jobs", params={"status": "SLEEPING"})
        assert r.status_code == 422 and r.json()["problems"][0]["field"].startswith("status")
        assert "QUEUED" in r.json()["problems"][0]["message"]
        r = c.post("/api/v1/jobs/j-x/scale", content="{", headers={"content-type": "application/json"})
        assert r.status_code == 422 and "not valid JSON" in r.json()["error"]
        r = anonymous.get("/api/v1/jobs")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "LOADMASTER_TOKEN" in r.json()["error"]
        r = anonymous.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401 and "tenant create" in r.json()["error"]
        for response in (r,):
            assert "Traceback" not in response.text


@pytest.mark.parametrize(("body", "kind", "status", "field", "words"), [
    # What no process can be given: refused at once, not accepted to fail at every launch.
    (manifest(command=["echo", "x" * 200_000]), "json", 422, "command", "per argument"),
    (manifest(command=["echo", *(["x" * 100_000] * 3)]), "json", 422, "command", "command line is"),
    (manifest(env={"BIG": "x" * 200_000}), "json", 422, "env", "per variable"),
    # Nested thousands deep: refused before any parser recurses through it.
    ("command: " + "[" * 10_000 + "]" * 10_000, "yaml", 400, "body", "nested 10000 levels deep"),
    ("name: x\ncommand:\n" + "- " * 5_000 + "true", "yaml", 400, "body", "nested"),
])
def test_request_limits_are_checked_before_the_costly_steps(sqlite_api: Api, body: Any, kind: str, status: int,
                                                            field: str, words: str) -> None:
    import time

    with sqlite_api.client(sqlite_api.tenant("vision")) as c:
        started = time.perf_counter()
        if kind == "json":
            r = c.post("/api/v1/jobs", json=body)
        else:
            r = c.post("/api/v1/jobs", content=body.encode(), headers=YAML)
        took = time.perf_counter() - started
    assert r.status_code == status, r.text
    assert r.json()["problems"][0]["field"] == field and words in r.json()["error"], r.json()
    assert took < 1.0, took  # the server spent milliseconds on it, not seconds
