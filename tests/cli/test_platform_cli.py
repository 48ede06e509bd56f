"""The platform's CLI end to end: a real server (store, virtual nodes, local executor, control loop, API over
HTTP) in this process, the `loadmaster` verbs run as a user runs them with LOADMASTER_URL/TOKEN."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from loadmaster.cli.main import app
from tests.platform.api_fixtures import ADMIN_SECRET, Live

runner = CliRunner()


def run(live: Live | None, *args: str, token: str | None = None, admin: bool = False,
        url: str | None = None) -> tuple[int, str]:
    env = {"LOADMASTER_URL": url or (live.url if live else ""), "LOADMASTER_TOKEN": token or "",
           "LOADMASTER_ADMIN_TOKEN": ADMIN_SECRET if admin else ""}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def run_json(live: Live, *args: str, **kw: Any) -> Any:
    code, out = run(live, *args, "--json", **kw)
    assert code == 0, out
    return json.loads(out)


def tenant(live: Live, name: str, *extra: str) -> str:
    code, out = run(live, "tenant", "create", name, *extra, admin=True)
    assert code == 0, out
    return next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("Give it to the tenant as"))


def manifest(tmp_path: Path, name: str, code: str, **fields: Any) -> Path:
    text = f"name: {name}\ncommand: [{json.dumps(sys.executable)}, -c, {json.dumps(code)}]\n"
    text += "".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items())
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_tenants_by_the_admin(server: Live) -> None:
    token = tenant(server, "vision", "--gpus", "4", "--borrow", "2")
    assert token.startswith("lm_")
    listed = run_json(server, "tenant", "list", admin=True)
    assert {"name": "vision", "gpu_quota": 4, "borrow_limit": 2}.items() <= next(
        t for t in listed if t["name"] == "vision").items()
    code, out = run(server, "tenant", "set-quota", "vision", "--gpus", "6", "--no-borrow-limit", admin=True)
    assert code == 0 and "quota 6 GPUs, borrowing limit none" in out
    code, out = run(server, "tenant", "create", "vision", "--gpus", "1", admin=True)
    assert code == 2 and "exists already" in out
    code, out = run(server, "tenant", "create", "nope", "--gpus", "1", token=token)  # a tenant's token
    assert code == 2 and "only the admin token" in out
    second = run_json(server, "tenant", "token", "issue", "vision", admin=True)["token"]
    assert run_json(server, "job", "list", token=second) == []


def test_users_tokens_roots_audit_and_delete_by_the_admin(server: Live, tmp_path: Path) -> None:
    tenant(server, "audio", "--gpus", "1", "--user", "ana")
    bo = run_json(server, "tenant", "token", "issue", "audio", "--user", "bo", "--expires-in", "3600", admin=True)
    assert bo["user"] == "bo" and bo["expires_at"] is not None
    users = run_json(server, "tenant", "token", "list", "audio", admin=True)["users"]
    assert sorted(u["user"] for u in users) == ["ana", "bo"]
    code, out = run(server, "tenant", "token", "list", "audio", admin=True)
    assert code == 0 and "ana" in out and "never" in out  # ana's token lives until revoked
    rotated = run_json(server, "tenant", "token", "rotate", "audio", "--user", "bo", admin=True)["token"]
    assert run(server, "job", "list", token=bo["token"])[0] == 2  # the old token fails at once
    assert run_json(server, "job", "list", token=rotated) == []
    code, out = run(server, "tenant", "token", "revoke", "audio", "--user", "bo", admin=True)
    assert code == 0 and "revoked 1 token(s) of audio/bo" in out
    assert run(server, "job", "list", token=rotated)[0] == 2
    code, out = run(server, "tenant", "token", "revoke", "audio", "--user", "bo", admin=True)
    assert code == 2 and "no user 'bo'" in out
    code, out = run(server, "tenant", "set-roots", "audio", "--root", f"{tmp_path}:rw", "--root", "/srv/x:ro",
                    admin=True)
    # Rich wraps at the terminal's width (80 without one): a long tmp path puts "(rw)," on the next line.
    assert code == 0 and f"{tmp_path} (rw), /srv/x (ro)" in " ".join(out.split())
    code, out = run(server, "tenant", "set-roots", "audio", "--root", "relative:rw", admin=True)
    assert code == 2 and "roots" in out
    code, out = run(server, "tenant", "set-roots", "audio", "--root", "/x:maybe", admin=True)
    assert code == 2 and "PATH:ro or PATH:rw" in out
    assert run_json(server, "tenant", "delete", "audio", admin=True) == {"tenant": "audio", "jobs_deleted": 0}
    actions = [e["action"] for e in run_json(server, "tenant", "audit", "--tenant", "audio", admin=True)]
    assert actions == ["tenant.delete", "tenant.update", "token.revoke", "token.rotate", "token.issue",
                       "tenant.create"]
    code, out = run(server, "tenant", "audit", admin=True)
    assert code == 0 and "tenant.delete" in out


def test_submit_follow_streams_logs_and_exits_with_the_outcome(server: Live, tmp_path: Path) -> None:
    token = tenant(server, "speech", "--gpus", "4")
    ok = manifest(tmp_path, "ok", "import os; print('hello from', os.environ['RANK'])", learners=2)
    code, out = run(server, "job", "submit", str(ok), "--follow", token=token)
    assert code == 0, out
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out
    assert "PROCESSING" in out and "COMPLETED" in out
    bad = manifest(tmp_path, "bad", "import sys; print('oops'); sys.exit(4)", retry={"policy": "never"})
    code, out = run(server, "job", "submit", str(bad), "--follow", token=token)
    assert code == 1, out
    assert "oops" in out and "FAILED" in out

    jobs = run_json(server, "job", "list", token=token)
    assert [(j["name"], j["status"]) for j in jobs] == [("bad", "FAILED"), ("ok", "COMPLETED")]
    failed = run_json(server, "job", "show", jobs[0]["id"], token=token)
    assert failed["attempt_history"][0]["exit_codes"] == [{"rank": 0, "exit_code": 4}]
    code, out = run(server, "job", "show", jobs[0]["id"], token=token)
    assert code == 0 and "history" in out and "attempts" in out
    code, out = run(server, "job", "logs", jobs[1]["id"], "--rank", "1", token=token)
    assert code == 0 and out.strip() == "hello from 1"
    code, out = run(server, "job", "logs", jobs[1]["id"], "-f", "--attempt", "1", "--tail", "1", token=token)
    assert code == 0 and "[rank 0] hello from 0" in out


def test_queued_jobs_cancel_halt_resume_queue_and_cluster(server: Live, tmp_path: Path) -> None:
    token = tenant(server, "nlp", "--gpus", "1", "--borrow", "0")
    hold = manifest(tmp_path, "hold", "import time; time.sleep(60)")
    first = run_json(server, "job", "submit", str(hold), token=token)["id"]
    server.wait(token, first, "PROCESSING")
    second = run_json(server, "job", "submit", str(hold), token=token)["id"]  # over quota: it waits
    entries = run_json(server, "queue", token=token)
    assert [e["job_id"] for e in entries] == [second]
    code, out = run(server, "queue", token=token)
    assert code == 0 and second in out
    cluster = run_json(server, "cluster", token=token)
    assert [j["id"] for j in cluster["running"]] == [first] and cluster["gpus_used"] >= 1
    code, out = run(server, "cluster", token=token)
    assert code == 0 and first in out

    assert run_json(server, "job", "halt", second, token=token)["status"] == "HALTED"
    assert run_json(server, "job", "resume", second, token=token)["status"] == "QUEUED"
    code, out = run(server, "job", "cancel", second, token=token)
    assert code == 0 and "CANCELLED" in out
    code, out = run(server, "job", "resume", second, token=token)
    assert code == 2 and "only a HALTED job can be resumed" in out
    code, out = run(server, "job", "scale", first, "2", token=token)
    assert code == 2 and "not elastic" in out
    code, out = run(server, "job", "cancel", first, token=token)
    assert code == 0 and "cancel requested" in out
    server.wait(token, first, "CANCELLED")


def test_manifest_problems_reach_the_user_as_one_line(server: Live, tmp_path: Path) -> None:
    token = tenant(server, "robotics", "--gpus", "2")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncommand: run\nresources:\n  gpus: 3\n  gpu_memory: 80\n")
    code, out = run(server, "job", "submit", str(bad), token=token)
    assert code == 2 and "resources.gpu_memory: unknown field" in out and "Traceback" not in out
    code, out = run(server, "job", "submit", str(tmp_path / "missing.yaml"), token=token)
    assert code == 2 and "no such manifest file" in out


def test_a_server_that_is_down_or_a_bad_token_name_the_fix(server: Live) -> None:
    code, out = run(None, "job", "list", token="lm_x", url="http://127.0.0.1:9")
    assert code == 2 and "cannot reach the loadmaster server at http://127.0.0.1:9" in out
    assert "loadmaster server" in out and "LOADMASTER_URL" in out and len(out.strip().splitlines()) == 1
    code, out = run(server, "job", "list", token="lm_not-a-token")
    assert code == 2 and "does not know this token" in out and "LOADMASTER_TOKEN" in out
    code, out = run(server, "queue")
    assert code == 2 and "no token: set LOADMASTER_TOKEN" in out
    code, out = run(server, "tenant", "list")
    assert code == 2 and "LOADMASTER_ADMIN_TOKEN" in out
