"""The golden matrix: every policy x placement on the bundled traces, reduced to digests of what a run writes.

A digest is the sha256 of summary.json without `wall_time_s` (the only key that depends on the machine) and
the sha256 of jobs.csv, byte for byte. Speed work must leave every digest unchanged; a change of meaning (a
new performance model, a fixed bug) regenerates them once, in a commit that says why:

    .venv/bin/python -m tests.sim.golden            # print the digests that differ from golden_digests.json
    .venv/bin/python -m tests.sim.golden --write    # rewrite golden_digests.json from the current code
    .venv/bin/python -m tests.sim.golden --only overload/ [--write]   # the cases whose name starts so

Workloads: the bundled Gavel sample on its 108-GPU cluster and on a third of it (36 GPUs, where LAS, SRTF
and Themis preempt hundreds of times), the bundled Philly sample on Philly's machine list, and a small
Philly-like overload (offered load 1.5, CPU and memory requests from the model families' profiles, so the
CPU term of the performance model and the CPU-aware placers are exercised).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES
from loadmaster.sim.experiment import RunOptions, simulate, write_run
from loadmaster.traces import load_cluster, load_workload, write_csv
from loadmaster.traces.synth import synthesize

DIGESTS = Path(__file__).with_name("golden_digests.json")


@dataclass(frozen=True)
class Case:
    workload: str
    policy: str
    placement: str

    @property
    def name(self) -> str:
        return f"{self.workload}/{self.policy}/{self.placement}"


# name -> (how to make the workload, cluster spec)
WORKLOADS: dict[str, tuple[str, str]] = {
    "gavel": ("sample:gavel", "9x4:v100,9x4:p100,9x4:k80"),
    "gavel-36": ("sample:gavel", "3x4:v100,3x4:p100,3x4:k80"),
    "philly": ("sample:philly", "philly"),
    "overload": ("synth", "4x8"),
}


@cache
def workload(name: str) -> Workload:
    source, _ = WORKLOADS[name]
    if source == "synth":
        return synthesize("philly", 400, 3, cluster_gpus=32, load=1.5, cpu_demands=True)
    return load_workload(source)


@cache
def cluster(name: str) -> Cluster:
    return load_cluster(WORKLOADS[name][1])


def cases() -> Iterator[Case]:
    for w in WORKLOADS:
        for policy in POLICIES:
            for placement in PLACERS:
                yield Case(w, policy, placement)


def workload_digest(name: str) -> str:
    """The workload itself, as canonical CSV: a changed generator shows up here, not as a changed run."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "w.csv"
        write_csv(workload(name).jobs, path)
        return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(case: Case) -> dict[str, str]:
    outcome = simulate(workload(case.workload), cluster(case.workload),
                       RunOptions(policy=case.policy, placement=case.placement))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        write_run(out, outcome, plots="none")
        summary = json.loads((out / "summary.json").read_text())
        summary.pop("wall_time_s")
        text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
        return {"summary": hashlib.sha256(text.encode()).hexdigest(),
                "jobs_csv": hashlib.sha256((out / "jobs.csv").read_bytes()).hexdigest()}


def stored() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(DIGESTS.read_text())
    return data


def main(argv: list[str]) -> int:
    write = "--write" in argv
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    old = stored() if DIGESTS.exists() else {}
    new: dict[str, dict[str, str]] = {**old, **{f"workload/{w}": {"csv": workload_digest(w)} for w in WORKLOADS}}
    differ = ran = 0
    for case in cases():
        if not case.name.startswith(only):
            continue
        ran += 1
        new[case.name] = digests(case)
        if old.get(case.name) != new[case.name]:
            differ += 1
            print(f"differs: {case.name}", flush=True)
    for w in WORKLOADS:
        if old.get(f"workload/{w}") != new[f"workload/{w}"]:
            print(f"workload differs: {w}")
    if write:
        DIGESTS.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(new)} entries to {DIGESTS}")
    print(f"{differ} of {ran} runs differ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
