"""A simulation that also counts the decisions it made (not the timer rounds it counted without making them),
for tests that compare a run which skips rounds with one that makes every round."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.sim import simulator
from loadmaster.sim.experiment import RunOptions, simulate


def simulate_counting(workload: Workload, cluster: Cluster, options: RunOptions,
                      run_attrs: Mapping[str, object] | None = None, timeline: bool = False
                      ) -> tuple[dict[str, object], list[str], int]:
    """The run's summary (without its wall time), every job's record as text (then the timeline's, with
    `timeline`: a run that skips rounds records fewer points), and the decisions made. `run_attrs`: class
    attributes of the simulator's run to set for it."""
    made = [0]
    decide = simulator._Run.decide
    start_or_decide = simulator._Run.start_or_decide

    def counted(run: simulator._Run) -> object:
        made[0] += 1
        return decide(run)

    def counted_alone(run: simulator._Run, keep: bool) -> object:  # the run loop's decide() and apply()
        made[0] += 1
        return start_or_decide(run, keep)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulator._Run, "decide", counted)
        mp.setattr(simulator._Run, "start_or_decide", counted_alone)
        for name, value in (run_attrs or {}).items():
            mp.setattr(simulator._Run, name, value)
        run = simulate(workload, cluster, options)
    summary = {k: v for k, v in run.summary.items() if k != "wall_time_s"}
    written = [repr(r) for r in run.result.records]
    if timeline:
        line = run.result.timeline
        written.append(repr((list(line.times), list(line.busy_gpus), list(line.queued))))
    return summary, written, made[0]
