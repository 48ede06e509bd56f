"""Tenants kept apart below the API, with real processes and the real server (`loadmaster server`).

The cross-tenant matrix: tenant B runs a job that writes a checkpoint, a result and a file in its area;
tenant A's job then tries to read and write all of them, B's job and log directories, the server's
environment and database, /etc/shadow, and to signal B's learner (isolation_attack.py), and A tries through
the API to have the server copy B's files in or write over them (data/results/workdir pointing at B, `..`,
links left in its own area). Every attempt must fail, B's job must still run, and B's files must be
byte-identical afterwards. Run twice: the server as root (learners as tenants' own users, in bubblewrap) and
as an unprivileged user (learners as the server's user, in bubblewrap): the non-root fallback.

Also here: path escapes in every manifest field rejected at submission; tokens revoked, rotated or expired
fail at their next request; a server without a sandbox refuses a second tenant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadmaster.platform.executors.sandbox import find_bwrap
from tests.platform.api_fixtures import Live, sqlite_live  # noqa: F401
from tests.platform.process_output import ProcessOutput

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
ADMIN = "isolation-admin-secret-0123456789"
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # tenants' users can run it (the test's own Python may be under /root)

needs_root_and_bwrap = pytest.mark.skipif(os.geteuid() != 0 or find_bwrap() is None or not Path(SYSTEM_PYTHON).exists(),
                                          reason="the matrix needs root (to make users), bubblewrap and "
                                                 "/usr/bin/python3")


class Server(ProcessOutput):
    """`loadmaster server` in a process of its own, as root or as an unprivileged user."""

    url: str = ""

    @classmethod
    def start(cls, data: Path, *, as_user: int | None) -> Server:
        args = ["-m", "loadmaster.cli.main", "server", "--data-dir", str(data), "--nodes", "1x4", "--port", "0",
                "--tick", "0.1", "--grace", "2", "--sandbox", "auto"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LOADMASTER_ADMIN_TOKEN": ADMIN,
               "AWS_SECRET_ACCESS_KEY": "server-canary-secret"}
        if as_user is None:
            argv = [sys.executable, *args]
        else:  # the system Python with this checkout's packages: the test's own may be unreadable to the user
            site = [p for p in sys.path if p.endswith("site-packages")]
            env["PYTHONPATH"] = ":".join([str(SRC), *site])
            argv = ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", SYSTEM_PYTHON, *args]
        server = cls(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        line = server.until("loadmaster server on")
        server.url = line.split(" on ", 1)[1].split()[0]
        return server

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def wait_status(c: httpx.Client, job_id: str, *statuses: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, f"{job_id} is {job['status']}, not {statuses}: {job.get('history')}"
        time.sleep(0.1)


def digest(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = Path(dirpath) / name
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def area() -> Iterator[tuple[Path, Path]]:
    """A data directory and a read-only scripts root, outside /tmp/pytest-of-root (closed to other users)."""
    top = Path(tempfile.mkdtemp(prefix="lm-isolation-"))
    top.chmod(0o755)
    data, scripts = top / "data", top / "scripts"
    data.mkdir()
    scripts.mkdir()
    for name in ("isolation_attack.py", "isolation_victim.py"):
        shutil.copy(HERE / name, scripts / name)
    try:
        yield data, scripts
    finally:
        shutil.rmtree(top, ignore_errors=True)


@needs_root_and_bwrap
@pytest.mark.parametrize("mode", ["root", "unprivileged"])
def test_cross_tenant_matrix_every_attempt_fails(area: tuple[Path, Path], mode: str) -> None:
    data, scripts = area
    as_user = None if mode == "root" else NOBODY
    if as_user is not None:
        shutil.chown(data, as_user, as_user)
    server = Server.start(data, as_user=as_user)
    try:
        matrix = _run_matrix(server, data, scripts)
    finally:
        server.stop()
    leaks = [row for row in matrix if row["reached"]]
    print(f"\n{mode}: {len(matrix)} attempts, {len(leaks)} leaks")
    for row in matrix:
        print(f"  {'LEAK' if row['reached'] else 'ok  '} {row['attempt']}: {row['detail']}")
    assert len(matrix) >= 30 and leaks == []


def _run_matrix(server: Server, data: Path, scripts: Path) -> list[dict[str, Any]]:
    matrix: list[dict[str, Any]] = []
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes()
    matrix.append({"attempt": "admin token in the server's /proc environ", "reached": ADMIN.encode() in environ,
                   "detail": "the server started itself again without it"})
    roots = [{"path": str(scripts), "writable": False}]
    with server.client(ADMIN) as admin:
        assert admin.get("/health").json()["sandbox"] is True
        tokens = {}
        for name in ("a", "b"):
            r = admin.post("/api/v1/tenants", json={"name": name, "gpus": 2})
            assert r.status_code == 201, r.text
            tokens[name] = r.json()["token"]
            assert admin.patch(f"/api/v1/tenants/{name}", json={"roots": roots}).status_code == 200
    with server.client(tokens["b"]) as b:
        victim = b.post("/api/v1/jobs", json={"name": "victim", "resources": {"gpus": 1},
                                              "command": [SYSTEM_PYTHON, str(scripts / "isolation_victim.py")]})
        assert victim.status_code == 201, victim.text
        bjob = victim.json()["id"]
        wait_status(b, bjob, "PROCESSING")
        log = data / "jobs" / bjob / "attempt-1" / "logs" / "rank-0.log"
        deadline = time.monotonic() + 30
        while "ready" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            time.sleep(0.1)
        bdirs = [data / "jobs" / bjob / "checkpoints", data / "jobs" / bjob / "results", data / "tenants" / "b"]
        before = digest(*bdirs)
        pids = json.loads((log.parent / "rank-0.pid").read_text())
        targets = {
            "b_checkpoint_file": str(bdirs[0] / "ckpt.pt"), "b_checkpoint_dir": str(bdirs[0]),
            "b_results_dir": str(bdirs[1]), "b_job_dir": str(data / "jobs" / bjob),
            "b_work_dir": str(data / "jobs" / bjob / "work"), "b_home": str(bdirs[2]),
            "b_home_file": str(bdirs[2] / "secret.txt"), "b_log_file": str(log), "server_pid": server.proc.pid,
            "db_file": str(data / "loadmaster.db"), "b_pids": [pids["pid"], pids["shim_pid"]],
        }
        with server.client(tokens["a"]) as a:
            attack = a.post("/api/v1/jobs", json={
                "name": "attack", "resources": {"gpus": 1}, "env": {"TARGETS": json.dumps(targets)},
                "command": [SYSTEM_PYTHON, str(scripts / "isolation_attack.py")], "results": "~/out"})
            assert attack.status_code == 201, attack.text
            ajob = attack.json()["id"]
            ended = wait_status(a, ajob, "COMPLETED", "FAILED")
            alog = (data / "jobs" / ajob / "attempt-1" / "logs" / "rank-0.log").read_text()
            assert "attacks done" in alog, alog
            matrix += [json.loads(line) for line in alog.splitlines() if line.startswith("{")]
            # The results target holds a link to B's checkpoint: the copy must not write through it.
            matrix.append({"attempt": "results copied through a link into B's checkpoint",
                           "reached": ended["status"] == "COMPLETED", "detail": ended["status_reason"][:200]})
            matrix += _api_attempts(a, bjob, bdirs)
        assert b.get(f"/api/v1/jobs/{bjob}").json()["status"] == "PROCESSING"  # B's learner was never stopped
        after = digest(*bdirs)
        matrix.append({"attempt": "B's files changed", "reached": after != before,
                       "detail": f"{len(before)} files compared byte for byte"})
        b.post(f"/api/v1/jobs/{bjob}/cancel")
        wait_status(b, bjob, "CANCELLED")
    return matrix


def _api_attempts(a: httpx.Client, bjob: str, bdirs: list[Path]) -> list[dict[str, Any]]:
    """A asks the server to copy B's files in, write over them, or run in B's directory."""
    ckpt, results, home = bdirs
    refused = [
        ("data", str(ckpt)), ("data", (ckpt / "ckpt.pt").as_uri()), ("data", f"../../{bjob}/checkpoints"),
        ("data", "~/../b/secret.txt"), ("data", "~/b-link"), ("data", "/etc/shadow"),
        ("data", "zip://x::file:///etc/shadow"), ("data", "memory://b"), ("results", str(ckpt)),
        ("results", results.as_uri()), ("results", f"../../{bjob}/results"), ("workdir", str(home)),
        ("workdir", f"../../{bjob}/work"), ("workdir", "~b"),
    ]
    rows = []
    for key, value in refused:
        r = a.post("/api/v1/jobs", json={"name": "probe", "command": ["true"], key: value})
        fields = [p["field"] for p in r.json().get("problems", [])] if r.status_code == 422 else []
        rows.append({"attempt": f"submit {key}: {value}", "reached": r.status_code != 422 or fields != [key],
                     "detail": f"{r.status_code} {fields}"})
    # In its own area, but holding a link to B's checkpoint: accepted, and the copy refuses the link.
    r = a.post("/api/v1/jobs", json={"name": "probe", "command": ["true"], "data": "~/tree"})
    assert r.status_code == 201, r.text
    job = wait_status(a, r.json()["id"], "COMPLETED", "FAILED")
    rows.append({"attempt": "data: a tree in A's area holding a link to B's checkpoint",
                 "reached": job["status"] != "FAILED" or "symbolic link" not in job["status_reason"],
                 "detail": job["status_reason"][:200]})
    return rows


@pytest.mark.parametrize(("field", "value", "words"), [
    ("workdir", "../../x", "leaves"),
    ("workdir", "/etc", "outside"),
    ("workdir", "~other/x", "another user"),
    ("workdir", "/tmp/../etc", "'..'"),
    ("data", "../../../loadmaster.db", "leaves"),
    ("data", "../attempt-1/logs", "leaves"),
    ("data", "/etc/passwd", "outside"),
    ("data", "file://relative/path", "absolute path"),
    ("data", "memory://x", "protocol"),
    ("data", "simplecache::file:///etc/passwd", "chained"),
    ("data", "sftp://localhost/etc/passwd", "protocol"),
    ("results", "../../x", "leaves"),
    ("results", "/tmp", "outside"),
    ("results", "file:///etc", "outside"),
    ("results", "~/../other-tenant", "leaves"),
])
def test_path_escapes_are_rejected_at_submission_with_the_field(sqlite_live: Live, field: str, value: str,  # noqa: F811
                                                                 words: str) -> None:
    token = sqlite_live.tenant("paths")
    with sqlite_live.client(token) as c:
        r = c.post("/api/v1/jobs", json={"name": "escape", "command": ["true"], field: value})
    assert r.status_code == 422, r.text
    problem = r.json()["problems"][0]
    assert problem["field"] == field and words in problem["message"], problem


def test_paths_inside_the_job_and_the_tenant_area_are_accepted_and_resolved_there(sqlite_live: Live) -> None:  # noqa: F811
    token = sqlite_live.tenant("inside")
    data_dir = Path(sqlite_live.platform.dirs.root)
    (data_dir / "tenants" / "inside" / "code").mkdir(parents=True)  # the tenant's own area: its to fill
    with sqlite_live.client(token) as c:
        r = c.post("/api/v1/jobs", json={
            "name": "inside", "resources": {"gpus": 1}, "workdir": "~/src/../code", "results": "out/1",
            "command": ["sh", "-c", "pwd > $LOADMASTER_RESULTS_DIR/cwd; echo $HOME >> $LOADMASTER_RESULTS_DIR/cwd"]})
        assert r.status_code == 201, r.text
        done = sqlite_live.wait(token, r.json()["id"], "COMPLETED", "FAILED")
    assert done["status"] == "COMPLETED", done["history"]
    assert done["user"] == "default"
    # A relative results path is inside the job's own work directory, never the server's working directory.
    cwd, home = (data_dir / "jobs" / done["id"] / "work" / "out" / "1" / "cwd").read_text().split()
    assert cwd == str(data_dir / "tenants" / "inside" / "code") and home == str(data_dir / "tenants" / "inside")
    assert (data_dir / "jobs" / done["id"] / "checkpoints").stat().st_mode & 0o777 == 0o700


def test_revoked_rotated_and_expired_tokens_fail_at_their_next_request(sqlite_live: Live) -> None:  # noqa: F811
    first = sqlite_live.tenant("tokens")
    with sqlite_live.client(sqlite_live.admin_token) as admin:
        alice = admin.post("/api/v1/tenants/tokens/tokens", json={"user": "alice"}).json()["token"]
        brief = admin.post("/api/v1/tenants/tokens/tokens", json={"user": "bob", "expires_in_s": 1}).json()["token"]
        with sqlite_live.client(alice) as c:
            assert c.get("/api/v1/whoami").json()["user"] == "alice"
            job = c.post("/api/v1/jobs", json={"name": "mine", "command": ["sleep", "60"],
                                                "resources": {"gpus": 1}}).json()
            assert job["user"] == "alice"  # jobs record who submitted
            assert admin.delete("/api/v1/tenants/tokens/tokens/alice").json()["revoked"] == 1
            assert c.get("/api/v1/whoami").status_code == 401  # the very next request
        rotated = admin.post("/api/v1/tenants/tokens/tokens/default/rotate", json={}).json()["token"]
        with sqlite_live.client(first) as old, sqlite_live.client(rotated) as new:
            assert old.get("/api/v1/whoami").status_code == 401
            assert new.get("/api/v1/whoami").json()["tenant"] == "tokens"
        time.sleep(1.1)
        with sqlite_live.client(brief) as c:
            assert c.get("/api/v1/whoami").status_code == 401
        users = {u["user"]: u["tokens"] for u in admin.get("/api/v1/tenants/tokens/tokens").json()["users"]}
        assert users == {"default": 1, "bob": 1}
        assert admin.delete("/api/v1/tenants/tokens").status_code == 409  # its job is not finished
        c2 = sqlite_live.client(rotated)
        c2.post(f"/api/v1/jobs/{job['id']}/cancel")
        sqlite_live.wait(rotated, job["id"], "CANCELLED", "COMPLETED")
        c2.close()
        assert admin.delete("/api/v1/tenants/tokens").json() == {"tenant": "tokens", "jobs_deleted": 1}
        with sqlite_live.client(rotated) as gone:
            assert gone.get("/api/v1/whoami").status_code == 401
        actions = [e["action"] for e in admin.get("/api/v1/audit", params={"tenant": "tokens"}).json()["entries"]]
        assert actions == ["tenant.delete", "token.rotate", "token.revoke", "token.issue", "token.issue",
                           "tenant.create"]


def test_without_a_sandbox_a_second_tenant_needs_the_insecure_flag(tmp_path: Path) -> None:
    from tests.platform.api_fixtures import start_platform

    live = start_platform(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "data", insecure_shared_user=False)
    try:
        with live.client(live.admin_token) as admin:
            health = admin.get("/health").json()
            assert health["sandbox"] is False and "NO sandbox" in health["isolation"]
            assert admin.post("/api/v1/tenants", json={"name": "one", "gpus": 1}).status_code == 201
            second = admin.post("/api/v1/tenants", json={"name": "two", "gpus": 1})
            assert second.status_code == 409 and "--insecure-shared-user" in second.json()["error"]
    finally:
        live.platform.shutdown()


@needs_root_and_bwrap
def test_learners_run_as_the_tenants_own_users(area: tuple[Path, Path]) -> None:
    from tests.platform.api_fixtures import start_platform

    data, _ = area
    live = start_platform(f"sqlite:///{data / 'loadmaster.db'}", data, sandbox="auto", tenant_users=True,
                          insecure_shared_user=False)
    try:
        with live.client(live.admin_token) as admin:
            mapped = admin.post("/api/v1/tenants", json={"name": "mapped", "gpus": 1, "os_user": "nobody"})
            assert mapped.status_code == 201 and mapped.json()["tenant"]["os_user"] == "nobody"
            ranged = admin.post("/api/v1/tenants", json={"name": "ranged", "gpus": 1}).json()
            unknown = admin.post("/api/v1/tenants", json={"name": "ghost", "gpus": 1, "os_user": "no-such-user"})
            assert unknown.status_code == 409 and unknown.json()["problems"][0]["field"] == "os_user"
        uids = {}
        for name, token in (("mapped", mapped.json()["token"]), ("ranged", ranged["token"])):
            (data / "tenants" / name / "in").mkdir(parents=True)
            (data / "tenants" / name / "in" / "sample.txt").write_text("data")
            with live.client(token) as c:
                r = c.post("/api/v1/jobs", json={
                    "name": "who", "resources": {"gpus": 1}, "data": "~/in", "results": "~/out",
                    "command": "cat $LOADMASTER_DATA_DIR/sample.txt; id -u > $LOADMASTER_RESULTS_DIR/uid; "
                               "env > $HOME/env"})
                assert r.status_code == 201, r.text
                done = live.wait(token, r.json()["id"], "COMPLETED", "FAILED")
                assert done["status"] == "COMPLETED", done["history"]
                copied = data / "tenants" / name / "out" / "uid"  # staged out by a copy running as the user
                uids[name] = int(copied.read_text())
                assert copied.stat().st_uid == uids[name]
                assert (data / "jobs" / done["id"] / "data" / "sample.txt").stat().st_uid == uids[name]
                checkpoints = (data / "jobs" / done["id"] / "checkpoints").stat()
                assert checkpoints.st_uid == uids[name] and checkpoints.st_mode & 0o777 == 0o700
                env = (data / "tenants" / name / "env").read_text()
                assert live.admin_token not in env and "LOADMASTER_ADMIN" not in env  # nothing of the server's
        assert uids["mapped"] == NOBODY and uids["ranged"] >= 200_000
    finally:
        live.platform.shutdown()


def test_admin_token_file_must_be_private_and_a_store_of_tenants_needs_a_sandbox(tmp_path: Path) -> None:
    from loadmaster.platform.server import Platform, ServerError, ServerOptions

    secret = tmp_path / "admin-token"
    secret.write_text("file-admin-secret-0123456789\n")
    secret.chmod(0o644)
    base = {"port": 0, "data_dir": tmp_path / "data", "nodes": "1x1", "dashboard": False, "sandbox": "none",
            "tenant_users": False}
    with pytest.raises(ServerError, match="chmod 600"):
        Platform.build(ServerOptions(**base, admin_token_file=secret), env={})  # type: ignore[arg-type]
    secret.chmod(0o600)
    first = Platform.build(ServerOptions(**base, admin_token_file=secret, insecure_shared_user=True),  # type: ignore[arg-type]
                           env={})
    try:
        assert first.admin_token is None  # the file's token is the admin's: nothing generated, nothing printed
        url = first.serve_in_thread()
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer file-admin-secret-0123456789"}) as admin:
            assert admin.get("/api/v1/whoami").json()["admin"] is True
            for name in ("one", "two"):
                assert admin.post("/api/v1/tenants", json={"name": name, "gpus": 1}).status_code == 201
    finally:
        first.shutdown()
    with pytest.raises(ServerError, match="--insecure-shared-user"):  # two tenants, no sandbox, no flag
        Platform.build(ServerOptions(**base), env={})  # type: ignore[arg-type]


needs_bwrap = pytest.mark.skipif(find_bwrap() is None, reason="needs bubblewrap")

# Traps SIGTERM, checkpoints (takes a moment), exits 0; or kills itself with SIGKILL when asked to.
_GRACEFUL = ("import os, signal, sys, time\n"
             "def stop(*_):\n"
             "    time.sleep(0.5)\n"
             "    open(os.path.join(os.environ['LOADMASTER_CHECKPOINT_DIR'], 'ckpt'), 'w').write('saved')\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             "open(os.environ['LOADMASTER_REPORT_FILE'], 'a').write('{\"step\": 1}\\n')\n"
             "print('pid in its namespace', os.getpid(), flush=True)\n"
             "if sys.argv[1:] == ['die']: os.kill(os.getpid(), signal.SIGKILL)\n"
             "time.sleep(60)\n")


@needs_bwrap
@pytest.mark.parametrize("how", ["preempted", "killed"])
def test_a_sandboxed_learner_keeps_its_grace_period_and_its_exit_code(tmp_path: Path, how: str) -> None:
    from loadmaster.platform.executors.local import LocalExecutor
    from tests.platform.executor_helpers import (
        attempt_spec,
        kill_leftovers,
        learners,
        log_text,
        wait_for_end,
        wait_until,
    )

    job = tmp_path / "job"
    (job / "work").mkdir(parents=True)
    args = ("die",) if how == "killed" else ()
    spec = attempt_spec(job, gang=learners(("n0", ())), command=(sys.executable, "-c", _GRACEFUL, *args))
    spec = dataclasses.replace(spec, workdir=str(Path(spec.checkpoint_dir).parent / "work"))
    Path(spec.workdir).mkdir(parents=True)
    ex = LocalExecutor(sandbox=find_bwrap())
    try:
        ex.launch(spec)
        wait_until(lambda: "pid in its namespace" in log_text(spec, 0), what="the learner to start")
        assert "pid in its namespace 2" in log_text(spec, 0)  # its own PID namespace (bwrap's init is 1)
        if how == "preempted":
            ex.stop(spec.job_id, spec.attempt, grace_s=10.0)
        ended, progress = wait_for_end(ex)
    finally:
        ex.close()
        kill_leftovers()
    assert [p.report["step"] for p in progress] == [1]  # its reports directory is bound read-write
    if how == "preempted":  # the sandbox's own process ignored SIGTERM: the learner had its grace period
        assert ended.stopped and ended.exits[0].exit_code == 0
        assert (Path(spec.checkpoint_dir) / "ckpt").read_text() == "saved"
    else:  # as outside a sandbox: a death by SIGKILL is -9 (not the sandbox's 137)
        assert ended.exits[0].exit_code == -9


def test_a_log_stream_ends_when_its_token_is_revoked(sqlite_live: Live) -> None:  # noqa: F811
    from loadmaster.platform.client import Client

    token = sqlite_live.tenant("streams")
    with sqlite_live.client(token) as c:
        job = c.post("/api/v1/jobs", json={"name": "talks", "resources": {"gpus": 1},
                                           "command": "for i in $(seq 300); do echo $i; sleep 0.1; done"}).json()
    kinds = []
    revoked_at = None
    with Client(sqlite_live.url, token) as follower, sqlite_live.client(sqlite_live.admin_token) as admin:
        for kind, _ in follower.follow(job["id"]):
            kinds.append(kind)
            if kind == "log" and revoked_at is None:
                assert admin.delete("/api/v1/tenants/streams/tokens/default").status_code == 200
                revoked_at = time.monotonic()
            assert revoked_at is None or time.monotonic() - revoked_at < 10, "the stream outlived the revoke"
    assert kinds[-1] == "revoked" and "end" not in kinds
    assert revoked_at is not None and time.monotonic() - revoked_at < 5


@needs_root_and_bwrap
def test_an_uploaded_package_is_the_tenants_own_copy_inside_the_sandbox(area: tuple[Path, Path]) -> None:
    """Code upload under confinement: the server unpacks the package (where the learner cannot plant links)
    and hands the copy to the tenant's user, and the sandbox shows it read-write."""
    from loadmaster.platform.code import pack
    from tests.platform.api_fixtures import start_platform

    data, scripts = area
    project = scripts.parent / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "input.txt").write_text("from the package\n")
    package = pack(project, 1 << 20)
    live = start_platform(f"sqlite:///{data / 'loadmaster.db'}", data, sandbox="auto", tenant_users=True,
                          insecure_shared_user=False)
    try:
        with live.client(live.admin_token) as admin:
            token = admin.post("/api/v1/tenants", json={"name": "coder", "gpus": 1}).json()["token"]
        with live.client(token) as c:
            assert c.post("/api/v1/code", content=package.archive,
                          headers={"content-type": "application/octet-stream"}).status_code == 201
            r = c.post("/api/v1/jobs", json={
                "name": "coded", "resources": {"gpus": 1}, "code": package.digest, "workdir": "pkg",
                "command": "cat input.txt > $LOADMASTER_RESULTS_DIR/read; echo changed > input.txt; "
                           "id -u > $LOADMASTER_RESULTS_DIR/uid; pwd > $LOADMASTER_RESULTS_DIR/pwd"})
            assert r.status_code == 201, r.text
            done = live.wait(token, r.json()["id"], "COMPLETED", "FAILED")
        assert done["status"] == "COMPLETED", done["history"]
        results = data / "jobs" / done["id"] / "results"
        assert (results / "read").read_text() == "from the package\n"
        uid = int((results / "uid").read_text())
        assert uid >= 200_000
        copy = data / "jobs" / done["id"] / "attempt-1" / "code"
        assert (results / "pwd").read_text().strip() == str(copy / "pkg")
        assert copy.stat().st_uid == uid and (copy / "pkg" / "input.txt").stat().st_uid == uid
        assert (copy / "pkg" / "input.txt").read_text() == "changed\n"
    finally:
        live.platform.shutdown()
