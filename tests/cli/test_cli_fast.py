"""A plain `sim run` skips Typer (cli/fast.py): the same options, defaults, outputs and errors; anything
less plain goes to the Typer app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadmaster.cli import sim
from loadmaster.cli.fast import _FLAGS, _VALUED, parse_sim_run, run_defaults, run_sim_fast
from loadmaster.cli.main import app
from loadmaster.sim.failures import RetryPolicy


def _run_command() -> typer.core.TyperCommand:
    group = typer.main.get_command(sim.app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["run"]
    assert isinstance(command, typer.core.TyperCommand)
    return command


def test_every_option_and_default_is_the_typer_commands() -> None:
    command = _run_command()
    defaults = run_defaults()
    known = {**{name: param for name, (param, _) in _VALUED.items()}, **_FLAGS}
    seen = set()
    for param in command.params:
        name = param.opts[0]
        assert known[name] == param.name, name
        assert defaults[param.name] == param.default, name
        seen.add(name)
    assert seen == set(known)


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
    assert run_sim_fast(["sim", "run", *argv]) is None


def test_other_commands_go_to_typer() -> None:
    assert run_sim_fast(["sim", "compare"]) is None
    assert run_sim_fast(["trace", "synth"]) is None
    assert run_sim_fast([]) is None


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
