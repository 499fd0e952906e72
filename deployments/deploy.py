"""Build Prefect deployments from the jobs file: one `mape-k` deployment per streaming job, plus the operator,
dashboard, background and pipeline flows.

Each job's control loop runs every minute with a deployment concurrency limit of one and collision strategy
CANCEL_NEW: a run that comes due while the previous one still runs is cancelled, never queued. The loop reads
every metric since its last observation, so a skipped minute loses nothing, while queued runs would pile up
behind a slow one and act late. Schedules are anchored at a per-job second of the minute, so a hundred jobs do
not all start at :00.

The loops and the batch work never share a work queue: the pipeline and backtest flows go to the pool's
`pipeline` queue (priority 10, one run at a time), everything else to its `default` queue (priority 1). A worker
polling both starts a due loop before any pipeline run; a worker started with `--queue pipeline` on another
machine takes the pipeline off the loops' machine altogether (docs/operate.md).

Planning (`plan_deployments`) is pure and checks everything first (the jobs file, the jobs asked for); only
then `apply_deployments` writes to the Prefect API, so a bad request changes nothing. A deployment's version is
a hash of its content: deploying again rewrites only what changed. `prefect_yaml` renders the same plan for
`prefect deploy --all`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import json
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from daedalus.connectors.jobs import JobsFile, JobSpec, load_jobs
from daedalus.models.errors import ConfigurationError

if TYPE_CHECKING:  # Prefect is imported where a deployment is built: `daedalus approve` reads LOOP_INTERVAL_S only
    from prefect.schedules import Schedule

DEFAULT_POOL = "daedalus"
LOOP_INTERVAL_S = 60
FLEET_INTERVAL_S = 300
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
COLLISION = "CANCEL_NEW"
TAG = "daedalus"
LOOP_QUEUE = "default"  # the loops, operator and dashboard flows: Prefect's own default queue of the pool
PIPELINE_QUEUE = "pipeline"  # the Spark pipeline and the backtests


@dataclass(frozen=True)
class Queue:
    """A work queue of the pool: Prefect starts runs of a lower `priority` number first, and never more than
    `concurrency` at once from it (None: no limit)."""

    name: str
    priority: int
    concurrency: int | None
    description: str


QUEUES = (
    Queue(LOOP_QUEUE, 1, None, "Daedalus control loops, operator and dashboard flows: started first."),
    Queue(PIPELINE_QUEUE, 10, 1, "Daedalus pipeline (Spark) and backtests: one at a time, after any due loop; "
                                 "serve it from another machine with `daedalus worker --queue pipeline`."),
)


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
    queue: str = LOOP_QUEUE

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


# What a loop run does not need, with a hundred jobs a minute: its tasks' "Finished in state Completed()" lines (most
# of the server's log writes; the loop's own lines, decision and inbox notes, are logged by the flow and stay); the
# API version check its clients repeat (its worker made it; Prefect's setting is meant for such runs); and the
# suspension observer (added in `loop_deployment`; flows/mape_k.py says why).
LOOP_ENV = {"PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING",
            "PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED": "false"}


def loop_deployment(spec: JobSpec, store_url: str, jobs_file: str, lake_url: str | None = None,
                    interval_s: float = LOOP_INTERVAL_S, job_variables: dict[str, Any] | None = None) -> Planned:
    from prefect.schedules import Interval

    from daedalus.flows.mape_k import NO_SUSPENSION_OBSERVER, mape_k

    env = {**(job_variables or {}).get("env", {}), **LOOP_ENV, NO_SUSPENSION_OBSERVER: "true"}
    return Planned(
        flow=mape_k, name=spec.name,
        parameters={"job": spec.name, "store_url": store_url, "jobs_file": jobs_file, "lake_url": lake_url},
        tags=(TAG, f"job:{spec.name}", f"engine:{spec.engine}", f"mode:{spec.mode}"),
        description=f"Daedalus control loop of {spec.name} ({spec.engine}, {spec.mode}, scaleout "
                    f"{spec.scaleout.min}–{spec.scaleout.max}), every {interval_s:.0f} s.",
        schedules=(Interval(timedelta(seconds=interval_s), anchor_date=anchor_for(spec.name)),), concurrency=1,
        version=spec_version(spec),
        job_variables={**(job_variables or {}), "env": env},
    )


def operator_deployments(store_url: str, jobs_file: str, job_variables: dict[str, Any] | None = None
                         ) -> list[Planned]:
    from prefect.schedules import Interval

    from daedalus.flows.approval import approve_scale, scale_job
    from daedalus.flows.dashboards import fleet_overview
    from daedalus.flows.release import release_job

    where = {"store_url": store_url, "jobs_file": jobs_file}
    jv = dict(job_variables or {})
    return [
        Planned(flow=approve_scale, name="approve-scale", parameters=dict(where), tags=(TAG, "operator"),
                description="Started by a job's loop for each proposal in approve mode: waits for an operator.",
                job_variables=jv),
        Planned(flow=scale_job, name="scale-job", parameters=dict(where), tags=(TAG, "operator"),
                description="Scale a job by hand (job, scaleout, reason), within its limits.", job_variables=jv),
        Planned(flow=release_job, name="release-job", parameters=dict(where), tags=(TAG, "operator"),
                description="Lift a job's quarantine by metric validation by hand (job, reason).", job_variables=jv),
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
        background = importlib.import_module("daedalus.flows.background")
        flows = _flows_of(background)
        for name, triggers in background.triggers(lake_url=lake_url).items():
            planned.append(Planned(flow=flows[name], name=name, parameters={}, tags=(TAG, "background"),
                                   description=flows[name].description or "", triggers=tuple(triggers),
                                   job_variables=jv))
    except ModuleNotFoundError as exc:
        if exc.name != "daedalus.flows.background":
            raise
        notes.append("daedalus.flows.background is not installed: "
                     "recovery-monitor and retrain-forecaster are not deployed")
    try:
        pipeline = importlib.import_module("daedalus.flows.pipeline")
        flows = _flows_of(pipeline)
        for name, schedules in pipeline.schedules().items():
            planned.append(Planned(flow=flows[name], name=name, parameters=_accepted(flows[name], where),
                                   tags=(TAG, "pipeline"), description=flows[name].description or "",
                                   schedules=tuple(schedules), concurrency=1, job_variables=jv,
                                   queue=PIPELINE_QUEUE))
    except ModuleNotFoundError as exc:
        if exc.name != "daedalus.flows.pipeline":
            raise
        notes.append("daedalus.flows.pipeline is not installed: the periodic Spark flows are not deployed")
    from daedalus.flows.backtest import backtest  # on demand: run from the UI with the job and the window

    planned.append(Planned(flow=backtest, name="backtest", parameters=_accepted(backtest, where),
                           tags=(TAG, "pipeline"), description=backtest.description or "", job_variables=jv,
                           queue=PIPELINE_QUEUE))
    return planned, notes


def plan_deployments(jobs: JobsFile, store_url: str, only: Sequence[str] = (), lake_url: str | None = None,
                     interval_s: float = LOOP_INTERVAL_S, job_variables: dict[str, Any] | None = None,
                     with_background: bool = True) -> tuple[list[Planned], list[str]]:
    """Everything to deploy for this jobs file; raises before anything is applied when a job is missing.

    With a `lake_url`, every loop appends its observations to the metric-history lake the pipeline reads;
    `with_background=False` leaves out the event-triggered and periodic flows (recovery monitoring, retraining,
    validation).
    """
    specs = select_jobs(jobs, only)
    store, jobs_file = absolute(store_url), absolute(jobs.path)
    lake = None if lake_url is None else absolute(lake_url)
    planned = [loop_deployment(s, store, jobs_file, lake, interval_s, job_variables) for s in specs]
    planned += operator_deployments(store, jobs_file, job_variables)
    if not with_background:
        return planned, ["background and pipeline flows not deployed (--no-background)"]
    extra, notes = extra_deployments(store, jobs_file, lake, job_variables)
    return planned + extra, notes


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


SQLITE_MAX_JOBS = 10  # one-minute loops a SQLite-backed server takes without its log filling with lock tracebacks
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def sqlite_warning(api_url: str, jobs: int, pipeline: bool) -> str | None:
    """A warning for a fleet too big for the local Prefect server's SQLite database, or None.

    SQLite takes one writer at a time: beside a Spark pipeline, or beyond `SQLITE_MAX_JOBS` one-minute loops, the
    server logs `database is locked` tracebacks and answers 503 until it falls behind. The API does not say which
    database a server uses (its URL is redacted), so this judges a server on this machine by the database URL in
    force here, which `prefect server start` uses; a remote server is not judged."""
    from urllib.parse import urlparse

    from prefect.settings import get_current_settings

    if urlparse(api_url).hostname not in LOOPBACK:
        return None
    url = get_current_settings().server.database.connection_url
    if url is not None and not url.get_secret_value().startswith("sqlite"):
        return None
    if jobs <= SQLITE_MAX_JOBS and not pipeline:
        return None
    why = f"{jobs} one-minute loops" + (" and the Spark pipeline" if pipeline else "")
    return (f"the Prefect server at {api_url} uses SQLite (no PREFECT_SERVER_DATABASE_CONNECTION_URL here): with "
            f"{why} it will log 'database is locked' tracebacks and fall behind. Run it on PostgreSQL "
            "(docs/operate.md, Server settings for many jobs), or deploy fewer jobs or --no-background.")


async def ensure_queues(client: Any, pool: str) -> None:
    """The pool's work queues with their priorities and limits (`QUEUES`), created or brought back in line: the
    loops must never wait behind a Spark run."""
    from prefect.exceptions import ObjectNotFound

    for q in QUEUES:
        try:
            found = await client.read_work_queue_by_name(q.name, work_pool_name=pool)
        except ObjectNotFound:
            await client.create_work_queue(name=q.name, work_pool_name=pool, priority=q.priority,
                                           concurrency_limit=q.concurrency, description=q.description)
            continue
        if (found.priority, found.concurrency_limit) != (q.priority, q.concurrency):
            await client.update_work_queue(found.id, priority=q.priority, concurrency_limit=q.concurrency)


def content_hash(p: Planned, pool: str) -> str:
    """Everything a deployment is made of; stored as its version, so an unchanged deployment is not rewritten
    (rewriting replaces its schedule and its scheduled runs)."""
    content = {"entrypoint": p.entrypoint, "parameters": p.parameters, "tags": p.tags, "description": p.description,
               "schedules": [schedule_yaml(sc) for sc in p.schedules], "concurrency": p.concurrency,
               "collision": COLLISION, "job_variables": p.job_variables, "pool": pool, "spec": p.version,
               "queue": p.queue,
               "triggers": [t.model_dump(mode="json") for t in p.triggers]}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:12]


async def _upsert(client: Any, p: Planned, pool: str, flow_id: Any, schema: dict[str, Any], version: str) -> Any:
    """Create or update one deployment (the API's create is an upsert on flow and name), then its triggers."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions, VersionInfo

    deployment_id = await client.create_deployment(
        flow_id=flow_id, name=p.name, version=version, version_info=VersionInfo(type="prefect:simple", version=version),
        schedules=[DeploymentScheduleCreate.from_schedule(sc) for sc in p.schedules],
        concurrency_limit=p.concurrency,
        concurrency_options=None if p.concurrency is None else ConcurrencyOptions(
            collision_strategy=ConcurrencyLimitStrategy(COLLISION)),
        parameters=p.parameters, description=p.description, work_pool_name=pool, work_queue_name=p.queue,
        tags=list(p.tags),
        entrypoint=p.entrypoint, parameter_openapi_schema=schema, enforce_parameter_schema=True,
        job_variables=p.job_variables, pull_steps=[], paused=False)
    if p.triggers:
        await client.delete_resource_owned_automations(f"prefect.deployment.{deployment_id}")
        for trigger in p.triggers:
            trigger = trigger.model_copy()
            trigger.set_deployment_id(deployment_id)
            await client.create_automation(trigger.as_automation())
    return deployment_id


@dataclass
class Applied:
    """What `apply_deployments` did: full name → deployment id, and which ones it wrote."""

    ids: dict[str, str] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


async def apply_deployments(planned: Sequence[Planned], pool: str = DEFAULT_POOL, create_pool: bool = True,
                            parallel: int = 4, on_done: Callable[[Planned], None] | None = None,
                            retries: int = 3) -> Applied:
    """Create or update every planned deployment; unchanged ones are left alone.

    Checks the work pool first. Writes are idempotent upserts, retried when the server is busy (503, SQLite
    locked); after a failure deploying again converges, and the error names the deployments not applied.
    """
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.utilities.callables import parameter_schema

    result = Applied()
    failed: list[str] = []
    async with get_client() as client:
        await ensure_pool(client, pool, create_pool)
        await ensure_queues(client, pool)
        flows = {p.flow_name: p.flow for p in planned}
        flow_ids = {name: await client.create_flow_from_name(name) for name in flows}
        schemas = {name: parameter_schema(f).model_dump(exclude_unset=True) for name, f in flows.items()}
        named = DeploymentFilter(name=DeploymentFilterName(any_=sorted({p.name for p in planned})))
        existing: dict[tuple[Any, str], Any] = {}
        while True:
            page = await client.read_deployments(deployment_filter=named, limit=200, offset=len(existing))
            existing.update({(d.flow_id, d.name): d for d in page})
            if len(page) < 200:
                break
        gate = asyncio.Semaphore(parallel)

        async def one(p: Planned) -> None:
            version = content_hash(p, pool)
            current = existing.get((flow_ids[p.flow_name], p.name))
            if current is not None and current.version == version and current.work_pool_name == pool:
                result.ids[p.full_name] = str(current.id)
                result.unchanged.append(p.full_name)
            else:
                async with gate:
                    for attempt in range(retries + 1):
                        try:
                            did = await _upsert(client, p, pool, flow_ids[p.flow_name], schemas[p.flow_name], version)
                            result.ids[p.full_name] = str(did)
                            result.written.append(p.full_name)
                            break
                        except PrefectHTTPStatusError as exc:
                            if exc.response.status_code not in (429, 503) or attempt == retries:
                                failed.append(f"{p.full_name}: {exc.response.status_code} {exc.response.text[:200]}")
                                break
                            await asyncio.sleep(2.0 * (attempt + 1))
                        except Exception as exc:  # reported all together below, after the others were applied
                            failed.append(f"{p.full_name}: {type(exc).__name__}: {exc}")
                            break
            if on_done is not None:
                on_done(p)

        await asyncio.gather(*(one(p) for p in planned))
    if failed:
        raise ConfigurationError(f"{len(failed)} of {len(planned)} deployments were not applied (deploy again to "
                                 "finish):\n" + "\n".join(failed))
    return result


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


def deploy_jobs(jobs_file: Path | str, store_url: str, pool: str = DEFAULT_POOL, only: Sequence[str] = (),
                prune: bool = False, create_pool: bool = True, lake_url: str | None = None,
                job_variables: dict[str, Any] | None = None, background: bool = True,
                on_progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, str], list[str], float]:
    """Plan, apply and (with `prune`) prune in one call, timed: what `daedalus deploy` and the Prefect-side
    benchmarks run. Returns full name → deployment id, notes for the operator, and the seconds it took.

    `on_progress(done, total)` follows the deployments applied, so a caller can draw a bar; nothing is drawn here.
    """
    started = time.perf_counter()
    jobs = load_jobs(jobs_file)
    planned, notes = plan_deployments(jobs, store_url, only, lake_url, job_variables=job_variables,
                                      with_background=background)
    done = 0

    def one_more(_: Planned) -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, len(planned))

    if on_progress is not None:
        on_progress(0, len(planned))
    applied = asyncio.run(apply_deployments(planned, pool, create_pool=create_pool, on_done=one_more))
    if applied.unchanged:
        notes.append(f"{len(applied.unchanged)} deployment(s) unchanged, left alone; {len(applied.written)} written")
    if prune:
        notes += [f"deleted {name}: not in the jobs file" for name in
                  asyncio.run(prune_deployments([j.name for j in jobs.jobs]))]
    return applied.ids, notes, time.perf_counter() - started


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
        key = yaml.safe_dump([p.job_variables, p.queue], sort_keys=True)
        work_pool = pools.setdefault(key, {"name": pool, "work_queue_name": p.queue,
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
    queues = "".join(f"#   prefect work-queue create {q.name} --pool {pool} --priority {q.priority}"
                     f"{'' if q.concurrency is None else f' --limit {q.concurrency}'}\n" for q in QUEUES)
    header = ("# Generated by `daedalus deploy FILE --prefect-yaml prefect.yaml`: one mape-k deployment per job, plus\n"
              "# the operator, dashboard, background and pipeline flows. Apply: `prefect --no-prompt deploy --all`,\n"
              "# after creating the work queues (`daedalus deploy` does it itself), so the loops never wait behind\n"
              f"# the pipeline:\n{queues}")
    return header + yaml.dump(doc, Dumper=dumper, sort_keys=False, allow_unicode=True, width=120)


def _prefect_version() -> str:
    import prefect

    return prefect.__version__
