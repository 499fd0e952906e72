"""Forecast (the paper's workload forecast): auto-ARIMA, the fallback, and the choice between them by WAPE."""

from daedalus.models.forecast.forecaster import Forecaster
from daedalus.models.forecast.score import WAPE_HISTORY_LEN, wape

__all__ = ["WAPE_HISTORY_LEN", "Forecaster", "wape"]
