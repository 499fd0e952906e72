"""Capacity: how many tuples per second can the job process, at each scale-out?

Per worker, an online simple linear regression of throughput (y) on CPU utilization (x) —
Welford co-moments, exact, no stored samples (``daedalus.models.capacity.regression.OnlineRegression``). Under data skew
the workers do not reach full CPU together: the hot worker saturates first and the others stay
proportional to it. So worker w's expected maximum CPU is

    x_max,w = cpu_ceiling · x̄_w / max_v x̄_v

with x̄_w its mean CPU since the last rescale (a rescale changes the partition assignment, hence the
skew), and its capacity is α_w + β_w · x_max,w. The capacity at the current scale-out is the sum over
the current workers. At another scale-out i it is i × the mean worker capacity, unless scale-out i
was observed before: then the remembered capacity observed there wins.

Choice for unobserved scale-outs: the mean of ``worker_capacities()`` — the per-worker capacity at
the *current* skew — times i, as in the paper. It is not the mean capacity at full CPU (α + β · 1),
which would assume skew vanishes when the job is rescaled; with the skew of the current assignment
carried over, the extrapolation stays conservative.

When a worker's regression is not determined (fewer than ``min_samples`` samples, no CPU spread, or a
non-positive slope, which no worker has), its capacity falls back to the through-origin ratio
ȳ_w / x̄_w · x_max,w (ȳ and x̄ over the regression's own samples). So it does when the line's intercept is
positive: a worker processes nothing without CPU, so α_w > 0 is noise in the CPU signal flattening the slope
(regression dilution: on a flat load the fitted line tends to the mean throughput, and extrapolated to the ceiling
it halved a real Flink worker's capacity). Beyond the mean CPU the through-origin line promises more, and it is what
the Flink autoscaler uses as its true processing rate (records per busy second). Capacities are never negative.

Each worker also has a regression of the current layout only (its samples since the last rescale). Once it has
``min_samples`` samples, the line of the worker's whole history stands only while it explains the layout's mean
throughput within ``LAYOUT_TOLERANCE``; otherwise the layout's own line (or its through-origin ratio) is used.
They agree where a worker has its CPU to itself (a pod with its own CPU request), and the history's line, with more
samples over a wider range of load, is then the better one.
Where workers share cores (TaskManagers on one machine, an over-committed node), the CPU cost of a record changes
with the layout: four one-slot TaskManagers on two cores spend about 1.8 ms of busy time per record, two spend about
1.1, and a line pooled over both layouts judged the two-worker job at half its capacity.

A saturated job measures its capacity directly: while its backlog holds more than ``backlog_s`` seconds of its
own throughput and still grows (over the window, it processed clearly less than arrived: by more than
``SATURATION_DEFICIT`` of the arrivals), it processes as fast as it can. Once
``min_samples`` steady samples since the last rescale were saturated, the capacity at the current scale-out is at
most their mean throughput: extrapolating CPU to its ceiling cannot promise more than the job delivers with a
backlog waiting (the Flink autoscaler's "observed true processing rate" makes the same correction). It only
lowers the estimate: under skew a saturated job's total throughput exceeds what it sustains (the cold workers
keep up, the hot one falls behind).

Samples from the warm-up after a (re)start (``uptime_s < warmup_s``) and samples with a missing or
negative throughput or CPU are dropped.

References
----------
Pfister et al., "Daedalus: Self-Adaptive Horizontal Autoscaling for Resource Efficiency of Distributed
Stream Processing Systems", ICPE 2024 (capacity estimation, data skew); Welford (1962); Chan, Golub &
LeVeque (1979).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from daedalus.models.capacity.regression import OnlineRegression
from daedalus.models.errors import KnowledgeError
from daedalus.models.stats import RunningMean, require_keys
from daedalus.models.types import Observation

__all__ = ["CapacityModel"]

_MIN_VAR_X = 1e-10  # CPU variance (utilization², x in [0, 1]) below which a slope is not determined
# A backlog a healthy job does not carry: more than a few scrapes' worth of its throughput waiting.
BACKLOG_S = 5.0
# How much less than arrived a job with a backlog must process over a window to count as saturated. A job that
# keeps up with a standing backlog (a file source a few files behind, a consumer a fetch behind) processes what
# arrives, and two counters' rates scraped moments apart differ by a few percent: equality is not saturation.
SATURATION_DEFICIT = 0.05


# How far the line of a worker's whole history may miss the current layout's mean throughput and still stand for it.
LAYOUT_TOLERANCE = 0.10

KEPT_WORKERS = 64  # regressions of workers no longer reporting that are kept (oldest dropped first)


def _through_origin(reg: OnlineRegression, x: float) -> float:
    """ȳ / x̄ · x: the line through the origin and the samples' mean (0 without CPU samples)."""
    return reg.mean_y / reg.mean_x * x if reg.mean_x > 0 else 0.0


class CapacityModel:
    """Per-worker throughput-on-CPU regressions and the capacities they imply.

    Parameters
    ----------
    cpu_ceiling
        Usable CPU utilization of the hottest worker, in (0, 1].
    warmup_s
        Samples taken less than this long after the job (re)started are not steady state; dropped.
    min_samples
        Samples a worker's regression needs before its slope is trusted; also the CPU samples since
        the last rescale every current worker needs before the current capacity counts as observed, and the
        saturated samples that make the throughput a measured capacity.
    backlog_s
        A sample is saturated when the backlog holds more than this many seconds of the job's throughput.

    Examples
    --------
    Two workers with exact linear data and an idle CPU: A (y = −10 + 100·x) averages CPU 0.8, B (y = −5 + 200·x)
    averages 0.4, so B's expected maximum CPU is 0.5 when A saturates.

    >>> x_a = np.array([0.7, 0.8, 0.9] * 4); x_b = x_a - 0.4
    >>> obs = Observation(
    ...     job="demo", timestamps=np.arange(12.0), workload=np.zeros(12), lag=np.zeros(12),
    ...     throughput={"a": -10 + 100 * x_a, "b": -5 + 200 * x_b}, cpu={"a": x_a, "b": x_b},
    ...     uptime_s=np.full(12, 3600.0), scaleout=2)
    >>> model = CapacityModel()
    >>> model.update(obs)
    >>> {w: round(c, 6) for w, c in model.worker_capacities().items()}
    {'a': 90.0, 'b': 95.0}
    >>> caps, observed = model.capacities(max_scaleout=3, current=2)
    >>> [round(c, 6) for c in caps], observed
    ([92.5, 185.0, 277.5], (False, True, False))
    """

    def __init__(self, cpu_ceiling: float = 1.0, warmup_s: float = 60.0, min_samples: int = 10,
                 backlog_s: float = BACKLOG_S) -> None:
        if not (math.isfinite(cpu_ceiling) and 0 < cpu_ceiling <= 1):
            raise ValueError(f"cpu_ceiling must be a CPU utilization in (0, 1], got {cpu_ceiling!r}")
        if not (math.isfinite(warmup_s) and warmup_s >= 0):
            raise ValueError(f"warmup_s must be a number of seconds ≥ 0, got {warmup_s!r}")
        if int(min_samples) != min_samples or min_samples < 2:
            raise ValueError(f"min_samples must be a whole number ≥ 2 (a line needs two points), got {min_samples!r}")
        if not (math.isfinite(backlog_s) and backlog_s > 0):
            raise ValueError(f"backlog_s must be a positive number of seconds, got {backlog_s!r}")
        self.cpu_ceiling = float(cpu_ceiling)
        self.warmup_s = float(warmup_s)
        self.min_samples = int(min_samples)
        self.backlog_s = float(backlog_s)
        self._regressions: dict[str, OnlineRegression] = {}
        # per current worker, its samples since the last rescale: the layout's line, and x̄_w (its mean CPU)
        self._layout: dict[str, OnlineRegression] = {}
        self._saturated = RunningMean()  # the job's throughput in saturated samples since the last rescale
        self._workers: tuple[str, ...] = ()
        self._scaleout: int | None = None
        self._observed: dict[int, float] = {}
        self._observed_load: dict[int, float] = {}  # the `load` each observed capacity was estimated at

    # --- what the model knows ------------------------------------------------------------------
    @property
    def workers(self) -> tuple[str, ...]:
        """The current workers (those of the latest observation that reported last), sorted."""
        return self._workers

    @property
    def scaleout(self) -> int | None:
        """The scale-out of the latest observation."""
        return self._scaleout

    @property
    def observed(self) -> dict[int, float]:
        """Latest observed capacity per scale-out (a copy)."""
        return dict(self._observed)

    @property
    def observed_load(self) -> dict[int, float]:
        """The `load` each observed capacity was estimated at, per scale-out (a copy)."""
        return dict(self._observed_load)

    def load(self) -> float:
        """How close to saturation the current layout ran: 1.0 once it measured its capacity saturated, else the
        busiest current worker's mean CPU since the last rescale over the ceiling. An estimate made at load u
        extrapolates its samples, and their noise, by 1/u."""
        if self.saturated_throughput is not None:
            return 1.0
        means = self.mean_cpu
        return min(1.0, max(means.values()) / self.cpu_ceiling) if means else 0.0

    @property
    def mean_cpu(self) -> dict[str, float]:
        """x̄_w: mean CPU of each current worker since the last rescale (workers with samples only)."""
        return {w: self._layout[w].mean_x for w in self._workers if w in self._layout and self._layout[w].n}

    def regression(self, worker: str) -> OnlineRegression:
        """A copy of a worker's regression (empty if the worker never gave a steady sample)."""
        reg = self._regressions.get(worker)
        return OnlineRegression.from_state(reg.to_state()) if reg else OnlineRegression()

    @property
    def ready(self) -> bool:
        """Whether every current worker has ``min_samples`` CPU samples since the last rescale."""
        return bool(self._workers) and all(
            w in self._layout and self._layout[w].n >= self.min_samples for w in self._workers
        )

    # --- learning ------------------------------------------------------------------------------
    def update(self, obs: Observation) -> None:
        self._check_aligned(obs)  # before anything changes: a misaligned observation leaves the model as it was
        rescaled = self._scaleout is not None and obs.scaleout != self._scaleout
        if rescaled:
            self._layout = {}
            self._saturated = RunningMean()
        uptime = np.asarray(obs.uptime_s, dtype=float)
        with np.errstate(invalid="ignore"):
            steady = uptime >= self.warmup_s  # NaN uptime: not known to be steady
        # After a rescale, x̄ counts only the samples after the last restart in this window: the
        # samples before it still belong to the previous partition assignment.
        start = 0
        if rescaled:
            restarts = np.flatnonzero(np.diff(uptime) < 0)
            if restarts.size:
                start = int(restarts[-1]) + 1
        last_report: dict[str, int] = {}
        current = np.zeros(uptime.shape, dtype=bool)
        current[start:] = True
        current &= steady
        layout = current & ~self._catching_up(obs)
        for worker in sorted(set(obs.throughput) & set(obs.cpu)):
            y = np.asarray(obs.throughput[worker], dtype=float)
            x = np.asarray(obs.cpu[worker], dtype=float)
            with np.errstate(invalid="ignore"):
                valid = np.isfinite(x) & np.isfinite(y) & (x >= 0) & (y >= 0)
            if valid.any():
                last_report[worker] = int(np.flatnonzero(valid)[-1])
            use = valid & steady
            if use.any():
                reg = self._regressions.pop(worker, None) or OnlineRegression()
                reg.update_many(x[use], y[use])
                self._regressions[worker] = reg  # re-inserted: the dict stays ordered by last update
            use &= layout
            if use.any():
                self._layout.setdefault(worker, OnlineRegression()).update_many(x[use], y[use])
        self._learn_saturation(obs, current)
        self._workers = self._current_workers(obs, last_report, rescaled)
        self._scaleout = obs.scaleout
        self._forget_gone_workers()
        if self.ready:
            self._observed[obs.scaleout] = self.capacity_current()
            self._observed_load[obs.scaleout] = self.load()

    @staticmethod
    def _check_aligned(obs: Observation) -> None:
        """Every worker's series as long as the timestamps, or a ValueError."""
        steps = np.shape(obs.uptime_s)
        for worker in sorted(set(obs.throughput) & set(obs.cpu)):
            y, x = np.shape(obs.throughput[worker]), np.shape(obs.cpu[worker])
            if not (x == y == steps):
                raise ValueError(
                    f"job {obs.job}: worker {worker} has {np.prod(y):.0f} throughput and {np.prod(x):.0f} CPU "
                    f"samples for {np.prod(steps):.0f} steps; per-worker series must align with the timestamps"
                )

    @staticmethod
    def _job_throughput(obs: Observation) -> tuple[np.ndarray, np.ndarray] | None:
        """Per step, how many workers reported a throughput and its sum over them (finite, non-negative readings
        only); None without workers."""
        workers = sorted(set(obs.throughput) & set(obs.cpu))
        if not workers:
            return None
        thr = np.vstack([np.asarray(obs.throughput[w], dtype=float) for w in workers])
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(thr) & (thr >= 0)
        return ok.sum(axis=0), np.where(ok, thr, 0.0).sum(axis=0)

    @classmethod
    def _catching_up(cls, obs: Observation) -> np.ndarray:
        """The steps at which the job works off a backlog: one is queued and the workers together process more than
        `SATURATION_DEFICIT` above what arrives. Their samples stay in each worker's line (CPU against throughput
        holds), but not in the layout's x̄: the worker with the most backlog drains last, at full CPU, while the
        others already process only their arrivals. Read as the layout's skew, that would put the capacity of the
        scale-out at a fraction of what it is (flapping-2, seed 2: 491,405/s at 10 workers, truly 928,813/s, read
        in the minute after 7 → 10, and remembered as observed)."""
        shape = np.shape(obs.uptime_s)
        job = cls._job_throughput(obs)
        lag = np.asarray(obs.lag, dtype=float)
        if job is None or lag.shape != shape:
            return np.zeros(shape, dtype=bool)
        total = job[1]
        with np.errstate(invalid="ignore"):
            workload = np.asarray(obs.workload, dtype=float)
            return np.isfinite(lag) & (lag > 0) & np.isfinite(workload) & (
                total > (1 + SATURATION_DEFICIT) * workload)

    def _learn_saturation(self, obs: Observation, current: np.ndarray) -> None:
        """Adds the job's throughput at the steps since the last rescale whose backlog exceeds `backlog_s` of it,
        when over those steps the job processed less than arrived by more than `SATURATION_DEFICIT`: the backlog
        grows. Judged over the window, not per step: per step, a job that merely keeps up reads just below its
        arrivals half the time. A backlog being drained does not count: where each worker reads its own partitions,
        the workers that drained theirs process only their arrivals while the slowest catches up, and the total
        understates the capacity."""
        job = self._job_throughput(obs)
        if job is None:
            return
        reporting, total = job
        with np.errstate(invalid="ignore"):
            lag = np.asarray(obs.lag, dtype=float)
            workload = np.asarray(obs.workload, dtype=float)
            backlogged = current & (reporting >= obs.scaleout) & (total > 0) & np.isfinite(lag) & np.isfinite(
                workload) & (lag > self.backlog_s * total)
        if backlogged.any() and total[backlogged].sum() < (1 - SATURATION_DEFICIT) * workload[backlogged].sum():
            self._saturated.update_many(total[backlogged])

    def _forget_gone_workers(self) -> None:
        """Pods of a Deployment get new names at every restart: keep the regressions of the current workers and
        of the `KEPT_WORKERS` most recently updated others, so the knowledge does not grow with the job's age."""
        gone = [w for w in self._regressions if w not in self._workers]
        for worker in gone[: max(0, len(gone) - KEPT_WORKERS)]:
            del self._regressions[worker]

    def _current_workers(self, obs: Observation, last_report: dict[str, int], rescaled: bool) -> tuple[str, ...]:
        """The ``scaleout`` workers that reported most recently (a worker removed by a scale-in
        stops reporting before the survivors; one missed scrape does not drop a worker)."""
        if not last_report:
            if self._workers and not rescaled:
                return self._workers
            return tuple(sorted(set(obs.throughput) & set(obs.cpu)))
        ranked = sorted(last_report, key=lambda w: (-last_report[w], w))
        return tuple(sorted(ranked[: max(obs.scaleout, 1)]))

    # --- capacities ----------------------------------------------------------------------------
    def _determined(self, reg: OnlineRegression) -> bool:
        """Whether the line is trusted: enough samples, CPU spread, a rising slope and no throughput without CPU."""
        return reg.n >= self.min_samples and reg.var_x > _MIN_VAR_X and reg.slope > 0 and reg.intercept <= 0

    def _capacity_at(self, worker: str, x_max: float) -> float:
        """A worker's throughput at CPU `x_max`. Until the current layout has `min_samples` samples and throughput,
        from the line of the worker's whole history. Then from that line while it explains the layout's mean
        throughput (within `LAYOUT_TOLERANCE`: the cost of a record did not change with the layout), else from the
        layout's own line, else through the origin from the layout's samples. A line only when determined, else
        through the origin."""
        history, layout = self._regressions[worker], self._layout.get(worker)
        if layout is None or layout.n < self.min_samples or layout.mean_y <= 0:  # an idle layout says nothing
            return history.predict(x_max) if self._determined(history) else _through_origin(history, x_max)
        if self._determined(history) and abs(history.predict(layout.mean_x) - layout.mean_y) <= (
                LAYOUT_TOLERANCE * layout.mean_y):
            return history.predict(x_max)
        return layout.predict(x_max) if self._determined(layout) else _through_origin(layout, x_max)

    @property
    def saturated_throughput(self) -> float | None:
        """Mean throughput of the saturated samples since the last rescale, once there are ``min_samples``."""
        return self._saturated.mean if self._saturated.n >= self.min_samples else None

    def worker_capacities(self) -> dict[str, float]:
        """Skew-aware capacity per current worker (tuples/s); workers without samples are left out."""
        means = self.mean_cpu
        if not means:
            return {}
        top = max(means.values())
        capacities = {}
        for worker, x_bar in means.items():
            x_max = self.cpu_ceiling * x_bar / top if top > 0 else 0.0
            capacities[worker] = max(0.0, self._capacity_at(worker, x_max))
        return capacities

    def capacity_current(self) -> float:
        """Capacity at the current scale-out: the sum of the current workers' capacities, at most what the job
        processed while saturated (`saturated_throughput`)."""
        total = float(sum(self.worker_capacities().values()))
        saturated = self.saturated_throughput
        return total if saturated is None else min(total, saturated)

    def capacities(self, max_scaleout: int, current: int) -> tuple[tuple[float, ...], tuple[bool, ...]]:
        """C_i for i = 1 … max_scaleout, and whether each came from an observed scale-out.

        An observed scale-out keeps its remembered capacity; the current one's is refreshed after
        every update once ``ready``. Other scale-outs get i × the mean of ``worker_capacities()``
        (0.0 while nothing is known: check ``ready``).
        """
        if int(max_scaleout) != max_scaleout or max_scaleout < 1:
            raise ValueError(f"max_scaleout must be a whole number ≥ 1, got {max_scaleout!r}")
        if int(current) != current or current < 1:
            raise ValueError(f"current scale-out must be a whole number ≥ 1, got {current!r}")
        per_worker = self.worker_capacities()
        mean = sum(per_worker.values()) / len(per_worker) if per_worker else 0.0
        values, observed = [], []
        for i in range(1, int(max_scaleout) + 1):
            if i in self._observed:
                values.append(self._observed[i])
                observed.append(True)
            else:
                values.append(i * mean)
                observed.append(False)
        return tuple(values), tuple(observed)

    # --- persistence ---------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Plain data (dicts of floats, a list of worker names): JSON-ready, no pickle."""
        state: dict[str, Any] = {
            "cpu_ceiling": self.cpu_ceiling,
            "warmup_s": self.warmup_s,
            "min_samples": float(self.min_samples),
            "workers": list(self._workers),
            "regressions": {w: reg.to_state() for w, reg in sorted(self._regressions.items())},
            "layout_regressions": {w: reg.to_state() for w, reg in sorted(self._layout.items())},
            "observed": {str(i): c for i, c in sorted(self._observed.items())},
            "observed_load": {str(i): u for i, u in sorted(self._observed_load.items())},
            "backlog_s": self.backlog_s,
            "saturated": self._saturated.to_state(),
        }
        if self._scaleout is not None:
            state["scaleout"] = float(self._scaleout)
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> CapacityModel:
        require_keys(cls, state, ("cpu_ceiling", "warmup_s", "min_samples", "workers", "regressions",
                                  "observed"))
        try:
            model = cls(float(state["cpu_ceiling"]), float(state["warmup_s"]), int(state["min_samples"]),
                        float(state.get("backlog_s", BACKLOG_S)))
            workers = tuple(str(w) for w in state["workers"])
            # states written before saturation was learnt have none: it starts empty
            saturated = RunningMean.from_state(state["saturated"]) if "saturated" in state else RunningMean()
            regressions = {str(w): OnlineRegression.from_state(s) for w, s in state["regressions"].items()}
            # states written before the layout's lines were kept (with only its CPU means) start the layout afresh
            layout = {str(w): OnlineRegression.from_state(s) for w, s in state.get("layout_regressions", {}).items()}
            observed = {int(i): float(c) for i, c in state["observed"].items()}
            # states written before the loads were kept have none: their observations count as made at idle
            observed_load = {int(i): float(u) for i, u in state.get("observed_load", {}).items()}
            scaleout = int(state["scaleout"]) if "scaleout" in state else None
        except (TypeError, ValueError, AttributeError) as error:
            raise KnowledgeError(f"CapacityModel state is malformed: {error}") from None
        if any(not math.isfinite(c) or c < 0 for c in observed.values()):
            raise KnowledgeError(f"CapacityModel state: observed capacities must be finite and ≥ 0: {observed}")
        if any(not 0 <= u <= 1 for u in observed_load.values()) or not set(observed_load) <= set(observed):
            raise KnowledgeError(f"CapacityModel state: observed loads must be in [0, 1], for observed scale-outs "
                                 f"only: {observed_load}")
        if any(w not in regressions for w in layout):
            raise KnowledgeError("CapacityModel state: a worker has a layout line but no regression")
        model._workers, model._regressions, model._layout = workers, regressions, layout
        model._observed, model._observed_load, model._scaleout = observed, observed_load, scaleout
        model._saturated = saturated
        return model

    def __repr__(self) -> str:
        return (
            f"CapacityModel(cpu_ceiling={self.cpu_ceiling!r}, warmup_s={self.warmup_s!r}, "
            f"min_samples={self.min_samples}, workers={len(self._workers)}, scaleout={self._scaleout})"
        )
