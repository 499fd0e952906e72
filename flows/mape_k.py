"""The control loop: one MAPE-K iteration per flow run, over the job's persisted knowledge.

The iteration itself is models.loop.iteration.iterate; here its phases are Prefect tasks, and the run loads and
saves the knowledge, applies the inbox, publishes the dashboards and emits the events that start the background flows.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.events import emit_event

from daedalus.connectors import targets
from daedalus.connectors.store import DEFAULT_URL, JobStore, Store
from daedalus.connectors.switches import stop_reason
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.approvals import approval_runs
from daedalus.models.loop.iteration import Iteration, Phases, iterate
from daedalus.models.ports import Target
from daedalus.tasks.analyze import analyze
from daedalus.tasks.approval import reconcile_approval_runs
from daedalus.tasks.execute import execute
from daedalus.tasks.lake import record_history
from daedalus.tasks.monitor import monitor
from daedalus.tasks.plan import plan
from daedalus.tasks.publish import publish
from daedalus.tasks.unwalked import unwalked


def _retry_unless_given_up(task: Any, task_run: Any, state: Any) -> bool:
    """The monitor task retries what a source did not: a ConnectorError comes after the source's own retries, within
    its deadline (`prometheus.deadline`); running the whole observation again would multiply that deadline."""
    return not isinstance(state.data, ConnectorError)


ORCHESTRATED = Phases(unwalked(monitor.with_options(retry_condition_fn=_retry_unless_given_up)), unwalked(analyze),
                      unwalked(plan), unwalked(execute))
# the run's other tasks, called the same way
RECONCILE_APPROVAL_RUNS, PUBLISH = map(unwalked, (reconcile_approval_runs, publish))


def load_knowledge(store: JobStore, target: Target) -> tuple[Knowledge, int | None]:
    loaded = store.load()
    logger = get_run_logger()
    for warning in loaded.warnings:
        logger.warning(warning)
    if loaded.knowledge is None:
        logger.info("no stored knowledge for %s: starting fresh", target.job)
        return Knowledge.new(target.job, target.config), None
    return loaded.knowledge, loaded.version


# A loop run lasts seconds. Prefect's engine watches every deployment run for a suspension from outside (a thread, an
# events subscription, a version check and a read of the run: 8 % of the runs' CPU in a 50-job fleet); the loop's
# deployments turn that off for their runs, and the preloaded process (runtime/prefork.py) honours it. To stop a
# job's loop, pause it (`daedalus pause`): the next minute's run would come anyway.
NO_SUSPENSION_OBSERVER = "DAEDALUS_NO_SUSPENSION_OBSERVER"

RESCALED = "daedalus.job.rescaled"  # after every executed rescale → recovery-monitor flow
FORECAST_POOR = "daedalus.forecast.poor"  # after 15 consecutive poor forecasts → retrain-forecaster flow


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
           lake_url: str | None = None, at: float | None = None) -> dict[str, Any]:
    """`at` evaluates the loop as of that epoch second over metrics already in Prometheus (`daedalus step --at`)."""
    target, spec = targets.resolve(job, store_url, jobs_file, at)
    root = Store(store_url)
    store = root.job(job)  # the run's one view of its job's folder: knowledge, inbox, status, forecasts
    knowledge, _ = load_knowledge(store, target)
    waiting = store.pending()
    stop = stop_reason(root, spec, target.clock.now())
    it = iterate(target, knowledge, ORCHESTRATED, [m for _, m in waiting], stop=stop, journal=store.save)
    if lake_url:
        record_history(lake_url, it.observation)  # logs a failure, never raises
    version = store.save(knowledge)  # a failed save fails the run: the next one starts from the last version
    store.ack([path for path, _ in waiting])
    logger = get_run_logger()
    for note in it.notes:
        logger.info("%s: %s", job, note)
    emit_loop_events(job, it, knowledge, store_url, jobs_file)
    # The proposal is visible from the save on: its approval run (the operator's form) comes before any report. A run
    # that died after its save left its approval runs undone: each run does what the ledger asks of them.
    wanted = approval_runs(knowledge, target.wall_now(), target.config.approval_timeout)
    if wanted and spec is not None and jobs_file is not None:
        try:
            RECONCILE_APPROVAL_RUNS(wanted, it, knowledge, spec, store_url, jobs_file)
        except Exception as exc:  # the next run tries again; the server's own timeout ends a run nobody closes
            logger.warning("%s: the approval runs were not reconciled (%s: %s)", job, type(exc).__name__, exc)
    # What is left only reports: once the run has acted and saved, no report can fail it or skip its events.
    try:
        PUBLISH(it, knowledge, store, target.config.mode, stop, version)
    except Exception as exc:
        logger.error("%s: the dashboards were not published (%s: %s); the loop's work is saved", job,
                     type(exc).__name__, exc)
    logger.info("%s: %s %d → %d", job, it.decision.kind, it.decision.current, it.decision.target)
    return {**it.summary(), "knowledge_version": version}
