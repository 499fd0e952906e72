"""The forecaster's model: auto-ARIMA fitted once, then a Kalman filter with fixed parameters every loop.

pmdarima's auto-ARIMA chooses the model on the step means of the window; only its *specification* (order,
seasonal order, trend, …) and *parameters* are kept. Every loop a statsmodels SARIMAX with those fixed
parameters carries its Kalman filter over the new steps only (≈ 5 ms for a 240-step window when re-filtered
whole). pmdarima's `update` is never called: it refits over everything it holds, so its cost grows with the
job. The model works on workload / `scale`: fits at 1e5–1e6 tuples/s diverge otherwise. Pure (no I/O, no clock).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from daedalus.models.forecast.window import StepWindow

__all__ = ["SPEC_KEYS", "ArimaModel", "auto_arima"]

# SARIMAX constructor arguments that define the model (besides the data). Read from the fitted pmdarima
# model, stored in the state, passed back to SARIMAX when rebuilding.
SPEC_KEYS = (
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


def auto_arima(
    series: np.ndarray, seasonal_period_steps: int | None, max_d: int
) -> tuple[dict[str, Any], np.ndarray, list[str]]:
    """Stepwise auto-ARIMA on a step series (seconds): the chosen specification, its parameters and their names."""
    import pmdarima as pm  # heavy import, only when fitting

    y = _fill_nan(np.asarray(series, dtype=float))
    if np.ptp(y) == 0:
        return constant_model(float(y[0]))
    m = seasonal_period_steps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pm.auto_arima(
            y,
            start_p=1,
            start_q=1,
            max_p=5,
            max_q=5,
            max_d=max_d,
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
    spec = {k: kwds[k] for k in SPEC_KEYS if k in kwds}
    spec["order"] = tuple(int(v) for v in spec["order"])
    spec["seasonal_order"] = tuple(int(v) for v in spec["seasonal_order"])
    return spec, np.asarray(res.params, dtype=float).copy(), list(res.model.param_names)


def constant_model(level: float) -> tuple[dict[str, Any], np.ndarray, list[str]]:
    """ARIMA(0, 0, 0) with a constant `level`, for a window that never changed.

    pmdarima returns ARIMA(0, 0, 0) *without* an intercept for a constant series ("returning a (0, 0, 0) ARMA"):
    its forecast is 0, whatever the level. On a constant workload that model was served after the first fit and
    scored a WAPE of 0.9456 every loop (the forecast fell from the last value to 0 over the first step, then
    stayed at 0). Here the intercept is the level and the noise variance a small positive number.
    """
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SARIMAX(np.full(8, level), order=(0, 0, 0), trend="c")
    kwds = model._get_init_kwds()
    spec = {k: kwds[k] for k in SPEC_KEYS if k in kwds}
    spec["order"] = (0, 0, 0)
    spec["seasonal_order"] = (0, 0, 0, 0)
    return spec, np.array([level, 1e-6]), list(model.param_names)


class ArimaModel:
    """A SARIMAX specification with fixed parameters, and its Kalman filter over the forecaster's window."""

    def __init__(self, spec: dict[str, Any], params: np.ndarray, param_names: list[str], scale: float,
                 fitted_at: float | None) -> None:
        self.spec = spec
        self.params = params
        self.param_names = param_names
        self.scale = scale
        self.fitted_at = None if fitted_at is None else float(fitted_at)
        self._res: Any = None  # the filter's results; None while the window holds no data

    @classmethod
    def fit(cls, series: np.ndarray, seasonal_period_steps: int | None, max_d: int) -> ArimaModel:
        """auto-ARIMA on a step series (seconds); the model is not filtered yet (`refilter`)."""
        scale = scale_of(series)
        spec, params, names = auto_arima(series / scale, seasonal_period_steps, max_d)
        return cls(spec, params, names, scale, None)

    def copy(self) -> ArimaModel:
        """The same specification, parameters and scale, not filtered yet."""
        return ArimaModel(dict(self.spec), self.params.copy(), list(self.param_names), self.scale, self.fitted_at)

    @property
    def order(self) -> tuple[int, int, int]:
        return tuple(self.spec["order"])

    @property
    def seasonal_order(self) -> tuple[int, int, int, int]:
        return tuple(self.spec["seasonal_order"])

    @property
    def named_params(self) -> dict[str, float]:
        return dict(zip(self.param_names, self.params.tolist(), strict=True))

    @property
    def filtering(self) -> bool:
        """The filter has run over data: the model can forecast."""
        return self._res is not None

    @property
    def filtered_nobs(self) -> int:
        """Steps the filter ran over in its last update: the new steps, not the window (0 before any)."""
        return 0 if self._res is None else int(self._res.nobs)

    def refilter(self, window: StepWindow) -> None:
        """Kalman filter with the fixed parameters over the bounded window: O(window), no refit."""
        from statsmodels.tsa.statespace.sarimax import SARIMAX

        endog = window.values
        if not np.isfinite(endog).any():
            self._res = None
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._res = SARIMAX(endog / self.scale, **self.spec).filter(self.params)

    def advance(self, window: StepWindow) -> None:
        """Carry the filter over the steps the window just completed, from its last state: each loop costs the
        same whatever the window holds; the window is re-filtered only when there is no filter to carry on."""
        steps = window.completed
        if self._res is None or len(steps) >= window.size:
            self.refilter(window)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._res = self._res.extend(np.asarray(steps, dtype=float) / self.scale)

    def forecast_seconds(self, now: float, horizon_s: int, window: StepWindow) -> np.ndarray | None:
        """Step means ahead, interpolated between step centres to seconds from `now`, clipped at 0.

        None when a value is not finite (the fallback is served then).
        """
        assert window.end is not None and self._res is not None
        step = float(window.step_s)
        last_centre = window.end + (step - 1.0) / 2.0  # mean time of the step's per-second samples
        seconds = now + np.arange(horizon_s, dtype=float)
        needed = math.ceil((seconds[-1] - last_centre) / step)
        # A stale window (no data for long) is capped; the last forecast step is held beyond it.
        steps = min(max(needed, 1), math.ceil(horizon_s / step) + window.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ahead = self.scale * np.asarray(self._res.forecast(steps), dtype=float)
        last = window.ring[-1]
        anchor = last if math.isfinite(last) else ahead[0]
        centres = last_centre + step * np.arange(steps + 1, dtype=float)
        values = np.interp(seconds, centres, np.concatenate(([anchor], ahead)))
        if not np.all(np.isfinite(values)):
            return None
        return np.clip(values, 0.0, None)


def scale_of(series: np.ndarray) -> float:
    """Typical magnitude of a series, so the model sees values of order one."""
    finite = np.abs(series[np.isfinite(series)])
    return float(finite.mean()) if finite.size and finite.mean() > 0 else 1.0


def _fill_nan(y: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaN gaps (ends held), for auto_arima which does not take NaN."""
    ok = np.isfinite(y)
    if ok.all():
        return y
    x = np.arange(y.size, dtype=float)
    return np.interp(x, x[ok], y[ok])
