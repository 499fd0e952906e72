"""Retrain forecasters: fit a new model per job, backtest it against the current one, promote only if better.

Backtest: the last `holdout_s` seconds of the history are held out; the new model is fitted (auto-ARIMA) on
the steps before them, and the current model (its specification and fixed parameters) is filtered over the
same steps; both forecast from the end of the training part and are scored by WAPE on the held-out steps.
The new model is promoted when its WAPE is lower by at least `MIN_GAIN` (1 %, relative), or when the job
has no model yet. Promotion is a
"forecaster" message to the job's inbox: the loop swaps the model in at its next iteration, so the store
never changes here and an interrupted retrain leaves every job on its previous version.

The fleet flow runs `backtest` per job inside Spark (`groupBy(job).applyInPandas`), one forecaster per job in
parallel; the one-job flow runs it in its own process.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from threadpoolctl import threadpool_limits

from daedalus.connectors.lake import Lake
from daedalus.connectors.spark import SparkSettings, read_lake, session
from daedalus.connectors.store import Store
from daedalus.models.forecast import Forecaster, wape

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULT_SCHEMA = ("job string, status string, old_wape double, new_wape double, fit_s double, steps long, "
                 "model string, state string, error string")
HISTORY_S = 6 * 3600.0  # history read per job
HOLDOUT_S = 900.0  # held out for the backtest: one forecast horizon
MIN_GAIN = 0.01  # the new model must cut the held-out WAPE by this fraction: no churn on noise-level differences


@dataclass(frozen=True)
class Outcome:
    """What retraining did for one job. status: promoted, kept, failed (fit error) or skipped (bad history)."""

    job: str
    status: str
    old_wape: float | None
    new_wape: float | None
    fit_s: float
    steps: int
    model: str = ""
    state: dict[str, Any] | None = None  # the new forecaster's state, when promoted
    error: str = ""

    def row(self) -> dict[str, Any]:
        """The artifact row: per job old and new WAPE, promoted or not, fit time."""
        def pct(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(100 * x, 2)

        return {"job": self.job, "old_wape_pct": pct(self.old_wape), "new_wape_pct": pct(self.new_wape),
                "promoted": self.status == "promoted", "status": self.status, "fit_s": round(self.fit_s, 2),
                "model": self.model, "note": self.error}


def current_model(store: Store, job: str) -> dict[str, Any] | None:
    """The job's current forecaster configuration and model (None: no knowledge), read-only."""
    knowledge = store.job(job).load().knowledge
    if knowledge is None:
        return None
    state = knowledge.forecaster.to_state()
    return {"config": state["config"], "model": state["model"]}


def _step_forecast(f: Forecaster, origin: float, ends: np.ndarray, step: float) -> np.ndarray:
    """The ARIMA forecast from `origin`, averaged over each held-out step (ending at `ends`)."""
    f.forecast(origin)
    forecast = f.last_model_forecast
    if forecast is None or not forecast.values:
        return np.full(ends.size, np.nan)
    values = np.asarray(forecast.values, dtype=float)
    out = np.full(ends.size, np.nan)
    for k, end in enumerate(ends):
        lo, hi = round(end - step + 1 - origin), round(end - origin) + 1
        if lo >= 0 and hi <= values.size:
            out[k] = values[lo:hi].mean()
    return out


def backtest(job: str, ends: np.ndarray, means: np.ndarray, current: Mapping[str, Any] | None,
             holdout_s: float = HOLDOUT_S) -> Outcome:
    """Fit a new forecaster on step means (stamped at each step's last second) and compare with the current.

    Never raises for a bad job: a history too short or a failed fit is an Outcome with status "failed".
    """
    config = dict(current["config"]) if current else Forecaster().config()
    ends = np.asarray(ends, dtype=float)
    means = np.asarray(means, dtype=float)
    order = np.argsort(ends)
    ends, means = ends[order], means[order]
    if ends.size == 0:
        return Outcome(job, "failed", None, None, 0.0, 0, error="no history")
    import pmdarima  # noqa: F401 - load every BLAS before limiting its threads
    import statsmodels.tsa.statespace.sarimax  # noqa: F401

    with threadpool_limits(1):  # one BLAS thread: small matrices, and Spark runs one task per core
        return _backtest(job, ends, means, current, config, holdout_s)


def _backtest(job: str, ends: np.ndarray, means: np.ndarray, current: Mapping[str, Any] | None,
              config: dict[str, Any], holdout_s: float) -> Outcome:
    step = float(config["step_s"])
    started = time.perf_counter()
    split = ends[-1] - holdout_s
    train, test = ends <= split, ends > split
    try:
        new = Forecaster.fit_from_history(ends[train], means[train], fit_steps=config["window_steps"], **config)
    except Exception as exc:  # one job's failed fit leaves its model in place, and the others unaffected
        return Outcome(job, "failed", None, None, time.perf_counter() - started, int(ends.size),
                       error=f"fit failed: {type(exc).__name__}: {exc}")
    fit_s = time.perf_counter() - started
    origin = float(ends[train][-1]) + 1.0
    new_wape = wape(means[test], _step_forecast(new, origin, ends[test], step))
    old_wape = None
    if current and current.get("model"):
        state = new.to_state()
        state["model"] = current["model"]
        try:
            old_wape = wape(means[test], _step_forecast(Forecaster.from_state(state), origin, ends[test], step))
        except Exception:  # a current model that cannot even forecast is beaten by any working one
            old_wape = math.inf
        if math.isnan(old_wape):
            old_wape = math.inf
    model = f"ARIMA{new.order}{new.seasonal_order if new.seasonal_order and new.seasonal_order[3] else ''}"
    if math.isnan(new_wape):
        return Outcome(job, "kept", old_wape, None, fit_s, int(ends.size), model,
                       error="no held-out data to score the new model on")
    better = old_wape is None or new_wape < old_wape * (1 - MIN_GAIN)
    return Outcome(job, "promoted" if better else "kept", old_wape, new_wape, fit_s, int(ends.size), model,
                   new.to_state() if better else None)


# ---------------------------------------------------------------------- fleet retrain on Spark


def step_history(rows: DataFrame, step_s: float) -> DataFrame:
    """Per job and step: mean workload (stamped at the step's last second) and the count of bad rows.

    The mean is over the step's rows: the per-second mean whenever the number of workers is constant
    within the step (everywhere but the step of a rescale). Aggregated map-side: only one row per job and
    step is shuffled. A bad row (null or negative workload, or a file with the wrong schema) keeps the
    whole job out of training.
    """
    from pyspark.sql import functions as F

    seconds = F.unix_micros(F.col("timestamp")) / 1e6
    bucket = F.floor(seconds / step_s) * step_s
    bad = F.col("workload").isNull() | (F.col("workload") < 0) | F.col("schema_error").isNotNull() \
        | F.col("timestamp").isNull()
    return rows.groupBy("job", bucket.alias("bucket")).agg(
        F.avg("workload").alias("workload"), F.sum(bad.cast("long")).alias("bad"),
    ).select("job", (F.col("bucket") + step_s - 1).alias("end"), "workload", "bad")


def _fit_group(currents: Mapping[str, Any], holdout_s: float) -> Any:
    """The function applyInPandas runs on each job's step history (a closure over the current models)."""

    def fit(history: pd.DataFrame) -> pd.DataFrame:
        job = str(history["job"].iloc[0])
        bad = int(history["bad"].sum())
        if bad:
            outcome = Outcome(job, "skipped", None, None, 0.0, len(history),
                              error=f"{bad} malformed rows in the history: validate the lake; the job is not trained")
        else:
            history = history[np.isfinite(history["end"])]
            outcome = backtest(job, history["end"].to_numpy(), history["workload"].to_numpy(), currents.get(job),
                               holdout_s)
        return pd.DataFrame([{
            "job": job, "status": outcome.status, "old_wape": outcome.old_wape, "new_wape": outcome.new_wape,
            "fit_s": outcome.fit_s, "steps": outcome.steps, "model": outcome.model,
            "state": None if outcome.state is None else json.dumps(outcome.state), "error": outcome.error,
        }])

    return fit


def retrain_fleet(lake: Lake, store_url: str | None, until: float, history_s: float = HISTORY_S,
                  holdout_s: float = HOLDOUT_S, jobs: list[str] | None = None,
                  spark_settings: SparkSettings | None = None) -> list[Outcome]:
    """Backtest a new forecaster for every job of the lake (or `jobs`) in parallel; nothing is posted here."""
    spark = session(spark_settings)
    store = Store(store_url) if store_url else None
    names = jobs if jobs is not None else lake.jobs()
    currents = {job: current_model(store, job) for job in names} if store else {}
    steps = {float((c or {}).get("config", {}).get("step_s", Forecaster().step_s)) for c in currents.values()}
    step_s = steps.pop() if len(steps) == 1 else float(Forecaster().step_s)
    read = read_lake(spark, lake, until - history_s, until, names, columns=("job", "timestamp", "workload"))
    history = step_history(read.rows, step_s)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    # Sorted on the driver: an orderBy would sample its input first, and so run every fit twice.
    result = sorted(history.repartition(partitions, "job").groupBy("job")
                    .applyInPandas(_fit_group(currents, holdout_s), schema=RESULT_SCHEMA).collect(),
                    key=lambda r: r["job"])
    outcomes = [Outcome(r["job"], r["status"], r["old_wape"], r["new_wape"], r["fit_s"], r["steps"], r["model"] or "",
                        None if r["state"] is None else json.loads(r["state"]), r["error"] or "") for r in result]
    for job, uri, error in read.unreadable:
        outcomes.append(Outcome(job, "skipped", None, None, 0.0, 0, error=f"unreadable lake file {uri}: {error}"))
    return outcomes


def promote(store_url: str, outcomes: list[Outcome], now: float | None = None) -> list[str]:
    """Post the promoted forecasters to their jobs' inboxes; returns the jobs posted to."""
    store = Store(store_url)
    posted = []
    for outcome in outcomes:
        if outcome.status == "promoted" and outcome.state is not None:
            store.job(outcome.job).post("forecaster", {"state": outcome.state}, now=now)
            posted.append(outcome.job)
    return posted


@task(name="retrain-fleet", cache_policy=NO_CACHE)
def retrain_fleet_task(lake_url: str, store_url: str | None, until: float, history_s: float, holdout_s: float,
                       jobs: list[str] | None, spark_settings: SparkSettings | None) -> list[Outcome]:
    return retrain_fleet(Lake(lake_url), store_url, until, history_s, holdout_s, jobs, spark_settings)


@task(name="promote-forecasters", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def promote_task(store_url: str, outcomes: list[Outcome]) -> list[str]:
    return promote(store_url, outcomes)


# ---------------------------------------------------------------------- one job, without Spark


def step_means(timestamps: Any, workload: Any, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-second samples (possibly one per worker) → mean per step, stamped at the step's last second."""
    frame = pd.DataFrame({"t": np.asarray(timestamps, dtype=float), "y": np.asarray(workload, dtype=float)})
    frame = frame[np.isfinite(frame["t"])].groupby("t", sort=True)["y"].max().reset_index()
    if frame.empty:
        return np.array([]), np.array([])
    frame["end"] = np.floor(frame["t"] / step_s) * step_s + step_s - 1
    grouped = frame.groupby("end", sort=True)["y"].mean()
    return grouped.index.to_numpy(dtype=float), grouped.to_numpy(dtype=float)


@task(name="publish-retrain", cache_policy=NO_CACHE)
def publish(outcomes: list[Outcome], key: str = "retrain-fleet") -> None:
    """One table: per job old and new WAPE, promoted or not, fit time."""
    promoted = sum(o.status == "promoted" for o in outcomes)
    create_table_artifact(key=key, table=[o.row() for o in outcomes],
                          description=f"Forecaster retraining: {promoted} of {len(outcomes)} jobs promoted")
