"""`las-gavel`: las-het with Gavel's idea of which GPU type a job should get (Narayanan et al., OSDI'20).

las-het offers a job every GPU type it can run on, fastest first, so a job that runs at a tenth of its speed
on a K80 takes one whenever the fast types are busy, and holds it for ten times its runtime. Gavel's
heterogeneity-aware LAS gives each job time on the types where its throughput, relative to the other jobs',
is highest: a job that loses little on a K80 runs there, and the V100s go to the jobs that gain most on
them. Two rules, both fixed per job (they depend on the job's own per-type speeds only, so a decision class
stays (queue, speeds) and the Session's walk is unchanged):

- a type is accepted only where the job runs at least `min_speed` of its best speed; the others are never
  offered to it (it waits for a type where it runs well, as Themis' bids do with a clock);
- accepted types are offered by *comparative advantage*: the job's speed there divided by a typical job's
  (`type_speed`, the default table), so a job that is unusually good on K80s takes them first and leaves the
  fast types to the jobs that need them. With advantage=False they are offered fastest first (las-het).

Jobs without per-type speeds of their own get las-het's order: nothing sets them apart from a typical job.
Measurements behind the defaults: docs/results.md section 11.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loadmaster.scheduling.policies.las import (
    DEFAULT_MAX_LOSS_S,
    DEFAULT_ROUND_S,
    DEFAULT_STARVE_FACTOR,
    TIRESIAS_THRESHOLDS_GPU_S,
    HetLasPolicy,
)
from loadmaster.scheduling.policies.srtf import DEFAULT_CHECKPOINT_INTERVAL_S, DEFAULT_RESTART_OVERHEAD_S

DEFAULT_MIN_SPEED = 0.4


class GavelLasPolicy(HetLasPolicy):
    """las-het whose jobs accept only types where they run at min_speed of their best, by comparative advantage."""

    name = "las-gavel"

    def __init__(self, thresholds: Sequence[float] = TIRESIAS_THRESHOLDS_GPU_S,
                 starve_factor: float | None = DEFAULT_STARVE_FACTOR,
                 round_s: float | None = DEFAULT_ROUND_S,
                 max_loss_s: float | None = DEFAULT_MAX_LOSS_S,
                 checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S,
                 type_speed: Mapping[str, float] | None = None,
                 min_speed: float = DEFAULT_MIN_SPEED, advantage: bool = True) -> None:
        if not 0.0 <= min_speed <= 1.0:
            raise ValueError(f"min_speed is a share of the job's best speed, in [0, 1]; got {min_speed}")
        super().__init__(thresholds, starve_factor, round_s, max_loss_s, checkpoint_interval_s, restart_overhead_s,
                         type_speed)
        self.min_speed = min_speed
        self.advantage = advantage

    def _preference(self, types: tuple[str, ...], speeds: tuple[tuple[str, float], ...] | None) -> list[str]:
        # A job without speeds of its own gets las-het's order: nothing sets it apart from a typical job.
        if speeds is None:
            return super()._preference(types, speeds)
        return self._accepted(types, dict(speeds))

    def _accepted(self, types: Sequence[str], own: Mapping[str, float]) -> list[str]:
        best = max((own.get(t, 0.0) for t in types), default=0.0)
        if best <= 0:
            return list(types)  # no number for any of the cluster's types: nothing to choose by

        def rank(i_t: tuple[int, str]) -> tuple[float, int]:
            i, t = i_t
            speed = own[t]
            typical = self.type_speed.get(t, 1.0)
            return (-(speed / typical if self.advantage and typical > 0 else speed), i)

        listed = [(i, t) for i, t in enumerate(types) if t in own and own[t] >= self.min_speed * best]
        # A type the job has no number for comes last, as in las-het: unknown is not known to be slow.
        return [t for _, t in sorted(listed, key=rank)] + [t for t in types if t not in own]
