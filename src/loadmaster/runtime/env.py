"""The environment contract between the platform and a learner.

The executor sets these variables for every learner process; `loadmaster.runtime` reads them. Plain names
(RANK, WORLD_SIZE, ...) are torch.distributed's, so torch code runs unchanged; LOADMASTER_* are ours.
This module must import nothing of the server: a learner installs loadmaster only for the runtime.
"""

from __future__ import annotations

# torch.distributed's env:// rendezvous, with torchrun's names for the grouping of learners by node: the
# learners of a job on one node are one group (torchrun's "node"), numbered in the order of their lowest rank.
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"  # index among the job's learners on this node
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"  # the job's learners on this node
GROUP_RANK = "GROUP_RANK"  # torchrun's name for the node's index among the job's nodes
NODE_RANK = "NODE_RANK"  # the same, as Lightning and most launch scripts spell it
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"  # the job's nodes
ROLE_RANK = "ROLE_RANK"  # torchrun's per-role rank: every learner has the one role, so RANK
ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE"
ROLE_NAME = "ROLE_NAME"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# loadmaster's own
JOB_ID = "LOADMASTER_JOB_ID"
ATTEMPT = "LOADMASTER_ATTEMPT"  # 1 for the first attempt; a resume after preemption is a new attempt
CHECKPOINT_DIR = "LOADMASTER_CHECKPOINT_DIR"  # the job's checkpoint directory, kept across attempts
DATA_DIR = "LOADMASTER_DATA_DIR"  # where the job's data source was staged (unset when it has none)
RESULTS_DIR = "LOADMASTER_RESULTS_DIR"  # what the learners write here is copied to the results target
REPORT_FILE = "LOADMASTER_REPORT_FILE"  # JSON lines appended by runtime.report(), one file per rank
ARRAY_INDEX = "LOADMASTER_ARRAY_INDEX"  # a job array's task: its index (Slurm's SLURM_ARRAY_TASK_ID)
ARRAY_JOB_ID = "LOADMASTER_ARRAY_JOB_ID"  # the array's id, shared by its tasks (SLURM_ARRAY_JOB_ID)
PREEMPT_FILE = "LOADMASTER_PREEMPT_FILE"  # appears when the platform asks the learner to stop (then SIGTERM)
