"""Admission: a job that can never fit its tenant's limits or the cluster is rejected, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from loadmaster.core.cluster import Cluster, Node
from loadmaster.platform.admission import admit
from loadmaster.platform.manifest import parse_manifest

CLUSTER = Cluster((Node("a", 4, 16.0, 64.0), Node("b", 4, 16.0, 64.0), Node("c", 8, 32.0, 256.0)))


def _m(**fields: Any) -> Any:
    return parse_manifest({"name": "j", "command": "true", **fields})


@pytest.mark.parametrize(("fields", "max_gpus", "field", "words"), [
    ({"learners": 3, "resources": {"gpus": 4}}, 8, "learners", "may hold at most 8 GPUs"),
    ({"resources": {"gpus": 8}}, 6, "resources.gpus", "may hold at most 6"),
    ({"learners": 4, "elastic": {"min_learners": 3, "max_learners": 6}}, 2, "elastic.min_learners", "smallest"),
    ({"resources": {"gpus": 16}}, None, "resources.gpus", "largest server has 8"),
    ({"learners": 5, "resources": {"gpus": 4}}, None, "learners", "cluster has 16"),
    ({"resources": {"gpus": 8, "cpus": 64}}, None, "resources.cpus", "at most 32 CPUs"),
    ({"resources": {"gpus": 1, "memory_gb": 512}}, None, "resources.memory_gb", "at most 256 GB"),
])
def test_never_fits_names_the_field(fields: dict[str, Any], max_gpus: int | None, field: str, words: str) -> None:
    rejection = admit(_m(**fields), "vision", max_gpus, CLUSTER)
    assert rejection is not None
    assert rejection.field == field
    assert words in rejection.reason


@pytest.mark.parametrize("fields", [
    {"learners": 4, "resources": {"gpus": 4}},  # the whole cluster
    {"learners": 8, "elastic": {"min_learners": 2, "max_learners": 20}, "resources": {"gpus": 4}},  # min fits
    {"resources": {"gpus": 0, "cpus": 32}},  # CPU-only, on the big server
])
def test_what_can_run_some_day_is_admitted(fields: dict[str, Any]) -> None:
    assert admit(_m(**fields), "vision", None, CLUSTER) is None


def test_the_tenant_limit_is_quota_plus_borrowing() -> None:
    assert admit(_m(learners=2, resources={"gpus": 4}), "vision", 8, CLUSTER) is None
    rejection = admit(_m(learners=2, resources={"gpus": 4}), "vision", 7, CLUSTER)
    assert rejection is not None and "tenant set-quota vision" in rejection.reason
