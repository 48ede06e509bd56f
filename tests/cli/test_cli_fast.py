"""A plain `sim run` or `queue` skips Typer (cli/fast.py): the same options, defaults, outputs and errors;
anything less plain goes to the Typer app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadmaster.cli import sim
from loadmaster.cli.fast import (
    _FLAGS,
    _QUEUE_FLAGS,
    _QUEUE_VALUED,
    _VALUED,
    QUEUE_DEFAULTS,
    parse_queue,
    parse_sim_run,
    run_defaults,
    run_fast,
)
from loadmaster.cli.main import app
from loadmaster.sim.failures import RetryPolicy
from tests.platform.api_fixtures import Live


def _command(typer_app: typer.Typer, name: str) -> typer.core.TyperCommand:
    group = typer.main.get_command(typer_app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands[name]
    assert isinstance(command, typer.core.TyperCommand)
    return command


@pytest.mark.parametrize(("typer_app", "name", "valued", "flags", "defaults"), [
    (sim.app, "run", _VALUED, _FLAGS, run_defaults()),
    (app, "queue", _QUEUE_VALUED, _QUEUE_FLAGS, QUEUE_DEFAULTS),
])
def test_every_option_and_default_is_the_typer_commands(typer_app: typer.Typer, name: str, valued: dict[str, Any],
                                                         flags: dict[str, str], defaults: dict[str, Any]) -> None:
    command = _command(typer_app, name)
    known = {**{name: param for name, (param, _) in valued.items()}, **flags}
    seen = set()
    for param in command.params:
        name = param.opts[0]
        assert known[name] == param.name, name
        assert defaults[param.name] == param.default, name
        seen.add(name)
    assert seen == set(known) == set(valued) | set(flags)
    assert set(defaults) == set(known.values())


def test_plain_options_are_parsed() -> None:
    assert parse_sim_run(["--policy", "las", "--seed=3", "--until", "1.5e3", "--retry", "never", "--json",
                          "--out", "x", "--no-plots", "--seed", "4"]) == {
        "policy": "las", "seed": 4, "until": 1500.0, "retry": RetryPolicy.NEVER, "as_json": True,
        "out": Path("x"), "no_plots": True}
    assert parse_sim_run([]) == {}


@pytest.mark.parametrize("argv", [
    ["--help"], ["--seed", "x"], ["--seed", "1.0"], ["--max-attempts", "0"], ["--until", "-1"], ["--until", "inf"],
    ["--retry", "sometimes"], ["--policy"], ["--seed", "-1"], ["--json=1"], ["extra"], ["--"], ["--polic", "x"],
])
def test_anything_less_plain_goes_to_typer(argv: list[str]) -> None:
    assert parse_sim_run(argv) is None
    assert run_fast(["sim", "run", *argv]) is None


def test_plain_queue_options_are_parsed() -> None:
    assert parse_queue(["--tenant", "vision", "--limit=10000", "--all", "--json", "--limit", "1"]) == {
        "tenant": "vision", "limit": 1, "show_all": True, "as_json": True}
    assert parse_queue([]) == {}


@pytest.mark.parametrize("argv", [
    ["--help"], ["--limit", "0"], ["--limit", "10001"], ["--limit", "x"], ["--tenant"], ["--tenant", "-x"],
    ["--all=1"], ["--al"], ["extra"],
])
def test_a_queue_less_plain_goes_to_typer(argv: list[str]) -> None:
    assert parse_queue(argv) is None
    assert run_fast(["queue", *argv]) is None


def test_other_commands_go_to_typer() -> None:
    assert run_fast(["sim", "compare"]) is None
    assert run_fast(["trace", "synth"]) is None
    assert run_fast([]) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["--seed", "--until", "--json", "--policy", "1", "-2", "x", "--no-plots", "=",
                                 "--seed=5", "--max-attempts", "0", "2.5"]), max_size=6))
def test_the_parser_never_raises(argv: list[str]) -> None:
    """Whatever the words, it answers or hands them on: errors are Typer's to report."""
    values = parse_sim_run(argv)
    assert values is None or set(values) <= set(run_defaults())


def test_a_fast_run_writes_what_the_typer_run_writes(tmp_path: Path) -> None:
    args = ["sim", "run", "--trace", "sample:gavel", "--policy", "las", "--plots", "none", "--json"]
    fast = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", *args, "--out", str(tmp_path / "fast")],
                          capture_output=True, text=True, timeout=120)
    assert fast.returncode == 0, fast.stderr
    slow = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "slow")])  # the Typer app itself
    assert slow.exit_code == 0, slow.output
    a, b = json.loads(fast.stdout), json.loads(slow.stdout)
    a.pop("wall_time_s")
    b.pop("wall_time_s")
    assert a == b
    assert (tmp_path / "fast" / "jobs.csv").read_bytes() == (tmp_path / "slow" / "jobs.csv").read_bytes()


def test_a_fast_run_fails_as_the_typer_run_does(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "sim", "run", "--policy", "nope", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --policy: unknown policy 'nope'") and "Traceback" not in proc.stderr


# The command line as a new process runs it: run_fast() first; pydantic (what Typer's option coercion loads)
# must not have been needed.
_FAST = ("import sys; from loadmaster.cli.fast import run_fast; status = run_fast(sys.argv[1:]); "
         "assert status is not None, 'not the fast path'; assert 'pydantic' not in sys.modules; sys.exit(status)")


def test_a_fast_queue_prints_what_the_typer_queue_prints(server: Live) -> None:
    token = server.tenant("fastq", gpus=1, borrow=0)
    job = {"command": ["sleep", "60"], "resources": {"gpus": 1}}
    with server.client(token) as c:
        ids = [c.post("/api/v1/jobs", json={**job, "name": f"q{i}"}).json()["id"] for i in range(3)]
        server.wait(token, ids[0], "PROCESSING")
        try:  # both runs must see the same queue: once a round has placed the waiting jobs, it stays as it is
            server.wait_for(lambda: [(e["job_id"], e["wait_reason"]) for e in c.get("/api/v1/queue").json()["entries"]]
                            == [(ids[1], "over_quota"), (ids[2], "over_quota")], "the round's queue")
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOADMASTER_")}
            env.update(LOADMASTER_URL=server.url, LOADMASTER_TOKEN=token, COLUMNS="200")
            for args in (["queue", "--json"], ["queue", "--all"], ["queue", "--limit", "1"]):
                fast = subprocess.run([sys.executable, "-c", _FAST, *args], env=env, text=True, capture_output=True,
                                      timeout=120, check=False)
                slow = CliRunner().invoke(app, args, env=env)
                assert fast.returncode == slow.exit_code == 0, fast.stderr + slow.output
                if args[1] == "--json":
                    assert [e["job_id"] for e in json.loads(fast.stdout)] == ids[1:]
                    assert _without_times(json.loads(fast.stdout)) == _without_times(json.loads(slow.stdout))
                else:  # the estimates are read against each run's clock (and size the table): not compared
                    assert fast.stdout.splitlines()[0].strip() == slow.stdout.splitlines()[0].strip()
                    shown = [i for i in ids[1:] if i in slow.stdout]
                    assert shown and [i for i in ids[1:] if i in fast.stdout] == shown
                    assert ("1 more" in fast.stdout) == ("1 more" in slow.stdout) == (args[1] == "--limit")
            bad = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "queue", "--limit", "0"], env=env,
                                 text=True, capture_output=True, timeout=120, check=False)
            assert bad.returncode == 2 and "--limit" in bad.stderr  # Typer's error, as before
        finally:
            for job_id in ids:
                c.post(f"/api/v1/jobs/{job_id}/cancel")


def _without_times(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "estimated_start_at"} for e in entries]

