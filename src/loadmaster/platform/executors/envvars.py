"""The environment a learner runs with: the runtime contract (runtime/env.py) over the manifest's env.

The contract follows torchrun's, so that scripts written for torchrun or Lightning run unchanged: the
learners of a job on one node are one group (torchrun's "node"); they learn their place in it from
LOCAL_RANK / LOCAL_WORLD_SIZE and the group's from GROUP_RANK (= NODE_RANK) / GROUP_WORLD_SIZE. When every
learner of the job on a node has one GPU, each sees all of them (CUDA_VISIBLE_DEVICES, in local-rank
order) and picks its own by LOCAL_RANK, which is what `torch.cuda.set_device(LOCAL_RANK)` expects. A
learner with several GPUs (torchrun as the command, model parallelism) or none sees only its own: two such
learners on one node could not tell their GPUs apart by LOCAL_RANK.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.runtime import env as contract

# Variables of loadmaster's own namespace are never inherited from the host: a stale LOADMASTER_DATA_DIR
# would mislead the learner, and the server's own settings (LOADMASTER_DB_URL...) are not its business.
_OWN_PREFIX = "LOADMASTER_"
ROLE = "default"  # torchrun's role name when none is given; loadmaster's learners all have the one role
# Set for every learner unless the manifest's env says otherwise (defaults, not part of the runtime contract):
OMP_NUM_THREADS = "OMP_NUM_THREADS"  # the learner's CPUs (whole, at least 1): no oversubscription
PYTHONUNBUFFERED = "PYTHONUNBUFFERED"  # a stopped attempt's last lines reach its log


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one learner stands in its gang: its node's group and the GPUs it sees (the node's indices)."""

    local_rank: int
    local_world_size: int
    group_rank: int
    group_world_size: int
    visible_gpus: tuple[int, ...]


def placements(spec: AttemptSpec) -> dict[int, Placement]:
    """Every learner's Placement, by rank. Nodes are numbered in the order of their lowest rank, so the
    node of rank 0 (the rendezvous host) is group 0."""
    by_node: dict[str, list[LearnerSpec]] = {}
    for learner in sorted(spec.learners, key=lambda lr: lr.rank):
        by_node.setdefault(learner.node, []).append(learner)
    out: dict[int, Placement] = {}
    for group_rank, members in enumerate(by_node.values()):
        shared = all(len(m.gpu_ids) == 1 for m in members)
        node_gpus = tuple(m.gpu_ids[0] for m in members) if shared else ()
        for local_rank, member in enumerate(members):
            out[member.rank] = Placement(local_rank, len(members), group_rank, len(by_node),
                                         node_gpus if shared else member.gpu_ids)
    return out


def omp_threads(cpus: float) -> int:
    """OpenMP threads for a learner given `cpus` CPUs: the whole ones, at least one."""
    return max(1, math.floor(cpus + 1e-9))


def learner_env(
    spec: AttemptSpec,
    learner: LearnerSpec,
    place: Placement,
    *,
    master_addr: str,
    cuda_visible_devices: str,
    report_file: str,
    preempt_file: str,
) -> dict[str, str]:
    """The variables to set for `learner` (the host's environment is added under them, by child_env).
    `cuda_visible_devices` is place.visible_gpus as the executor names them on the learner's machine."""
    env = {OMP_NUM_THREADS: str(omp_threads(learner.cpus)), PYTHONUNBUFFERED: "1"}
    env.update(spec.env)  # the manifest may choose its own threads or buffering; nothing of the below
    world = str(len(spec.learners))
    env.update({
        contract.RANK: str(learner.rank),
        contract.WORLD_SIZE: world,
        contract.LOCAL_RANK: str(place.local_rank),
        contract.LOCAL_WORLD_SIZE: str(place.local_world_size),
        contract.GROUP_RANK: str(place.group_rank),
        contract.NODE_RANK: str(place.group_rank),
        contract.GROUP_WORLD_SIZE: str(place.group_world_size),
        contract.ROLE_RANK: str(learner.rank),
        contract.ROLE_WORLD_SIZE: world,
        contract.ROLE_NAME: ROLE,
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
