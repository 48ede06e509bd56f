"""YAML cluster files, validated with pydantic (imported only when a YAML file is given: it is slow)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadmaster.core.cluster import Cluster
from loadmaster.traces.clusters import DEFAULT_GPU_TYPE, USAGE, ClusterSpecError, NodeGroup, build_cluster


class _NodeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = Field(default=None, min_length=1)
    count: int = Field(default=1, ge=1)
    gpus: int = Field(ge=0)
    gpu_type: str = Field(default=DEFAULT_GPU_TYPE, min_length=1)
    cpus: float | None = Field(default=None, ge=0)
    mem_gb: float | None = Field(default=None, ge=0)
    rack: str | None = Field(default=None, min_length=1)


class _ClusterFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = Field(default=None, min_length=1)
    nodes: list[_NodeEntry] = Field(min_length=1)


_EXAMPLE = """nodes:
  - count: 9        # optional, default 1
    gpus: 4
    gpu_type: v100  # optional; cpus, mem_gb, name and rack are optional too"""
_KEYS = {"cluster": list(_ClusterFile.model_fields), "node": list(_NodeEntry.model_fields)}
_FIX = {
    "int_type": "write a whole number, e.g. 4",
    "float_type": "write a number, e.g. 24 or 62.5",
    "string_type": "write a name, e.g. v100 (quote it if it looks like a number)",
    "list_type": "write a YAML list, one '- gpus: N' item per node group",
    "too_short": "list at least one node group",
    "string_too_short": "give a non-empty name",
    "greater_than_equal": "use a value >= {ge}",
    "missing": "add it",
    "model_type": "write a mapping of key: value pairs",
}


def load_yaml(path: str | Path) -> Cluster:
    name = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ClusterSpecError(f"{name}: cannot read the cluster file ({exc.strerror})\n{USAGE}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise ClusterSpecError(f"{name}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ClusterSpecError(f"{name}: expected a mapping with a `nodes:` list, e.g.\n{_EXAMPLE}")
    try:
        spec = _ClusterFile.model_validate(data)
    except ValidationError as exc:
        problems = [_explain(e) for e in exc.errors()]
        raise ClusterSpecError(f"{name}: {len(problems)} problem(s):\n  " + "\n  ".join(problems)) from None
    groups = [
        NodeGroup(e.count, e.gpus, e.gpu_type, e.cpus, e.mem_gb, e.name, e.rack) for e in spec.nodes
    ]
    return build_cluster(groups, name=spec.name or Path(path).stem)


def _explain(error: Any) -> str:
    loc = error["loc"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "top level"
    kind = error["type"]
    if kind == "extra_forbidden":
        scope = "node" if len(loc) > 1 else "cluster"
        allowed = _KEYS[scope]
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"{where}: unknown key; {hint}allowed keys are {', '.join(allowed)}"
    fix = _FIX.get(kind, "see docs/clusters.md").format(**(error.get("ctx") or {}))
    got = "" if kind == "missing" else f" (got {error.get('input')!r})"
    return f"{where}: {error['msg']}{got}; fix: {fix}"


