"""The jobs file: one source of truth for every streaming job a Daedalus installation scales.

YAML with `defaults` merged under each entry of `jobs`. Unknown keys are errors; every error names the
file, the job and the field. Durations accept seconds (`600`) or a unit (`600s`, `10m`, `1h`).
"""

from __future__ import annotations

import dataclasses
import re
from datetime import time
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml
from pydantic import Field, ValidationError, create_model, model_validator

from daedalus.connectors.fields import (
    Duration,
    NonNegativeDuration,
    Rfc1123Label,
    Rfc1123Subdomain,
    Strict,
    invalid,
)
from daedalus.connectors.prometheus import PrometheusSettings
from daedalus.connectors.sim_persistent import SimSettings
from daedalus.models.config import JOBS_FILE, LoopConfig
from daedalus.models.errors import ConfigurationError

# libyaml's parser where PyYAML was built with it (a seventh of the time on a 100-job file, 1.8 ms against 12.8):
# the loop reads its jobs file every run
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

LOOP = LoopConfig()  # the loop's defaults: each setting is declared once, in models/config.py


def _loop_settings() -> dict[str, Any]:
    """The jobs file's loop settings, derived from LoopConfig's declarations (`in_jobs_file`): name, default, and the
    type its kind reads (durations take "10m"; a None default stays allowed)."""
    kinds: dict[str, Any] = {"duration": Duration, "duration ≥ 0": NonNegativeDuration, "count ≥ 1": int,
                             "number > 0": float}
    bounds: dict[str, dict[str, Any]] = {"count ≥ 1": {"ge": 1}, "number > 0": {"gt": 0}}
    hints = get_type_hints(LoopConfig)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(LoopConfig):
        kind = f.metadata.get(JOBS_FILE)
        if kind is None:
            continue
        read = hints[f.name] if kind == "choice" else kinds[kind]
        out[f.name] = (read | None if f.default is None else read, Field(f.default, **bounds.get(kind, {})))
    return out


LoopSettings = create_model("LoopSettings", __base__=Strict, **_loop_settings())
LoopSettings.__doc__ = "The loop's settings a jobs-file entry may set (models/config.py declares each once)."
LOOP_KEYS: tuple[str, ...] = tuple(LoopSettings.model_fields)

Engine = Literal["flink", "kafka-streams", "spark", "sim"]
ENGINES: tuple[str, ...] = ("flink", "kafka-streams", "spark", "sim")
ScaleKind = Literal["Deployment", "StatefulSet", "FlinkDeployment", "SparkApplication", "spark-local", "spark-submit",
                   "flink-rest", "flink-reactive", "sim"]


class ScaleTarget(Strict):
    """What the loop rescales. Namespace and name become URL path segments of the Kubernetes API: only valid
    Kubernetes names pass (a namespace `..` must never reach another path)."""

    kind: ScaleKind
    namespace: Rfc1123Label = "default"
    name: Rfc1123Subdomain
    ready_timeout: Duration = 120.0  # after a patch, wait this long for the new scale-out to be ready
    # spark-local: the job's working folder; spark-submit: a folder of its own (control files, driver log);
    # flink-rest: the JobManager's REST address (http://host:8081); flink-reactive: the local cluster's folder
    path: str | None = None
    # spark-submit: the application's submit command, `{scaleout}` where the scale-out goes (connectors/spark_submit.py)
    command: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "flink_field" in data:
            raise invalid("flink_field was removed: a FlinkDeployment is scaled through its scale subresource, "
                          "which sets spec.taskManager.replicas (the operator's CRD maps it there; with the "
                          "reactive scheduler the job's parallelism follows the TaskManagers): delete the key")
        return data

    @model_validator(mode="after")
    def _command(self) -> ScaleTarget:
        if self.kind != "spark-submit":
            if self.command is not None:
                raise ValueError(f"field command: only a spark-submit target runs a command, not {self.kind!r}")
            return self
        if not self.path or not self.command:
            raise ValueError("fields path and command: a spark-submit target needs a folder of its own and the "
                             "application's submit command")
        if "{scaleout}" not in self.command:
            raise ValueError(f"field command: {self.command!r} has no {{scaleout}}: the scale-out would not change it")
        return self


class ScaleOut(Strict):
    """The job's scale-out limits: the loop never goes below `min` or above `max`, nor moves more than `max_step`."""

    min: int = Field(LOOP.min_scaleout, ge=1)
    max: int = Field(LOOP.max_scaleout, ge=1)
    max_step: int | None = Field(LOOP.max_step, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> ScaleOut:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be ≥ min ({self.min})")
        return self


class Blackout(Strict):
    """A daily window (UTC) in which the loop decides and reports but never acts."""

    start: time
    end: time

    def contains(self, t: time) -> bool:
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end


class JobSpec(LoopSettings):
    name: Rfc1123Label  # also a deployment's name, an artifact key and a store folder
    engine: Engine
    prometheus: PrometheusSettings | None = None
    selector: dict[str, str] = Field(default_factory=dict)
    source: dict[str, str] = Field(default_factory=dict)
    queries: dict[str, str] = Field(default_factory=dict)  # per-job PromQL template overrides
    # The label that tells the job's workers apart in its metrics: `pod` on Kubernetes, `tm_id` for a standalone
    # Flink (whose TaskManagers carry no `pod`).
    worker_label: str = Field("pod", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    scale_target: ScaleTarget
    scaleout: ScaleOut = ScaleOut()
    blackout: tuple[Blackout, ...] = ()
    sim: SimSettings | None = None
    store_url: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "parallelism" in data:
            raise ValueError("field parallelism: renamed `scaleout` (the paper's word), with the same min, max and "
                             "max_step: rename the key in the jobs file")
        if isinstance(data, dict) and data.get("engine") == "sim" and "scale_target" not in data:
            return {**data, "scale_target": {"kind": "sim", "name": "sim"}}  # the simulator is the target
        return data

    @model_validator(mode="after")
    def _engine_needs(self) -> JobSpec:
        if self.engine == "sim":
            if self.scale_target.kind != "sim":
                raise ValueError("field scale_target.kind: engine 'sim' scales through kind 'sim'")
            return self
        if self.prometheus is None:
            raise ValueError(f"field prometheus.url: engine {self.engine!r} needs a Prometheus URL")
        if not self.selector:
            raise ValueError(f"field selector: engine {self.engine!r} needs labels that pick the job's series")
        from daedalus.connectors.promql import (
            QuerySet,  # the templates render now, so a bad override fails at load time
        )

        try:
            QuerySet(self.name, self.engine, self.selector, self.source, self.queries, 60.0,
                     worker_label=self.worker_label)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from exc
        return self

    def loop_config(self) -> LoopConfig:
        return LoopConfig(min_scaleout=self.scaleout.min, max_scaleout=self.scaleout.max,
                          max_step=self.scaleout.max_step, **{name: getattr(self, name) for name in LOOP_KEYS})


class JobsFile(Strict):
    defaults: dict[str, Any] = Field(default_factory=dict)
    jobs: tuple[JobSpec, ...]
    path: str = "<memory>"

    def job(self, name: str) -> JobSpec:
        for j in self.jobs:
            if j.name == name:
                return j
        known = ", ".join(j.name for j in self.jobs) or "none"
        raise ConfigurationError(f"{self.path}: no job {name!r}; known: {known}")


def _merge(defaults: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    merged = dict(defaults)
    for key, value in job.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


_FIELD_IN_MESSAGE = re.compile(r"^Value error, (?:job '[^']*': )?field ([\w.]+): (.*)$", re.S)


def _error(path: str, raw_jobs: list[Any], idx: int, error: Any) -> str:
    """`FILE: job 'name' (jobs[i]), field F: message` — entry-level checks name their field in the message."""
    field, msg = ".".join(str(p) for p in error["loc"]) or "(entry)", error["msg"]
    m = _FIELD_IN_MESSAGE.match(msg)
    if m and field == "(entry)":
        field, msg = m.group(1), m.group(2)
    name = raw_jobs[idx].get("name", "?") if isinstance(raw_jobs[idx], dict) else "?"
    return f"{path}: job {name!r} (jobs[{idx}]), field {field}: {msg}"


def parse_jobs(data: Any, path: str = "<memory>") -> JobsFile:
    """Validate a parsed jobs document; collects every error and raises once."""
    if not isinstance(data, dict) or set(data) - {"defaults", "jobs"} or "jobs" not in data:
        raise ConfigurationError(f"{path}: a jobs file has `jobs:` (a list) and optionally `defaults:`, nothing else")
    defaults = data.get("defaults") or {}
    raw_jobs = data["jobs"]
    if not isinstance(defaults, dict) or not isinstance(raw_jobs, list) or not raw_jobs:
        raise ConfigurationError(f"{path}: `defaults` must be a mapping and `jobs` a non-empty list")
    errors: list[str] = []
    jobs: list[JobSpec] = []
    for i, raw in enumerate(raw_jobs):
        if not isinstance(raw, dict):
            errors.append(f"{path}: jobs[{i}] must be a mapping, got {type(raw).__name__}")
            continue
        try:
            jobs.append(JobSpec.model_validate(_merge(defaults, raw)))
        except ValidationError as exc:
            errors += [_error(path, raw_jobs, i, e) for e in exc.errors()]
    names = [j.name for j in jobs]
    errors += [f"{path}: job {n!r} is defined twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if errors:
        raise ConfigurationError("\n".join(errors))
    return JobsFile(defaults=defaults, jobs=tuple(jobs), path=path)


def load_jobs(path: str | Path) -> JobsFile:
    p = Path(path)
    try:
        data = yaml.load(p.read_text(), Loader=SAFE_LOADER)
    except OSError as exc:
        raise ConfigurationError(f"{p}: cannot read the jobs file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{p}: not valid YAML ({exc})") from exc
    return parse_jobs(data, str(p))
