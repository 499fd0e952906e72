"""Choosing the forecast by its record: every method scored at every lead, the best one served at each lead.

The forecaster has several ways to forecast the workload: its ARIMA model, the line over the last minutes, the
last minute's mean held flat ("last-value") and, when the workload repeats itself, the same minutes one season
earlier shifted to today's level ("seasonal"). None is best everywhere: ARIMA with two differences is best a few
minutes ahead and extrapolates a curvature far beyond what arrives half an hour later; holding the last value
is hard to beat 30 minutes ahead on a noisy trace; a season known from the data beats both when it exists.

`MethodRecord` keeps what is needed to choose, with a bounded state:

- the workload's minute means on the clock's minutes (a ring of `history_minutes`), for the naive forecasts
  and the season;
- every `score_every` loops, each method's forecast as minute means (pending until those minutes arrived);
- per method and minute of lead, exponentially weighted sums of |forecast − actual| and |actual|: their ratio
  is the method's recent WAPE at that lead (`decay` per scored forecast);
- the season: the lag (minutes) with the highest autocorrelation of the minute means, if it is high enough.

The served forecast takes, at each minute of lead, the method with the lowest recent WAPE there, and carries
that WAPE as its expected relative error (`errors`), which the planner widens the forecast with. A forecast is
never worse than holding the last value at any lead — measured, not assumed. Pure: numpy only.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from daedalus.models.types import Forecast

__all__ = ["METHODS", "IntervalForecast", "MethodRecord"]

METHODS = ("arima", "linear", "last-value", "seasonal")
SCORED = (*METHODS, "served")  # the served (combined) forecast is scored too: its record is its expected error
MINUTE = 60.0


@dataclass(frozen=True)
class IntervalForecast(Forecast):
    """A forecast with what its record says about it: per minute of lead, the serving method's recent WAPE
    (`errors`, relative) and which method serves that minute (`methods`). Empty while nothing was scored."""

    errors: tuple[float, ...] = ()
    methods: tuple[str, ...] = ()


class MethodRecord:
    """Scores of every forecasting method per minute of lead, the minute history and the season; see the module
    docstring. `horizon_minutes` leads are scored."""

    def __init__(self, horizon_minutes: int, history_minutes: int = 1500, decay: float = 0.95,
                 score_every: int = 2, min_scores: int = 5, season_min: int = 10, season_acf: float = 0.5) -> None:
        self.horizon_minutes = int(horizon_minutes)
        self.history_minutes = int(history_minutes)
        self.decay = float(decay)
        self.score_every = int(score_every)
        self.min_scores = int(min_scores)
        self.season_min = int(season_min)
        self.season_acf = float(season_acf)
        self.history: deque[float] = deque(maxlen=self.history_minutes)
        self.last_minute: int | None = None  # clock minute (t // 60) of the newest completed minute mean
        self.partial_minute: int | None = None
        self.partial_sum = 0.0
        self.partial_n = 0
        self.err = {m: np.zeros(self.horizon_minutes) for m in SCORED}
        self.act = {m: np.zeros(self.horizon_minutes) for m in SCORED}
        self.count = {m: np.zeros(self.horizon_minutes) for m in SCORED}
        self.pending: list[tuple[int, dict[str, np.ndarray]]] = []  # (first clock minute, minute means per method)
        self.season: int | None = None  # minutes
        self.calls = 0

    # ------------------------------------------------------------------ data

    def observe(self, ts: np.ndarray, y: np.ndarray) -> None:
        """Fold clean per-second samples (increasing, new) into minute means; score what they complete."""
        minutes = np.floor(ts / MINUTE).astype(np.int64)
        ok = np.isfinite(y)
        for minute in np.unique(minutes).tolist():
            sel = (minutes == minute) & ok
            if self.partial_minute is not None and minute != self.partial_minute:
                self._close()
            if self.partial_minute is None:
                self.partial_minute, self.partial_sum, self.partial_n = minute, 0.0, 0
            self.partial_sum += float(y[sel].sum())
            self.partial_n += int(sel.sum())
        # the minute is complete once its last second arrived
        if self.partial_minute is not None and ts.size and ts[-1] >= (self.partial_minute + 1) * MINUTE - 1:
            self._close()

    def _close(self) -> None:
        assert self.partial_minute is not None
        value = self.partial_sum / self.partial_n if self.partial_n else math.nan
        minute = self.partial_minute
        self.partial_minute, self.partial_sum, self.partial_n = None, 0.0, 0
        if self.last_minute is not None and minute > self.last_minute + 1:  # minutes without data
            for _ in range(min(minute - self.last_minute - 1, self.history_minutes)):
                self.history.append(math.nan)
        self.history.append(value)
        self.last_minute = minute
        self._score(minute, value)

    def _score(self, minute: int, actual: float) -> None:
        if not math.isfinite(actual):
            return
        keep = []
        for first, values in self.pending:
            lead = minute - first
            if 0 <= lead < self.horizon_minutes:
                for method, v in values.items():
                    if lead < v.size and math.isfinite(v[lead]):
                        self.err[method][lead] = self.decay * self.err[method][lead] + abs(v[lead] - actual)
                        self.act[method][lead] = self.decay * self.act[method][lead] + abs(actual)
                        self.count[method][lead] += 1
            if first + self.horizon_minutes - 1 > minute:
                keep.append((first, values))
        self.pending = keep

    # ------------------------------------------------------------------ the naive methods

    def level(self, minutes: int = 1) -> float | None:
        """Mean of the newest `minutes` complete minute means (None without data)."""
        recent = np.asarray(list(self.history)[-minutes:], dtype=float)
        recent = recent[np.isfinite(recent)]
        return float(recent.mean()) if recent.size else None

    def last_value(self, horizon_s: int) -> np.ndarray | None:
        v = self.level(1)
        return None if v is None else np.full(horizon_s, v)

    def seasonal(self, now: float, horizon_s: int) -> np.ndarray | None:
        """The same clock minutes one season (or a whole number of seasons) earlier, shifted by the difference
        between the last 10 minutes and the same 10 minutes one season earlier."""
        p = self.season
        if p is None or self.last_minute is None:
            return None
        h = np.asarray(self.history, dtype=float)
        last = self.last_minute
        seconds = now + np.arange(horizon_s, dtype=float)
        minutes = np.floor(seconds / MINUTE).astype(np.int64)
        back = np.maximum(np.ceil((minutes - last) / p), 1).astype(np.int64) * p  # whole seasons back, into the past
        index = h.size - 1 - (last - (minutes - back))
        if index.min() < 0:
            return None
        values = h[index]
        span = min(10, p)
        now_level = h[-span:]
        then_level = h[h.size - span - p:h.size - p] if h.size >= span + p else np.array([])
        if then_level.size == span and np.isfinite(now_level).any() and np.isfinite(then_level).any():
            values = values + (np.nanmean(now_level) - np.nanmean(then_level))
        if not np.isfinite(values).all():
            return None
        return np.clip(values, 0.0, None)

    def detect_season(self) -> None:
        """The lag between `season_min` and half the history with the highest autocorrelation of the minute means
        (detrended by a centred moving average of one lag), if it is a local peak above `season_acf`."""
        h = np.asarray(self.history, dtype=float)
        if h.size < 4 * self.season_min or not np.isfinite(h).all() or np.ptp(h) == 0:
            self.season = None
            return
        x = h - h.mean()
        n = x.size
        spectrum = np.fft.rfft(x, 2 * n)
        acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
        if acf[0] <= 0:
            self.season = None
            return
        acf = acf / acf[0] * n / (n - np.arange(n))  # unbiased
        lags = np.arange(self.season_min, n // 2)
        if lags.size < 3:
            self.season = None
            return
        a = acf[lags]
        peaks = [i for i in range(1, a.size - 1) if a[i] >= a[i - 1] and a[i] >= a[i + 1] and a[i] > self.season_acf]
        self.season = int(lags[max(peaks, key=lambda i: a[i])]) if peaks else None

    # ------------------------------------------------------------------ choosing

    def wape(self, method: str) -> np.ndarray:
        """Recent WAPE per minute of lead: nan up to the first lead with `min_scores` scored forecasts; beyond the
        last such lead, its WAPE grown with the square root of the lead (the far leads are scored last: a
        forecast is scored at lead ℓ only ℓ minutes after it was made)."""
        act = self.act[method]
        out = np.divide(self.err[method], act, out=np.full(act.size, np.nan), where=act > 0)
        out = np.where(self.count[method] >= self.min_scores, out, np.nan)
        scored = np.flatnonzero(np.isfinite(out))
        if scored.size and scored[-1] < out.size - 1:
            last = int(scored[-1])
            beyond = np.arange(last + 1, out.size)
            out[beyond] = out[last] * np.sqrt((beyond + 1) / (last + 1))
        return out

    def remember(self, now: float, forecasts: Mapping[str, np.ndarray]) -> None:
        """Every `score_every` calls, keep each method's forecast (per second from `now`) as minute means on the
        clock's minutes that it covers whole, to be scored as they arrive."""
        self.calls += 1
        if (self.calls - 1) % self.score_every:
            return
        first = math.ceil(now / MINUTE)  # the first whole clock minute of the horizon
        offset = round(first * MINUTE - now)
        means = {}
        for method, values in forecasts.items():
            whole = (values.size - offset) // int(MINUTE)
            if whole <= 0:
                continue
            means[method] = values[offset:offset + whole * int(MINUTE)].reshape(whole, int(MINUTE)).mean(axis=1)
        if means:
            self.pending.append((first, means))

    def choose(self, forecasts: Mapping[str, np.ndarray]) -> tuple[np.ndarray, tuple[str, ...],
                                                                   tuple[float, ...]] | None:
        """Combine the methods per minute of lead, each weighted by 1 / (its recent WAPE there)²; None while no
        method has a record at every lead. Returns the per-second forecast, the heaviest method of each minute,
        and each minute's expected relative error: the served forecast's own recent WAPE once it has a record,
        until then the weighted WAPE of the methods (an upper bound: a combination errs less than its parts).

        Combining beat choosing the best method per lead on the paper's traces at every lead (30-minute WAPE on
        sine 60k, tm, advertising: 7.8 / 32.4 / 14.9 % combined, 11.8 / 43.2 / 18.7 % chosen, 11.1 / 34.7 / 20.2 %
        ARIMA alone, 32.4 / 40.5 / 23.1 % the last value): the best method changes faster than its record shows.
        """
        available = [m for m in METHODS if m in forecasts]
        if not available:
            return None
        size = min(v.size for v in forecasts.values())
        minutes = math.ceil(size / MINUTE)
        scores = np.vstack([_fill_forward(self.wape(m))[:minutes] for m in available])
        if scores.shape[1] < minutes or np.isnan(scores).all(axis=0).any():
            return None
        weights = np.where(np.isnan(scores), 0.0, 1.0 / (np.nan_to_num(scores, nan=1.0) ** 2 + 1e-4))
        weights /= weights.sum(axis=0, keepdims=True)
        lead = (np.arange(size) // int(MINUTE)).astype(int)
        stacked = np.vstack([forecasts[m][:size] for m in available])
        values = (stacked * weights[:, lead]).sum(axis=0)
        methods = tuple(available[i] for i in weights.argmax(axis=0))
        own = _fill_forward(self.wape("served"))[:minutes]
        mixed = (weights * np.nan_to_num(scores)).sum(axis=0)
        errors = tuple(float(e) for e in np.where(np.isnan(own), mixed, own))
        return values, methods, errors

    # ------------------------------------------------------------------ state

    def to_state(self) -> dict[str, Any]:
        def enc(xs: Any) -> list[float | None]:
            return [None if not math.isfinite(float(x)) else float(x) for x in xs]

        return {
            "config": {"horizon_minutes": self.horizon_minutes, "history_minutes": self.history_minutes,
                       "decay": self.decay, "score_every": self.score_every, "min_scores": self.min_scores,
                       "season_min": self.season_min, "season_acf": self.season_acf},
            "history": enc(self.history),
            "last_minute": self.last_minute,
            "partial": None if self.partial_minute is None else
            {"minute": self.partial_minute, "sum": self.partial_sum, "n": self.partial_n},
            "scores": {m: {"err": enc(self.err[m]), "act": enc(self.act[m]), "count": enc(self.count[m])}
                       for m in SCORED},
            "pending": [{"first": first, "values": {m: enc(_round(v)) for m, v in values.items()}}
                        for first, values in self.pending],
            "season": self.season,
            "calls": self.calls,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> MethodRecord:
        def dec(xs: list[Any]) -> np.ndarray:
            return np.array([math.nan if x is None else float(x) for x in xs], dtype=float)

        new = cls(**state["config"])
        new.history.extend(dec(state["history"]).tolist())
        new.last_minute = None if state["last_minute"] is None else int(state["last_minute"])
        partial = state["partial"]
        if partial is not None:
            new.partial_minute, new.partial_sum, new.partial_n = int(partial["minute"]), float(partial["sum"]), \
                int(partial["n"])
        for m in SCORED:
            scores = state["scores"][m]
            new.err[m], new.act[m], new.count[m] = dec(scores["err"]), dec(scores["act"]), dec(scores["count"])
        new.pending = [(int(p["first"]), {m: dec(v) for m, v in p["values"].items()}) for p in state["pending"]]
        new.season = None if state["season"] is None else int(state["season"])
        new.calls = int(state["calls"])
        return new


def _fill_forward(x: np.ndarray) -> np.ndarray:
    """NaN after the first finite value takes the last finite value before it (a lead scored too rarely, e.g.
    the last one when loops do not fall on the clock's minutes, takes the previous lead's record)."""
    out = x.copy()
    for k in range(1, out.size):
        if math.isnan(out[k]):
            out[k] = out[k - 1]
    return out


def _round(x: np.ndarray, digits: int = 6) -> np.ndarray:
    """To `digits` significant digits: a pending forecast is only ever compared with what arrives."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = 10.0 ** (digits - 1 - np.floor(np.log10(np.abs(x))))
    scale = np.where(np.isfinite(scale), scale, 1.0)
    return np.round(x * scale) / scale
