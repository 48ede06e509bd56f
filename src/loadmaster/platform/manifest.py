"""A job manifest (YAML or JSON), validated with pydantic: what a user submits.

Unknown fields are errors (a typo must not be silently ignored). Limits are deliberately generous but
finite, so an absurd value ("gpus: 1e9") is an error that names the field rather than a job that queues
forever; the cluster-specific check (does it fit at all?) happens at submission against the live cluster.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

MAX_LEARNERS = 1024
MAX_GPUS_PER_LEARNER = 64
MAX_CPUS_PER_LEARNER = 1024.0
MAX_MEMORY_GB_PER_LEARNER = 16384.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_STOP_GRACE_S = 600.0
# The runtime contract's variables belong to the executor: a manifest may not override them.
RESERVED_ENV_PREFIXES = ("LOADMASTER_",)
RESERVED_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "CUDA_VISIBLE_DEVICES"})
# torchrun's grouping names, added to the contract later: refused at submission (parse_manifest) rather than by
# the model, because the control loop validates stored manifests again and an older job that set one of them
# must stay readable (the executor's value wins for it).
RESERVED_ENV_SINCE_GROUPS = frozenset({"GROUP_RANK", "NODE_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
                                       "ROLE_NAME"})
# Shell strings run under bash with pipefail, so `python train.py | tee log` fails when python does.
SHELL = ("bash", "-o", "pipefail", "-c")


MAX_DEPENDENCIES = 100
MAX_ARRAY_TASKS = 1000  # Slurm's default MaxArraySize is 1001
JobRef = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9-]+$")]
_ARRAY = re.compile(r"^(?P<ranges>[0-9,:\-]+)(%(?P<limit>[0-9]+))?$")
SERVER_SET = ("array_index", "array_job")  # fields the server writes into a task's manifest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Strict):
    """Per learner."""

    gpus: Annotated[int, Field(ge=0, le=MAX_GPUS_PER_LEARNER)] = 1
    cpus: Annotated[float, Field(gt=0, le=MAX_CPUS_PER_LEARNER)] = 1.0
    memory_gb: Annotated[float, Field(gt=0, le=MAX_MEMORY_GB_PER_LEARNER)] = 1.0
    # Only GPUs of this type (a node's type: `loadmaster cluster` lists them); None: any, one type per gang.
    gpu_type: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = None

    @model_validator(mode="after")
    def _type_needs_gpus(self) -> Self:
        if self.gpu_type is not None and self.gpus == 0:
            raise ValueError(f"gpu_type {self.gpu_type!r} asks for a type of GPU, but gpus is 0: set resources.gpus "
                             "or leave gpu_type out")
        return self


class PlacementStrategy(StrEnum):
    PACK = "pack"
    SPREAD = "spread"


class Locality(StrEnum):
    NONE = "none"  # anywhere
    RELAXED = "relaxed"  # one server, then one rack, then anywhere as the job waits
    STRICT = "strict"  # as few servers as possible, however long it waits


class Placement(_Strict):
    strategy: PlacementStrategy = PlacementStrategy.PACK
    locality: Locality = Locality.NONE


class Elastic(_Strict):
    min_learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)]
    max_learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)]

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_learners > self.max_learners:
            raise ValueError("elastic.min_learners must be <= elastic.max_learners")
        return self


class RetryPolicy(StrEnum):
    NEVER = "never"
    ALWAYS = "always"  # retry every failure up to max_attempts
    CLASSIFIED = "classified"  # retry only failures a retry can help (not deterministic ones)


class Retry(_Strict):
    policy: RetryPolicy = RetryPolicy.CLASSIFIED
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 3


class MetricGoal(StrEnum):
    MIN = "min"  # a loss: lower is better
    MAX = "max"  # an accuracy: higher is better


class EarlyStop(_Strict):
    """Stop the job, COMPLETED, once the metric its learners report (runtime.report(loss=...)) has not improved
    by more than min_delta over its best for `patience` reports in a row."""

    metric: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    patience: Annotated[int, Field(ge=1, le=1_000_000)]
    min_delta: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    mode: MetricGoal = MetricGoal.MIN

    @field_validator("metric")
    @classmethod
    def _not_bookkeeping(cls, v: str) -> str:
        if v in ("time", "step", "total_steps", "progress"):
            raise ValueError(f"{v!r} is progress bookkeeping, not a metric that plateaus: name the reported "
                             "value to watch, e.g. loss")
        return v


class JobManifest(_Strict):
    # The schema says what _name() checks (the check itself stays there, for its message).
    name: str = Field(json_schema_extra={"pattern": _NAME.pattern, "minLength": 1, "maxLength": 128})
    learners: Annotated[int, Field(ge=1, le=MAX_LEARNERS)] = 1
    resources: Resources = Resources()
    command: list[str] | str
    # An uploaded code package (platform/code.py): `loadmaster job submit --working-dir DIR` sets it. Declared
    # before workdir, whose check reads it.
    code: str | None = Field(default=None, json_schema_extra={"pattern": r"^sha256:[0-9a-f]{64}$"})
    # Where the learners start. With `code`, a directory inside the package (default: its root); without, a
    # directory on the learners' machines.
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    placement: Placement = Placement()
    elastic: Elastic | None = None
    retry: Retry = Retry()
    max_runtime_s: Annotated[float, Field(gt=0, le=365 * 86400)] | None = None
    # Expected run time alone, when the user knows it: feeds queue-wait estimates until progress is reported.
    expected_duration_s: Annotated[float, Field(gt=0, le=365 * 86400)] | None = None
    # Seconds a stopped learner has between SIGTERM and SIGKILL to checkpoint; None: the server's --grace.
    stop_grace_s: Annotated[float, Field(ge=0, le=MAX_STOP_GRACE_S)] | None = None
    # Opt-in: stop the job (COMPLETED, not retried) once its reported metric plateaus.
    early_stop: EarlyStop | None = None
    data: str | None = None  # fsspec URL staged before the learners start (DOWNLOADING)
    results: str | None = None  # fsspec URL the results directory is copied to (STORING)
    # Slurm's --dependency: the job is not scheduled until each job of `after` has started (or ended), each
    # of `afterany` has ended, each of `afterok` has COMPLETED (one that ended otherwise fails this job).
    after: Annotated[list[JobRef], Field(max_length=MAX_DEPENDENCIES)] = Field(default_factory=list)
    afterany: Annotated[list[JobRef], Field(max_length=MAX_DEPENDENCIES)] = Field(default_factory=list)
    afterok: Annotated[list[JobRef], Field(max_length=MAX_DEPENDENCIES)] = Field(default_factory=list)
    # Slurm's --array: "0-9", "1,3,8-11", "0-20:5", with "%N" to run at most N tasks at once. One job per
    # index is made at submission, each with the fields below set (LOADMASTER_ARRAY_INDEX in its environment).
    array: str | None = Field(default=None, max_length=256)
    array_index: int | None = None  # set by the server, refused at submission
    array_job: str | None = None  # the array's first task's id: the tasks' shared name (set by the server)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("name must be 1-128 characters of letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, str) and not v.strip():
            raise ValueError("command is empty: give the program to run, e.g. 'python train.py'")
        if isinstance(v, list) and (not v or not v[0].strip()):
            raise ValueError("command is empty: give the program and its arguments, e.g. ['python', 'train.py']")
        return v

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            array_tasks(v)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"env name {name!r} is not a valid variable name")
            if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(f"env {name} is set by loadmaster for every learner; remove it from the manifest")
        return v

    @field_validator("code")
    @classmethod
    def _code(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^sha256:[0-9a-f]{64}$", v):
            raise ValueError("code names an uploaded package as sha256: and 64 lowercase hex digits (what "
                             "`loadmaster job submit --working-dir DIR` uploads and sets)")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir_inside_code(cls, v: str | None, info: ValidationInfo) -> str | None:
        inside = v is None or not (v.startswith(("/", "~")) or ".." in PurePosixPath(v).parts)
        if info.data.get("code") is not None and not inside:
            raise ValueError(f"{v!r}: with `code`, workdir is a directory inside the package (relative, "
                             "without '..'); leave it out to start at the package's root")
        return v

    @model_validator(mode="after")
    def _elastic_holds_learners(self) -> Self:
        if self.elastic and not self.elastic.min_learners <= self.learners <= self.elastic.max_learners:
            raise ValueError(f"learners ({self.learners}) must lie between elastic.min_learners "
                             f"({self.elastic.min_learners}) and elastic.max_learners ({self.elastic.max_learners})")
        return self

    @property
    def argv(self) -> tuple[str, ...]:
        return (*SHELL, self.command) if isinstance(self.command, str) else tuple(self.command)

    @property
    def gpus(self) -> int:
        return self.learners * self.resources.gpus


class ManifestError(ValueError):
    """A manifest that cannot be accepted. `problems` lists (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in problems))


def problems_of(err: ValidationError) -> list[tuple[str, str]]:
    """pydantic's errors as (dotted field path, message), in the words a user can act on."""
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling (see the manifest reference in docs/platform.md)"
        elif e["type"] == "missing":
            msg = "field required"
        out.append((loc, msg))
    return out


def array_tasks(spec: str) -> tuple[tuple[int, ...], int | None]:
    """Slurm's array syntax: the indices, in order, and the most tasks at once (None: no limit)."""
    m = _ARRAY.match(spec.replace(" ", ""))
    if m is None:
        raise ValueError(f"array {spec!r}: write indices as Slurm does, e.g. '0-9', '1,3,8-11', '0-20:5', "
                         "optionally with '%N' to run at most N at once ('0-9%2')")
    indices: list[int] = []
    for part in m["ranges"].split(","):
        bounds, _, step_text = part.partition(":")
        low_text, dash, high_text = bounds.partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
            step = int(step_text) if step_text else 1
        except ValueError:
            raise ValueError(f"array {spec!r}: {part!r} is not N, N-M or N-M:STEP") from None
        if high < low or step < 1:
            raise ValueError(f"array {spec!r}: {part!r} runs backwards or has a step below 1")
        if (high - low) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise ValueError(f"array {spec!r}: more than {MAX_ARRAY_TASKS} tasks")
        indices.extend(range(low, high + 1, step))
    limit = int(m["limit"]) if m["limit"] is not None else None
    if limit is not None and limit < 1:
        raise ValueError(f"array {spec!r}: %{limit} must allow at least one task at once")
    return tuple(sorted(set(indices))), limit


def parse_manifest(data: Any) -> JobManifest:
    """Validate an already decoded manifest (a mapping)."""
    if not isinstance(data, dict):
        raise ManifestError([("", f"a manifest is a mapping of fields, got {type(data).__name__}")])
    try:
        manifest = JobManifest.model_validate(data)
    except ValidationError as err:
        raise ManifestError(problems_of(err)) from None
    set_by_server = [name for name in SERVER_SET if getattr(manifest, name) is not None]
    if set_by_server:
        raise ManifestError([(name, "is set by the server for each task of an array; give `array` instead")
                             for name in set_by_server])
    taken = sorted(RESERVED_ENV_SINCE_GROUPS.intersection(manifest.env))
    if taken:
        raise ManifestError([(f"env.{name}", f"{name} is set by loadmaster for every learner (its node's group, "
                                             "as torchrun sets it); remove it from the manifest") for name in taken])
    return manifest


def load_manifest_text(text: str) -> JobManifest:
    """A manifest from YAML or JSON text (JSON is YAML)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError([("", f"not valid YAML or JSON{where}: {getattr(err, 'problem', err)}")]) from None
    return parse_manifest(data)
