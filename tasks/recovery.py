"""Follow a job after a rescale until it has recovered: workload − throughput watched by the anomaly detector.

The detector's normal statistics come from the job's knowledge (learned by the loop in normal operation), or,
for a job without them, from the window before the rescale. The downtime is the time from the rescale to the
restart the metrics report (uptime since the last restart). Reads metrics only: the result goes to the job's
inbox as a "recovered" message, and the loop applies it (the ledger's observed recovery time is set once,
whichever of the loop and this flow notices the recovery first: a monitor stops as soon as the ledger has it, or
as soon as the job has been rescaled again).
A poll whose metrics cannot be read is retried at the next poll; the monitor always ends at its wait, with why.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from daedalus.connectors.store import Store
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.ports import Target
from daedalus.models.recovery.anomaly import (
    AnomalyDetector,
    RecoveryTracker,
    downtime_s,
    learn_normal,
    superseded_note,
    track_recovery,
)
from daedalus.tasks.artifacts import artifact_key

BASELINE_S = 600.0  # window before the rescale to learn normal operation from, when the knowledge has none


@dataclass(frozen=True)
class Recovery:
    job: str
    decision: str
    rescale_time: float
    predicted_recovery_s: float | None
    observed_recovery_s: float | None  # None: not recovered before the timeout
    downtime_s: float | None
    waited_s: float  # on the job's clock
    reason: str = ""  # how it ended: recovered, noticed by the loop, or why the monitor gave up
    in_ledger: bool = False  # the loop had already recorded it: nothing to post

    @property
    def recovered(self) -> bool:
        return self.observed_recovery_s is not None


def normal_detector(knowledge: Knowledge | None, target: Target, rescale_time: float) -> AnomalyDetector:
    """The job's learned statistics of normal operation, else learned from the window before the rescale. With
    neither (a job saturated since its start, metrics unreadable), an empty detector: it judges around 0 with its
    noise floor, so the monitor still watches and ends, recovered or at its wait, instead of failing."""
    if knowledge is not None and knowledge.anomaly.n >= 2:
        return knowledge.anomaly
    detector = AnomalyDetector()
    with contextlib.suppress(ConnectorError):
        learn_normal(detector, target.metrics.observe(target.job, rescale_time - BASELINE_S, rescale_time),
                     target.config.warmup_s)
    return detector


def follow(target: Target, decision: str, rescale_time: float, predicted_recovery_s: float | None,
           detector: AnomalyDetector, timeout_s: float, poll_s: float,
           sleep: Callable[[float], None] = time.sleep,
           settled: Callable[[], float | None] = lambda: None,
           superseded: Callable[[], float | None] = lambda: None) -> Recovery:
    """Poll the job's metrics from the rescale on until recovery, until `settled` returns the recovery the ledger
    already has (the loop noticed it first), until `superseded` returns the time of a later rescale of the job, or
    until `timeout_s` passed (job clock or wall).

    A later rescale ends the watch at its time: what follows it is its own recovery, and counted as this one's it
    would stretch a scale-out taken in two steps (1 → 2, then 2 → 3 while still behind) into the time both took.
    Only the polling is here: what recovery and downtime are is `daedalus.models.recovery.anomaly`'s, as in the loop.
    """
    tracker = RecoveryTracker(rescale_time, detector)
    since, restart, unreadable = rescale_time - 1.0, None, ""
    started = time.monotonic()
    while True:
        now = target.clock.now()
        later = superseded()
        until = now if later is None else min(now, later)
        try:
            obs = target.metrics.observe(target.job, since, until) if until > since else None
        except ConnectorError as exc:  # a job stopped, a Prometheus restarting: try again at the next poll
            unreadable = f"; the metrics could not be read at the last poll ({exc})"
        else:
            unreadable = ""
            if obs is not None:
                restart = track_recovery(tracker, obs, restart)
                if obs.timestamps.size:
                    since = float(obs.timestamps[-1])
        waited = now - rescale_time
        ledger = None if tracker.recovered else settled()
        if (tracker.recovered or ledger is not None or later is not None or waited >= timeout_s
                or time.monotonic() - started >= timeout_s):
            observed = tracker.observed_recovery_s if ledger is None else ledger
            reason = tracker.status if ledger is None else f"recovered in {ledger:.0f} s, noticed first by the loop"
            if observed is None and later is not None:
                reason = f"{superseded_note(later - rescale_time)}: {reason}{unreadable}"
            elif observed is None:
                reason = f"gave up after {waited:.0f} s (its wait is {timeout_s:.0f} s): {reason}{unreadable}"
            return Recovery(target.job, decision, rescale_time, predicted_recovery_s, observed,
                            downtime_s(rescale_time, restart), waited, reason, in_ledger=ledger is not None)
        sleep(poll_s)


@task(name="follow-recovery", cache_policy=NO_CACHE)
def follow_task(target: Target, decision: str, rescale_time: float, predicted_recovery_s: float | None,
                detector: AnomalyDetector, timeout_s: float, poll_s: float,
                settled: Callable[[], float | None], superseded: Callable[[], float | None]) -> Recovery:
    return follow(target, decision, rescale_time, predicted_recovery_s, detector, timeout_s, poll_s, settled=settled,
                  superseded=superseded)


@task(name="record-recovery", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def record(store_url: str, recovery: Recovery) -> None:
    """Post the observed recovery to the job's inbox; the loop records it in the ledger and learns the downtime."""
    Store(store_url).job(recovery.job).post("recovered", {
        "decision": recovery.decision, "observed_recovery_s": recovery.observed_recovery_s,
        "downtime_s": recovery.downtime_s})


def recovery_markdown(r: Recovery, direction: str) -> str:
    def s(x: float | None) -> str:
        return "—" if x is None or not math.isfinite(x) else f"{x:.0f} s"

    verdict = f"recovered in **{s(r.observed_recovery_s)}**" if r.recovered else \
        f"**not recovered** within {s(r.waited_s)}: {r.reason}"
    error = "" if not (r.recovered and r.predicted_recovery_s is not None) else \
        f" (observed − predicted: {r.observed_recovery_s - r.predicted_recovery_s:+.0f} s)"
    predicted = s(r.predicted_recovery_s) if r.predicted_recovery_s is not None else "none within the horizon"
    return (f"# {r.job}: recovery after {direction}\n\n- decision `{r.decision}`: {verdict}{error}\n"
            f"- predicted recovery time: {predicted}\n- observed downtime: {s(r.downtime_s)}\n")


@task(name="publish-recovery", cache_policy=NO_CACHE)
def publish(r: Recovery, direction: str) -> dict[str, object]:
    create_markdown_artifact(key=artifact_key("recovery", r.job), markdown=recovery_markdown(r, direction),
                             description=f"Predicted against observed recovery time of {r.job}")
    return {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in asdict(r).items()}
