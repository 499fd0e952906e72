"""The forecaster as plain JSON-safe data, and back: stored in every knowledge version, so the layout is fixed.

No pickle: configuration, the window, the partial step, the per-second tail, the pending forecasts, the scores,
and the model as specification + parameter list. NaN is stored as null, ±inf as "inf"/"-inf" (strict JSON).
Rebuilding re-filters the model over the stored window: forecasts are identical. A change of this layout is a
new `STATE_VERSION` (and a new knowledge schema version). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import numpy as np

from daedalus.models.errors import KnowledgeError
from daedalus.models.forecast.arima import SPEC_KEYS, ArimaModel
from daedalus.models.forecast.fallback import LinearFallback
from daedalus.models.forecast.score import ForecastScore, Pending
from daedalus.models.forecast.select import MethodRecord
from daedalus.models.forecast.window import StepWindow

__all__ = ["STATE_VERSION", "ForecasterParts", "decode", "encode"]


class ForecasterParts(Protocol):
    """What the state holds of a forecaster: its parts, not the class (which imports this module)."""

    step_window: StepWindow
    score: ForecastScore
    model: ArimaModel | None
    fallback: LinearFallback
    record: MethodRecord
    fit_error: str | None
    fit_failed_at_steps: int | None

    def config(self) -> dict[str, Any]: ...


F = TypeVar("F", bound=ForecasterParts)

STATE_VERSION = 2  # 2: the methods' record (forecast_select); a version-1 state is read with an empty record


def encode(f: ForecasterParts) -> dict[str, Any]:
    """Plain, strictly JSON-serialisable state (`json.dumps(state, allow_nan=False)` works)."""
    window, score, m = f.step_window, f.score, f.model
    model = None
    if m is not None:
        model = {
            "spec": _jsonable(m.spec),
            "params": [float(p) for p in m.params],
            "param_names": list(m.param_names),
            "fitted_at": m.fitted_at,
            "scale": m.scale,
        }
    partial = None
    if window.partial_start is not None:
        partial = {"start": window.partial_start, "sum": window.partial_sum, "n": window.partial_n}
    return {
        "version": STATE_VERSION,
        "config": f.config(),
        "data": {
            "window": _enc_list(window.ring),
            "window_end": window.end,
            "partial": partial,
            "tail_t": list(f.fallback.t),
            "tail_y": _enc_list(f.fallback.y),
            "last_t": window.last_t,
            "steps_seen": window.steps_seen,
        },
        "model": model,
        "scoring": {
            "previous_wape": _enc(score.previous_wape),
            "served_wape": _enc(score.served_wape),
            "poor_loops": score.poor_loops,
            "history": _enc_list(score.history),
            "pending_model": _enc_pending(score.pending_model),
            "pending_served": _enc_pending(score.pending_served),
        },
        "fit": {"error": f.fit_error, "failed_at_steps": f.fit_failed_at_steps},
        "record": f.record.to_state(),
    }


def decode(cls: type[F], state: Mapping[str, Any]) -> F:
    """Rebuild a working forecaster from `encode`'s state; a corrupt or unknown state is a KnowledgeError."""
    try:
        version = state["version"]
        if version not in (1, STATE_VERSION):
            raise KnowledgeError(f"forecaster state version {version!r}, expected {STATE_VERSION}")
        new = cls(**state["config"])
        if version >= 2:
            new.record = MethodRecord.from_state(state["record"])
        data, scoring, fit = state["data"], state["scoring"], state["fit"]
        window = new.step_window
        window.ring.extend(_dec_list(data["window"]))
        window.end = _opt_float(data["window_end"])
        if data["partial"] is not None:
            window.partial_start = float(data["partial"]["start"])
            window.partial_sum = float(data["partial"]["sum"])
            window.partial_n = int(data["partial"]["n"])
        new.fallback.t.extend(float(t) for t in data["tail_t"])
        new.fallback.y.extend(_dec_list(data["tail_y"]))
        window.last_t = _opt_float(data["last_t"])
        window.steps_seen = int(data["steps_seen"])
        new.fit_error = fit["error"]
        new.fit_failed_at_steps = fit["failed_at_steps"]
        model = state["model"]
        if model is not None:
            spec = {k: model["spec"][k] for k in SPEC_KEYS if k in model["spec"]}
            spec["order"] = tuple(spec["order"])
            spec["seasonal_order"] = tuple(spec["seasonal_order"])
            new.model = ArimaModel(spec, np.asarray(model["params"], dtype=float), list(model["param_names"]),
                                   float(model["scale"]), _opt_float(model["fitted_at"]))
            new.model.refilter(window)
        score = new.score
        score.previous_wape = _dec(scoring["previous_wape"])
        score.served_wape = _dec(scoring["served_wape"])
        score.poor_loops = int(scoring["poor_loops"])
        score.history.extend(_dec_list(scoring["history"]))
        score.pending_model = _dec_pending(scoring["pending_model"])
        score.pending_served = _dec_pending(scoring["pending_served"])
    except (KeyError, TypeError, ValueError) as exc:
        raise KnowledgeError(f"corrupt forecaster state: {type(exc).__name__}: {exc}") from exc
    return new


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


PENDING_STORED_S = 600  # seconds of a pending forecast stored: the next loop scores only what arrived by then


def _enc_pending(pending: Pending | None) -> dict[str, Any] | None:
    if pending is None:
        return None
    start, values = pending
    return {"start": start, "values": [float(v) for v in values[:PENDING_STORED_S]]}


def _dec_pending(data: Mapping[str, Any] | None) -> Pending | None:
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
