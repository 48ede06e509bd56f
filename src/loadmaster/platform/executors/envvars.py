"""The environment a learner runs with: the runtime contract (runtime/env.py) over the manifest's env."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.runtime import env as contract

# Variables of loadmaster's own namespace are never inherited from the host: a stale LOADMASTER_DATA_DIR
# would mislead the learner, and the server's own settings (LOADMASTER_DB_URL...) are not its business.
_OWN_PREFIX = "LOADMASTER_"


def learner_env(
    spec: AttemptSpec,
    learner: LearnerSpec,
    *,
    master_addr: str,
    cuda_visible_devices: str,
    report_file: str,
    preempt_file: str,
) -> dict[str, str]:
    """The variables to set for `learner` (the host's environment is added under them, by child_env)."""
    local = sorted(other.rank for other in spec.learners if other.node == learner.node)
    env = dict(spec.env)
    env.update({
        contract.RANK: str(learner.rank),
        contract.WORLD_SIZE: str(len(spec.learners)),
        contract.LOCAL_RANK: str(local.index(learner.rank)),
        contract.LOCAL_WORLD_SIZE: str(len(local)),
        contract.MASTER_ADDR: master_addr,
        contract.MASTER_PORT: str(spec.master_port),
        contract.CUDA_VISIBLE_DEVICES: cuda_visible_devices,
        contract.JOB_ID: spec.job_id,
        contract.ATTEMPT: str(spec.attempt),
        contract.CHECKPOINT_DIR: spec.checkpoint_dir,
        contract.RESULTS_DIR: spec.results_dir,
        contract.REPORT_FILE: report_file,
        contract.PREEMPT_FILE: preempt_file,
    })
    if spec.data_dir is not None:
        env[contract.DATA_DIR] = spec.data_dir
    return env


def child_env(host: Mapping[str, str], overlay: Mapping[str, str]) -> dict[str, str]:
    """The learner's whole environment: the host's (PATH, HOME, ...) without loadmaster's own variables,
    then `overlay` (learner_env's result, which the manifest's LOADMASTER_* entries are part of)."""
    env = {k: v for k, v in host.items() if not k.startswith(_OWN_PREFIX)}
    env.update(overlay)
    return env
