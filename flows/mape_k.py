"""The control loop: one MAPE-K iteration per flow run, over the job's persisted knowledge."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefect import flow, get_run_logger
from prefect.events import emit_event

from connectors import targets
from connectors.inbox import Inbox
from connectors.store import DEFAULT_URL, KnowledgeStore
from deployments.jobs import load_jobs
from flows.approval import request_approval, stop_reason
from flows.dashboards import publish_dashboards
from models.control import ControlMessage, apply_messages
from models.errors import ConnectorError
from models.knowledge import Knowledge
from models.types import Analysis, Decision, Observation, ScalingAction
from tasks.analyze import analyze
from tasks.execute import execute
from tasks.lake import record_history
from tasks.monitor import monitor, observe_or_hold
from tasks.plan import plan


@dataclass(frozen=True)
class Phases:
    """The four phases as callables: Prefect tasks in a flow run, their plain functions in a fast simulation."""

    monitor: Callable[..., Observation]
    analyze: Callable[..., Analysis]
    plan: Callable[..., Decision]
    execute: Callable[..., ScalingAction | None]


ORCHESTRATED = Phases(monitor, analyze, plan, execute)
PLAIN = Phases(monitor.fn, analyze.fn, plan.fn, execute.fn)


@dataclass(frozen=True)
class Iteration:
    observation: Observation
    analysis: Analysis
    decision: Decision
    action: ScalingAction | None
    loop_ms: float  # analyze + plan, the loop's own cost
    notes: tuple[str, ...] = ()  # what the inbox changed

    def summary(self) -> dict[str, Any]:
        d, a = self.decision, self.analysis
        return {"decision": d.id, "kind": d.kind, "current": d.current, "target": d.target,
                "reasons": list(d.reasons), "action": None if self.action is None else self.action.state,
                "loop_ms": round(self.loop_ms, 3), "capacity_current": a.capacity(a.scaleout),
                "forecast_peak": a.forecast.peak, "forecast_method": a.forecast.method,
                "forecast_wape": a.forecast.previous_wape, "notes": list(self.notes)}


def expire_proposal(knowledge: Knowledge, now: float) -> None:
    """An unanswered proposal expires: nothing happens, and the loop may propose again."""
    p = knowledge.pending
    if p is not None and now >= p.expires:
        entry = knowledge.entry(p.id)
        if entry is not None:
            entry.state = "expired"
            entry.history.append((now, "expired unanswered"))
        knowledge.pending = None


def iterate(target: targets.Target, knowledge: Knowledge, phases: Phases,
            messages: list[ControlMessage] | None = None, stop: str | None = None) -> Iteration:
    """Apply the inbox, then monitor → analyze → plan → execute, once.

    An approved proposal or a manual action from the inbox is executed in place of the plan's decision;
    the plan is still made and reported. `stop` (kill switch for all jobs, blackout window) makes the plan's
    own action a dry run that names it; an operator's action still applies.
    """
    cfg, job = target.config, target.job
    now = target.clock.now()
    try:
        parallelism = target.scaler.current(job)
    except ConnectorError:
        parallelism = 1
    obs = observe_or_hold(job, target.metrics, knowledge.last_observation_end, now, parallelism,
                          call=phases.monitor)
    expire_proposal(knowledge, now)
    applied = apply_messages(knowledge, messages or [], cfg, obs.parallelism, now)
    started = time.perf_counter()
    a = phases.analyze(cfg, obs, knowledge, now)
    d = phases.plan(cfg, a, knowledge, now)
    loop_ms = 1000 * (time.perf_counter() - started)
    operator = applied.decision
    if operator is not None and operator.changes:
        action = phases.execute(cfg, operator, knowledge, target.scaler, now, operator=True)
    else:
        action = phases.execute(cfg, d, knowledge, target.scaler, now, stop=stop)
    return Iteration(obs, a, d, action, loop_ms, tuple(applied.notes))


def load_knowledge(store: KnowledgeStore, target: targets.Target) -> tuple[Knowledge, int | None]:
    loaded = store.load(target.job)
    logger = get_run_logger()
    for warning in loaded.warnings:
        logger.warning(warning)
    if loaded.knowledge is None:
        logger.info("no stored knowledge for %s: starting fresh", target.job)
        return Knowledge.new(target.job, target.config), None
    return loaded.knowledge, loaded.version


RESCALED = "daedalus.job.rescaled"  # after every executed rescale → recovery-monitor flow
FORECAST_POOR = "daedalus.forecast.poor"  # after 15 consecutive poor forecasts → retrain-forecaster flow


def resolve_target(job: str, store_url: str, jobs_file: str | None) -> targets.Target:
    """A registered in-process target (simulation, tests) or one built from the jobs file (deployments)."""
    if jobs_file is None:
        return targets.get(job)
    from deployments.jobs import load_jobs
    from deployments.targets import build_target

    return build_target(load_jobs(jobs_file).job(job), store_url)


def emit_loop_events(job: str, it: Iteration, knowledge: Knowledge, store_url: str, jobs_file: str | None) -> None:
    """Events that start the background flows (their triggers are declared with the deployments)."""
    resource = {"prefect.resource.id": f"daedalus.job.{job}", "prefect.resource.name": job}
    where = {"job": job, "store_url": store_url, "jobs_file": jobs_file}
    if it.action is not None and it.action.state == "executed":
        d = it.decision if it.decision.id == it.action.decision_id else None
        emit_event(RESCALED, resource=resource, payload={
            **where, "decision": it.action.decision_id, "from": it.action.current, "to": it.action.target,
            "time": it.action.time, "predicted_recovery_s": None if d is None else d.predicted_recovery_s})
    if knowledge.forecaster.retrain_needed:
        emit_event(FORECAST_POOR, resource=resource,
                   payload={**where, "poor_loops": knowledge.forecaster.poor_loops})


@flow(name="mape-k", description="One Daedalus MAPE-K iteration for one streaming job.")
def mape_k(job: str, store_url: str = DEFAULT_URL, jobs_file: str | None = None,
           lake_url: str | None = None) -> dict[str, Any]:
    target = resolve_target(job, store_url, jobs_file)
    store, inbox = KnowledgeStore(store_url), Inbox(store_url)
    knowledge, _ = load_knowledge(store, target)
    waiting = inbox.pending(job)
    spec = None if jobs_file is None else load_jobs(jobs_file).job(job)
    stop = stop_reason(store_url, spec, target.clock.now())
    it = iterate(target, knowledge, ORCHESTRATED, [m for _, m in waiting], stop=stop)
    if lake_url:
        record_history(lake_url, it.observation)  # logs a failure, never raises
    version = store.save(knowledge)  # a failed save fails the run: the next one starts from the last version
    inbox.ack([path for path, _ in waiting])
    for note in it.notes:
        get_run_logger().info("%s: %s", job, note)
    publish_dashboards(it, knowledge, store_url, target.config.mode, stop, version)
    if it.action is not None and it.action.state == "proposed" and jobs_file is not None:
        request_approval(it, knowledge, store_url, jobs_file)
    emit_loop_events(job, it, knowledge, store_url, jobs_file)
    get_run_logger().info("%s: %s %d → %d", job, it.decision.kind, it.decision.current, it.decision.target)
    return {**it.summary(), "knowledge_version": version}
