"""A backtest: what other policies would have done on one job's own history.

From the lake's rows of one job (one per worker and second) this rebuilds what a replay needs: the arrivals per
second, the scale-out that actually ran, and the job's capacity per scale-out fitted by the project's own capacity
model (models/capacity) fed the history loop by loop. The chosen policies are then replayed on the simulator over
the same arrivals, from the same first scale-out (a static deployment from the maximum), with the job's downtimes.
The history's own run ("actual") is computed from the rows, not simulated.

The replayed job is the simulator with identical workers (no heterogeneity, no skew) over Flink's 128 key groups,
sized at every rescale so that its capacity at n workers is the fitted C_n. Scale-outs the history never ran have
extrapolated capacities (n × the mean worker capacity), and the report says which.

Pure (numpy, pandas and the models): it runs on the driver for one job and inside Spark's executors for a fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from daedalus.models import policies
from daedalus.models.capacity import CapacityModel
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ValidationError
from daedalus.models.forecast.forecaster import Forecaster
from daedalus.models.text import utc
from daedalus.models.types import Observation
from daedalus.sim.report import score, trace
from daedalus.sim.runner import JOB, run
from daedalus.sim.simulator import SimConfig, Simulator

__all__ = ["ACTUAL", "Fit", "History", "InsufficientHistory", "backtest", "check_policies", "default_policies",
           "fit_capacity", "history_from_rows", "loop_config", "min_seconds"]

ACTUAL = "actual"
# (p95 − p5) / mean of the arrivals below which a capacity regression reads the CPU noise, not a slope
MIN_LOAD_VARIATION = 0.05
PREFERRED = ("daedalus", "ds2", "flink-autoscaler", "static")  # the default comparison, where registered
MAX_FILLED_GAP_S = 5  # missing seconds in a row carried forward (metric validation's `max_gap_steps`)


class InsufficientHistory(ValidationError):
    """The window cannot be backtested: it says what is missing and how much."""


@dataclass(frozen=True, eq=False)
class History:
    """One job's history, one value per second of the window."""

    job: str
    timestamps: np.ndarray  # epoch seconds, consecutive
    workload: np.ndarray  # arrivals, tuples/s
    scaleout: np.ndarray  # the scale-out that ran (int)
    lag: np.ndarray  # consumer lag, tuples
    throughput: np.ndarray  # total processed, tuples/s
    rows: pd.DataFrame  # the per-worker rows (worker, epoch, throughput, cpu), for the capacity fit

    @property
    def seconds(self) -> int:
        return int(self.timestamps.size)


@dataclass(frozen=True)
class Fit:
    """The capacity per scale-out the model fitted on the history: the replayed job's capacity."""

    fitted: tuple[float, ...]  # C_i for i = 1 … max: the replayed job's capacity
    observed: tuple[bool, ...]  # whether C_i was observed (else extrapolated)

    @property
    def never_observed(self) -> list[int]:
        return [i + 1 for i, seen in enumerate(self.observed) if not seen]


def min_seconds() -> int:
    """The shortest history the forecaster fits on and then forecasts once over (its first fit needs
    `min_fit_steps` steps of `step_s`, then one horizon to be scored)."""
    f = Forecaster()
    return f.min_fit_steps * f.step_s + f.horizon_s


def _epoch(stamps: pd.Series) -> np.ndarray:
    return ((pd.to_datetime(stamps, utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy()


def history_from_rows(job: str, rows: pd.DataFrame) -> History:
    """Per-second series of one job from its lake rows; refuses a history with a hole the replay would invent."""
    if rows.empty:
        raise InsufficientHistory(f"the lake holds no rows of job {job!r} in this window")
    frame = pd.DataFrame({"worker": rows["worker"].astype(str), "epoch": np.round(_epoch(rows["timestamp"])),
                          **{c: pd.to_numeric(rows[c], errors="coerce") for c in
                             ("workload", "throughput", "cpu", "lag", "scaleout")}})
    per_second = frame.groupby("epoch", sort=True).agg(workload=("workload", "max"), lag=("lag", "max"),
                                                       scaleout=("scaleout", "max"),
                                                       throughput=("throughput", "sum"))
    first, last = float(per_second.index[0]), float(per_second.index[-1])
    stamps = np.arange(first, last + 1.0)
    full = per_second.reindex(stamps)
    holes = full["workload"].isna() | full["scaleout"].isna()
    runs = holes.astype(int).groupby((~holes).cumsum()).sum()
    if runs.max() > MAX_FILLED_GAP_S:
        raise InsufficientHistory(
            f"job {job!r}: the history has {int(holes.sum())} missing seconds, {int(runs.max())} in a row (at most "
            f"{MAX_FILLED_GAP_S} can be carried forward): choose a window without the gap")
    full = full.ffill()
    return History(job, stamps, full["workload"].to_numpy(float), full["scaleout"].to_numpy().astype(int),
                   full["lag"].fillna(0.0).to_numpy(float), full["throughput"].to_numpy(float),
                   frame[["worker", "epoch", "throughput", "cpu"]])


def check(history: History) -> None:
    """Too short for the forecaster, or too little load variation to fit capacity: say what is missing."""
    need = min_seconds()
    if history.seconds < need:
        raise InsufficientHistory(
            f"job {history.job!r}: the window holds {history.seconds / 60:.0f} min of history; the forecaster needs "
            f"{need / 60:.0f} min (its first fit and one forecast horizon): "
            f"{(need - history.seconds) / 60:.0f} min more")
    w = history.workload
    mean = float(np.mean(w))
    variation = (float(np.percentile(w, 95)) - float(np.percentile(w, 5))) / mean if mean > 0 else 0.0
    if variation < MIN_LOAD_VARIATION:
        raise InsufficientHistory(
            f"job {history.job!r}: the arrivals vary by {100 * variation:.1f} % (p5 to p95 over the mean) in this "
            f"window; fitting capacity needs at least {100 * MIN_LOAD_VARIATION:.0f} %: choose a longer window or "
            "one with busier and quieter hours")


def _uptime(history: History, warmup_s: float) -> np.ndarray:
    """Seconds since the scale-out last changed (a rescale restarts the job); the window's start counts as steady."""
    changed = np.flatnonzero(np.diff(history.scaleout) != 0) + 1
    start = np.full(history.seconds, -warmup_s)
    if changed.size:
        idx = np.searchsorted(changed, np.arange(history.seconds), side="right") - 1
        start = np.where(idx >= 0, changed[np.maximum(idx, 0)], -warmup_s)
    return np.arange(history.seconds) - start


def _observations(history: History, loop_s: float, warmup_s: float) -> list[Observation]:
    """The history cut into the loop's windows, as the monitor phase saw it."""
    uptime = _uptime(history, warmup_s)
    index = pd.Index(history.timestamps)
    tp = history.rows.pivot_table(index="epoch", columns="worker", values="throughput", aggfunc="mean")
    cpu = history.rows.pivot_table(index="epoch", columns="worker", values="cpu", aggfunc="mean")
    tp, cpu = tp.reindex(index), cpu.reindex(index=index, columns=tp.columns)
    workers, tps, cpus = list(tp.columns), tp.to_numpy(float), cpu.to_numpy(float)
    step = max(1, int(loop_s))
    out = []
    for a in range(0, history.seconds, step):
        window = slice(a, min(a + step, history.seconds))
        present = [k for k in range(len(workers)) if np.isfinite(tps[window, k]).any()]
        out.append(Observation(
            job=history.job, timestamps=history.timestamps[window], workload=history.workload[window],
            throughput={workers[k]: tps[window, k] for k in present},
            cpu={workers[k]: cpus[window, k] for k in present},
            lag=history.lag[window], uptime_s=uptime[window].astype(float),
            scaleout=int(history.scaleout[window][-1])))
    return out


def _replay_config(max_scaleout: int, cfg: LoopConfig, start: float = SimConfig.start) -> SimConfig:
    return SimConfig(max_scaleout=max_scaleout, worker_capacity=1.0, heterogeneity=0.0, skew=0.0,
                     downtime_out_s=cfg.downtime_out_s, downtime_in_s=cfg.downtime_in_s,
                     checkpoint_interval=cfg.checkpoint_interval, start=start)


class ReplayedJob(Simulator):
    """The simulator with the fitted capacity at every scale-out: identical workers (no skew, no heterogeneity over
    Flink's 128 key groups) whose capacity is set at every rescale so that the job's capacity at n workers is C_n.

    It sets the per-slot capacities and the true capacities the Simulator keeps (`_capacity`, `_true_capacities`):
    the simulator has no public hook for a capacity per scale-out."""

    def __init__(self, workload: np.ndarray, config: SimConfig, capacities: Sequence[float], seed: int,
                 initial_scaleout: int, job: str) -> None:
        super().__init__(workload, config, seed=seed, initial_scaleout=initial_scaleout, job=job)
        self._layout = self.true_capacities() / config.worker_capacity  # capacity at n per unit of worker capacity
        self._fitted = np.asarray(capacities, dtype=float)
        self._true_capacities = self._fitted.copy()
        self._size_workers()

    def _size_workers(self) -> None:
        n = self.scaleout
        self._capacity[:] = self._fitted[n - 1] / self._layout[n - 1]

    def scale(self, target: int) -> None:
        super().scale(target)
        self._size_workers()


def fit_capacity(history: History, cfg: LoopConfig) -> Fit:
    """C_i by the capacity model fed the history loop by loop, as the monitor phase saw it: the capacities observed
    at each scale-out, and the others extrapolated from the last loop whose workers all had steady samples (a
    rescale near the window's end leaves the model without a current layout)."""
    model = CapacityModel(warmup_s=cfg.warmup_s)
    m = cfg.max_scaleout
    fitted: tuple[float, ...] = ()
    for obs in _observations(history, cfg.loop_interval_s, cfg.warmup_s):
        model.update(obs)
        if model.ready:
            fitted, _ = model.capacities(m, obs.scaleout)
    observed = model.observed
    if not fitted or not all(math.isfinite(c) and c > 0 for c in fitted):
        raise InsufficientHistory(
            f"job {history.job!r}: the capacity model fitted no capacity on this history (no scale-out ran "
            f"{cfg.warmup_s:.0f} s past its restart with every worker reporting throughput and CPU): the replay "
            "has no job to run")
    fitted = tuple(observed.get(i, c) for i, c in enumerate(fitted, start=1))
    return Fit(tuple(float(x) for x in fitted), tuple(i in observed for i in range(1, m + 1)))


def actual_figures(history: History, slo_s: float) -> dict[str, Any]:
    """The history's own run: worker-hours and rescales from the scale-out that ran; latency estimated from the
    consumer lag by Little's law (the lag over the arrival rate: how long the newest arrival waits)."""
    wait = history.lag / np.maximum(history.workload, 1.0)
    return {"worker_hours": float(history.scaleout.sum()) / 3600.0,
            "rescales": int(np.count_nonzero(np.diff(history.scaleout))),
            "seconds_over_slo": int((wait > slo_s).sum()),
            "latency_p95_s": float(np.percentile(wait, 95))}


def _replay(name: str, history: History, fit: Fit, cfg: LoopConfig, seed: int) -> dict[str, Any]:
    policy = policies.make(name, cfg.max_scaleout, cfg)
    sim_config = _replay_config(cfg.max_scaleout, cfg, start=float(history.timestamps[0]) - 1.0)
    first = cfg.max_scaleout if name == "static" else int(np.clip(history.scaleout[0], 1, cfg.max_scaleout))
    job = ReplayedJob(history.workload, sim_config, fit.fitted, seed, first, JOB)
    result = run(history.workload, policy, sim_config, cfg, seed=seed, sim=job)
    s = score(result, slo_s=cfg.latency_slo)
    return {"worker_hours": s["worker_seconds"] / 3600.0, "seconds_over_slo": s["seconds_over_slo"],
            "rescales": s["rescales"], "latency_p95_s": s["latency_s"]["p95"],
            "budget_exceeded": s["budget_exceeded"], "trace": trace(result, cfg.latency_slo)}


def default_policies() -> list[str]:
    """The loop's planner, the two peers (DS2, the Flink autoscaler) and static, those the registry holds."""
    return [n for n in PREFERRED if n in policies.names()]


def check_policies(names: Sequence[str]) -> None:
    known = policies.names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"no policy {', '.join(map(repr, unknown)) or 'given'}; known: {', '.join(known)}")


def loop_config(history: History, max_scaleout: int | None = None,
                downtimes: tuple[float, float] | None = None) -> LoopConfig:
    """The job's loop settings for the replay: its maximum scale-out (default: the largest the history ran) and its
    downtimes out and in (default: the configured ones)."""
    top = int(history.scaleout.max())
    if max_scaleout is not None and max_scaleout < top:
        raise InsufficientHistory(f"job {history.job!r} ran at {top} workers, above the maximum scale-out "
                                  f"{max_scaleout} given: give at least {top}")
    defaults = LoopConfig()
    out_s, in_s = downtimes or (defaults.downtime_out_s, defaults.downtime_in_s)
    return LoopConfig(max_scaleout=max_scaleout or top, downtime_out_s=out_s, downtime_in_s=in_s)


def backtest(history: History, names: Sequence[str], max_scaleout: int | None = None,
             downtimes: tuple[float, float] | None = None, seed: int = 0,
             on_policy: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The backtest report of one job: its window, the actual run, each policy's replay and the fitted capacity.

    `downtimes` (out, in) are the job's learned ones; without them the configured defaults stand, and the report
    says which."""
    check_policies(names)
    check(history)
    cfg = loop_config(history, max_scaleout, downtimes)
    fit = fit_capacity(history, cfg)
    replays = {}
    for name in names:
        if on_policy is not None:
            on_policy(name)
        replays[name] = _replay(name, history, fit, cfg, seed)
    t = history.timestamps
    return {
        "job": history.job,
        "window": {"start": utc(t[0] - 1.0), "end": utc(t[-1])},
        "seconds": history.seconds,
        "max_scaleout": cfg.max_scaleout,
        "slo_s": cfg.latency_slo,
        "downtime_s": {"out": cfg.downtime_out_s, "in": cfg.downtime_in_s,
                       "source": "configured" if downtimes is None else "learned"},
        "actual": actual_figures(history, cfg.latency_slo),
        "policies": replays,
        "capacity": {
            "per_scaleout": [{"scaleout": i + 1, "fitted": c, "observed": o}
                             for i, (c, o) in enumerate(zip(fit.fitted, fit.observed, strict=True))],
            "never_observed": fit.never_observed,
        },
    }
