"""Forecast against actual: the record of what each loop forecast, and how the forecasts each decision relied on
compare with what arrived (the WAPE over that record). Computed here once; the dashboards only draw and print it.

The record keeps two hours of forecasts at the forecaster's step (`record_forecast`); the forecasts each loop made
for the time until the next loop, joined (`next_loop_forecast`), are matched to the actual step that starts within
half a step of each (`matched_wape`). Pure.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from daedalus.models.forecast.score import wape
from daedalus.models.forecast.steps import step_means

if TYPE_CHECKING:
    from daedalus.models.forecast.forecaster import Forecaster
    from daedalus.models.types import Forecast

FORECAST_STEP_S = 30  # forecasts are kept at the forecaster's step
FORECAST_KEEP_S = 7200  # two hours of forecasts, like the forecaster's window


def steps_of(values: tuple[float, ...] | list[float], step: int = FORECAST_STEP_S) -> list[float]:
    """Per-second values as means of whole steps."""
    return [round(float(x), 1) for x in step_means(values, step)]


def record_forecast(history: list[dict[str, Any]] | None, forecast: Forecast) -> list[dict[str, Any]]:
    """The rolling record of forecasts, with this loop's appended and those older than two hours dropped."""
    kept = [h for h in history or [] if h["start"] > forecast.start - FORECAST_KEEP_S and h["start"] < forecast.start]
    if forecast.values:
        kept.append({"start": forecast.start, "method": forecast.method, "values": steps_of(forecast.values)})
    return kept


def next_loop_forecast(history: list[dict[str, Any]], loop_s: float = 60.0) -> tuple[np.ndarray, np.ndarray]:
    """The forecasts each loop made for the time until the next loop, joined: what each decision relied on."""
    ts: list[float] = []
    ys: list[float] = []
    for h in history:
        n = max(1, round(loop_s / FORECAST_STEP_S))
        for i, y in enumerate(h["values"][:n]):
            ts.append(h["start"] + i * FORECAST_STEP_S)
            ys.append(y)
    return np.asarray(ts), np.asarray(ys)


def actual_steps(f: Forecaster) -> tuple[np.ndarray, np.ndarray]:
    """What arrived: the forecaster's window of step means, with the start time of each step."""
    y = f.window
    if f.window_end is None or not len(y):
        return np.array([]), np.array([])
    t = f.window_end - f.step_s * np.arange(len(y) - 1, -1, -1)
    return t, y


def matched_wape(actual_t: np.ndarray, actual_y: np.ndarray, fc_t: np.ndarray, fc_y: np.ndarray) -> float | None:
    """WAPE of the joined next-loop forecasts against the actual step that starts within half a step of each."""
    ok = np.isfinite(actual_y)
    at, ay = actual_t[ok], actual_y[ok]
    if not len(at) or not len(fc_t):
        return None
    i = np.clip(np.searchsorted(at, fc_t), 1, len(at) - 1) if len(at) > 1 else np.zeros(len(fc_t), dtype=int)
    nearest = np.where(np.abs(at[i - 1] - fc_t) <= np.abs(at[i] - fc_t), i - 1, i) if len(at) > 1 else i
    close = np.abs(at[nearest] - fc_t) <= FORECAST_STEP_S / 2
    if not close.any():
        return None
    w = wape(ay[nearest[close]], fc_y[close])
    return float(w) if math.isfinite(w) else None
