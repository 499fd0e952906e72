"""The event-driven background flows: recovery monitoring after a rescale, and WAPE-triggered retraining.

`triggers()` declares, per deployment, the Prefect event triggers that start them: the loop emits
`daedalus.job.rescaled` after every executed rescale and `daedalus.forecast.poor` while its forecaster has been
poor for 15 consecutive loops (flows/mape_k.py). Both flows only read the job's knowledge and post their result
to the job's inbox; the loop applies it, so they never block or race the loop.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from prefect import flow, get_run_logger
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

from daedalus.connectors.clock import WALL
from daedalus.connectors.lake import Lake
from daedalus.connectors.store import DEFAULT_URL, JobStore, Store
from daedalus.connectors.targets import resolve
from daedalus.flows.mape_k import FORECAST_POOR, RESCALED
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ValidationError
from daedalus.models.knowledge import Knowledge
from daedalus.tasks import recovery as recovery_tasks
from daedalus.tasks import retrain as retrain_tasks
from daedalus.tasks.artifacts import artifact_key

RECOVERY_WAIT_MAX_S = 1800.0  # a monitor waits for recovery at most this long
RECOVERY_DEADLINE_S = RECOVERY_WAIT_MAX_S + 120.0  # Prefect fails a monitor still running then, whatever it waits on


def recovery_wait_s(cfg: LoopConfig, timeout_s: float | None = None) -> float:
    """How long a monitor polls at most: as long as the loop follows a recovery (the job's `max_recovery_s`: a
    compressed clock, as in the Flink demo, waits compressed), at most 30 minutes, so the poll ends before the
    deadline, and no longer than a `timeout_s` given (a caller that stops the job then). Not from the prediction: a
    recovery is observed because predictions miss (on a real Flink one predicted 26 s took 5, one predicted none
    took 416), and a monitor stops as soon as the job, or the loop, says it has recovered.

    >>> cfg = LoopConfig()
    >>> recovery_wait_s(cfg), recovery_wait_s(LoopConfig(max_recovery_s=900.0)), recovery_wait_s(cfg, timeout_s=90.0)
    (1800.0, 900.0, 90.0)
    """
    return min(cfg.max_recovery_s, RECOVERY_WAIT_MAX_S, math.inf if timeout_s is None else timeout_s)


def triggers(lake_url: str | None = None) -> dict[str, list[DeploymentEventTrigger]]:
    """Deployment name → its event triggers; event payload fields become flow parameters (types kept)."""
    job_events = {"prefect.resource.id": "daedalus.job.*"}
    retrain_parameters = {"job": "{{ event.payload.job }}", "store_url": "{{ event.payload.store_url }}",
                          "jobs_file": "{{ event.payload.jobs_file }}"}
    if lake_url is not None:
        retrain_parameters["lake_url"] = lake_url
    return {
        "recovery-monitor": [DeploymentEventTrigger(
            name="after-every-rescale", expect={RESCALED}, match=job_events, posture="Reactive", threshold=1,
            parameters={
                "job": "{{ event.payload.job }}", "decision": "{{ event.payload.decision }}",
                "rescale_time": "{{ event.payload.time }}", "from_scaleout": "{{ event.payload['from'] }}",
                "to_scaleout": "{{ event.payload.to }}",
                "predicted_recovery_s": "{{ event.payload.predicted_recovery_s }}",
                "store_url": "{{ event.payload.store_url }}", "jobs_file": "{{ event.payload.jobs_file }}",
            })],
        "retrain-forecaster": [DeploymentEventTrigger(
            name="forecast-poor", expect={FORECAST_POOR}, match=job_events, posture="Reactive", threshold=1,
            parameters=retrain_parameters)],
    }


@flow(name="recovery-monitor", description="Follow workload − throughput after a rescale until the job has "
      "recovered; record the observed recovery time and downtime.", timeout_seconds=RECOVERY_DEADLINE_S)
def recovery_monitor(
    job: str,
    decision: str,
    rescale_time: float,
    from_scaleout: int | None = None,
    to_scaleout: int | None = None,
    predicted_recovery_s: float | None = None,
    store_url: str = DEFAULT_URL,
    jobs_file: str | None = None,
    timeout_s: float | None = None,
    poll_s: float = 15.0,
) -> dict[str, Any]:
    """Polls for `recovery_wait_s` at most, and stops as soon as the ledger has the recovery (the loop noticed it
    first) or a later rescale (what follows is that one's recovery); a run stuck past `RECOVERY_DEADLINE_S` (a hung
    metrics call) is failed by Prefect, so no monitor outlives its purpose. The prediction is the ledger's (an
    approved or manual rescale's event carries none)."""
    target, _ = resolve(job, store_url, jobs_file)
    store = Store(store_url).job(job)
    knowledge = store.load().knowledge
    entry = knowledge.entry(decision) if knowledge is not None else None
    if entry is not None and entry.predicted_recovery_s is not None:
        predicted_recovery_s = entry.predicted_recovery_s
    timeout_s = recovery_wait_s(target.config, timeout_s)
    detector = recovery_tasks.normal_detector(knowledge, target, rescale_time)
    result = recovery_tasks.follow_task(target, decision, rescale_time, predicted_recovery_s, detector, timeout_s,
                                        poll_s, partial(_settled, store, decision),
                                        partial(_later_rescale, store, rescale_time))
    direction = "a rescale" if from_scaleout is None or to_scaleout is None else (
        f"{'scale-out' if to_scaleout > from_scaleout else 'scale-in'} {from_scaleout} → {to_scaleout}")
    predicted = "none within the horizon" if predicted_recovery_s is None else f"{predicted_recovery_s:.0f} s"
    if result.recovered:
        if not result.in_ledger:
            recovery_tasks.record(store_url, result)
        get_run_logger().info("%s recovered from %s in %.0f s (predicted: %s)", job, direction,
                              result.observed_recovery_s, predicted)
    else:
        get_run_logger().warning("%s: no recovery from %s observed (predicted: %s); %s", job, direction, predicted,
                                 result.reason)
    return recovery_tasks.publish(result, direction)


def _knowledge(store: JobStore) -> Knowledge | None:
    """The job's stored knowledge; None when unreadable (the loop's to report: the monitor keeps watching)."""
    try:
        return store.load().knowledge
    except Exception:
        return None


def _later_rescale(store: JobStore, rescale_time: float) -> float | None:
    """When the job was rescaled again after the one followed (the ledger's last rescale, a second or more later)."""
    knowledge = _knowledge(store)
    last = None if knowledge is None else knowledge.last_rescale
    return float(last) if last is not None and last > rescale_time + 1.0 else None


def _settled(store: JobStore, decision: str) -> float | None:
    """The observed recovery time the ledger already has for `decision` (the loop noticed it first), else None."""
    knowledge = _knowledge(store)
    entry = knowledge.entry(decision) if knowledge is not None else None
    return None if entry is None else entry.observed_recovery_s


@flow(name="retrain-forecaster", description="Retrain one job's forecaster in the background (its forecasts "
      "were poor for 15 loops); the loop swaps the model in when it is ready.")
def retrain_forecaster(
    job: str,
    store_url: str = DEFAULT_URL,
    lake_url: str | None = None,
    jobs_file: str | None = None,
    history_s: float = retrain_tasks.HISTORY_S,
    holdout_s: float = retrain_tasks.HOLDOUT_S,
    now: float | None = None,
) -> dict[str, Any]:
    """History from the lake when given, else from the job's metrics source; promotes only a better model."""
    logger = get_run_logger()
    root = Store(store_url)
    if any(m.kind == "forecaster" for _, m in root.job(job).pending()):
        logger.info("%s: a retrained forecaster is already waiting for the loop; nothing to do", job)
        return {"job": job, "status": "already-pending"}
    current = retrain_tasks.current_model(root, job)
    now = (WALL.now() if lake_url else resolve(job, store_url, jobs_file)[0].clock.now()) if now is None else now
    ts, workload = _history(job, store_url, lake_url, jobs_file, now - history_s, now)
    step_s = float(current["config"]["step_s"]) if current else 30.0
    ends, means = retrain_tasks.step_means(ts, workload, step_s)
    outcome = retrain_tasks.backtest(job, ends, means, current, holdout_s)
    if outcome.status == "promoted":
        retrain_tasks.promote_task(store_url, [outcome])
    retrain_tasks.publish([outcome], key=artifact_key("retrain", job))
    logger.info("%s: %s (old WAPE %s, new WAPE %s)", job, outcome.status, outcome.old_wape, outcome.new_wape)
    return outcome.row()


def _history(job: str, store_url: str, lake_url: str | None, jobs_file: str | None, since: float,
             until: float) -> tuple[Any, Any]:
    """Per-second workload of one job; bad values never reach training (ValidationError names them)."""
    import numpy as np

    if lake_url:
        frame = Lake(lake_url).read(job, since, until, columns=("timestamp", "workload"))
        ts = frame["timestamp"].astype("int64").to_numpy() / 1e6 if len(frame) else np.array([])
        workload = frame["workload"].to_numpy(dtype=float)
    else:
        obs = resolve(job, store_url, jobs_file)[0].metrics.observe(job, since, until)
        ts, workload = obs.timestamps, obs.workload
    bad = ~np.isfinite(workload) | (workload < 0)
    if bad.any():
        raise ValidationError(f"job {job!r}: {int(bad.sum())} missing or negative workload values in the history "
                              f"(first at {float(np.asarray(ts)[bad][0]):.0f}); validate the lake, nothing was trained")
    return ts, workload
