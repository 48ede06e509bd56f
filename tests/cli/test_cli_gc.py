"""A `loadmaster sim ...` process leaves the cyclic collector off to its end (cli/main.py, sim/collector.py):
what it simulated lives until it exits, and a collection after the run would only walk it. Other commands
keep it on."""

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
