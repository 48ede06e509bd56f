"""Where a job's files live under the server's data directory. The control loop writes there, the executor's
learners write there, the API reads logs from there: one definition, so the three agree.

    DATA/tenants/TENANT/                the tenant's own area (`~` in a manifest), its OS user's, 0700
    DATA/jobs/JOB/                      the server's (0711: its learners may pass, not list)
    DATA/jobs/JOB/work/                 the default workdir; relative manifest paths resolve here
    DATA/jobs/JOB/checkpoints/          kept across attempts (runtime.checkpoint_dir())
    DATA/jobs/JOB/data/                 the staged data source (runtime.data_dir())
    DATA/jobs/JOB/results/              copied to the results target when the job succeeds
    DATA/jobs/JOB/attempt-N/logs/       rank-R.log (stdout+stderr), rank-R.exit
    DATA/jobs/JOB/attempt-N/reports/    rank-R.jsonl (runtime.report())
    DATA/jobs/JOB/attempt-N/code/       the job's code package, unpacked afresh for this attempt (its cwd), the
                                        tenant's user's once unpacked (by the server, where the learner cannot
                                        plant links) and inside the sandbox
    DATA/code/sha256/HEX.tar.gz         uploaded code packages, by content (platform/code.py)

The learner's directories (work, checkpoints, data, results, reports, code) belong to the tenant's OS user with
mode 0700; the logs and the executor's control files stay the server's, in directories the learner cannot
change (a learner owning them could swap one for a symbolic link that the server then writes through).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class JobDirs:
    root: Path  # the server's data directory

    # Each path is made in one joinpath(), not a chain of `/` (a Path per step): the control loop makes a
    # dozen of these per attempt it starts and ends.
    def job(self, job_id: str) -> Path:
        return self.root.joinpath("jobs", job_id)

    def work(self, job_id: str) -> Path:
        return self.root.joinpath("jobs", job_id, "work")

    def tenant_home(self, tenant: str) -> Path:
        return self.root.joinpath("tenants", tenant)

    def checkpoints(self, job_id: str) -> Path:
        return self.root.joinpath("jobs", job_id, "checkpoints")

    def data(self, job_id: str) -> Path:
        return self.root.joinpath("jobs", job_id, "data")

    def results(self, job_id: str) -> Path:
        return self.root.joinpath("jobs", job_id, "results")

    def attempt(self, job_id: str, attempt: int) -> Path:
        return self.root.joinpath("jobs", job_id, f"attempt-{attempt}")

    def logs(self, job_id: str, attempt: int) -> Path:
        return self.root.joinpath("jobs", job_id, f"attempt-{attempt}", "logs")

    def code(self, job_id: str, attempt: int) -> Path:
        return self.root.joinpath("jobs", job_id, f"attempt-{attempt}", "code")

    def reports(self, job_id: str, attempt: int) -> Path:
        return self.root.joinpath("jobs", job_id, f"attempt-{attempt}", "reports")

    def log_file(self, job_id: str, attempt: int, rank: int) -> Path:
        return self.root.joinpath("jobs", job_id, f"attempt-{attempt}", "logs", f"rank-{rank}.log")
