from __future__ import annotations

import pytest

from loadmaster.platform.manifest import ManifestError, load_manifest_text, parse_manifest


def test_a_full_manifest_round_trips() -> None:
    m = load_manifest_text("""
name: resnet50
learners: 2
resources: {gpus: 2, cpus: 8, memory_gb: 32}
command: python train.py --epochs 3
workdir: /tmp
env: {BATCH: "64"}
priority: 5
placement: {strategy: spread, locality: relaxed}
elastic: {min_learners: 1, max_learners: 4}
retry: {policy: always, max_attempts: 5}
max_runtime_s: 3600
data: file:///data/imagenet
results: /tmp/results
""")
    assert m.gpus == 4 and m.argv == ("bash", "-o", "pipefail", "-c", "python train.py --epochs 3")
    assert parse_manifest(m.model_dump(mode="json")) == m


@pytest.mark.parametrize(("doc", "field", "words"), [
    ({"name": "x", "command": "true", "gpu": 1}, "gpu", "unknown field"),
    ({"name": "x"}, "command", "field required"),
    ({"name": "x", "command": ""}, "command", "command is empty"),
    ({"name": "x", "command": "true", "resources": {"gpus": -1}}, "resources.gpus", "greater than or equal to 0"),
    ({"name": "x", "command": "true", "resources": {"gpus": 10**9}}, "resources.gpus", "less than or equal"),
    ({"name": "x", "command": "true", "learners": 0}, "learners", "greater than or equal to 1"),
    ({"name": "x", "command": "true", "env": {"RANK": "3"}}, "env", "set by loadmaster"),
    ({"name": "x", "command": "true", "env": {"NODE_RANK": "1"}}, "env.NODE_RANK", "set by loadmaster"),
    ({"name": "x", "command": "true", "env": {"GROUP_RANK": "1"}}, "env.GROUP_RANK", "torchrun"),
    ({"name": "x", "command": "true", "stop_grace_s": -1}, "stop_grace_s", "greater than or equal to 0"),
    ({"name": "x", "command": "true", "stop_grace_s": 601}, "stop_grace_s", "less than or equal to 600"),
    ({"name": "x", "command": "true", "stop_grace_s": "soon"}, "stop_grace_s", "valid number"),
    ({"name": "x y", "command": "true"}, "name", "letters, digits"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "loss"}}, "early_stop.patience", "field required"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "loss", "patience": 0}}, "early_stop.patience",
     "greater than or equal to 1"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "loss", "patience": 3, "min_delta": -0.1}},
     "early_stop.min_delta", "greater than or equal to 0"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "step", "patience": 3}}, "early_stop.metric",
     "progress bookkeeping"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "loss", "patience": 3, "mode": "lower"}},
     "early_stop.mode", "'min' or 'max'"),
    ({"name": "x", "command": "true", "early_stop": {"metric": "loss", "patience": 3, "patient": 3}},
     "early_stop.patient", "unknown field"),
    ({"name": "x", "command": "true", "learners": 5, "elastic": {"min_learners": 1, "max_learners": 4}}, "",
     "must lie between"),
])
def test_bad_manifests_name_the_field(doc: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ManifestError) as err:
        parse_manifest(doc)
    fields = [loc for loc, _ in err.value.problems]
    assert field in fields or (field == "" and fields), err.value.problems
    assert words in str(err.value)


def test_text_that_is_not_yaml_says_where() -> None:
    with pytest.raises(ManifestError, match="line 3"):
        load_manifest_text("name: x\ncommand: [unclosed\n")
    with pytest.raises(ManifestError, match="mapping of fields"):
        load_manifest_text("- a list")


def test_stop_grace_s_is_optional_and_kept() -> None:
    assert parse_manifest({"name": "x", "command": "true"}).stop_grace_s is None
    assert parse_manifest({"name": "x", "command": "true", "stop_grace_s": 0}).stop_grace_s == 0
    assert parse_manifest({"name": "x", "command": "true", "stop_grace_s": 90.5}).stop_grace_s == 90.5


def test_a_stored_manifest_with_a_name_reserved_since_node_groups_stays_readable() -> None:
    from loadmaster.platform.manifest import JobManifest

    # the control loop re-validates stored manifests with the model alone
    assert JobManifest.model_validate({"name": "x", "command": "true", "env": {"NODE_RANK": "1"}}).env == {
        "NODE_RANK": "1"}


def test_early_stop_is_opt_in_and_defaults_to_a_falling_metric() -> None:
    from loadmaster.platform.manifest import MetricGoal

    assert parse_manifest({"name": "x", "command": "true"}).early_stop is None
    rule = parse_manifest({"name": "x", "command": "true", "early_stop": {"metric": "loss", "patience": 4}}).early_stop
    assert rule is not None and rule.patience == 4 and rule.min_delta == 0 and rule.mode is MetricGoal.MIN
