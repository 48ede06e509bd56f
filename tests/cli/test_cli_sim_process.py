"""A `loadmaster sim ...` process leaves the cyclic collector off to its end (cli/main.py, sim/collector.py):
what it simulated lives until it exits, and a collection after the run would only walk it. Other commands
keep it on. The console script then ends a successful simulation without the interpreter's teardown
(cli/main.py script()): what it prints and writes must all be there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROBE = """
import gc, json, sys
sys.argv = ["loadmaster", *json.loads(sys.argv[1])]
from loadmaster.cli.main import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(gc.isenabled()), file=sys.stderr)
"""


def _collector_on_after(argv: list[str]) -> bool:
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return bool(json.loads(proc.stderr.rstrip("\n").split("\n")[-1]))


def test_a_sim_run_leaves_the_collector_off(tmp_path: Path) -> None:
    assert not _collector_on_after(["sim", "run", "--json", "--no-plots", "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "jobs.csv").exists()


def test_other_commands_keep_it_on() -> None:
    assert _collector_on_after(["--help"])


def _script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "sim", "run", "--out", str(tmp_path / "out"),
                           *args], capture_output=True, text=True, timeout=120)


def test_the_script_ends_a_simulation_with_everything_printed_and_written(tmp_path: Path) -> None:
    proc = _script(tmp_path, "--json", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["jobs"] > 0
    out = tmp_path / "out"
    assert json.loads((out / "summary.json").read_text())["jobs"] == summary["jobs"]
    assert len((out / "jobs.csv").read_text().splitlines()) == summary["jobs"] + 1
    table = _script(tmp_path, "--no-plots")  # the table and the closing line, through the same exit
    assert table.returncode == 0, table.stderr
    assert "simulation summary" in table.stdout and table.stdout.rstrip().endswith(str(out))


def test_a_failing_simulation_exits_as_usual(tmp_path: Path) -> None:
    proc = _script(tmp_path, "--policy", "no-such-policy")
    assert proc.returncode != 0
    assert "no-such-policy" in proc.stdout + proc.stderr
