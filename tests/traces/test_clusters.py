"""Cluster specs: shorthand, YAML, machine lists and the bundled names."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from loadmaster.traces import ClusterSpecError, load_cluster
from loadmaster.traces.clusters import RACK_SIZE


def test_gavel_heterogeneous_cluster() -> None:
    c = load_cluster("9x4:v100,9x4:p100,9x4:k80")
    assert len(c.nodes) == 27 and c.total_gpus == 108
    assert {t: c.gpus_of_type(t) for t in c.gpu_types} == {"v100": 36, "p100": 36, "k80": 36}
    assert len(c.racks) == 3  # each group starts its own rack


def test_synergy_cluster_defaults() -> None:
    c = load_cluster("16x8")
    assert c.total_gpus == 128
    assert {(n.cpus, n.mem_gb, n.gpu_type) for n in c.nodes} == {(24.0, 500.0, "gpu")}
    assert len(c.racks) == 1


def test_explicit_cpus_memory_and_rack_filling() -> None:
    c = load_cluster("100x4:32cpu:128gb")
    assert {(n.cpus, n.mem_gb) for n in c.nodes} == {(32.0, 128.0)}
    sizes = Counter(n.rack for n in c.nodes)
    assert len(sizes) == 7 and max(sizes.values()) == RACK_SIZE and min(sizes.values()) == 4


def test_names_are_unique_across_groups_of_one_type() -> None:
    c = load_cluster("2x4:v100, 2x8:v100")
    assert [n.name for n in c.nodes] == ["v100-000", "v100-001", "v100-002", "v100-003"]


def test_philly_cluster() -> None:
    c = load_cluster("philly")
    assert len(c.nodes) == 552 and c.total_gpus == 2490
    assert set(c.gpu_types) == {"12gb", "24gb"}


def test_alibaba_cluster() -> None:
    c = load_cluster("alibaba")
    assert len(c.nodes) == 1213 and c.total_gpus == 6212


def test_machine_list_files(philly_machines: Path, alibaba_nodes: Path) -> None:
    assert load_cluster(str(philly_machines)).total_gpus == 2490
    assert load_cluster(str(alibaba_nodes)).total_gpus == 6212


@pytest.mark.parametrize("spec", ["", "foo", "9x", "0x4", "4x4:1.5x", "4x4:v100:k80", "4x4:8cpu:16cpu"])
def test_bad_shorthand_shows_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ClusterSpecError) as err:
        load_cluster(spec)
    assert "COUNTxGPUS" in str(err.value) and "philly | alibaba" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_yaml_cluster(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(
        "name: lab\n"
        "nodes:\n"
        "  - {count: 20, gpus: 8, gpu_type: a100}\n"
        "  - {name: fat, gpus: 4, cpus: 64, mem_gb: 1024, rack: special}\n"
        "  - {count: 2, gpus: 0, cpus: 32, mem_gb: 128, name: cpu}\n"
    )
    c = load_cluster(str(path))
    assert c.name == "lab" and len(c.nodes) == 23 and c.total_gpus == 164
    by_name = {n.name: n for n in c.nodes}
    assert (by_name["fat"].cpus, by_name["fat"].mem_gb, by_name["fat"].rack) == (64.0, 1024.0, "special")
    assert by_name["a100-000"].cpus == 24.0 and by_name["cpu-001"].gpus == 0
    assert Counter(n.rack for n in c.nodes if n.gpu_type == "a100") == {"rack0": 16, "rack1": 4}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("nodes:\n  - {gpus: 4, gpu_typ: v100}\n", "nodes[0].gpu_typ: unknown key; did you mean 'gpu_type'?"),
        ("nodes:\n  - {gpus: -1}\n", "nodes[0].gpus"),
        ("nodes:\n  - {gpus: 2, cpus: -3}\n", ">= 0"),
        ("nodes:\n  - {gpus: four}\n", "nodes[0].gpus: Input should be a valid integer (got 'four')"),
        ("nodes:\n  - {gpus: 4.5}\n", "whole number"),
        ("nodes:\n  - {count: 2}\n", "nodes[0].gpus: Field required"),
        ("nodes: []\n", "at least one node group"),
        ("nods:\n  - {gpus: 2}\n", "did you mean 'nodes'?"),
        ("nodes: [\n", "line 2: not valid YAML"),
        ("", "expected a mapping with a `nodes:` list"),
        ("nodes:\n  - {name: a, gpus: 1}\n  - {name: a, gpus: 1}\n", "duplicate node names"),
    ],
)
def test_invalid_yaml_names_field_and_fix(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ClusterSpecError) as err:
        load_cluster(str(path))
    assert expected in str(err.value)


def test_missing_yaml_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterSpecError, match="cannot read the cluster file"):
        load_cluster(str(tmp_path / "nope.yaml"))
