"""Bad input over real HTTP to a real `loadmaster server` process (SQLite and PostgreSQL): every malformed
manifest, unknown field, negative or oversized resource, missing command, non-UTF-8 or huge body gets a 4xx
JSON answer that names the field; never a 500, never a traceback; and the stored jobs are the same after."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import PY, Server, pg_database, running_server, write_manifest

JSON = {"content-type": "application/json"}
YAML = {"content-type": "application/yaml"}
SMALL = {"cpus": 0.1, "memory_gb": 0.1}


def ok(**fields: Any) -> dict[str, Any]:
    return {"name": "fine", "resources": {"gpus": 1, **SMALL}, "command": [PY, "-c", "pass"], **fields}


def huge_chunks() -> Iterator[bytes]:
    """A 3 MB manifest sent without a Content-Length (chunked): the limit must hold without one too."""
    yield b'{"name": "big", "command": ["python"], "env": {"BIG": "'
    for _ in range(300):
        yield b"x" * 10_000
    yield b'"}}'


# (label, body: JSON-able, bytes or str, headers, expected status, field named in problems[0])
CASES: list[tuple[str, Any, dict[str, str], int, str]] = [
    ("malformed YAML", "name: x\ncommand: [python\n", YAML, 400, "body"),
    ("malformed JSON", '{"name": "x",', JSON, 400, "body"),
    ("not a mapping", "[1, 2, 3]", JSON, 400, "body"),
    ("a YAML scalar", "just words", YAML, 400, "body"),
    ("a python tag", "name: !!python/object/apply:os.system ['true']\ncommand: [x]\n", YAML, 400, "body"),
    ("unknown field", ok(gpus=2), JSON, 422, "gpus"),
    ("unknown nested field", ok(resources={"gpu": 1}), JSON, 422, "resources.gpu"),
    ("unknown field in YAML", "name: x\ncommand: run\nretry: {polcy: never}\n", YAML, 422, "retry.polcy"),
    ("negative gpus", ok(resources={"gpus": -1}), JSON, 422, "resources.gpus"),
    ("negative cpus", ok(resources={"cpus": -2}), JSON, 422, "resources.cpus"),
    ("negative memory", ok(resources={"memory_gb": -1}), JSON, 422, "resources.memory_gb"),
    ("negative learners", ok(learners=-1), JSON, 422, "learners"),
    ("negative runtime", ok(max_runtime_s=-5), JSON, 422, "max_runtime_s"),
    ("oversized gpus", ok(resources={"gpus": 65}), JSON, 422, "resources.gpus"),
    ("oversized memory", ok(resources={"memory_gb": 1e9}), JSON, 422, "resources.memory_gb"),
    ("oversized learners", ok(learners=100_000), JSON, 422, "learners"),
    ("infinite learners", '{"name": "x", "command": ["x"], "learners": 1e999}', JSON, 422, "learners"),
    # More digits than Python converts to an int (sys.int_max_str_digits): the decoder itself refuses.
    ("a huge integer", '{"name": "x", "command": ["x"], "learners": ' + "9" * 5000 + "}", JSON, 400, "body"),
    ("a huge integer in YAML", "name: x\ncommand: [x]\nlearners: " + "9" * 5000 + "\n", YAML, 400, "body"),
    ("NaN cpus", '{"name": "x", "command": ["x"], "resources": {"cpus": NaN}}', JSON, 422, "resources.cpus"),
    ("gpus beyond any server", ok(resources={"gpus": 8, **SMALL}), JSON, 422, "resources.gpus"),
    ("more GPUs than the cluster", ok(learners=3, resources={"gpus": 4, **SMALL}), JSON, 422, "learners"),
    ("missing command", {"name": "x"}, JSON, 422, "command"),
    ("empty command", ok(command=""), JSON, 422, "command"),
    ("empty argv", ok(command=[]), JSON, 422, "command"),
    ("a number as command", ok(command=5), JSON, 422, "command"),
    ("missing name", {"command": ["x"]}, JSON, 422, "name"),
    ("a reserved env", ok(env={"RANK": "3"}), JSON, 422, "env"),
    ("a nested env value", ok(env={"A": {"b": 1}}), JSON, 422, "env.A"),
    ("a bad retry policy", ok(retry={"policy": "sometimes"}), JSON, 422, "retry.policy"),
    ("non-UTF-8", b'{"name": "caf\xe9", "command": ["x"]}', JSON, 400, "body"),
    ("empty body", b"", JSON, 400, "body"),
    ("huge body", json.dumps(ok(env={f"V{i}": "x" * 1000 for i in range(3000)})), JSON, 413, "body"),
    ("huge chunked body", huge_chunks, JSON, 413, "body"),
    ("deeply nested JSON", "[" * 100_000 + "]" * 100_000, JSON, 400, "body"),
    ("deeply nested YAML", "[" * 100_000 + "]" * 100_000, YAML, 400, "body"),
    ("an unpaired surrogate", '{"name": "x", "command": ["python", "\\ud800"]}', JSON, 422, "command.1"),
    ("an unpaired surrogate in env", '{"name": "x", "command": ["x"], "env": {"A": "\\udfff"}}', JSON, 422, "env.A"),
    ("a NUL byte", '{"name": "x", "command": ["python", "a\\u0000b"]}', JSON, 422, "command.1"),
    ("a NUL byte in YAML", 'name: x\ncommand: [x]\nworkdir: "/tmp/\\0"\n', YAML, 422, "workdir"),
    ("unsupported Content-Type", "name: x\ncommand: [x]\n", {"content-type": "text/csv"}, 415, "Content-Type"),
]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root: Path = tmp_path_factory.mktemp(f"bad-input-{request.param}")
    with contextlib.ExitStack() as stack:
        db = f"sqlite:///{root / 'loadmaster.db'}" if request.param == "sqlite" else \
            stack.enter_context(pg_database())
        yield stack.enter_context(running_server(db, root))


@pytest.fixture(scope="module")
def token(server: Server) -> str:
    return server.tenant("careless", gpus=8)


@pytest.fixture(scope="module")
def stored(server: Server, token: str) -> list[dict[str, Any]]:
    """One good job, run to its end: what is stored before any bad input arrives."""
    with server.http(token) as c:
        r = c.post("/api/v1/jobs", json=ok())
        assert r.status_code == 201, r.text
    server.wait_status(r.json()["id"], "COMPLETED", timeout_s=60)
    return snapshot(server)


def snapshot(server: Server) -> list[dict[str, Any]]:
    return [server.job(j["id"]) for j in server.jobs()]


def send(server: Server, token: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    if callable(body):
        content: Any = body()
    elif isinstance(body, bytes | str):
        content = body
    else:
        content = json.dumps(body)
    with server.http(token) as c:
        return c.post("/api/v1/jobs", content=content, headers=headers)


@pytest.mark.parametrize(("label", "body", "headers", "status", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_manifest_is_a_4xx_naming_the_field(server: Server, token: str, stored: list[dict[str, Any]],
                                                label: str, body: Any, headers: dict[str, str], status: int,
                                                field: str) -> None:
    r = send(server, token, body, headers)
    assert r.status_code == status, f"{label}: {r.status_code} {r.text[:500]}"
    answer = r.json()
    assert answer["problems"], answer
    # A union's member may follow the field's name (command.list[str]): the field is named all the same.
    assert answer["problems"][0]["field"].startswith(field), answer
    assert field in answer["error"] or field == "body", answer
    assert "Traceback" not in r.text
    assert snapshot(server) == stored  # nothing was stored, nothing changed


def test_other_bad_requests_are_4xx_too(server: Server, token: str, stored: list[dict[str, Any]]) -> None:
    job_id = stored[0]["id"]
    with server.http(token) as c:
        checks = [
            (c.post(f"/api/v1/jobs/{job_id}/scale", json={"learners": -1}), 422, "learners"),
            (c.post(f"/api/v1/jobs/{job_id}/scale", content=b"\xff", headers=JSON), 400, "body"),
            (c.post(f"/api/v1/jobs/{job_id}/halt"), 409, None),  # it has ended
            (c.get("/api/v1/jobs", params={"limit": -3}), 422, "limit"),
            (c.get("/api/v1/jobs", params={"status": "SLEEPING"}), 422, "status"),
            (c.get("/api/v1/jobs/" + "x" * 5000), 422, "job_id"),
            (c.get(f"/api/v1/jobs/{job_id}/logs", params={"rank": -1}), 422, "rank"),
            (c.post("/api/v1/tenants", json={"name": "x", "gpus": 1}), 403, None),  # a tenant is not the admin
        ]
    with server.http() as admin:
        checks += [
            (admin.post("/api/v1/tenants", json={"name": "Bad Name!", "gpus": 1}), 422, "name"),
            (admin.post("/api/v1/tenants", json={"name": "neg", "gpus": -1}), 422, "gpus"),
            (admin.post("/api/v1/tenants", json={"name": "big", "gpus": 10**12}), 422, "gpus"),
            (admin.post("/api/v1/jobs", json=ok()), 422, "tenant"),  # the admin submits for a named tenant
        ]
    for r, status, field in checks:
        assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:300]}"
        if field is not None:
            assert r.json()["problems"][0]["field"].startswith(field), r.text
    assert snapshot(server) == stored


def test_the_cli_says_what_is_wrong_in_one_line(server: Server, token: str, stored: list[dict[str, Any]],
                                                tmp_path: Path) -> None:
    bad = write_manifest(tmp_path / "bad.yaml", ok(resources={"gpus": -1}))
    done = server.cli("job", "submit", str(bad), token=token)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "resources.gpus" in done.stderr and "Traceback" not in done.stderr + done.stdout, done.stderr
    assert snapshot(server) == stored


def test_the_server_logged_no_internal_error(server: Server, token: str, stored: list[dict[str, Any]]) -> None:
    """Runs after the others of its server (module order): nothing reached the catch-all 500 handler."""
    log = server.log()
    assert "unhandled error" not in log and "Traceback" not in log, log[-5000:]
