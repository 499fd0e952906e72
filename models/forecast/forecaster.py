"""Workload forecast: auto-ARIMA at step resolution, a linear fallback, and a bounded update cost.

The workload arrives per second, one chunk (about 60 s) per control loop. The `Forecaster` composes one
small object per job:

- `StepWindow` (forecast_window.py): the last `window_steps` means of `step_s` seconds, a partial step
  carried over to the next chunk;
- `ArimaModel` (forecast_arima.py): auto-ARIMA fitted once the window holds `min_fit_steps` points, then
  its fixed parameters Kalman-filtered over the new steps every loop, forecasts interpolated to seconds;
- `LinearFallback` (forecast_fallback.py): a line over the last `fallback_window_s` seconds, served while no
  model exists or while the model's previous forecast was poor;
- `ForecastScore` (wape.py): each loop's WAPE of the previous forecasts and the count of poor loops, which
  always judge the model's own forecast (computed even while the line is served);
- the state as plain JSON (forecast_state.py): `to_state()` / `from_state()`, identical forecasts after.

Retraining. `retrain()` refits in place (seconds: the caller decides where it runs). For a background
retrain, build a fresh forecaster from a longer history with `Forecaster.fit_from_history(ts, y,
**old.config())` (or rebuild one with `from_state`), then `old.swap_model(new)`: the loop's forecaster adopts
the new model's specification and parameters, keeps its own (more recent) data, re-filters over it and
resets the poor-loop count. Nothing else of the background forecaster is used.

Pure: no I/O, no wall clock (time is passed in), no Prefect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from daedalus.models.forecast import state as forecast_state
from daedalus.models.forecast.arima import ArimaModel
from daedalus.models.forecast.fallback import LinearFallback
from daedalus.models.forecast.score import WAPE_HISTORY_LEN, ForecastScore, wape
from daedalus.models.forecast.select import IntervalForecast, MethodRecord
from daedalus.models.forecast.state import STATE_VERSION
from daedalus.models.forecast.window import StepWindow
from daedalus.models.types import Forecast

__all__ = ["STATE_VERSION", "WAPE_HISTORY_LEN", "Forecaster", "wape"]

CONFIG_KEYS = ("horizon_s", "step_s", "window_steps", "wape_threshold", "poor_loops_to_retrain", "min_fit_steps",
               "fallback_window_s", "seasonal_period_steps", "max_d", "select")  # in the stored state's order
SEASON_EVERY = 15  # loops between two searches for the season


class Forecaster:
    """Per-second workload forecaster for one job; see the module docstring.

    Public state (read-only by convention): `previous_wape` (WAPE of the previous ARIMA forecast, or of the
    previous served forecast while no model exists; None if unknown), `served_wape` (WAPE of the previous
    *served* forecast, whatever its method), `poor_loops` (consecutive loops with previous_wape above the
    threshold), `wape_history`, `fitted`, `order`, `seasonal_order`, `params`, `fitted_at`,
    `last_model_forecast` (the ARIMA forecast of the last `forecast()` call, served or not), `fit_error`; the
    parts `step_window`, `model` (None before the first fit), `fallback` and `score`.
    """

    def __init__(self, horizon_s: int = 1800, step_s: int = 30, window_steps: int = 240, wape_threshold: float = 0.25,
                 poor_loops_to_retrain: int = 15, min_fit_steps: int = 60, fallback_window_s: int = 300,
                 seasonal_period_steps: int | None = None, max_d: int = 2, select: bool = True) -> None:
        for name, value, low in (
            ("horizon_s", horizon_s, 1),
            ("step_s", step_s, 1),
            ("window_steps", window_steps, 8),
            ("poor_loops_to_retrain", poor_loops_to_retrain, 1),
            ("min_fit_steps", min_fit_steps, 8),
            ("fallback_window_s", fallback_window_s, 1),
            ("seasonal_period_steps", 2 if seasonal_period_steps is None else seasonal_period_steps, 2),
        ):
            if int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer ≥ {low}, got {value!r}")
        if min_fit_steps > window_steps:
            raise ValueError(f"min_fit_steps ({min_fit_steps}) exceeds window_steps ({window_steps})")
        if not wape_threshold > 0:
            raise ValueError(f"wape_threshold must be positive, got {wape_threshold!r}")
        if max_d not in (0, 1, 2):
            raise ValueError(f"max_d must be 0, 1 or 2, got {max_d!r}")
        self.horizon_s = int(horizon_s)
        self.step_s = int(step_s)
        self.window_steps = int(window_steps)
        self.wape_threshold = float(wape_threshold)
        self.poor_loops_to_retrain = int(poor_loops_to_retrain)
        self.min_fit_steps = int(min_fit_steps)
        self.fallback_window_s = int(fallback_window_s)
        self.seasonal_period_steps = None if seasonal_period_steps is None else int(seasonal_period_steps)
        self.max_d = int(max_d)
        self.select = bool(select)

        self.step_window = StepWindow(self.step_s, self.window_steps)
        self.record = MethodRecord(horizon_minutes=math.ceil(self.horizon_s / 60))
        self.fallback = LinearFallback(self.fallback_window_s)
        self.score = ForecastScore(self.wape_threshold, self.poor_loops_to_retrain)
        self.model: ArimaModel | None = None
        self.fit_error: str | None = None
        self.fit_failed_at_steps: int | None = None  # steps seen at the last failed fit: paces the retries

    # ------------------------------------------------------------------ configuration and introspection

    def config(self) -> dict[str, Any]:
        """The constructor arguments: `Forecaster(**f.config())` is an empty forecaster like `f`."""
        return {name: getattr(self, name) for name in CONFIG_KEYS}

    @property
    def fitted(self) -> bool:
        return self.model is not None

    @property
    def order(self) -> tuple[int, int, int] | None:
        return None if self.model is None else self.model.order

    @property
    def seasonal_order(self) -> tuple[int, int, int, int] | None:
        return None if self.model is None else self.model.seasonal_order

    @property
    def params(self) -> dict[str, float]:
        return {} if self.model is None else self.model.named_params

    @property
    def fitted_at(self) -> float | None:
        return None if self.model is None else self.model.fitted_at

    @property
    def window(self) -> np.ndarray:
        """The completed step means in the window, oldest first (NaN for a step without data)."""
        return self.step_window.values

    @property
    def window_end(self) -> float | None:
        """Start time of the newest completed step."""
        return self.step_window.end

    @property
    def filtered_nobs(self) -> int:
        """Steps the Kalman filter ran over in its last update: the new steps, not the window (0 if no model)."""
        return 0 if self.model is None else self.model.filtered_nobs

    @property
    def previous_wape(self) -> float | None:
        return self.score.previous_wape

    @property
    def served_wape(self) -> float | None:
        return self.score.served_wape

    @property
    def poor_loops(self) -> int:
        return self.score.poor_loops

    @poor_loops.setter
    def poor_loops(self, value: int) -> None:
        self.score.poor_loops = value

    @property
    def wape_history(self) -> tuple[float, ...]:
        return tuple(self.score.history)

    @property
    def retrain_needed(self) -> bool:
        """A model exists and its forecasts were poor for `poor_loops_to_retrain` consecutive loops."""
        return self.model is not None and self.score.retrain_due

    @property
    def last_model_forecast(self) -> Forecast | None:
        """The ARIMA forecast of the last `forecast()` call (served or not), pending its score."""
        if self.score.pending_model is None:
            return None
        start, values = self.score.pending_model
        return Forecast(start, tuple(values.tolist()), "arima", self.previous_wape)

    # ------------------------------------------------------------------ the loop

    def observe(self, timestamps: Any, workload: Any) -> None:
        """Fold in one chunk of per-second workload (epoch-second timestamps, tuples/s).

        Scores the previous forecast on the seconds of it that arrived, aggregates to steps, re-filters the
        model over the window when steps completed, and fits the first model once the window holds
        `min_fit_steps` points. Seconds at or before the newest one already seen are ignored.
        """
        ts, y = self.step_window.clean(timestamps, workload)
        if ts.size == 0:
            return
        self.score.update(ts, y, judge_model=self.model is not None)
        if self.select:
            self.record.observe(ts, y)
            if self.record.calls % SEASON_EVERY == 0:
                self.record.detect_season()
        self._ingest(ts, y)
        if not self.step_window.completed:
            return
        if self.model is not None:
            self.model.advance(self.step_window)
        elif self._first_fit_due():
            try:
                self.fit(now=self.step_window.last_t)
            except Exception as exc:  # the loop must go on with the fallback; retried later
                self.fit_error = f"{type(exc).__name__}: {exc}"
                self.fit_failed_at_steps = self.step_window.steps_seen

    def forecast(self, now: float) -> Forecast:
        """`horizon_s` per-second values from `now`; remembered to be scored by the next `observe()`.

        With `select` (the default), every method that can forecast does, each is remembered to be scored per
        minute of lead, and the served forecast combines them at each minute, weighted by their recent WAPE there
        (`forecast_select`), with its own recent WAPE as its expected error. Until every lead has a record, and
        without `select`, the paper's rule: the ARIMA model unless its previous forecast was poor, else the line.
        """
        now = float(now)
        model_values = None
        if self.model is not None and self.model.filtering:
            model_values = self.model.forecast_seconds(now, self.horizon_s, self.step_window)
        model = None if model_values is None else (now, model_values)
        linear = self.fallback.values(now, self.horizon_s)
        if self.select:
            candidates = {"arima": model_values, "linear": linear,
                          "last-value": self.record.last_value(self.horizon_s),
                          "seasonal": self.record.seasonal(now, self.horizon_s)}
            candidates = {k: v for k, v in candidates.items() if v is not None}
            chosen = self.record.choose(candidates)
            self.record.remember(now, candidates if chosen is None else {**candidates, "served": chosen[0]})
            if chosen is not None:
                values, methods, errors = chosen
                self.score.remember(model, (now, values))
                return IntervalForecast(now, tuple(values.tolist()), _method_name(methods), self.previous_wape,
                                        errors=errors, methods=methods)
        if model_values is not None and not self.score.poor:
            values, method = model_values, "arima"
        else:
            if linear is None:
                self.score.remember(model, None)
                return Forecast(now, (), "none", self.previous_wape)
            values, method = linear, "linear"
        self.score.remember(model, (now, values))
        return Forecast(now, tuple(values.tolist()), method, self.previous_wape)

    # ------------------------------------------------------------------ fitting and retraining

    def fit(self, now: float | None = None) -> None:
        """Auto-ARIMA on the window (seconds); replaces the model, resets the scores of the old one.

        Raises ValueError when the window holds fewer than `min_fit_steps` points with data.
        """
        self._install(self._fit(self.window, "the window"),
                      now if now is not None else self.step_window.last_t)

    def retrain(self, now: float | None = None) -> None:
        """Refit in place on the window (the same as `fit`): new model, poor-loop count reset."""
        self.fit(now=now)

    @classmethod
    def fit_from_history(
        cls,
        timestamps: Any,
        workload: Any,
        *,
        now: float | None = None,
        fit_steps: int | None = None,
        **config: Any,
    ) -> Forecaster:
        """A fresh fitted forecaster built from a (longer) per-second history, for a background retrain.

        auto-ARIMA runs on the last `fit_steps` aggregated steps of the history (all of it if None: bound
        the history you pass); the new forecaster's window holds the last `window_steps` of them. Use
        `loop_forecaster.swap_model(new)` to put the model in service.
        """
        new = cls(**config)
        new._ingest(*new.step_window.clean(timestamps, workload))
        steps = np.asarray(new.step_window.completed, dtype=float)
        if fit_steps is not None:
            steps = steps[-int(fit_steps) :]
        new._install(new._fit(steps, "the history"), now if now is not None else new.step_window.last_t)
        return new

    def swap_model(self, other: Forecaster) -> None:
        """Adopt `other`'s fitted model (specification and parameters), keeping this forecaster's data.

        Re-filters over this window, resets the poor-loop count, the previous WAPE (unknown: the new model
        is served next) and the pending ARIMA forecast (it was the old model's).
        """
        if other.model is None:
            raise ValueError("the other forecaster has no fitted model")
        if other.step_s != self.step_s:
            raise ValueError(f"the other model works on {other.step_s} s steps, this one on {self.step_s} s")
        self._install(other.model.copy(), other.model.fitted_at)

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> dict[str, Any]:
        """Plain, strictly JSON-serialisable state (`json.dumps(state, allow_nan=False)` works)."""
        return forecast_state.encode(self)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Forecaster:
        """Rebuild a working forecaster from `to_state()`; its forecasts equal the original's."""
        return forecast_state.decode(cls, state)

    # ------------------------------------------------------------------ internals

    def _ingest(self, ts: np.ndarray, y: np.ndarray) -> None:
        """Clean per-second data into the fallback's tail and the step window."""
        if ts.size:
            self.fallback.update(ts, y)
        self.step_window.update(ts, y)

    def _fit(self, steps: np.ndarray, where: str) -> ArimaModel:
        """auto-ARIMA on `steps`; ValueError when fewer than `min_fit_steps` of them hold data."""
        with_data = int(np.isfinite(steps).sum())
        if with_data < self.min_fit_steps:
            raise ValueError(f"{with_data} steps with data in {where}, fewer than min_fit_steps={self.min_fit_steps}")
        return ArimaModel.fit(steps, self.seasonal_period_steps, self.max_d)

    def _install(self, model: ArimaModel, now: float | None) -> None:
        """Put a model in service: its scores start afresh, its filter runs over this window."""
        model.fitted_at = None if now is None else float(now)
        self.model = model
        self.fit_error = None
        self.fit_failed_at_steps = None
        self.score.restart()
        model.refilter(self.step_window)

    def _first_fit_due(self) -> bool:
        if self.step_window.finite_steps < self.min_fit_steps:
            return False
        if self.fit_failed_at_steps is None:
            return True
        return self.step_window.steps_seen - self.fit_failed_at_steps >= max(1, self.min_fit_steps // 2)


def _method_name(methods: tuple[str, ...]) -> str:
    """One method's name, or the methods in order of lead joined by "+" (e.g. "arima+last-value")."""
    return "+".join(dict.fromkeys(methods))
