"""The environment contract between the platform and a learner.

The executor sets these variables for every learner process; `loadmaster.runtime` reads them. Plain names
(RANK, WORLD_SIZE, ...) are torch.distributed's, so torch code runs unchanged; LOADMASTER_* are ours.
This module must import nothing of the server: a learner installs loadmaster only for the runtime.
"""

from __future__ import annotations

# torch.distributed's env:// rendezvous
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
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
PREEMPT_FILE = "LOADMASTER_PREEMPT_FILE"  # appears when the platform asks the learner to stop (then SIGTERM)
