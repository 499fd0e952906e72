"""Build Prefect deployments from the jobs file: one `mape-k` deployment per streaming job, plus the operator,
dashboard, background and pipeline flows.

Each job's control loop runs every minute with a deployment concurrency limit of one and collision strategy
CANCEL_NEW: a run that comes due while the previous one still runs is cancelled, never queued. The loop reads
every metric since its last observation, so a skipped minute loses nothing, while queued runs would pile up
behind a slow one and act late. Schedules are anchored at a per-job second of the minute, so a hundred jobs do
not all start at :00.

Planning (`plan_deployments`) is pure and checks everything first (the jobs file, the jobs asked for); only
then `apply_deployments` writes to the Prefect API, so a bad request changes nothing. Re-applying is an
idempotent update. `prefect_yaml` renders the same plan for `prefect deploy --all`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import yaml
from prefect.schedules import Interval, Schedule

from deployments.jobs import JobsFile, JobSpec
from models.errors import ConfigurationError

DEFAULT_POOL = "daedalus"
LOOP_INTERVAL_S = 60
FLEET_INTERVAL_S = 300
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
COLLISION = "CANCEL_NEW"
TAG = "daedalus"


@dataclass(frozen=True)
class Planned:
    """One deployment to create or update."""

    flow: Any  # a prefect Flow
    name: str
    parameters: dict[str, Any]
    tags: tuple[str, ...]
    description: str
    schedules: tuple[Schedule, ...] = ()
    concurrency: int | None = None
    triggers: tuple[Any, ...] = ()
    version: str = ""
    job_variables: dict[str, Any] = field(default_factory=dict)

    @property
    def flow_name(self) -> str:
        return self.flow.name

    @property
    def full_name(self) -> str:
        return f"{self.flow.name}/{self.name}"

    @property
    def entrypoint(self) -> str:
        """Module path of the flow function: the installed package, no file paths on the worker."""
        return f"{self.flow.fn.__module__}.{self.flow.fn.__name__}"


def absolute(location: str) -> str:
    """Deployed runs start in a temporary folder: local paths must be absolute; URLs stay as they are."""
    return location if "://" in location else os.path.abspath(location)


def anchor_for(job: str) -> datetime:
    """A fixed second of the minute per job, so runs of many jobs spread over the minute."""
    return ANCHOR + timedelta(seconds=zlib.crc32(job.encode()) % LOOP_INTERVAL_S)


def spec_version(spec: JobSpec) -> str:
    """Changes whenever the job's entry in the jobs file changes."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:12]


def select_jobs(jobs: JobsFile, only: Sequence[str]) -> list[JobSpec]:
    """The jobs to deploy; every job asked for must be in the jobs file, else nothing is deployed."""
    missing = [name for name in only if name not in {j.name for j in jobs.jobs}]
    if missing:
        known = ", ".join(j.name for j in jobs.jobs)
        raise ConfigurationError(f"{jobs.path}: no job {', '.join(map(repr, missing))} in the jobs file "
                                 f"(known: {known}); nothing was deployed. Add the job to the file first.")
    return [j for j in jobs.jobs if not only or j.name in only]


def loop_deployment(spec: JobSpec, store_url: str, jobs_file: str, lake_url: str | None = None,
                    interval_s: float = LOOP_INTERVAL_S, job_variables: dict[str, Any] | None = None) -> Planned:
    from flows.mape_k import mape_k

    return Planned(
        flow=mape_k, name=spec.name,
        parameters={"job": spec.name, "store_url": store_url, "jobs_file": jobs_file, "lake_url": lake_url},
        tags=(TAG, f"job:{spec.name}", f"engine:{spec.engine}", f"mode:{spec.mode}"),
        description=f"Daedalus control loop of {spec.name} ({spec.engine}, {spec.mode}, parallelism "
                    f"{spec.parallelism.min}–{spec.parallelism.max}), every {interval_s:.0f} s.",
        schedules=(Interval(timedelta(seconds=interval_s), anchor_date=anchor_for(spec.name)),), concurrency=1,
        version=spec_version(spec),
        job_variables=dict(job_variables or {}),
    )


def operator_deployments(store_url: str, jobs_file: str, job_variables: dict[str, Any] | None = None
                         ) -> list[Planned]:
    from flows.approval import approve_scale, scale_job
    from flows.dashboards import fleet_overview

    where = {"store_url": store_url, "jobs_file": jobs_file}
    jv = dict(job_variables or {})
    return [
        Planned(flow=approve_scale, name="approve-scale", parameters=dict(where), tags=(TAG, "operator"),
                description="Started by a job's loop for each proposal in approve mode: waits for an operator.",
                job_variables=jv),
        Planned(flow=scale_job, name="scale-job", parameters=dict(where), tags=(TAG, "operator"),
                description="Scale a job by hand (job, parallelism, reason), within its limits.", job_variables=jv),
        Planned(flow=fleet_overview, name="fleet-overview", parameters={"jobs_file": jobs_file,
                                                                        "store_url": store_url},
                tags=(TAG, "dashboard"), description="Every job: scale-out, mode, last action, health.",
                schedules=(Interval(timedelta(seconds=FLEET_INTERVAL_S), anchor_date=ANCHOR),), concurrency=1,
                job_variables=jv),
    ]


def _flows_of(module: Any) -> dict[str, Any]:
    from prefect import Flow

    return {f.name: f for f in vars(module).values() if isinstance(f, Flow)}


def _accepted(flow: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters the flow's signature takes."""
    names = inspect.signature(flow.fn).parameters
    return {k: v for k, v in parameters.items() if k in names and v is not None}


def extra_deployments(store_url: str, jobs_file: str, lake_url: str | None,
                      job_variables: dict[str, Any] | None = None) -> tuple[list[Planned], list[str]]:
    """The event-triggered background flows (flows/background.py `triggers()`) and the periodic pipeline flows
    (flows/pipeline.py `schedules()`), and a note for a module that is not installed."""
    planned: list[Planned] = []
    notes: list[str] = []
    where = {"store_url": store_url, "jobs_file": jobs_file, "lake_url": lake_url}
    jv = dict(job_variables or {})
    try:
        background = importlib.import_module("flows.background")
        flows = _flows_of(background)
        for name, triggers in background.triggers(lake_url=lake_url).items():
            planned.append(Planned(flow=flows[name], name=name, parameters={}, tags=(TAG, "background"),
                                   description=flows[name].description or "", triggers=tuple(triggers),
                                   job_variables=jv))
    except ModuleNotFoundError as exc:
        if exc.name != "flows.background":
            raise
        notes.append("flows.background is not installed: recovery-monitor and retrain-forecaster are not deployed")
    try:
        pipeline = importlib.import_module("flows.pipeline")
        flows = _flows_of(pipeline)
        for name, schedules in pipeline.schedules().items():
            planned.append(Planned(flow=flows[name], name=name, parameters=_accepted(flows[name], where),
                                   tags=(TAG, "pipeline"), description=flows[name].description or "",
                                   schedules=tuple(schedules), concurrency=1, job_variables=jv))
    except ModuleNotFoundError as exc:
        if exc.name != "flows.pipeline":
            raise
        notes.append("flows.pipeline is not installed: the periodic Spark flows are not deployed")
    return planned, notes


def plan_deployments(jobs: JobsFile, store_url: str, only: Sequence[str] = (), lake_url: str | None = None,
                     interval_s: float = LOOP_INTERVAL_S, job_variables: dict[str, Any] | None = None,
                     with_fleet_flows: bool = True) -> tuple[list[Planned], list[str]]:
    """Everything to deploy for this jobs file; raises before anything is applied when a job is missing.

    With a `lake_url`, every loop appends its observations to the metric-history lake the pipeline reads.
    """
    specs = select_jobs(jobs, only)
    store, jobs_file = absolute(store_url), absolute(jobs.path)
    lake = None if lake_url is None else absolute(lake_url)
    planned = [loop_deployment(s, store, jobs_file, lake, interval_s, job_variables) for s in specs]
    notes: list[str] = []
    if with_fleet_flows:
        planned += operator_deployments(store, jobs_file, job_variables)
        extra, notes = extra_deployments(store, jobs_file, lake, job_variables)
        planned += extra
    return planned, notes


# --- applying to the Prefect API ----------------------------------------------------------------------------


async def ensure_pool(client: Any, pool: str, create: bool) -> str:
    """The work pool's type; creates a process pool when asked and it does not exist."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound
    from prefect.workers.process import ProcessWorker

    try:
        return (await client.read_work_pool(pool)).type
    except ObjectNotFound:
        if not create:
            raise ConfigurationError(f"no work pool {pool!r}: create it (prefect work-pool create {pool} "
                                     "--type process) or deploy with --create-pool") from None
    await client.create_work_pool(WorkPoolCreate(name=pool, type="process",
                                                 base_job_template=ProcessWorker.get_default_base_job_template()))
    return "process"


async def _apply_one(p: Planned, pool: str) -> Any:
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy, VersionInfo
    from prefect.deployments.runner import EntrypointType

    limit = None if p.concurrency is None else ConcurrencyLimitConfig(
        limit=p.concurrency, collision_strategy=ConcurrencyLimitStrategy(COLLISION))
    deployment = await p.flow.ato_deployment(
        name=p.name, parameters=p.parameters, tags=list(p.tags), description=p.description,
        schedules=list(p.schedules) or None, concurrency_limit=limit, triggers=list(p.triggers) or None,
        entrypoint_type=EntrypointType.MODULE_PATH, work_pool_name=pool, job_variables=p.job_variables or None,
        version=p.version or None)
    return await deployment.aapply(work_pool_name=pool,
                                   version_info=VersionInfo(type="prefect:simple", version=p.version or "1"))


async def apply_deployments(planned: Sequence[Planned], pool: str = DEFAULT_POOL, create_pool: bool = True,
                            parallel: int = 8, on_done: Callable[[Planned], None] | None = None) -> dict[str, str]:
    """Create or update every planned deployment; returns full name → deployment id.

    Checks the work pool first. Deployments are idempotent updates: after a failure (the API went away),
    deploying again converges; the error names the deployments that were not applied.
    """
    from prefect import get_client

    async with get_client() as client:
        await ensure_pool(client, pool, create_pool)
    gate = asyncio.Semaphore(parallel)
    ids: dict[str, str] = {}
    failed: list[str] = []

    async def one(p: Planned) -> None:
        async with gate:
            try:
                ids[p.full_name] = str(await _apply_one(p, pool))
            except Exception as exc:  # reported all together below, after the others were applied
                failed.append(f"{p.full_name}: {type(exc).__name__}: {exc}")
            if on_done is not None:
                on_done(p)

    await asyncio.gather(*(one(p) for p in planned))
    if failed:
        raise ConfigurationError(f"{len(failed)} of {len(planned)} deployments were not applied (deploy again to "
                                 "finish):\n" + "\n".join(failed))
    return ids


async def prune_deployments(keep: Sequence[str]) -> list[str]:
    """Delete `mape-k` deployments of jobs no longer in the jobs file; returns their names."""
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterTags, FlowFilter, FlowFilterName

    async with get_client() as client:
        found = await client.read_deployments(deployment_filter=DeploymentFilter(tags=DeploymentFilterTags(all_=[TAG])),
                                              flow_filter=FlowFilter(name=FlowFilterName(any_=["mape-k"])))
        gone = [d for d in found if d.name not in keep]
        for d in gone:
            await client.delete_deployment(d.id)
    return [f"mape-k/{d.name}" for d in gone]


# --- prefect.yaml ---------------------------------------------------------------------------------------


def schedule_yaml(schedule: Schedule) -> dict[str, Any]:
    """A schedule as prefect.yaml writes it."""
    if schedule.interval is not None:
        return {"interval": schedule.interval.total_seconds(), "anchor_date": schedule.anchor_date.isoformat()}
    if schedule.cron is not None:
        return {"cron": schedule.cron, "timezone": schedule.timezone or "UTC"}
    return {"rrule": schedule.rrule, "timezone": schedule.timezone or "UTC"}


class _AnchoredDumper(yaml.SafeDumper):
    """Names the anchors of shared parts (`&work_pool`, `&one_run_at_a_time`) instead of `&id001`."""

    names: ClassVar[dict[int, str]] = {}  # id of a shared mapping → anchor name; set per document

    def generate_anchor(self, node: yaml.Node) -> str:
        return self.names.get(id(node.value), super().generate_anchor(node))

    def represent_mapping(self, tag: str, mapping: Any, flow_style: bool | None = None) -> yaml.MappingNode:
        node = super().represent_mapping(tag, mapping, flow_style)
        if id(mapping) in self.names:
            self.names[id(node.value)] = self.names.pop(id(mapping))
        return node


def prefect_yaml(planned: Sequence[Planned], pool: str = DEFAULT_POOL) -> str:
    """The plan as a prefect.yaml for `prefect --no-prompt deploy --all`; shared parts are anchors in
    `definitions:` that the deployments refer to."""
    pools: dict[str, dict[str, Any]] = {}
    concurrency = {"limit": 1, "collision_strategy": COLLISION}
    deployments = []
    for p in planned:
        key = yaml.safe_dump(p.job_variables, sort_keys=True)
        work_pool = pools.setdefault(key, {"name": pool, "work_queue_name": "default",
                                           **({"job_variables": p.job_variables} if p.job_variables else {})})
        d: dict[str, Any] = {"name": p.name, "entrypoint": p.entrypoint, "description": p.description,
                             "tags": list(p.tags), "parameters": p.parameters, "enforce_parameter_schema": True,
                             "work_pool": work_pool}
        if p.version:
            d["version"] = p.version
        if p.schedules:
            d["schedules"] = [schedule_yaml(sc) for sc in p.schedules]
        if p.concurrency is not None:
            d["concurrency_limit"] = concurrency if p.concurrency == 1 else {"limit": p.concurrency,
                                                                            "collision_strategy": COLLISION}
        if p.triggers:
            d["triggers"] = [t.model_dump(mode="json", exclude_none=True) for t in p.triggers]
        deployments.append(d)
    definitions: dict[str, Any] = {
        "work_pools": {f"{pool}{'' if i == 0 else f'_{i}'}": wp for i, wp in enumerate(pools.values())},
        "concurrency": {"one_run_at_a_time": concurrency},
    }
    names = {id(concurrency): "one_run_at_a_time",
             **{id(wp): f"pool_{i}" if i else "work_pool" for i, wp in enumerate(pools.values())}}
    dumper = type("Dumper", (_AnchoredDumper,), {"names": names})
    doc = {"name": "daedalus", "prefect-version": _prefect_version(), "build": None, "push": None,
           "definitions": definitions, "deployments": deployments}
    header = ("# Generated by `daedalus deploy FILE --prefect-yaml prefect.yaml`: one mape-k deployment per job, plus\n"
              "# the operator, dashboard, background and pipeline flows. Apply: `prefect --no-prompt deploy --all`.\n")
    return header + yaml.dump(doc, Dumper=dumper, sort_keys=False, allow_unicode=True, width=120)


def _prefect_version() -> str:
    import prefect

    return prefect.__version__
