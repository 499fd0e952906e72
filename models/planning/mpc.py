"""The model-predictive planner (`planner: daedalus`): control over the forecast horizon.

Algorithm 1 of the paper is greedy minute by minute: the smallest scale-out that recovers within a fixed 600 s.
Each of its rescales is then followed by a catch-up at little spare capacity, and a workload that moves every
few minutes makes it rescale again and again. This planner instead chooses a *schedule* over the forecast
horizon and applies its first step, as model-predictive control does:

- the candidate schedules are "keep the current scale-out", and "switch to scale-out i now, at the next loop
  or at the earliest loop the guardrails allow"; a scale-in also every `SCALE_IN_STEP_S` later within the
  pace), each followed by nothing or by one more switch `rescale_interval` later (`candidates`), over the
  forecast's 30 minutes. A scale-out sooner than the planner's pace is taken only when nothing else keeps the
  latency budget; inside the grace period after an executed rescale, only when keeping the scale-out would break
  the SLO itself (`grace_breach_band`: how sure that must be). A scale-in is paced by the scale-in interval alone:
  it only saves, and the check below refuses one the forecast would undo;
- each schedule is simulated on the same models the paper's planner uses (capacity per scale-out, the
  forecast, the downtime of a rescale and the replay from the last checkpoint), in 5-second bins, with the
  backlog's Lindley recursion b ← max(0, b + arrivals − capacity);
- its cost is the worker-seconds over the horizon plus `latency_weight` × the end-to-end latency it adds,
  summed over the seconds of arrivals (downtime, replay and catch-up), plus `rescale_price` per switch: a job
  affords a few rescales an hour, so a switch must save more than that, and a deeper scale-in later beats a
  shallow one now that would hold off the next one for the scale-in interval. The price rises as the rescale
  budget runs out, and a schedule's second switch pays what its first leaves;
- it is feasible when, on the forecast's *upper band* (forecast × (1 + z × the recent relative error at that
  lead)), its predicted latency never exceeds `latency_budget_share` × `latency_slo`, its backlog is drained
  by the end of the horizon, and each of its rescales has caught up (expected latency under `CAUGHT_UP_S`)
  `latency_slo` seconds after its restart. A scale-in whose scale-out would not cover the band until the
  horizon's end is therefore never chosen: it would have to be undone within the horizon;
- the cheapest feasible schedule wins; if it switches now, that is the decision, otherwise the loop waits
  (re-planning next minute with a fresher forecast). When nothing is feasible, the schedule that exceeds the
  latency budget least wins (the paper's "nothing qualified → the maximum", made gradual).

Capacities are the capacity model's, corrected where observation contradicted extrapolation: a scale-out
observed below i × the mean worker capacity scales the extrapolations near it down by the same ratio (the
rescale's effect, checked; the mistake is not repeated), and a margin stays unused (twice as large for a
scale-out never observed).

Pure: numpy only, no I/O, no clock. Every decision says why, with the numbers before and after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from daedalus.models.config import RESCALE_WINDOW_S, LoopConfig
from daedalus.models.text import duration
from daedalus.models.types import Analysis

BIN_S = 5.0  # resolution of the schedule simulation
CAUGHT_UP_S = 5.0  # a rescale has caught up when the expected latency is back under this (after `latency_slo`)
ROBUST_EXTRA_S = 300.0  # the band is checked until `rescale_interval` + this (a next switch's downtime and catch-up)
DEFAULT_ERROR = 0.10  # relative forecast error assumed at a 1-minute lead while nothing was measured
MAX_ERROR = 1.0  # the band never assumes the forecast off by more than this, relatively
SOFT_PENALTY = 1e9  # per second of predicted latency above the budget: any schedule within it wins
EARLY_PENALTY = 1e8  # a scale-out sooner than `rescale_interval` after the last rescale: only to keep the budget
SCALE_IN_STEP_S = 300.0  # later starts of a scale-in among the candidates, this far apart
MIN_SWING = 0.15  # an excursion of the load above its trend up to this is noise: no envelope
# The load flaps when its minute-to-minute swings (over MIN_SWING of the trend) reverse direction at least this often
# per minute of the envelope's window: then the recent maximum replaces the band, else it is added to it.
FLAP_RATE = 0.25
BUDGET_EXCEEDED = "rescale budget exceeded"  # marks a decision that rescales beyond the budget (the ledger, `explain`)


@dataclass(frozen=True)
class Schedule:
    """One candidate: the switches it makes, as (seconds from now, scale-out), in order; () keeps the current."""

    switches: tuple[tuple[float, int], ...]
    worker_s: float
    delay_s: float  # Σ over arrival seconds of the predicted latency, on the mean forecast
    max_latency_s: float  # on the upper band
    end_backlog_s: float  # seconds of capacity the backlog left at the horizon's end needs, on the upper band
    cost: float
    excess_s: float  # predicted latency above the budget, plus a backlog left at the end (0 when feasible)
    cost_band: float = math.nan  # the same cost with the latency on the upper band: the saving's other end
    max_latency_expected_s: float = math.nan  # on the mean forecast and the expected capacities, over the same window

    @property
    def feasible(self) -> bool:
        return self.excess_s <= 0

    @property
    def now(self) -> bool:
        """Its first switch is now: following it means acting in this loop."""
        return bool(self.switches) and self.switches[0][0] <= 0

    def describe(self, current: int) -> str:
        if not self.switches:
            return f"keep {current}"
        steps, before = [], current
        for at, n in self.switches:
            steps.append(f"{before} → {n} {'now' if at <= 0 else f'in {at:.0f} s'}")
            before = n
        return ", then ".join(steps)


@dataclass(frozen=True)
class Inputs:
    """What the planner simulates, prepared from the analysis and the settings."""

    mean: np.ndarray  # forecast per bin, tuples/s
    upper: np.ndarray  # its upper band per bin
    expected: np.ndarray  # capacity expected per scale-out 1 … max (index 0 = scale-out 1), corrected
    usable: np.ndarray  # the same less the margin: what feasibility is checked against
    notes: tuple[str, ...]
    band: np.ndarray | None = None  # the forecast's upper band alone, before the envelope (None: the same as upper)
    excursion: float = 0.0  # how far above its trend the load recently went (> 0: the envelope is planned for)
    spread: float = 0.0  # the capacity spread added to the margin of every extrapolated scale-out


def relative_errors(a: Analysis, minutes: int) -> np.ndarray:
    """The forecast's relative error per minute of lead: the forecaster's own measurement when it gives one
    (`Forecast.errors`), else its previous WAPE growing with the square root of the lead."""
    measured = tuple(getattr(a.forecast, "errors", ()) or ())
    if measured:
        e = np.asarray(measured, dtype=float)
        e = np.where(np.isfinite(e), e, DEFAULT_ERROR)
        if e.size < minutes:
            e = np.concatenate([e, np.full(minutes - e.size, e[-1])])
        return np.clip(e[:minutes], 0.0, MAX_ERROR)
    w = a.forecast.previous_wape
    base = DEFAULT_ERROR if w is None or not math.isfinite(w) else max(w, 0.01)
    return np.clip(base * np.sqrt(np.arange(1, minutes + 1)), 0.0, MAX_ERROR)


PLAUSIBLE = (0.6, 1.5)  # an observed per-worker capacity outside these × the others' median is not trusted …
TRUSTED_LOAD = 0.5  # … unless it was observed at this load or more: its estimate extrapolates its samples ≤ 2×


def corrected_capacities(a: Analysis) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """C_i for i = 1 … max corrected by what observation taught (`learned_capacities`, then `plateau`), and which
    of them were observed."""
    caps, observed, notes = learned_capacities(a)
    caps, note = plateau(caps, observed)
    return caps, observed, notes + ((note,) if note else ())


def plateau(caps: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, str]:
    """No unobserved scale-out is predicted above what the job reached once more workers bought nothing: where an
    observed scale-out b came out no higher than a smaller observed a (a stage that does not scale, a shared
    machine), every unobserved scale-out above a is capped at the best capacity observed from a up. Extrapolating
    per worker past that would promise the capacity the rescale from a to b was just seen not to deliver, and the
    planner would try again (a bottleneck: once an hour, each time the ceiling expires)."""
    seen = np.flatnonzero(observed) + 1
    flat = [j for j in seen if any(caps[b - 1] <= caps[j - 1] for b in seen if b > j)]
    if not flat:
        return caps, ""
    start = int(flat[0])
    best = float(max(caps[j - 1] for j in seen if j >= start))
    capped = ~observed & (np.arange(1, caps.size + 1) > start) & (caps > best)
    if not capped.any():
        return caps, ""
    bought = ", ".join(f"C_{j} {caps[j - 1]:,.0f}/s" for j in seen if j >= start)
    return np.where(capped, best, caps), (
        f"capacity plateau: more workers than {start} bought nothing observed ({bought}): no unobserved scale-out "
        f"above {start} is predicted above {best:,.0f}/s")


def learned_capacities(a: Analysis) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """C_i for i = 1 … max from the capacity model, corrected where observation contradicted extrapolation, and
    which of them were observed.

    The capacity model extrapolates an unobserved scale-out i as i × the mean worker capacity now. Where an
    observed scale-out j came out at a ratio r_j = C_j / (j × that mean) below 1, the extrapolations are
    scaled by r interpolated between the observed neighbours (the nearest one's beyond them), never above 1:
    a scale-out that delivered less than predicted is not predicted again at the old value. An observation
    made below `TRUSTED_LOAD` whose per-worker capacity lies outside `PLAUSIBLE` × the median of all of them is
    not trusted (a capacity "observed" at a few per cent of CPU is an extrapolation of noise) and is extrapolated
    instead. One observed nearer saturation stands however far it lies from the others: per-worker capacity
    really does change with the scale-out (a real Flink on two shared cores: 968/s at one TaskManager, 417/s per
    TaskManager at four), and replacing it by the current layout's extrapolation would size by a capacity never
    seen. Just after a rescale, before any worker capacity is known again, the unknown ones are interpolated per
    worker between the observed ones.
    """
    caps = np.asarray(a.capacities, dtype=float)
    caps = np.where(np.isfinite(caps) & (caps > 0), caps, 0.0)
    observed = np.asarray(a.observed, dtype=bool) & (caps > 0)
    index = np.arange(1, caps.size + 1)
    per_worker = caps / index
    notes: list[str] = []
    known = caps > 0
    loads = np.asarray(a.observed_load, dtype=float) if len(a.observed_load) == caps.size else np.zeros(caps.size)
    if known.any():
        reference = float(np.median(per_worker[known]))
        odd = observed & (loads < TRUSTED_LOAD) & (
            (per_worker < PLAUSIBLE[0] * reference) | (per_worker > PLAUSIBLE[1] * reference))
        for j in index[odd]:
            notes.append(f"capacity check: C_{j} observed at {caps[j - 1]:,.0f}/s ({100 * loads[j - 1]:.0f} % load) "
                         f"is {per_worker[j - 1]:,.0f}/s per worker against a median of {reference:,.0f}/s: not "
                         f"trusted, extrapolated instead")
        if odd.any() and (observed & ~odd).any():
            observed = observed & ~odd
            seen = index[observed]
            caps = np.where(odd, index * np.interp(index, seen, per_worker[observed]), caps)
            per_worker = caps / index
        elif odd.any():
            caps = np.where(odd, index * reference, caps)
            observed = observed & ~odd
            per_worker = caps / index
    extrapolated = (caps > 0) & ~observed
    if not observed.any():
        return caps, observed, tuple(notes)
    seen = index[observed]
    if not extrapolated.any():
        return np.where(observed, caps, index * np.interp(index, seen, per_worker[observed])), observed, tuple(notes)
    mean = float(np.median(per_worker[extrapolated]))
    ratios = np.minimum(per_worker[observed] / mean, 1.0)
    caps = np.where(observed, caps, index * mean * np.interp(index, seen, ratios))
    if ratios.min() < 0.97:
        worst = int(seen[np.argmin(ratios)])
        notes.append(f"capacity check: C_{worst} observed at {caps[worst - 1]:,.0f}/s, {100 * (1 - ratios.min()):.0f} "
                     f"% below {worst} × {mean:,.0f}/s extrapolated: extrapolations near it scaled down alike")
    return caps, observed, tuple(notes)


def envelope(cfg: LoopConfig, a: Analysis) -> tuple[float, float, bool, str]:
    """Whether the load moves faster than the loop can follow (bursts, a rate flapping minute to minute), and what
    to plan for then: how far above its own trend the load went in the recent minutes, relatively (0 up to
    MIN_SWING: no envelope), and the largest recent minute. Then the planner plans for that largest minute over the
    next rescale interval rather than chase each minute: a scale-out chasing a load that jumps minute to minute
    rescales every few minutes and is still late, and a scale-in in a low minute is undone by the next high one. The
    trend is the least-squares line through the minute means, so a steady rise or fall is no excursion. Whether it
    flaps (swings reversing at least FLAP_RATE per minute) decides how: a flapping load's forecast error is measured
    on the flapping itself, so the largest minute replaces the band (a band around a high minute plans for more than
    the load ever reached, and a scale-in in a low minute is undone by the next high one); bursts now and then are
    added to the band (the next burst may be larger than the last)."""
    minutes = int(cfg.envelope_s // 60)
    recent = np.asarray(a.recent_minutes[-minutes:], dtype=float) if minutes >= 3 else np.zeros(0)
    recent = recent[np.isfinite(recent)]
    if recent.size < 3 or not recent.mean() > 0:
        return 0.0, 0.0, False, ""
    trend = np.maximum(level(recent, cfg.level_minutes), 0.05 * float(recent.mean()))
    above = (recent - trend) / trend
    excursion = float(above.max())
    if excursion <= MIN_SWING:
        return 0.0, 0.0, False, ""
    steps = np.diff(recent)
    signs = np.sign(steps[np.abs(steps) > MIN_SWING * trend[1:]])
    reversals = int((signs[1:] != signs[:-1]).sum())
    flaps = reversals >= FLAP_RATE * recent.size
    worst = int(np.argmax(above))
    # The largest burst; against a line, the largest minute (a level the load has left may look like a burst).
    top = float(recent[above > MIN_SWING].max() if cfg.level_minutes else recent.max())
    how = (f"it flaps ({reversals} reversals of its swings): planning for its largest minute, {top:,.0f}/s, or the "
           "forecast where higher, in place of the forecast's band" if flaps else
           f"planning for its largest minute, {top:,.0f}/s, or the forecast's band where higher")
    return excursion, top, flaps, (
        f"envelope: in the last {recent.size} minutes the load went {100 * excursion:.0f} % above its "
        f"{'level' if cfg.level_minutes else 'trend'} "
        f"({float(recent[worst]):,.0f}/s against {float(trend[worst]):,.0f}/s, {recent.size - worst} min ago); "
        f"{how}, over the next {duration(cfg.rescale_interval + ROBUST_EXTRA_S)}")


def level(recent: np.ndarray, minutes: int) -> np.ndarray:
    """The load's level at each recent minute, against which a burst is measured: with `minutes` 0, the
    least-squares line through them all (a steady rise or fall is no burst); else the median of the `minutes`
    around each (the window's ends held), so a fall followed by a flat stretch is a level, not a burst above a
    line cutting beneath it, and only minutes above their own neighbours count."""
    if minutes <= 0:
        x = np.arange(recent.size, dtype=float)
        slope, intercept = np.polyfit(x, recent, 1)
        return slope * x + intercept
    half = int(minutes) // 2
    padded = np.pad(recent, half, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1), axis=1)


def capacity_spread(caps: np.ndarray, observed: np.ndarray, cap: float) -> float:
    """How far an extrapolated capacity may miss: each observed scale-out's per-worker capacity against its
    interpolation from the other observed ones (leave one out), the largest relative miss, at most `cap`.
    0 while fewer than three scale-outs were observed."""
    seen = np.flatnonzero(observed) + 1
    if seen.size < 3:
        return 0.0
    per_worker = caps[seen - 1] / seen
    misses = []
    for k in range(1, seen.size - 1):  # interior points only: interpolation, not extrapolation
        others = np.delete(np.arange(seen.size), k)
        guess = float(np.interp(seen[k], seen[others], per_worker[others]))
        misses.append(abs(guess - per_worker[k]) / per_worker[k])
    return float(min(cap, max(misses))) if misses else 0.0


def prepare(cfg: LoopConfig, a: Analysis, horizon_s: float) -> Inputs:
    bins = max(1, round(horizon_s / BIN_S))
    per_second = np.asarray(a.forecast.values, dtype=float)
    if per_second.size == 0 or not np.isfinite(per_second).all():
        per_second = np.full(bins * int(BIN_S), a.avg_workload)
    need = bins * int(BIN_S)
    if per_second.size < need:
        per_second = np.concatenate([per_second, np.full(need - per_second.size, per_second[-1])])
    mean = np.maximum(per_second[:need].reshape(bins, int(BIN_S)).mean(axis=1), 0.0)
    minutes = math.ceil(need / 60)
    errors = relative_errors(a, minutes)
    lead_minute = np.minimum((np.arange(bins) * BIN_S // 60).astype(int), minutes - 1)
    upper = mean * (1 + cfg.forecast_z * errors[lead_minute])
    caps, observed, notes = corrected_capacities(a)
    spread = capacity_spread(caps, observed, cfg.capacity_spread_max)
    usable = caps * (1 - np.where(observed, cfg.capacity_margin, cfg.capacity_margin + spread))
    notes = list(notes)
    if spread > 0:
        notes.append(f"capacity spread: observed scale-outs miss their interpolation by up to {100 * spread:.0f} %: "
                     "that much more margin on every extrapolated one")
    band = upper.copy()
    excursion, top, flaps, why = envelope(cfg, a)
    if excursion > 0:
        k = min(bins, round((cfg.rescale_interval + ROBUST_EXTRA_S) / BIN_S))
        upper[:k] = np.maximum(mean[:k] if flaps else upper[:k], top)
        notes.append(why)
    # No schedule can plan for more than the largest scale-out processes: the band is cut there (else a wide
    # band far ahead would make every schedule infeasible alike, and the planner could no longer compare them).
    ceiling = float(usable.max())
    if ceiling > 0:
        upper = np.minimum(upper, np.maximum(ceiling, mean))
        band = np.minimum(band, np.maximum(ceiling, mean))
    return Inputs(mean, upper, caps, usable, tuple(notes), band, excursion, spread)


def _segment(arrivals: np.ndarray, t: np.ndarray, lag: np.ndarray, before: np.ndarray, at: np.ndarray,
             down: np.ndarray, after: np.ndarray, replay_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Latency of each bin's arrivals and the backlog after each bin, one row per schedule, over the bins
    starting at times `t` (seconds from now), with at most one switch per row.

    A row starts with `lag` tuples queued, runs at capacity `before` until `at` (inf: no switch; else a bin boundary,
    `_on_bin`: the capacity before a stop works for the whole of its bin), stops for
    `down` seconds (nothing processed; the arrivals since the last checkpoint, `replay_s` of them, are queued
    again), then runs at `after`. An arrival is processed at the capacity running when it arrives, unless the
    backlog ahead of it outlasts the stop: then what is left waits for the restart and goes at `after`.
    """
    lag, before, at, down, after = (v[:, None] for v in (lag, before, at, down, after))
    before, after = np.maximum(before, 1e-9), np.maximum(after, 1e-9)
    restart = at + down
    end = t + BIN_S
    mid = t + BIN_S / 2
    running = np.clip((np.minimum(end, at) - t) / BIN_S, 0.0, 1.0)
    resumed = np.clip((end - np.maximum(t, restart)) / BIN_S, 0.0, 1.0)
    x = (arrivals - running * before - resumed * after) * BIN_S
    stop_bin = np.floor((at[:, 0] - t[0]) / BIN_S)
    hit = np.flatnonzero(np.isfinite(stop_bin) & (stop_bin >= 0) & (stop_bin < t.size))
    k = stop_bin[hit].astype(int)
    x[hit, k] += replay_s * arrivals[k]
    x[:, 0] += lag[:, 0]
    s = np.cumsum(x, axis=1)  # Lindley: b_k = S_k − min(0, min_{j ≤ k} S_j)
    backlog = s - np.minimum(np.minimum.accumulate(s, axis=1), 0.0)
    ahead = backlog / before
    late = (restart - mid) + np.maximum(backlog - before * np.maximum(at - mid, 0.0), 0.0) / after
    latency = np.where(mid < at, np.where(mid + ahead <= at, ahead, late),
                       np.where(mid < restart, (restart - mid) + backlog / after, backlog / after))
    return latency, backlog


def evaluate(cfg: LoopConfig, inputs: Inputs, current: int, lag: float,
             candidates: list[tuple[tuple[float, int], ...]], downtime_out_s: float,
             downtime_in_s: float, robust_s: float | None = None,
             price: tuple[float, float] | None = None) -> list[Schedule]:
    """Cost (expected) and feasibility (robust) of every candidate schedule (at most two switches).

    Expected, over the whole horizon: the mean forecast, the corrected capacities, half a checkpoint interval of
    replay. Robust, over the first `robust_s` seconds (all of the horizon if None): the upper band, the
    capacities less the margin, a whole checkpoint interval of replay; a schedule must stay within the latency
    budget there and leave no backlog at its end. A second switch is simulated from the backlog its first left
    at that time.
    """
    if not candidates:
        return []
    bins = inputs.mean.size
    t = np.arange(bins) * BIN_S
    k_robust = min(bins, round(robust_s / BIN_S)) if robust_s else bins
    firsts = list(dict.fromkeys(c[:1] for c in candidates))  # () and every first switch
    row_of = {c: r for r, c in enumerate(firsts)}

    def down(before: int, after: int) -> float:
        return downtime_out_s if after > before else downtime_in_s

    at1 = np.array([c[0][0] if c else np.inf for c in firsts])
    n1 = np.array([c[0][1] if c else current for c in firsts])
    d1 = np.array([down(current, c[0][1]) if c else 0.0 for c in firsts])
    m = len(candidates)
    first_row = np.array([row_of[c[:1]] for c in candidates])
    k_end = np.array([bins if len(c) < 2 else round(c[1][0] / BIN_S) for c in candidates])
    last_n = np.array([c[-1][1] if c else current for c in candidates])
    # Per candidate: Σ expected latency, max robust latency and the robust backlog left, over both segments.
    delay, max_latency, end_backlog, behind = np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m)
    delay_band, max_expected = np.zeros(m), np.zeros(m)
    catch_up = cfg.latency_slo  # a rescale's backlog must be worked off this long after the restart

    def caught_up(latency: np.ndarray, rows: np.ndarray, restart: np.ndarray, offset: int, limit: np.ndarray
                  ) -> np.ndarray:
        """Expected latency above CAUGHT_UP_S at `catch_up` after each restart (0 when the moment falls
        after `limit`, the segment's end, or beyond the horizon)."""
        finite = np.isfinite(restart)
        k = np.full(rows.size, -1)
        k[finite] = np.ceil((restart[finite] + catch_up) / BIN_S).astype(int) - 1 - offset
        inside = finite & (k >= 0) & (k + offset < limit) & (k < latency.shape[1])
        out = np.zeros(rows.size)
        out[inside] = np.maximum(latency[rows[inside], k[inside]] - CAUGHT_UP_S, 0.0)
        return out

    for name, arrivals, caps, replay in (("expected", inputs.mean, inputs.expected, cfg.checkpoint_interval / 2),
                                         ("robust", inputs.upper, inputs.usable, cfg.checkpoint_interval)):
        latency1, backlog1 = _segment(arrivals, t, np.full(len(firsts), lag), np.full(len(firsts), caps[current - 1]),
                                      at1, d1, caps[n1 - 1], replay)
        upto = np.minimum(k_end, k_robust)
        if name == "expected":
            delay += np.cumsum(latency1, axis=1)[first_row, k_end - 1] * BIN_S
            behind += caught_up(latency1, first_row, (at1 + d1)[first_row], 0, k_end)
            max_expected += np.maximum.accumulate(latency1, axis=1)[first_row, upto - 1]
        else:
            delay_band += np.cumsum(latency1, axis=1)[first_row, k_end - 1] * BIN_S
            max_latency += np.maximum.accumulate(latency1, axis=1)[first_row, upto - 1]
            end_backlog += np.where(k_end >= k_robust, backlog1[first_row, k_robust - 1], 0.0)
        for k2 in sorted(set(k_end[k_end < bins].tolist())):
            idx = np.flatnonzero(k_end == k2)
            prev = n1[first_row[idx]]
            nxt = last_n[idx]
            downs = np.where(nxt > prev, downtime_out_s, downtime_in_s)
            lat, back = _segment(arrivals[k2:], t[k2:], backlog1[first_row[idx], k2 - 1], caps[prev - 1],
                                 np.full(idx.size, k2 * BIN_S), downs, caps[nxt - 1], replay)
            if name == "expected":
                delay[idx] += lat.sum(axis=1) * BIN_S
                behind[idx] += caught_up(lat, np.arange(idx.size), k2 * BIN_S + downs, k2, np.full(idx.size, bins))
                if k2 < k_robust:
                    max_expected[idx] = np.maximum(max_expected[idx], lat[:, :k_robust - k2].max(axis=1))
            else:
                delay_band[idx] += lat.sum(axis=1) * BIN_S
                if k2 < k_robust:
                    max_latency[idx] = np.maximum(max_latency[idx], lat[:, :k_robust - k2].max(axis=1))
                    end_backlog[idx] = back[:, k_robust - k2 - 1]
    end_backlog = end_backlog / inputs.usable[last_n - 1]
    before = np.minimum(k_end, np.floor(np.where(np.isinf(at1), np.inf, at1) / BIN_S)[first_row].clip(0, bins))
    worker_s = (before * current + (k_end - before) * n1[first_row] + (bins - k_end) * last_n) * BIN_S
    budget = cfg.latency_budget_share * cfg.latency_slo
    excess = np.maximum(max_latency - budget, 0.0) + np.maximum(end_backlog - BIN_S, 0.0) + behind
    first, second = (cfg.rescale_price, cfg.rescale_price) if price is None else price
    fees = np.array([(first if c else 0.0) + (second if len(c) > 1 else 0.0) for c in candidates])
    cost = worker_s + cfg.latency_weight * delay + fees
    cost_band = worker_s + cfg.latency_weight * delay_band + fees
    return [Schedule(c, float(worker_s[i]), float(delay[i]), float(max_latency[i]), float(end_backlog[i]),
                     float(cost[i]), float(excess[i]), float(cost_band[i]), float(max_expected[i]))
            for i, c in enumerate(candidates)]


def _on_bin(at: float) -> float:
    """A switch's time on the simulation's grid: the first bin boundary at or after it. `_segment` stops a schedule
    at the start of a bin; a stop inside one would be simulated with the capacity before it working off the whole
    bin's arrivals and the replay, underpricing a switch off the grid (a loop every 7.5 s: "in 8 s" priced a fifth to
    a third less latency than the same switch now on a flat load, so it was deferred at every loop)."""
    return math.ceil(at / BIN_S - 1e-9) * BIN_S


def candidates(cfg: LoopConfig, current: int, horizon: float, grace_left: float, scale_in_left: float,
               pace_left: float = 0.0, breach: bool = False) -> list[tuple[tuple[float, int], ...]]:
    """The schedules that switch (keeping is evaluated apart, first): switch now or at the next loop (wait and
    see: the next loop has a fresher forecast), or at the earliest loop the guardrails allow; each followed by
    nothing or by one more switch `rescale_interval` later (no sooner: the planner's pace). A scale-in is never
    followed by a scale-out. Scale-outs sooner than the pace allows (`pace_left` s from now) are candidates too:
    `decide` takes one only when nothing else keeps the latency budget. Inside the grace period a scale-out may
    start now or at the next loop only on a `breach`: keeping would break the SLO itself (`decide`). A scale-in may
    also start every `SCALE_IN_STEP_S` after its earliest start, within the pace: waiting for a deeper one is then
    weighed against a shallower one now."""
    step = cfg.loop_interval_s
    lo = cfg.min_scaleout if cfg.max_step is None else max(cfg.min_scaleout, current - cfg.max_step)
    hi = cfg.max_scaleout if cfg.max_step is None else min(cfg.max_scaleout, current + cfg.max_step)
    out: list[tuple[tuple[float, int], ...]] = []
    for n1 in range(lo, hi + 1):
        if n1 == current:
            continue
        earliest = max(grace_left, scale_in_left if n1 < current else 0.0)
        if earliest >= horizon and n1 < current:
            continue
        first = math.ceil(earliest / step - 1e-9) * step
        starts = [0.0, step] if first <= 0 else [first] if first < horizon else []
        if n1 > current and first > 0 and breach:  # inside the grace period: early
            starts = [0.0, *([step] if step < first else []), *starts]
        paced = math.ceil(pace_left / step - 1e-9) * step
        if n1 > current and paced > first and paced < horizon:
            starts.append(paced)
        if n1 < current and starts:  # later scale-ins: deeper ones, once the forecast has fallen further
            starts += np.arange(starts[-1] + SCALE_IN_STEP_S, min(horizon, cfg.rescale_interval),
                                SCALE_IN_STEP_S).tolist()
        for at1 in dict.fromkeys(b for b in map(_on_bin, starts) if b < horizon):
            out.append(((at1, n1),))
            at2 = _on_bin(at1 + cfg.rescale_interval)
            if at2 >= horizon - step:
                continue
            lo2 = cfg.min_scaleout if cfg.max_step is None else max(cfg.min_scaleout, n1 - cfg.max_step)
            hi2 = cfg.max_scaleout if cfg.max_step is None else min(cfg.max_scaleout, n1 + cfg.max_step)
            if n1 < current:
                hi2 = n1 - 1
            out += [((at1, n1), (at2, n2)) for n2 in range(lo2, hi2 + 1) if n2 != n1]
    return out


def decide(cfg: LoopConfig, a: Analysis, now: float, last_rescale: float | None, last_action: float | None,
           downtime_out_s: float | None = None, downtime_in_s: float | None = None, recent_rescales: int = 0
           ) -> tuple[int, tuple[str, ...], bool]:
    """The scale-out to run now, why, and whether it is early (sooner than the planner's pace allows, because
    waiting would break the latency budget; or inside the grace period, because keeping would break the SLO): the
    first step of the cheapest feasible schedule."""
    cur = a.scaleout
    if a.avg_workload <= 0 and a.forecast.peak <= 0 and a.lag <= 0:
        return cfg.min_scaleout, ("idle: no workload, no forecast workload and no backlog: "
                                  f"the minimum scale-out {cfg.min_scaleout} suffices",), False
    horizon = float(len(a.forecast.values)) if a.forecast.values else 900.0
    horizon = max(2 * cfg.loop_interval_s, min(horizon, 3600.0))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        inputs = prepare(cfg, a, horizon)
    if not np.isfinite(inputs.usable).all() or inputs.usable[cur - 1] <= 0:
        return cur, ("no usable capacity estimate at the current scale-out: keep it",), False
    d_out = cfg.downtime_out_s if downtime_out_s is None else downtime_out_s
    d_in = cfg.downtime_in_s if downtime_in_s is None else downtime_in_s
    grace_left = 0.0 if last_action is None else max(0.0, cfg.grace_s - (now - last_action))
    scale_in_left = 0.0 if last_rescale is None else max(0.0, cfg.scale_in_s - (now - last_rescale))
    unobserved = not a.observed[cur - 1]
    if unobserved:  # every smaller capacity would be an extrapolation from a capacity not measured yet
        scale_in_left = math.inf
    allowed = cfg.rescale_budget
    left = allowed - recent_rescales
    spent = left < 2  # a scale-in and the scale-out that may undo it must both fit in what the window has left
    if spent:
        scale_in_left = math.inf
    # The budget's shadow price: each rescale dearer as the window's budget runs out, so it goes where it buys most.
    # A schedule's second switch spends what its first left; beyond the budget, it is a last resort (the latency
    # budget's), as a rescale sooner than the pace is: a schedule that needs it is no plan within the budget.
    price = cfg.rescale_price * allowed / max(left, 1)
    prices = (price, cfg.rescale_price * allowed / (left - 1) if left >= 2 else EARLY_PENALTY)
    pace_left = 0.0 if last_rescale is None else max(0.0, cfg.rescale_interval - (now - last_rescale))
    # The band must be kept until a schedule could next act at the planner's pace (and its rescale is over):
    # beyond that a shortfall of the band is met by the next switch, which the candidates include.
    robust_s = min(horizon, cfg.rescale_interval + ROBUST_EXTRA_S)
    settled = last_rescale is not None and last_action is not None and last_rescale >= last_action
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # capacities near 0 or 1e300: inf, ranked last
        [keep] = evaluate(cfg, inputs, cur, a.lag, [()], d_out, d_in, robust_s, prices)
        # Inside the grace period the last rescale is still settling: a scale-out there overrides a guardrail, so
        # only a predicted breach of the SLO itself if nothing changes (judged `grace_breach_band` of the way from
        # the expected latency of keeping to the band's) justifies it, not the budget;
        # and never after an intent that did not reach the target (its grace period keeps it from being redone).
        judged = keep.max_latency_expected_s + cfg.grace_breach_band * (keep.max_latency_s
                                                                         - keep.max_latency_expected_s)
        breach = grace_left > 0 and settled and judged > cfg.latency_slo
        schedules = [keep, *evaluate(cfg, inputs, cur, a.lag,
                                     candidates(cfg, cur, horizon, grace_left, scale_in_left, pace_left, breach),
                                     d_out, d_in, robust_s, prices)]
    budget = cfg.latency_budget_share * cfg.latency_slo

    def early(s: Schedule) -> bool:
        """A scale-out sooner than the pace or inside the grace period (a scale-in is paced by the scale-in
        interval alone: no candidate starts one sooner)."""
        return bool(s.switches) and s.switches[0][1] > cur and s.switches[0][0] < max(pace_left, grace_left) - 1e-9

    def rank(s: Schedule) -> tuple[float, bool, int]:
        # Feasible schedules at the planner's pace by cost; then a scale-out sooner than the pace (only when the
        # latency budget needs it); then the least excess over the budget. Ties: not acting now, fewer workers.
        penalty = SOFT_PENALTY * s.excess_s + (EARLY_PENALTY if early(s) else 0.0)
        total = s.cost + penalty
        return (total if math.isfinite(total) else math.inf, s.now, s.switches[0][1] if s.switches else cur)

    best = min(schedules, key=rank)
    if not best.feasible and not best.now and not keep.feasible:
        # Nothing keeps the budget: waiting for a better moment would only repeat itself loop after loop.
        best = min((s for s in schedules if s.now or s is keep), key=rank)
    notes = [f"forecast over the next {duration(horizon)} ({a.forecast.method}): peak "
             f"{float(inputs.mean.max()):,.0f}/s, "
             f"upper band {float(inputs.upper.max()):,.0f}/s (z = {cfg.forecast_z:g}); latency budget "
             f"{budget:.0f} s ({cfg.latency_budget_share:g} × SLO {cfg.latency_slo:.0f} s)", *inputs.notes]
    if grace_left > 0 and settled and keep.max_latency_s > cfg.latency_slo and not breach:
        notes.append(f"grace period: keeping {cur} is predicted at ≤ {keep.max_latency_s:.0f} s on the band, "
                     f"{keep.max_latency_expected_s:.0f} s expected; judged at {judged:.0f} s "
                     f"(grace_breach_band {cfg.grace_breach_band:g}), within the {cfg.latency_slo:.0f} s SLO: "
                     "no scale-out before the grace period ends")
    if unobserved:
        notes.append(f"the capacity at {cur} is not observed yet: no scale-in")
    notes.append(f"rescale budget: {recent_rescales} of {allowed} spent in the last {duration(RESCALE_WINDOW_S)} "
                 f"({cfg.max_rescales_per_hour:g} an hour): {price:,.0f} worker-s per rescale"
                 + (", no scale-in, which a scale-out might have to undo" if spent else ""))
    # A deferred switch is a bet that the next loop knows more; a growing backlog loses it. Wait only while the
    # current scale-out keeps up: its usable capacity covers the workload and drains the backlog within the SLO.
    need = a.avg_workload + a.lag / cfg.latency_slo
    keeps_up = float(inputs.usable[cur - 1]) >= need
    if best.switches and not best.now and not keeps_up:
        if best.switches[0][1] > cur:
            nows = [s for s in schedules if s.now and s.switches[0][1] > cur]
            if nows:
                best = min(nows, key=rank)
                notes.append(f"not waiting: {cur} does not keep up (usable {float(inputs.usable[cur - 1]):,.0f}/s "
                             f"against the workload {a.avg_workload:,.0f}/s + the backlog's drain "
                             f"{a.lag / cfg.latency_slo:,.0f}/s)")
        else:
            best = keep
    # Hold when a switch's saving lies within the uncertainty: cheaper on the forecast but not on its upper band.
    if best.now and keep.feasible and best.feasible and not (best.cost_band < keep.cost_band):
        notes.append(f"hold: {best.describe(cur)} saves {keep.cost - best.cost:,.0f} on the forecast but "
                     f"{keep.cost_band - best.cost_band:,.0f} on its upper band: within the uncertainty")
        best = keep
    exceeded = False
    if best.now and left <= 0:
        if keep.max_latency_s <= cfg.latency_slo and keep.end_backlog_s <= BIN_S:
            notes.append(f"rescale budget spent ({recent_rescales} of {allowed}): keeping {cur}, which keeps the "
                         f"{cfg.latency_slo:.0f} s SLO (predicted ≤ {keep.max_latency_s:.0f} s)")
            best = keep
        else:
            exceeded = True
    waiting = min((s for s in schedules if not s.now), key=rank)

    def text(s: Schedule) -> str:
        n = len(s.switches)
        fee = "" if not any((price, prices[1])[:n]) else f" + 1 × {price:,.0f} per rescale" if n == 1 else (
            f" + {price:,.0f} + {prices[1]:,.0f} for its two rescales" + (" (the second beyond the budget)"
                                                                            if left < 2 else ""))
        out = (f"{s.describe(cur)}: {s.worker_s:,.0f} worker-s + {cfg.latency_weight:g} × {s.delay_s:,.0f} s of "
               f"added latency{fee} = {s.cost:,.0f}, predicted latency ≤ {s.max_latency_s:.0f} s")
        if s.max_latency_s > budget:
            out += f" (over the budget {budget:.0f} s)"
        elif s.end_backlog_s > BIN_S:
            out += f" (a backlog of {s.end_backlog_s:.0f} s of capacity left at the end)"
        return out

    notes.append(text(keep))
    if not best.feasible:
        notes.append("no schedule stays within the budget: the one least over it")
    if not best.now:
        if best is not keep:
            notes.append(f"cheapest: {text(best)}; not now: keep {cur}")
        else:
            notes.append(f"cheapest: keep {cur}")
        return cur, tuple(notes), False
    target = best.switches[0][1]
    if early(best) and last_rescale is not None:
        notes.append(f"the last rescale was {now - last_rescale:.0f} s ago (< {cfg.rescale_interval:.0f} s): "
                     "rescaling sooner than the planner's pace, since waiting would break the latency budget")
    if target > cur:
        notes.append(set_by(inputs, target, robust_s, keeps_up))
    if exceeded:
        notes.append(f"{BUDGET_EXCEEDED}: {recent_rescales} of {allowed} spent in the last "
                     f"{duration(RESCALE_WINDOW_S)}, but keeping {cur} would break the {cfg.latency_slo:.0f} s SLO "
                     f"(predicted {keep.max_latency_s:.0f} s)")
    notes.append(f"cheapest: {text(best)}, against {waiting.cost:,.0f} waiting ({waiting.describe(cur)}): "
                 f"{cur} → {target}")
    return target, tuple(notes), early(best)


def set_by(inputs: Inputs, target: int, robust_s: float, keeps_up: bool) -> str:
    """Which load set a scale-out: the smallest scale-out covering each of the forecast, its upper band and the
    envelope over the robust window, against the one chosen (the first that reaches it names the cause)."""
    k = max(1, min(inputs.mean.size, round(robust_s / BIN_S)))
    band = inputs.upper if inputs.band is None else inputs.band
    loads = (("the forecast", float(inputs.mean[:k].max())),
             ("the forecast's upper band (the recent error at each lead)", float(band[:k].max())),
             ("the envelope (the recent excursion above the trend)", float(inputs.upper[:k].max())))

    def smallest(load: float) -> int:
        fits = np.flatnonzero(inputs.usable >= load)
        return int(fits[0]) + 1 if fits.size else inputs.usable.size

    for name, load in loads:
        if smallest(load) >= target:
            return f"scale-out set by {name}: {load:,.0f}/s needs {smallest(load)}"
    if not keeps_up:
        return "scale-out set by the backlog: the current scale-out does not keep up"
    return (f"scale-out set by the latency of the switch (downtime, replay and catch-up): {loads[-1][1]:,.0f}/s "
            f"alone needs {smallest(loads[-1][1])}")
