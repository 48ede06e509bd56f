"""Shared fixtures: the real traces in ../shared/traces (skipped when that folder is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.core.workload import Workload
from loadmaster.traces import alibaba, gavel, philly

# tests/traces/conftest.py -> parents[3] is the folder holding the repository and shared/.
SHARED = Path(__file__).parents[3] / "shared" / "traces"


def shared_file(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not here (the real traces live in ../shared/traces)")
    return path


@pytest.fixture(scope="session")
def philly_log() -> Path:
    return shared_file("philly", "philly_sample_cluster_job_log.json")


@pytest.fixture(scope="session")
def philly_workload(philly_log: Path) -> Workload:
    return philly.load(philly_log)


@pytest.fixture(scope="session")
def philly_machines() -> Path:
    return shared_file("philly", "cluster_machine_list")


@pytest.fixture(scope="session")
def gavel_trace() -> Path:
    return shared_file("gavel-msr", "generated_1000jobs_lam240_seed0.trace")


@pytest.fixture(scope="session")
def gavel_vc_folder() -> Path:
    return shared_file("gavel-msr", "seed=0")


@pytest.fixture(scope="session")
def gavel_vc_workload(gavel_vc_folder: Path) -> Workload:
    return gavel.load(gavel_vc_folder)


@pytest.fixture(scope="session")
def alibaba_pods() -> Path:
    return shared_file("alibaba-gpu-v2023", "openb_pod_list_default.csv")


@pytest.fixture(scope="session")
def alibaba_nodes() -> Path:
    return shared_file("alibaba-gpu-v2023", "openb_node_list_gpu_node.csv")


@pytest.fixture(scope="session")
def alibaba_workload(alibaba_pods: Path) -> Workload:
    return alibaba.load(alibaba_pods)
