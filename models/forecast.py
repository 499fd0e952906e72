"""Workload forecast: auto-ARIMA at step resolution, a linear fallback, and a bounded update cost.

The workload arrives per second, one chunk (about 60 s) per control loop. The forecaster

- aggregates it to `step_s` means (a partial step carries over to the next chunk) and keeps a ring of the
  last `window_steps` of them, plus the last `fallback_window_s` seconds for the linear fallback;
- fits auto-ARIMA (pmdarima) once the window holds `min_fit_steps` points, then keeps only the model's
  *specification* (order, seasonal order, trend, …) and *parameters*: every loop it re-runs the Kalman filter
  of a statsmodels SARIMAX with those fixed parameters over the bounded window (≈ 5 ms for 240 steps).
  pmdarima's `update` is never called: it refits over everything it holds, so its cost grows with the job;
- forecasts `horizon_s` seconds, per second, from `now`: ARIMA step means interpolated between step
  centres, or a least-squares line over the last `fallback_window_s` seconds, both clipped at 0;
- scores each loop the previous forecast against what arrived (WAPE). The ARIMA forecast is computed and
  scored every loop even while the fallback is served, so the choice "ARIMA or line" and the count of poor
  loops always judge the model itself (scoring the served forecast would flip-flop: a bad model makes the
  line be served, the line scores well, the bad model is served again, and the poor-loop count never
  reaches the retrain threshold).

Retraining. `retrain()` refits in place (seconds: the caller decides where it runs). For a background
retrain, build a fresh forecaster from a longer history with `Forecaster.fit_from_history(ts, y,
**old.config())` (or rebuild one with `from_state`), then `old.swap_model(new)`: the loop's forecaster adopts
the new model's specification and parameters, keeps its own (more recent) data, re-filters over it and
resets the poor-loop count. Nothing else of the background forecaster is used.

Persistence. `to_state()` is plain JSON-safe data (no pickle): configuration, the window, the partial step,
the per-second tail, the pending forecasts, the scores, and the model as specification + parameter list.
`from_state()` rebuilds the SARIMAX and filters it over the stored window: forecasts are identical.

Pure: no I/O, no wall clock (time is passed in), no Prefect.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from daedalus.models.errors import KnowledgeError
from daedalus.models.types import Forecast

__all__ = ["STATE_VERSION", "WAPE_HISTORY_LEN", "Forecaster", "wape"]

STATE_VERSION = 1
WAPE_HISTORY_LEN = 240  # loops of WAPE history kept (4 h at one loop a minute)

# SARIMAX constructor arguments that define the model (besides the data). Read from the fitted pmdarima
# model, stored in the state, passed back to SARIMAX when rebuilding.
_SPEC_KEYS = (
    "order",
    "seasonal_order",
    "trend",
    "measurement_error",
    "time_varying_regression",
    "mle_regression",
    "simple_differencing",
    "enforce_stationarity",
    "enforce_invertibility",
    "hamilton_representation",
    "concentrate_scale",
    "trend_offset",
    "use_exact_diffuse",
)


def wape(actual: Any, predicted: Any) -> float:
    """Weighted absolute percentage error Σ|y − ŷ| / Σ|y| over the pairs where both are finite.

    No finite pair → nan (nothing to score). Σ|y| = 0: 0.0 if the prediction is exactly right (all zero),
    else inf (any error on a zero workload is infinitely poor, and compares as poor against any threshold).
    """
    y = np.asarray(actual, dtype=float).ravel()
    p = np.asarray(predicted, dtype=float).ravel()
    if y.shape != p.shape:
        raise ValueError(f"actual and predicted differ in length: {y.size} ≠ {p.size}")
    ok = np.isfinite(y) & np.isfinite(p)
    if not ok.any():
        return float("nan")
    num = float(np.abs(y[ok] - p[ok]).sum())
    den = float(np.abs(y[ok]).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


class Forecaster:
    """Per-second workload forecaster for one job; see the module docstring.

    Public state (read-only by convention): `previous_wape` (WAPE of the previous ARIMA forecast, or of the
    previous served forecast while no model exists; None if unknown), `served_wape` (WAPE of the previous
    *served* forecast, whatever its method), `poor_loops` (consecutive loops with previous_wape above the
    threshold), `wape_history`, `fitted`, `order`, `seasonal_order`, `params`, `fitted_at`,
    `last_model_forecast` (the ARIMA forecast of the last `forecast()` call, served or not), `fit_error`.
    """

    def __init__(
        self,
        horizon_s: int = 900,
        step_s: int = 30,
        window_steps: int = 240,
        wape_threshold: float = 0.25,
        poor_loops_to_retrain: int = 15,
        min_fit_steps: int = 60,
        fallback_window_s: int = 300,
        seasonal_period_steps: int | None = None,
        max_d: int = 2,
    ) -> None:
        for name, value, low in (
            ("horizon_s", horizon_s, 1),
            ("step_s", step_s, 1),
            ("window_steps", window_steps, 8),
            ("poor_loops_to_retrain", poor_loops_to_retrain, 1),
            ("min_fit_steps", min_fit_steps, 8),
            ("fallback_window_s", fallback_window_s, 1),
        ):
            if int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer ≥ {low}, got {value!r}")
        if min_fit_steps > window_steps:
            raise ValueError(f"min_fit_steps ({min_fit_steps}) exceeds window_steps ({window_steps})")
        if not wape_threshold > 0:
            raise ValueError(f"wape_threshold must be positive, got {wape_threshold!r}")
        if seasonal_period_steps is not None and (
            int(seasonal_period_steps) != seasonal_period_steps or seasonal_period_steps < 2
        ):
            raise ValueError(f"seasonal_period_steps must be an integer ≥ 2, got {seasonal_period_steps!r}")
        self.horizon_s = int(horizon_s)
        self.step_s = int(step_s)
        self.window_steps = int(window_steps)
        self.wape_threshold = float(wape_threshold)
        self.poor_loops_to_retrain = int(poor_loops_to_retrain)
        self.min_fit_steps = int(min_fit_steps)
        self.fallback_window_s = int(fallback_window_s)
        self.seasonal_period_steps = None if seasonal_period_steps is None else int(seasonal_period_steps)
        if max_d not in (0, 1, 2):
            raise ValueError(f"max_d must be 0, 1 or 2, got {max_d!r}")
        self.max_d = int(max_d)

        # Data: the step ring, the partial step, the per-second tail.
        self._ring: deque[float] = deque(maxlen=self.window_steps)
        self._ring_end: float | None = None  # start time of the newest completed step
        self._partial_start: float | None = None
        self._partial_sum = 0.0
        self._partial_n = 0
        self._tail_t: deque[float] = deque(maxlen=self.fallback_window_s)
        self._tail_y: deque[float] = deque(maxlen=self.fallback_window_s)
        self._last_t: float | None = None
        self._steps_seen = 0  # completed steps ever (an int: paces fit retries)

        # Model: specification + fixed parameters; `_res` is the filter over the current window.
        self._spec: dict[str, Any] | None = None
        self._params: np.ndarray | None = None
        self._param_names: list[str] = []
        self._scale = 1.0  # the model works on workload / scale: fits at 1e5-1e6 tuples/s diverge otherwise
        self._res: Any = None
        self.fitted_at: float | None = None
        self.fit_error: str | None = None
        self._fit_failed_at_steps: int | None = None

        # Scoring.
        self._pending_model: tuple[float, np.ndarray] | None = None
        self._pending_served: tuple[float, np.ndarray] | None = None
        self.previous_wape: float | None = None
        self.served_wape: float | None = None
        self.poor_loops = 0
        self._wape_history: deque[float] = deque(maxlen=WAPE_HISTORY_LEN)

    # ------------------------------------------------------------------ configuration and introspection

    def config(self) -> dict[str, Any]:
        """The constructor arguments: `Forecaster(**f.config())` is an empty forecaster like `f`."""
        return {
            "horizon_s": self.horizon_s,
            "step_s": self.step_s,
            "window_steps": self.window_steps,
            "wape_threshold": self.wape_threshold,
            "poor_loops_to_retrain": self.poor_loops_to_retrain,
            "min_fit_steps": self.min_fit_steps,
            "fallback_window_s": self.fallback_window_s,
            "seasonal_period_steps": self.seasonal_period_steps,
            "max_d": self.max_d,
        }

    @property
    def fitted(self) -> bool:
        return self._params is not None

    @property
    def order(self) -> tuple[int, int, int] | None:
        return None if self._spec is None else tuple(self._spec["order"])

    @property
    def seasonal_order(self) -> tuple[int, int, int, int] | None:
        return None if self._spec is None else tuple(self._spec["seasonal_order"])

    @property
    def params(self) -> dict[str, float]:
        if self._params is None:
            return {}
        return dict(zip(self._param_names, self._params.tolist(), strict=True))

    @property
    def window(self) -> np.ndarray:
        """The completed step means in the window, oldest first (NaN for a step without data)."""
        return np.asarray(self._ring, dtype=float)

    @property
    def window_end(self) -> float | None:
        """Start time of the newest completed step."""
        return self._ring_end

    @property
    def filtered_nobs(self) -> int:
        """Steps the Kalman filter ran over in its last update: the new steps, not the window (0 if no model)."""
        return 0 if self._res is None else int(self._res.nobs)

    @property
    def wape_history(self) -> tuple[float, ...]:
        return tuple(self._wape_history)

    @property
    def retrain_needed(self) -> bool:
        """A model exists and its forecasts were poor for `poor_loops_to_retrain` consecutive loops."""
        return self._params is not None and self.poor_loops >= self.poor_loops_to_retrain

    @property
    def last_model_forecast(self) -> Forecast | None:
        """The ARIMA forecast of the last `forecast()` call (served or not), pending its score."""
        if self._pending_model is None:
            return None
        start, values = self._pending_model
        return Forecast(start, tuple(values.tolist()), "arima", self.previous_wape)

    # ------------------------------------------------------------------ the loop

    def observe(self, timestamps: Any, workload: Any) -> None:
        """Fold in one chunk of per-second workload (epoch-second timestamps, tuples/s).

        Scores the previous forecast on the seconds of it that arrived, aggregates to steps, re-filters the
        model over the window when steps completed, and fits the first model once the window holds
        `min_fit_steps` points. Seconds at or before the newest one already seen are ignored.
        """
        ts = np.asarray(timestamps, dtype=float).ravel()
        y = np.asarray(workload, dtype=float).ravel()
        if ts.shape != y.shape:
            raise ValueError(f"timestamps and workload differ in length: {ts.size} ≠ {y.size}")
        ts, y = self._clean(ts, y)
        if ts.size == 0:
            return
        self._score(ts, y)
        completed = self._ingest(ts, y)
        if not completed:
            return
        if self._params is not None:
            self._advance(completed)
        elif self._first_fit_due():
            try:
                self.fit(now=self._last_t)
            except Exception as exc:  # the loop must go on with the fallback; retried later
                self.fit_error = f"{type(exc).__name__}: {exc}"
                self._fit_failed_at_steps = self._steps_seen

    def forecast(self, now: float) -> Forecast:
        """`horizon_s` per-second values from `now`; remembered to be scored by the next `observe()`."""
        now = float(now)
        model_values = self._model_values(now) if self._res is not None else None
        self._pending_model = None if model_values is None else (now, model_values)
        use_model = model_values is not None and (
            self.previous_wape is None or not self.previous_wape > self.wape_threshold
        )
        if use_model:
            assert model_values is not None
            values, method = model_values, "arima"
        else:
            linear = self._linear_values(now)
            if linear is None:
                self._pending_served = None
                return Forecast(now, (), "none", self.previous_wape)
            values, method = linear, "linear"
        self._pending_served = (now, values)
        return Forecast(now, tuple(values.tolist()), method, self.previous_wape)

    # ------------------------------------------------------------------ fitting and retraining

    def fit(self, now: float | None = None) -> None:
        """Auto-ARIMA on the window (seconds); replaces the model, resets the scores of the old one.

        Raises ValueError when the window holds fewer than `min_fit_steps` points with data.
        """
        series = self.window
        if int(np.isfinite(series).sum()) < self.min_fit_steps:
            raise ValueError(
                f"{int(np.isfinite(series).sum())} steps with data in the window, "
                f"fewer than min_fit_steps={self.min_fit_steps}"
            )
        self._scale = _scale_of(series)
        spec, params, names = self._auto_arima(series / self._scale)
        self._install(spec, params, names, now if now is not None else self._last_t)

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
        ts = np.asarray(timestamps, dtype=float).ravel()
        y = np.asarray(workload, dtype=float).ravel()
        if ts.shape != y.shape:
            raise ValueError(f"timestamps and workload differ in length: {ts.size} ≠ {y.size}")
        ts, y = new._clean(ts, y)
        steps = np.asarray(new._ingest(ts, y), dtype=float)
        if fit_steps is not None:
            steps = steps[-int(fit_steps) :]
        if int(np.isfinite(steps).sum()) < new.min_fit_steps:
            raise ValueError(
                f"the history gives {int(np.isfinite(steps).sum())} steps with data, "
                f"fewer than min_fit_steps={new.min_fit_steps}"
            )
        new._scale = _scale_of(steps)
        spec, params, names = new._auto_arima(steps / new._scale)
        new._install(spec, params, names, now if now is not None else new._last_t)
        return new

    def swap_model(self, other: Forecaster) -> None:
        """Adopt `other`'s fitted model (specification and parameters), keeping this forecaster's data.

        Re-filters over this window, resets the poor-loop count, the previous WAPE (unknown: the new model
        is served next) and the pending ARIMA forecast (it was the old model's).
        """
        if other._spec is None or other._params is None:
            raise ValueError("the other forecaster has no fitted model")
        if other.step_s != self.step_s:
            raise ValueError(f"the other model works on {other.step_s} s steps, this one on {self.step_s} s")
        self._scale = other._scale
        self._install(dict(other._spec), other._params.copy(), list(other._param_names), other.fitted_at)

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> dict[str, Any]:
        """Plain, strictly JSON-serialisable state (`json.dumps(state, allow_nan=False)` works)."""
        model = None
        if self._spec is not None and self._params is not None:
            model = {
                "spec": _jsonable(self._spec),
                "params": [float(p) for p in self._params],
                "param_names": list(self._param_names),
                "fitted_at": self.fitted_at,
                "scale": self._scale,
            }
        partial = None
        if self._partial_start is not None:
            partial = {"start": self._partial_start, "sum": self._partial_sum, "n": self._partial_n}
        return {
            "version": STATE_VERSION,
            "config": self.config(),
            "data": {
                "window": _enc_list(self._ring),
                "window_end": self._ring_end,
                "partial": partial,
                "tail_t": list(self._tail_t),
                "tail_y": _enc_list(self._tail_y),
                "last_t": self._last_t,
                "steps_seen": self._steps_seen,
            },
            "model": model,
            "scoring": {
                "previous_wape": _enc(self.previous_wape),
                "served_wape": _enc(self.served_wape),
                "poor_loops": self.poor_loops,
                "history": _enc_list(self._wape_history),
                "pending_model": _enc_pending(self._pending_model),
                "pending_served": _enc_pending(self._pending_served),
            },
            "fit": {"error": self.fit_error, "failed_at_steps": self._fit_failed_at_steps},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Forecaster:
        """Rebuild a working forecaster from `to_state()`; its forecasts equal the original's."""
        try:
            version = state["version"]
            if version != STATE_VERSION:
                raise KnowledgeError(f"forecaster state version {version!r}, expected {STATE_VERSION}")
            new = cls(**state["config"])
            data, scoring, fit = state["data"], state["scoring"], state["fit"]
            new._ring.extend(_dec_list(data["window"]))
            new._ring_end = _opt_float(data["window_end"])
            if data["partial"] is not None:
                new._partial_start = float(data["partial"]["start"])
                new._partial_sum = float(data["partial"]["sum"])
                new._partial_n = int(data["partial"]["n"])
            new._tail_t.extend(float(t) for t in data["tail_t"])
            new._tail_y.extend(_dec_list(data["tail_y"]))
            new._last_t = _opt_float(data["last_t"])
            new._steps_seen = int(data["steps_seen"])
            new.fit_error = fit["error"]
            new._fit_failed_at_steps = fit["failed_at_steps"]
            model = state["model"]
            if model is not None:
                spec = {k: model["spec"][k] for k in _SPEC_KEYS if k in model["spec"]}
                spec["order"] = tuple(spec["order"])
                spec["seasonal_order"] = tuple(spec["seasonal_order"])
                new._spec = spec
                new._params = np.asarray(model["params"], dtype=float)
                new._param_names = list(model["param_names"])
                new.fitted_at = _opt_float(model["fitted_at"])
                new._scale = float(model["scale"])
                new._refilter()
            new.previous_wape = _dec(scoring["previous_wape"])
            new.served_wape = _dec(scoring["served_wape"])
            new.poor_loops = int(scoring["poor_loops"])
            new._wape_history.extend(_dec_list(scoring["history"]))
            new._pending_model = _dec_pending(scoring["pending_model"])
            new._pending_served = _dec_pending(scoring["pending_served"])
        except (KeyError, TypeError, ValueError) as exc:
            raise KnowledgeError(f"corrupt forecaster state: {type(exc).__name__}: {exc}") from exc
        return new

    # ------------------------------------------------------------------ internals: data

    def _clean(self, ts: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Finite timestamps, increasing, unique, newer than anything already seen."""
        keep = np.isfinite(ts)
        ts, y = ts[keep], y[keep]
        if ts.size > 1 and np.any(np.diff(ts) <= 0):
            ts, first = np.unique(ts, return_index=True)
            y = y[first]
        if self._last_t is not None:
            newer = ts > self._last_t
            ts, y = ts[newer], y[newer]
        return ts, y

    def _ingest(self, ts: np.ndarray, y: np.ndarray) -> list[float]:
        """Fold clean per-second data into the tail and the step ring; returns the completed step means."""
        if ts.size == 0:
            return []
        self._tail_t.extend(ts[-self.fallback_window_s :].tolist())
        self._tail_y.extend(y[-self.fallback_window_s :].tolist())
        self._last_t = float(ts[-1])
        step = float(self.step_s)
        buckets = np.floor(ts / step) * step
        cuts = np.flatnonzero(np.diff(buckets)) + 1
        first = np.concatenate(([0], cuts))
        finite = np.isfinite(y)
        sums = np.add.reduceat(np.where(finite, y, 0.0), first)
        counts = np.add.reduceat(finite.astype(np.int64), first)
        completed: list[float] = []
        for start, total, n in zip(buckets[first].tolist(), sums.tolist(), counts.tolist(), strict=True):
            if self._partial_start is not None and start == self._partial_start:
                self._partial_sum += total
                self._partial_n += int(n)
                continue
            if self._partial_start is not None:  # a later step began: close the earlier one as it is
                completed.append(self._close_partial())
            if self._ring_end is not None:  # steps without any data: NaN (the Kalman filter skips them)
                missing = round((start - self._ring_end) / step) - 1
                for _ in range(min(max(missing, 0), self.window_steps)):
                    completed.append(self._push(math.nan, self._ring_end + step))
                if missing > 0:
                    self._ring_end = start - step
            self._partial_start, self._partial_sum, self._partial_n = start, total, int(n)
        # Per-second samples: the step is complete once its last second arrived.
        if self._partial_start is not None and self._last_t >= self._partial_start + step - 1:
            completed.append(self._close_partial())
        return completed

    def _close_partial(self) -> float:
        assert self._partial_start is not None
        value = self._partial_sum / self._partial_n if self._partial_n else math.nan
        start = self._partial_start
        self._partial_start, self._partial_sum, self._partial_n = None, 0.0, 0
        return self._push(value, start)

    def _push(self, value: float, start: float) -> float:
        self._ring.append(value)
        self._ring_end = start
        self._steps_seen += 1
        return value

    def _first_fit_due(self) -> bool:
        if int(np.isfinite(self.window).sum()) < self.min_fit_steps:
            return False
        if self._fit_failed_at_steps is None:
            return True
        return self._steps_seen - self._fit_failed_at_steps >= max(1, self.min_fit_steps // 2)

    # ------------------------------------------------------------------ internals: scoring

    def _score(self, ts: np.ndarray, y: np.ndarray) -> None:
        model_wape = _score_pending(self._pending_model, ts, y)
        served_wape = _score_pending(self._pending_served, ts, y)
        if not math.isnan(served_wape):
            self.served_wape = served_wape
        # The model's own forecast when there is a model, else the served one (the fallback line).
        has_model = self._params is not None
        judged = model_wape if has_model else served_wape
        if math.isnan(judged):
            return
        self.previous_wape = judged
        self._wape_history.append(judged)
        if has_model:
            self.poor_loops = self.poor_loops + 1 if judged > self.wape_threshold else 0

    # ------------------------------------------------------------------ internals: model

    def _auto_arima(self, series: np.ndarray) -> tuple[dict[str, Any], np.ndarray, list[str]]:
        import pmdarima as pm  # heavy import, only when fitting

        y = _fill_nan(np.asarray(series, dtype=float))
        m = self.seasonal_period_steps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = pm.auto_arima(
                y,
                start_p=1,
                start_q=1,
                max_p=5,
                max_q=5,
                max_d=self.max_d,
                max_order=8,
                seasonal=m is not None,
                m=m or 1,
                max_P=2,
                max_Q=2,
                max_D=1,
                stepwise=True,
                suppress_warnings=True,
                error_action="ignore",
            )
        res = model.arima_res_
        kwds = res.model._get_init_kwds()
        spec = {k: kwds[k] for k in _SPEC_KEYS if k in kwds}
        spec["order"] = tuple(int(v) for v in spec["order"])
        spec["seasonal_order"] = tuple(int(v) for v in spec["seasonal_order"])
        return spec, np.asarray(res.params, dtype=float).copy(), list(res.model.param_names)

    def _install(self, spec: dict[str, Any], params: np.ndarray, names: list[str], now: float | None) -> None:
        self._spec, self._params, self._param_names = spec, params, names
        self.fitted_at = None if now is None else float(now)
        self.fit_error = None
        self._fit_failed_at_steps = None
        self.poor_loops = 0
        self.previous_wape = None
        self._pending_model = None
        self._refilter()

    def _advance(self, steps: list[float]) -> None:
        """Carry the Kalman filter over the new steps only, from its last state: each loop costs the same
        whatever the window holds; the window is re-filtered only when a model is installed or restored."""
        if self._res is None or len(steps) >= self.window_steps:
            self._refilter()
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._res = self._res.extend(np.asarray(steps, dtype=float) / self._scale)

    def _refilter(self) -> None:
        """Kalman filter with the fixed parameters over the bounded window: O(window), no refit."""
        from statsmodels.tsa.statespace.sarimax import SARIMAX

        assert self._spec is not None and self._params is not None
        endog = self.window
        if not np.isfinite(endog).any():
            self._res = None
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._res = SARIMAX(endog / self._scale, **self._spec).filter(self._params)

    def _model_values(self, now: float) -> np.ndarray | None:
        """ARIMA step means, interpolated between step centres to seconds from `now`, clipped at 0."""
        assert self._ring_end is not None
        step = float(self.step_s)
        last_centre = self._ring_end + (step - 1.0) / 2.0  # mean time of the step's per-second samples
        seconds = now + np.arange(self.horizon_s, dtype=float)
        needed = math.ceil((seconds[-1] - last_centre) / step)
        # A stale window (no data for long) is capped; the last forecast step is held beyond it.
        steps = min(max(needed, 1), math.ceil(self.horizon_s / step) + self.window_steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ahead = self._scale * np.asarray(self._res.forecast(steps), dtype=float)
        anchor = self._ring[-1] if math.isfinite(self._ring[-1]) else ahead[0]
        centres = last_centre + step * np.arange(steps + 1, dtype=float)
        values = np.interp(seconds, centres, np.concatenate(([anchor], ahead)))
        if not np.all(np.isfinite(values)):
            return None
        return np.clip(values, 0.0, None)

    def _linear_values(self, now: float) -> np.ndarray | None:
        """Least-squares line over the last `fallback_window_s` seconds, projected from `now`, clipped."""
        if self._last_t is None:
            return None
        t = np.asarray(self._tail_t, dtype=float)
        y = np.asarray(self._tail_y, dtype=float)
        ok = np.isfinite(y) & (t > self._last_t - self.fallback_window_s)
        if not ok.any():
            return None
        t, y = t[ok] - self._last_t, y[ok]  # centred on the newest second: well-conditioned
        seconds = now - self._last_t + np.arange(self.horizon_s, dtype=float)
        if t.size == 1 or np.ptp(t) == 0:
            values = np.full(self.horizon_s, float(y.mean()))
        else:
            design = np.column_stack((t, np.ones_like(t)))
            (slope, intercept), *_ = np.linalg.lstsq(design, y, rcond=None)
            values = intercept + slope * seconds
        return np.clip(values, 0.0, None)


# ---------------------------------------------------------------------- helpers


def _scale_of(series: np.ndarray) -> float:
    """Typical magnitude of a series, so the model sees values of order one."""
    finite = np.abs(series[np.isfinite(series)])
    return float(finite.mean()) if finite.size and finite.mean() > 0 else 1.0


def _score_pending(pending: tuple[float, np.ndarray] | None, ts: np.ndarray, y: np.ndarray) -> float:
    """WAPE of a remembered per-second forecast over the seconds of it present in (ts, y)."""
    if pending is None:
        return math.nan
    start, values = pending
    idx = np.rint(ts - start).astype(np.int64)
    inside = (idx >= 0) & (idx < values.size)
    if not inside.any():
        return math.nan
    return wape(y[inside], values[idx[inside]])


def _fill_nan(y: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaN gaps (ends held), for auto_arima which does not take NaN."""
    ok = np.isfinite(y)
    if ok.all():
        return y
    x = np.arange(y.size, dtype=float)
    return np.interp(x, x[ok], y[ok])


def _enc(x: float | None) -> float | str | None:
    if x is None or math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def _dec(x: float | str | None) -> float | None:
    if x is None:
        return None
    return float(x)


def _enc_list(xs: Any) -> list[float | str | None]:
    return [_enc(float(x)) for x in xs]


def _dec_list(xs: list[Any]) -> list[float]:
    return [math.nan if x is None else float(x) for x in xs]


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


def _enc_pending(pending: tuple[float, np.ndarray] | None) -> dict[str, Any] | None:
    if pending is None:
        return None
    start, values = pending
    return {"start": start, "values": [float(v) for v in values]}


def _dec_pending(data: Mapping[str, Any] | None) -> tuple[float, np.ndarray] | None:
    if data is None:
        return None
    return float(data["start"]), np.asarray(data["values"], dtype=float)


def _jsonable(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, tuple | list):
            out[key] = [v.item() if isinstance(v, np.generic) else v for v in value]
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = value
    return out
