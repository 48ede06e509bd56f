"""A plain `sim run --json` imports what its run uses: one policy's module, one placer's, one trace loader, no
Rich (its note goes to stderr as plain text when stderr is no terminal), no numpy.random without a failure to
draw, no numpy.ma, no learner-at-a-time simulator. Start-up is most of a short run's process (issue 9's Gavel
figure: 1,000 jobs in 0.5 s, whole process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import POLICIES, make_policy

_PROBE = """
import json, sys
sys.argv = ["loadmaster", *json.loads(sys.argv[1])]
from loadmaster.cli.main import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _run(tmp_path: Path, *args: str) -> tuple[dict[str, object], str, list[str]]:
    argv = ["sim", "run", "--json", "--out", str(tmp_path / "out"), *args]
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    *notes, modules = proc.stderr.rstrip("\n").split("\n")
    return json.loads(proc.stdout), "\n".join(notes), json.loads(modules)


def test_a_themis_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    summary, notes, modules = _run(tmp_path, "--trace", "sample:gavel", "--policy", "themis")
    assert summary["jobs"] > 0 and (tmp_path / "out" / "summary.json").exists()
    policies = {m for m in modules if m.startswith("loadmaster.scheduling.policies.")}
    assert policies == {"loadmaster.scheduling.policies.base", "loadmaster.scheduling.policies.themis",
                        "loadmaster.scheduling.policies.themis_quiet"}  # its next_change_s, a part of it
    placers = {m for m in modules if m.startswith("loadmaster.scheduling.placement.")}
    assert placers == {"loadmaster.scheduling.placement.base", "loadmaster.scheduling.placement.pack"}
    unused = ("rich", "typer", "click", "pydantic", "numpy.ma", "numpy.random", "loadmaster.sim.learner_at_a_time",
              "loadmaster.traces.philly", "loadmaster.traces.alibaba", "loadmaster.traces.history")
    assert [m for m in modules if m in unused or m.startswith(tuple(u + "." for u in unused))] == []
    # The loader's report, as plain text: one line per note, not wrapped, nothing read as markup.
    assert notes.startswith("sample:gavel") or ": read " in notes.split("\n")[0]
    assert all(line.startswith("  note: ") for line in notes.split("\n")[1:])


def test_a_run_with_failures_to_draw_still_draws_them(tmp_path: Path) -> None:
    """numpy.random is imported at the first draw: the Philly sample's failed attempts draw categories, and
    the run's summary is the one the eager generator gave (the golden runs check the numbers). A run without
    plots imports no figure module."""
    summary, _, modules = _run(tmp_path, "--trace", "sample:philly", "--cluster", "philly", "--no-plots")
    assert "numpy.random" in modules
    assert not {"loadmaster.sim.figures", "loadmaster.sim.svg", "loadmaster.sim.plots"} & set(modules)
    assert summary["gpu_hours_failed_attempts"] > 0


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_name_makes_its_policy(name: str) -> None:
    policy = make_policy(name)
    assert policy.name == name.removesuffix("-strict")
    assert POLICIES[name]() is not policy  # a fresh policy per call: policies hold per-run state
    assert type(policy) is POLICIES[name].target  # the class, for its signature (the server's checkpoint interval)
    assert getattr(policy, "strict", False) is (name == "fifo-strict")


def test_keyword_arguments_reach_the_policy_class() -> None:
    las = POLICIES["las"](checkpoint_interval_s=60.0)
    assert las.checkpoint_interval_s == 60.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placer_name_makes_its_placer(name: str) -> None:
    placer = make_placer(name)
    assert placer.name == name
    assert PLACERS[name]() is not placer


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of: fifo"):
        make_policy("nope")
    with pytest.raises(ValueError, match="unknown placement 'nope'; choose one of: pack"):
        make_placer("nope")
