"""The simulated streaming job: a Flink-like job reading a Kafka-like topic, one second per step.

It is the embedded default target and the ground truth of every benchmark, so it must look like the
recorded Flink runs (CPU linear in throughput from ≈ 0.085 idle, ≈ 110,000 tuples/s per worker at full
CPU, skewed partitions) and it must know the answers the autoscaler only estimates: the true capacity
at every scale-out and the end-to-end latency of every second's arrivals.

Model, per second t:

- arrivals on partition p = workload[t] × weight_p; weights ∝ exp(skew · z_p), z_p standard normal
  drawn once per seed, normalised to sum 1 (skew 0 gives uniform partitions);
- partition p is read by worker p % n (round-robin); worker slot k has the fixed capacity
  worker_capacity × (1 + U(−heterogeneity, heterogeneity));
- a worker processes min(capacity, backlog + arrivals of its partitions), shared between its partitions
  in proportion to their demand; CPU = idle_cpu + (1 − idle_cpu) × processed / capacity (+ noise);
- a rescale stops processing for the downtime, then restarts from the last checkpoint: what was
  processed after it goes back onto the backlog and is processed again.

A sample's timestamp is the end of its second: step t is stamped ``start + t + 1``, and ``now`` (the
start of the next step) equals the timestamp of the last sample, so ``observe(since=previous_now)``
returns exactly the seconds simulated since then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from daedalus.models.types import Observation, StageLoad


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the simulated job; the defaults are calibrated on the recorded Flink runs."""

    max_scaleout: int = 12
    # Flink hashes keys into 128 key groups by default. With only max_scaleout partitions, scale-outs that do
    # not divide them add workers but no capacity, which real keyed jobs do not show. None: max_scaleout.
    partitions: int | None = 128
    worker_capacity: float = 110_000.0  # tuples/s at full CPU
    heterogeneity: float = 0.10  # worker capacities spread ± this fraction, fixed per seed
    skew: float = 0.15  # partition weights ∝ exp(skew · z), z standard normal
    idle_cpu: float = 0.085  # CPU at zero throughput
    cpu_noise: float = 0.01  # std of the additive CPU noise
    throughput_noise: float = 0.0  # relative std of the noise on reported throughput
    downtime_out_s: float = 30.0
    downtime_in_s: float = 15.0
    downtime_noise_s: float = 3.0  # downtime + U(−this, this), rounded to whole seconds
    checkpoint_interval: float = 10.0
    start: float = 1_767_225_600.0  # epoch of second 0 (2026-01-01T00:00:00Z)
    base_latency_s: float = 0.5  # latency of a tuple processed in the second it arrives
    # A non-parallel stage after the workers (an aggregation with its own cost per record) that processes at most
    # this many tuples/s in all: the true capacity flattens at it, whatever the scale-out. None: no such stage.
    # With it the job publishes its stages (the workers' and this one's busy share), as a Flink job does.
    bottleneck_capacity: float | None = None

    def __post_init__(self) -> None:
        def require(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"SimConfig.{name} must be {rule}, got {getattr(self, name)!r}")

        def finite(name: str) -> bool:
            value = getattr(self, name)
            return isinstance(value, int | float) and math.isfinite(value)

        require(isinstance(self.max_scaleout, int) and self.max_scaleout >= 1, "max_scaleout", "an int >= 1")
        require(
            self.partitions is None or (isinstance(self.partitions, int) and self.partitions >= 1),
            "partitions",
            "None or an int >= 1",
        )
        require(finite("worker_capacity") and self.worker_capacity > 0, "worker_capacity", "positive")
        require(finite("heterogeneity") and 0 <= self.heterogeneity < 1, "heterogeneity", "in [0, 1)")
        require(finite("skew") and self.skew >= 0, "skew", ">= 0")
        require(finite("idle_cpu") and 0 <= self.idle_cpu < 1, "idle_cpu", "in [0, 1)")
        for name in (
            "cpu_noise",
            "throughput_noise",
            "downtime_out_s",
            "downtime_in_s",
            "downtime_noise_s",
            "base_latency_s",
        ):
            require(finite(name) and getattr(self, name) >= 0, name, ">= 0")
        require(finite("checkpoint_interval") and self.checkpoint_interval > 0, "checkpoint_interval", "positive")
        require(self.bottleneck_capacity is None or (isinstance(self.bottleneck_capacity, int | float)
                                                     and math.isfinite(self.bottleneck_capacity)
                                                     and self.bottleneck_capacity > 0),
                "bottleneck_capacity", "None or positive")
        require(finite("start"), "start", "a finite epoch")

    @property
    def n_partitions(self) -> int:
        return self.max_scaleout if self.partitions is None else self.partitions


@dataclass(frozen=True, eq=False)
class SimHistory:
    """Per-second record of the whole run so far, for benchmarks and plots.

    `scaleout` counts the target scale-out during a rescale downtime (those workers are paid for);
    `latency_s` is the end-to-end latency of the second's arrivals (max over partitions, NaN for a
    second without arrivals; for tuples still unprocessed at the end, the time waited so far);
    `processed` is the cumulative number of tuples processed for the first time; `replay` the tuples
    processed before a restart that still have to be processed again. At every second,
    cumsum(workload) = processed + lag − replay.
    """

    timestamps: np.ndarray
    workload: np.ndarray
    throughput: np.ndarray  # total reported, including reprocessed tuples
    scaleout: np.ndarray
    lag: np.ndarray
    true_capacity: np.ndarray
    latency_s: np.ndarray
    down: np.ndarray
    processed: np.ndarray
    replay: np.ndarray


class Simulator:
    """A deterministic (per seed) simulated streaming job, stepped one second at a time."""

    def __init__(
        self,
        workload: np.ndarray,
        config: SimConfig = SimConfig(),
        seed: int = 0,
        initial_scaleout: int | None = None,
        *,
        job: str = "sim",
    ) -> None:
        workload = np.array(workload, dtype=float)
        if workload.ndim != 1 or len(workload) == 0:
            raise ValueError("workload must be a non-empty 1-D array of tuples/s")
        if not np.all(np.isfinite(workload)) or np.any(workload < 0):
            raise ValueError("workload must be finite and non-negative")
        self.config = config
        self.job = job
        self._workload = workload
        n_slots, n_parts = config.max_scaleout, config.n_partitions
        setup, cpu_seed, tp_seed, down_seed = np.random.SeedSequence(seed).spawn(4)
        setup_rng = np.random.default_rng(setup)
        h = config.heterogeneity
        self._capacity = config.worker_capacity * (1 + setup_rng.uniform(-h, h, n_slots))
        weights = np.exp(config.skew * setup_rng.standard_normal(n_parts))
        self._weights = weights / weights.sum()
        self._cpu_rng = np.random.default_rng(cpu_seed)
        self._tp_rng = np.random.default_rng(tp_seed)
        self._down_rng = np.random.default_rng(down_seed)
        self._true_capacities = np.array([self._capacity_at(n) for n in range(1, n_slots + 1)])

        initial = n_slots if initial_scaleout is None else initial_scaleout
        self._check_scaleout(initial, "initial_scaleout")
        self._scaleout = initial
        self._owner = np.arange(n_parts) % initial
        self._t = 0  # index of the next step
        self._down_until = 0  # steps before this index are downtime
        self._restart = 0  # step at which the current uptime began
        # Per partition: unprocessed tuples, processing position (cumulative tuples processed, rewound
        # to the last checkpoint on a restart) and that checkpoint. First-time processed tuples are the
        # high-water mark of the position, derived when the history is read.
        self._backlog = np.zeros(n_parts)
        self._position = np.zeros(n_parts)
        self._checkpoint = np.zeros(n_parts)
        # History, one row per second of the workload; np.empty leaves unused rows uncommitted.
        steps = len(workload)
        self._tp = np.empty((steps, n_slots))  # reported throughput, NaN where the worker did not exist
        self._cpu = np.empty((steps, n_slots))
        self._busy = np.zeros((steps, n_slots))  # share of each second a worker processed (its busy time)
        self._held = np.zeros(steps)  # share of the workers' demand the bottleneck stage held back
        self._position_hist = np.empty((steps, n_parts))  # position after each step
        self._taken_hist = np.empty((steps, n_parts))  # tuples processed in each step
        self._lag = np.empty(steps)
        self._uptime = np.empty(steps)
        self._scale_hist = np.empty(steps, dtype=int)
        self._down = np.empty(steps, dtype=bool)

    # --- properties ---------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Epoch seconds of the next step (the timestamp of the last sample)."""
        return self.config.start + self._t

    @property
    def scaleout(self) -> int:
        """Current scale-out; during a rescale, its target."""
        return self._scaleout

    @property
    def rescaling(self) -> bool:
        return self._t < self._down_until

    @property
    def worker_capacities(self) -> np.ndarray:
        """Capacity of each worker slot at full CPU, tuples/s (ground truth for per-worker estimates)."""
        return self._capacity.copy()

    @property
    def partition_weights(self) -> np.ndarray:
        """Share of the workload arriving on each partition (sums to 1)."""
        return self._weights.copy()

    # --- ground truth -------------------------------------------------------------------------

    def _capacity_at(self, scaleout: int) -> float:
        share = np.bincount(np.arange(len(self._weights)) % scaleout, weights=self._weights, minlength=scaleout)
        used = share > 0
        workers = float(np.min(self._capacity[:scaleout][used] / share[used]))
        limit = self.config.bottleneck_capacity
        return workers if limit is None else min(workers, float(limit))

    def true_capacity(self, scaleout: int) -> float:
        """Workload at which the first worker saturates with the round-robin assignment at `scaleout`."""
        self._check_scaleout(scaleout, "scaleout")
        return float(self._true_capacities[scaleout - 1])

    def true_capacities(self) -> np.ndarray:
        """True capacity at scale-outs 1 … max_scaleout."""
        return self._true_capacities.copy()

    def lower_bound_scaleout(self, workload: np.ndarray) -> np.ndarray:
        """Per second, the smallest scale-out whose true capacity covers the workload (else the max).

        True capacity is not monotone in the scale-out (round-robin leaves some workers with more
        partitions), so search its running maximum: the first scale-out where the running maximum
        covers the workload is one whose own capacity does.
        """
        running_max = np.maximum.accumulate(self._true_capacities)
        index = np.searchsorted(running_max, np.asarray(workload, dtype=float), side="left")
        return np.minimum(index + 1, self.config.max_scaleout)

    # --- control ------------------------------------------------------------------------------

    def _check_scaleout(self, value: int, name: str) -> None:
        if isinstance(value, bool) or int(value) != value or not 1 <= value <= self.config.max_scaleout:
            raise ValueError(f"{name} must be an int in 1..{self.config.max_scaleout}, got {value!r}")

    def scale(self, target: int) -> None:
        """Rescale to `target` now: stop for the downtime, then restart from the last checkpoint.

        The downtime is drawn once and rounded to whole seconds (the step). A target equal to the
        current scale-out is a restart (scale-in downtime). A call during a rescale replaces its
        target and the downtime starts again from now.
        """
        self._check_scaleout(target, "target")
        target = int(target)
        cfg = self.config
        base = cfg.downtime_out_s if target > self._scaleout else cfg.downtime_in_s
        noise = self._down_rng.uniform(-cfg.downtime_noise_s, cfg.downtime_noise_s)
        self._down_until = self._t + max(0, round(base + noise))
        self._restart = self._down_until
        # The job stopped: state after the last checkpoint is lost and is read again from the topic.
        self._backlog += self._position - self._checkpoint
        self._position[:] = self._checkpoint
        self._scaleout = target
        self._owner = np.arange(len(self._weights)) % target

    def advance(self, seconds: int) -> None:
        """Simulate `seconds` one-second steps.

        Only the backlog recursion is sequential; noise, CPU and the per-worker masks are computed
        for the whole block afterwards.
        """
        if isinstance(seconds, bool) or int(seconds) != seconds or seconds < 0:
            raise ValueError(f"seconds must be a non-negative int, got {seconds!r}")
        seconds = int(seconds)
        t0, t1 = self._t, self._t + seconds
        if t1 > len(self._workload):
            raise ValueError(f"the workload has {len(self._workload)} s; cannot advance {seconds} s from second {t0}")
        cfg = self.config
        n_slots = cfg.max_scaleout
        cpu_noise = self._cpu_rng.normal(0.0, cfg.cpu_noise, (seconds, n_slots))
        tp_noise = self._tp_rng.normal(0.0, cfg.throughput_noise, (seconds, n_slots))

        backlog, position, checkpoint = self._backlog, self._position, self._checkpoint
        owner, capacity, weights = self._owner, self._capacity, self._weights
        taken_hist, workload = self._taken_hist, self._workload
        interval, restart = cfg.checkpoint_interval, self._restart
        limit = math.inf if cfg.bottleneck_capacity is None else cfg.bottleneck_capacity
        first_up = max(t0, min(t1, self._down_until))
        processed = np.zeros((seconds, n_slots))  # actual tuples per worker slot, 0 while down
        taken_hist[t0:first_up] = 0.0
        for t in range(t0, t1):
            backlog += workload[t] * weights
            if t >= first_up:
                demand = np.bincount(owner, weights=backlog, minlength=n_slots)
                done = np.minimum(capacity, demand)
                if done.sum() > limit:  # the stage behind the workers takes no more: they wait on it
                    self._held[t] = 1 - limit / done.sum()
                    done *= limit / done.sum()
                ratio = np.divide(done, demand, out=np.zeros(n_slots), where=demand > 0)
                taken = backlog * ratio[owner]
                backlog -= taken
                position += taken
                processed[t - t0] = done
                taken_hist[t] = taken
                uptime = t + 1 - restart
                if uptime // interval > (uptime - 1) // interval:
                    checkpoint[:] = position
            self._position_hist[t] = position
            self._lag[t] = backlog.sum()

        steps = slice(t0, t1)
        down = np.arange(t0, t1) < first_up
        exists = np.arange(n_slots) < self._scaleout
        self._tp[steps] = np.where(exists, np.maximum(processed * (1 + tp_noise), 0.0), np.nan)
        self._busy[steps] = processed / capacity
        cpu = cfg.idle_cpu + (1 - cfg.idle_cpu) * processed / capacity + cpu_noise
        cpu = np.clip(cpu, 0.0, 1.0)
        cpu[down] = 0.0
        self._cpu[steps] = np.where(exists, cpu, np.nan)
        self._uptime[steps] = np.where(down, 0.0, np.arange(t0, t1) + 1 - restart)
        self._scale_hist[steps] = self._scaleout
        self._down[steps] = down
        self._t = t1

    # --- reading ------------------------------------------------------------------------------

    def _timestamps(self) -> np.ndarray:
        return self.config.start + 1.0 + np.arange(self._t)

    def observe(self, since: float, until: float | None = None) -> Observation:
        """The per-second samples with since < timestamp ≤ until, as the monitor phase would see them."""
        stamps = self._timestamps()
        until = self.now if until is None else until
        window = slice(np.searchsorted(stamps, since, side="right"), np.searchsorted(stamps, until, side="right"))
        present = int(self._scale_hist[window].max(initial=0))
        return Observation(
            job=self.job,
            timestamps=stamps[window],
            workload=self._workload[window].copy(),
            throughput={f"worker-{k}": self._tp[window, k].copy() for k in range(present)},
            cpu={f"worker-{k}": self._cpu[window, k].copy() for k in range(present)},
            lag=self._lag[window].copy(),
            uptime_s=self._uptime[window].copy(),
            scaleout=self._scaleout,
            step_s=1.0,
            stages=self._stages(window),
        )

    def _stages(self, window: slice) -> tuple[StageLoad, ...]:
        """The workers' stage and the bottleneck stage over the window, as a Flink job publishes its tasks (busy share
        of the busiest subtask, backpressure, records in); none without a bottleneck stage."""
        limit = self.config.bottleneck_capacity
        up = ~self._down[window]
        if limit is None or not up.any():
            return ()
        n = self._scaleout
        total = float(np.nanmean(np.nansum(self._tp[window][up][:, :n], axis=1)))
        busy = float(self._busy[window][up][:, :n].mean(axis=0).max())
        return (StageLoad("work", n, busy, float(self._held[window][up].mean()), total),
                StageLoad("aggregate", 1, min(1.0, total / limit), 0.0, total))

    def history(self) -> SimHistory:
        """Everything simulated so far, with the end-to-end latency computed now."""
        steps = slice(0, self._t)
        scaleout = self._scale_hist[steps].copy()
        position = self._position_hist[steps]
        first = np.maximum.accumulate(position, axis=0)  # first-time processed, per partition
        processed = first.sum(axis=1)
        return SimHistory(
            timestamps=self._timestamps(),
            workload=self._workload[steps].copy(),
            throughput=np.nansum(self._tp[steps], axis=1),
            scaleout=scaleout,
            lag=self._lag[steps].copy(),
            true_capacity=self._true_capacities[scaleout - 1],
            latency_s=self._latency(first),
            down=self._down[steps].copy(),
            processed=processed,
            replay=processed - position.sum(axis=1),
        )

    def _latency(self, first: np.ndarray) -> np.ndarray:
        """End-to-end latency per second, FIFO per partition, from cumulative arrival/processing curves.

        The last tuple of second t on partition p arrives at (relative) time t + 1, when cumulative
        arrivals reach A_p(t). It leaves in the first step k whose first-time processed total
        `first[k]` reaches A_p(t), at k + the fraction of step k's processing needed to get there
        (the position moves linearly within a step, from where it started, after any rewind).
        """
        steps = len(first)
        arrivals = self._workload[:steps, None] * self._weights
        cumulative = np.cumsum(arrivals, axis=0)
        arrived_at = np.arange(steps) + 1.0
        latency = np.full((steps, len(self._weights)), -np.inf)
        for p in range(len(self._weights)):
            target = cumulative[:, p]
            k = np.searchsorted(first[:, p], target - 1e-9 * (target + 1.0), side="left")
            reached = k < steps
            kk = np.minimum(k, steps - 1)
            taken = self._taken_hist[kk, p]
            start = self._position_hist[kk, p] - taken
            frac = np.clip(np.divide(target - start, taken, out=np.ones(steps), where=taken > 0), 0.0, 1.0)
            wait = np.where(reached, np.maximum(kk + frac - arrived_at, 0.0), steps - arrived_at)
            latency[:, p] = np.where(arrivals[:, p] > 0, wait + self.config.base_latency_s, -np.inf)
        worst = latency.max(axis=1, initial=-np.inf)
        return np.where(np.isfinite(worst), worst, np.nan)
