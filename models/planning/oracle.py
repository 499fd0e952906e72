"""The offline optimum: the fewest worker-seconds any planner could use on a run, knowing it all in advance.

A planner that decides once per loop interval, rescales at most `max_rescales` times and keeps every second's
end-to-end latency within the SLO cannot use fewer worker-seconds than this. It is computed by dynamic programming
over (loop step, scale-out, rescales used), carrying the backlog along, on a fluid model of the simulated job that
knows what the simulator knows: every second's arrivals, the true capacity at each scale-out, the downtime of each
rescale in turn, the replay from the last checkpoint and the catch-up. Two solutions bracket the optimum:

- **upper bound** (`solve`): a schedule on a conservative model. One queue drains at the true capacity C_n (the
  workload at which the first worker saturates): it is exactly the busiest worker's queue scaled by its share, and
  after a rescale mixes partitions it bounds every partition's backlog from above. Every second the backlog not yet
  processed once must be arrivals of the last `slo − 1 − margin` seconds. A rescale stops processing for its
  downtime and puts back what was processed since the last checkpoint (checkpoints every `checkpoint_s` of uptime,
  so how far back is known from the previous downtime). Replayed in the real simulator, its worker-seconds are a
  feasible cost when it keeps the SLO there.
- **lower bound** (`solve(..., relaxed=True)`): a relaxation every schedule that keeps the SLO in the simulator
  also satisfies. Its queue is the busiest worker's backlog of tuples not yet processed once, over that worker's
  share: it drains at most C_n a second, so it is never longer than in the simulator, and in the simulator no
  partition may hold arrivals older than the SLO, so neither may this queue. At a rescale the queue forgets its
  backlog (another worker is the busiest now) and keeps only the arrivals of the downtime, which every partition
  holds; the replay is left out and backlogs are rounded down. It is solved exactly on that model, so its minimum
  is below the true optimum.

States of the same scale-out and rescale count are merged by backlog, rounded to `backlog_step_s` seconds of the
peak capacity (up for the upper bound, down for the lower), keeping the cheapest; a state whose backlog is larger
and whose cost is not smaller than another's is dropped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from daedalus.models.config import LoopConfig


@dataclass(frozen=True, eq=False)
class Instance:
    """What the oracle knows about a run. Scale-outs are 1 … len(capacities); `downtime_out[k]` is the downtime
    of the run's (k+1)-th rescale if it scales out, `downtime_in[k]` if it scales in (the simulator draws them in
    order), whole seconds."""

    workload: np.ndarray  # arrivals per second, the whole run
    capacities: np.ndarray  # true capacity at each scale-out: the workload at which the first worker saturates
    downtime_out: np.ndarray
    downtime_in: np.ndarray
    initial: int  # scale-out of the first loop interval
    max_rescales: int
    loop_s: int = 60
    checkpoint_s: int = 10
    slo_s: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.initial <= len(self.capacities):
            raise ValueError(f"oracle: the initial scale-out must be in 1 … {len(self.capacities)}")
        if min(len(self.downtime_out), len(self.downtime_in)) < self.max_rescales:
            raise ValueError(f"oracle: a downtime is needed for each of the {self.max_rescales} rescales")


@dataclass(frozen=True)
class Plan:
    """A schedule: the scale-out of each loop interval, and its figures on the model it was solved on."""

    scaleouts: tuple[int, ...]
    worker_seconds: float
    seconds_over_slo: int  # on the model (0 unless no schedule keeps the SLO there)
    rescales: int


@runtime_checkable
class Foresight(Protocol):
    """A target that can tell the oracle the whole run in advance (the simulated job), and replay a schedule."""

    def oracle_instance(self, loop_s: int, max_rescales: int, slo_s: float) -> Instance: ...

    def seconds_over_slo(self, scaleouts: Sequence[int], loop_s: int, slo_s: float) -> int:
        """Seconds over the SLO of the whole run, replayed from the start with this scale-out per loop interval."""
        ...


_PENALTY = 1e12  # worker-seconds one second over the SLO costs: keeping the SLO comes first


def _minute(w: np.ndarray, window: np.ndarray, backlog: np.ndarray, replay: np.ndarray, cap: np.ndarray,
            down: np.ndarray, tail_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One loop interval for many states at once (fluid, one-second steps): returns the backlog, the replay still
    to do, the seconds whose not-yet-processed backlog exceeds `window` (arrivals within the latency limit), and
    what was processed in the last `tail_s` seconds (what a rescale right after would replay)."""
    over = np.zeros(backlog.shape)
    tail = np.zeros(backlog.shape)
    length = len(w)
    for s in range(length):
        backlog = backlog + w[s]
        done = np.where(s >= down, np.minimum(cap, backlog), 0.0)
        backlog = backlog - done
        replay = np.maximum(replay - done, 0.0)
        over += (backlog - replay) > window[s] * (1 + 1e-9) + 1e-6
        tail += np.where(s >= length - tail_s, done, 0.0)
    return backlog, replay, over, tail


def solve(inst: Instance, margin_s: float = 0.0, relaxed: bool = False, backlog_step_s: float = 0.25) -> Plan:
    """The cheapest schedule of the upper-bound model (see the module docstring), or with `relaxed` the lower
    bound's; `margin_s` tightens the upper bound's latency limit. A relaxed problem without any schedule that keeps
    the SLO raises ValueError: then no schedule keeps it in the simulator either."""
    w = np.asarray(inst.workload, dtype=float)
    total = len(w)
    loop = inst.loop_s
    steps = math.ceil(total / loop)
    n_max = len(inst.capacities)
    rates = np.asarray(inst.capacities, dtype=float)
    # The latency limit as an age: arrivals older than `limit` seconds must be processed once. Necessary in the
    # simulator at limit = SLO (latency counts from the end of the arrival second, plus 0.5 s); sufficient in the
    # model at SLO − 1.
    limit = int(inst.slo_s) if relaxed else math.floor(inst.slo_s - 1 - margin_s)
    if limit < 1:
        raise ValueError(f"oracle: margin {margin_s} s leaves no latency budget under the {inst.slo_s} s SLO")
    cum = np.concatenate([[0.0], np.cumsum(w)])
    ends = np.arange(1, total + 1)
    window = cum[ends] - cum[np.maximum(ends - limit, 0)]  # arrivals within the limit, at the end of each second
    quantum = backlog_step_s * float(np.max(rates))
    downtime_out = np.append(np.asarray(inst.downtime_out[:inst.max_rescales], dtype=float), 0.0)
    downtime_in = np.append(np.asarray(inst.downtime_in[:inst.max_rescales], dtype=float), 0.0)
    rounding = np.floor if relaxed else np.ceil

    # Each state: scale-out, rescales used, backlog, replay left, seconds a rescale now would replay, cost, parent.
    n = np.array([inst.initial])
    k = np.zeros(1, dtype=int)
    tail_s = np.zeros(1, dtype=int)
    backlog, replay = np.zeros(1), np.zeros(1)
    w0 = w[:loop]
    backlog, replay, over, tail = _minute(w0, window[:loop], backlog, replay, rates[n - 1], np.zeros(1), tail_s)
    cost = n * float(len(w0)) + _PENALTY * over
    parents: list[np.ndarray] = []
    choices: list[np.ndarray] = [n.copy()]
    for m in range(1, steps):
        seg = slice(m * loop, min((m + 1) * loop, total))
        length = seg.stop - seg.start
        s_idx = np.repeat(np.arange(len(n)), n_max)
        target = np.tile(np.arange(1, n_max + 1), len(n))
        cur, used = n[s_idx], k[s_idx]
        rescale = target != cur
        keep = ~rescale | (used < inst.max_rescales)
        s_idx, target, cur, used, rescale = s_idx[keep], target[keep], cur[keep], used[keep], rescale[keep]
        k_used = np.minimum(used, inst.max_rescales)  # past the limit only "keep" is left: any downtime will do
        drawn = np.where(target > cur, downtime_out[k_used], downtime_in[k_used])
        down = np.where(rescale, drawn, 0)
        if relaxed:
            inject = np.zeros(len(target))
            new_tail = np.zeros(len(target), dtype=int)
        else:
            inject = np.where(rescale, tail[s_idx], 0.0)
            new_tail = np.where(rescale, (-down) % inst.checkpoint_s, tail_s[s_idx])
        carried = np.where(rescale, 0.0, backlog[s_idx]) if relaxed else backlog[s_idx] + inject
        b, r, o, t = _minute(w[seg], window[seg], carried, replay[s_idx] + inject, rates[target - 1], down, new_tail)
        c = cost[s_idx] + target * float(length) + _PENALTY * o
        if relaxed:
            feasible = o == 0
            s_idx, target, used, rescale, b, r, t, new_tail, c = (
                a[feasible] for a in (s_idx, target, used, rescale, b, r, t, new_tail, c))
            if not len(c):
                raise ValueError(f"oracle: no schedule keeps the SLO by minute {m} even with free rescales")
        new_k = used + rescale
        bins = rounding(b / quantum - 1e-9)
        import pandas as pd  # here, not at the top: the command line imports the policies at its start

        frame = pd.DataFrame({"n": target, "k": new_k, "bin": bins, "cost": c, "row": np.arange(len(c))})
        frame = frame.sort_values(["n", "k", "bin", "cost"], kind="stable").drop_duplicates(["n", "k", "bin"])
        best = frame.groupby(["n", "k"], sort=False)["cost"].cummin()
        frame = frame[frame["cost"] <= best.groupby([frame["n"], frame["k"]]).shift(1, fill_value=np.inf) - 1e-9]
        rows = frame["row"].to_numpy()
        n, k, cost, tail, tail_s = target[rows], new_k[rows], c[rows], t[rows], new_tail[rows]
        backlog = bins[rows] * quantum if relaxed else b[rows]
        replay = np.zeros(len(rows)) if relaxed else r[rows]
        parents.append(s_idx[rows])
        choices.append(n.copy())
    best_state = int(np.argmin(cost))
    schedule = [int(choices[-1][best_state])]
    state = best_state
    for m in range(steps - 1, 0, -1):
        state = int(parents[m - 1][state])
        schedule.append(int(choices[m - 1][state]))
    schedule.reverse()
    over_total = int(cost[best_state] // _PENALTY)
    worker_seconds = float(cost[best_state] - over_total * _PENALTY)
    rescales = sum(a != b for a, b in itertools.pairwise(schedule))
    return Plan(tuple(schedule), worker_seconds, over_total, rescales)


# The default rescale budget (`LoopConfig.max_rescales_per_hour`, 3) over the benchmark's 6 hours: 18 in a run, one
# per 20 minutes in a shorter run.
RESCALE_EVERY_S = 3600.0 / LoopConfig.max_rescales_per_hour
RESCALE_BUDGET = round(6 * LoopConfig.max_rescales_per_hour)


def rescale_limit(duration_s: float) -> int:
    """The most rescales a schedule of `duration_s` may make in all. A run longer than 6 hours gets 18 too: the
    dynamic programme counts rescales over the run, not per window, and only a total of 18 keeps every 6-hour window
    within 18 wherever they fall (at 20 per 25,000 s the oracle made 19 on the 6.9-hour tm trace, all of them
    possibly inside 6 hours)."""
    return min(RESCALE_BUDGET, int(duration_s // RESCALE_EVERY_S))
