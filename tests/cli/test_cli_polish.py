"""What a user types and reads, checked against a real server: user text printed as written (no Rich markup or
emoji codes read into it), no traceback for bad options, full job ids however narrow the terminal, unique
prefixes of ids, the queue's guessed run times flagged, and `job wait`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadmaster.cli.main import app
from tests.platform.api_fixtures import Live

runner = CliRunner()
ODD = "pattern [a-z]+ and [bold]x[/] :zzz:"  # markup a careless print would eat, an emoji code, a stray close tag


@pytest.fixture(scope="module")
def token(server: Live) -> str:
    return server.tenant("polish", gpus=2, borrow=0)


def run(live: Live, *args: str, token: str = "") -> tuple[int, str]:
    env = {"LOADMASTER_URL": live.url, "LOADMASTER_TOKEN": token, "LOADMASTER_ADMIN_TOKEN": ""}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def run_process(live: Live, *args: str, token: str, columns: int = 60) -> subprocess.CompletedProcess[str]:
    """The installed command in a narrow terminal (Rich reads COLUMNS when the process starts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADMASTER_")}
    env.update(LOADMASTER_URL=live.url, LOADMASTER_TOKEN=token, COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-m", "loadmaster.cli.main", *args], env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def submit(live: Live, token: str, tmp_path: Path, name: str, code: str, **fields: Any) -> str:
    doc = {"name": name, "command": [sys.executable, "-c", code], "resources": {"gpus": 1}, **fields}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    status, out = run(live, "job", "submit", str(path), "--json", token=token)
    assert status == 0, out
    return str(json.loads(out)["id"])


# ---------------------------------------------------------------------------------------------- literal text


def test_user_text_is_printed_as_written(server: Live, token: str, tmp_path: Path) -> None:
    job = submit(server, token, tmp_path, "odd", f"raise ValueError({ODD!r})", retry={"policy": "never"})
    server.wait(token, job, "FAILED")
    code, out = run(server, "job", "show", job, token=token)
    assert code == 0, out
    assert ODD in out  # the failure's evidence, in the status line and the attempts table
    code, out = run(server, "job", "list", token=token)
    assert code == 0 and ":zzz:" in out and "[a-z]+" in out and "💤" not in out


def test_errors_quoting_the_users_input_keep_it(server: Live, token: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('name: x\ncommand: run\n"[bold]oops[/]": 1\n')
    code, out = run(server, "job", "submit", str(bad), token=token)
    assert code == 2 and "[bold]oops[/]: unknown field" in out and "Traceback" not in out
    code, out = run(server, "job", "submit", str(tmp_path / "[red]missing:zzz:.yaml"), token=token)
    assert code == 2 and "[red]missing:zzz:.yaml" in out


# ----------------------------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(("args", "words"), [
    (["sim", "run", "--format", "bogus", "--out", "{tmp}/run"], "unknown format 'bogus'"),
    (["trace", "analyze", "sample:gavel", "--format", "bogus"], "unknown format 'bogus'"),
    (["sim", "run", "--until", "-5", "--out", "{tmp}/run"], "--until"),
    (["sim", "run", "--out", "{tmp}/a-file", "--until", "60", "--no-plots"], "a-file: File exists"),
    (["trace", "synth", "--out", "{tmp}/a-file/jobs.csv", "--jobs", "3"], "a-file"),
    (["trace", "convert", "sample:gavel", "--out", "{tmp}/a-file/x.csv"], "a-file"),
])
def test_bad_options_exit_2_without_a_traceback(args: list[str], words: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


# ------------------------------------------------------------------------------------------------ job ids


def test_listings_show_whole_ids_in_a_narrow_terminal(server: Live, token: str, tmp_path: Path) -> None:
    blocker = submit(server, token, tmp_path, "blocker", "import time; time.sleep(60)", resources={"gpus": 2})
    waiting = submit(server, token, tmp_path, "a-job-with-a-rather-long-name", "pass")
    server.wait(token, blocker, "PROCESSING")
    try:
        listing = run_process(server, "job", "list", token=token)
        assert listing.returncode == 0, listing.stderr
        assert blocker in listing.stdout and waiting in listing.stdout
        queue = run_process(server, "queue", token=token)
        assert queue.returncode == 0 and waiting in queue.stdout
        cluster = run_process(server, "cluster", token=token)
        assert cluster.returncode == 0 and blocker in cluster.stdout
    finally:
        run(server, "job", "cancel", blocker, token=token)
        run(server, "job", "cancel", waiting, token=token)
        server.wait(token, blocker, "CANCELLED")


def test_a_unique_prefix_names_a_job_everywhere(server: Live, token: str, tmp_path: Path) -> None:
    job = submit(server, token, tmp_path, "prefixed", "print('hi')")
    server.wait(token, job, "COMPLETED")
    short = job[: job.index("-") + 5]  # j- and four hex digits
    code, out = run(server, "job", "show", short, token=token)
    assert code == 0 and job in out
    code, out = run(server, "job", "show", short[2:], "--json", token=token)  # without the j-
    assert code == 0 and json.loads(out)["id"] == job
    code, out = run(server, "job", "logs", short, token=token)
    assert code == 0 and "hi" in out
    code, out = run(server, "job", "wait", short, token=token)
    assert code == 0 and job in out
    code, out = run(server, "job", "show", "j-", token=token)  # every job starts so
    assert code == 2 and "matches several jobs" in out and "give more of the id" in out
    code, out = run(server, "job", "show", "fffffffffff0", token=token)
    assert code == 2 and "no job 'fffffffffff0'" in out
    code, out = run(server, "job", "show", "j-../x", token=token)
    assert code == 2 and "is not a job id" in out
    other = server.tenant("other-polish", gpus=1)
    code, out = run(server, "job", "show", short, token=other)  # another tenant's job is no match
    assert code == 2 and "no job" in out


def test_queue_flags_a_guessed_run_time(server: Live, token: str, tmp_path: Path) -> None:
    blocker = submit(server, token, tmp_path, "hold", "import time; time.sleep(60)", resources={"gpus": 2})
    server.wait(token, blocker, "PROCESSING")
    guessed = submit(server, token, tmp_path, "unknown-length", "pass")
    known = submit(server, token, tmp_path, "known-length", "pass", expected_duration_s=90)
    try:
        code, out = run(server, "queue", "--json", token=token)
        entries = {e["job_id"]: e for e in json.loads(out)}
        assert entries[guessed]["duration_guessed"] and entries[guessed]["expected_duration_s"] == 3600
        assert not entries[known]["duration_guessed"] and entries[known]["expected_duration_s"] == 90
        code, out = run(server, "queue", token=token)
        assert code == 0 and "1h00m (guess)" in out and "1m30s" in out and "assume 1 h" in out
        deadline = time.monotonic() + 30
        while True:  # `job show` has the queue entry once a scheduling round has placed the job
            code, out = run(server, "job", "show", guessed, token=token)
            if "queue position" in out or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "run time is a guess" in " ".join(out.split())
    finally:
        for job in (blocker, guessed, known):
            run(server, "job", "cancel", job, token=token)
        server.wait(token, blocker, "CANCELLED")


# -------------------------------------------------------------------------------------------------- job wait


def test_job_wait_exit_status_mirrors_the_outcome(server: Live, token: str, tmp_path: Path) -> None:
    ok = submit(server, token, tmp_path, "ok", "import time; time.sleep(1)")
    bad = submit(server, token, tmp_path, "bad", "raise SystemExit(3)", retry={"policy": "never"})
    code, out = run(server, "job", "wait", ok, "--interval", "0.2", token=token)
    assert code == 0 and f"{ok} COMPLETED" in out
    code, out = run(server, "job", "wait", ok, bad, "--interval", "0.2", "--json", token=token)
    assert code == 1 and json.loads(out) == {ok: "COMPLETED", bad: "FAILED"}
    code, out = run(server, "job", "wait", "j-000000000000", token=token)
    assert code == 2 and "no job" in out


def test_job_wait_times_out_with_124(server: Live, token: str, tmp_path: Path) -> None:
    slow = submit(server, token, tmp_path, "slow", "import time; time.sleep(60)")
    try:
        start = time.monotonic()
        code, out = run(server, "job", "wait", slow, "--timeout", "1", "--interval", "0.2", token=token)
        assert code == 124 and "timed out after 1 s" in out and slow in out
        assert time.monotonic() - start < 10
        code, out = run(server, "job", "wait", slow, "--timeout", "-1", token=token)
        assert code == 2
    finally:
        run(server, "job", "cancel", slow, token=token)


def test_job_wait_outlives_a_server_that_is_down(server: Live, token: str, tmp_path: Path) -> None:
    code, out = run(server, "job", "wait", "j-000000000000", token="lm_x")
    assert code == 2 and "token" in out  # an unknown token is an error at once
    env = {"LOADMASTER_URL": "http://127.0.0.1:9", "LOADMASTER_TOKEN": token}
    result = runner.invoke(app, ["job", "wait", "j-000000000000", "--timeout", "0.5", "--interval", "0.1"], env=env)
    assert result.exit_code == 124, result.output  # unreachable: it kept waiting, then timed out
    assert "still waiting" in result.output and "cannot reach" in result.output
