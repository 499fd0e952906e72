"""Workload traces for the simulator: load, rescale and synthesise tuples/s, one value per second.

Three file formats are recognised by their header line:

- ``second|<name>`` (``second|count``, ``second|adCount``): the paper's traces, one row per second;
- ``timestamp|<name>`` (``timestamp|value``): rates recorded at 1 s, epoch seconds;
- ``date,<name>`` (``date,messages``): multi-day traces in 5 min, 15 min or 1 h steps.

Everything comes back as a float array at 1 s resolution, so the simulator never sees a format.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from daedalus.models.errors import WorkloadError

KNOWN_FORMATS = ("second|<name>", "timestamp|<name>", "date,<name>")
# Prometheus exports write `null` for a scrape that returned nothing: a missing sample, filled like a
# missing second. A literal NaN is a broken value and is rejected.
_MISSING = ("null", "")


def load_workload(path: str | Path, hours: float | None = None) -> np.ndarray:
    """Read a workload trace as tuples/s, one float per second.

    Per-second traces (``second|…``, ``timestamp|…``) are truncated to the first ``hours`` × 3600 s
    and must be at least that long. Coarse multi-day traces (``date,…``) are interpolated linearly
    to 1 s; with ``hours`` the whole trace is time-compressed onto ``hours`` × 3600 seconds, so
    days of seasonality fit into one simulated run.
    """
    path = Path(path)
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise ValueError(f"hours must be a positive number, got {hours}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file ({exc})") from exc
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise WorkloadError(f"{path}: empty workload file")
    header_line, header = lines[0]
    kind, sep = _detect(path, header_line, header)
    rows = lines[1:]
    if not rows:
        raise WorkloadError(f"{path}: no data after the header (line {header_line})")
    keys, values = _parse_rows(path, rows, sep, kind)
    if kind == "date":
        series = _resample_coarse(keys, values, hours)
    else:
        series = _per_second(keys, values)
        if hours is not None:
            needed = round(hours * 3600)
            if len(series) < needed:
                raise WorkloadError(
                    f"{path}: too short for the run: {len(series)} s of workload, {needed} s needed ({hours} h)"
                )
            series = series[:needed]
    if not float(np.max(series)) > 0:  # a run scales its workload to a peak, which needs one
        within = "" if hours is None else f" in the first {hours:g} h"
        raise WorkloadError(f"{path}: the rate is 0 throughout{within}: nothing to scale to the run's peak")
    return series


def _detect(path: Path, line: int, header: str) -> tuple[str, str]:
    """Which format the header names, and its field separator."""
    for sep in ("|", ","):
        fields = [f.strip().lower() for f in header.split(sep)]
        if len(fields) != 2 or not fields[1]:
            continue
        if sep == "|" and fields[0] in ("second", "timestamp"):
            return fields[0], sep
        if sep == "," and fields[0] == "date":
            return "date", sep
    raise WorkloadError(
        f"{path}: unknown workload format, header {header!r} (line {line}); known formats: {', '.join(KNOWN_FORMATS)}"
    )


def _parse_rows(path: Path, rows: list[tuple[int, str]], sep: str, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Keys (seconds, epoch seconds or datetimes as seconds from the first) and values of the rows.

    Missing samples (`null`) are left out: the resampling fills them by interpolation.
    """
    raw_keys: list[str] = []
    values: list[float] = []
    lines: list[int] = []
    for n, line in rows:
        fields = line.split(sep)
        if len(fields) != 2:
            raise WorkloadError(f"{path}: line {n}: expected 2 fields separated by {sep!r}, got {line!r}")
        key, raw = fields[0].strip(), fields[1].strip()
        if raw.lower() in _MISSING:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise WorkloadError(f"{path}: line {n}: non-numeric value {raw!r}") from None
        if math.isnan(value):
            raise WorkloadError(f"{path}: line {n}: NaN value")
        if math.isinf(value):
            raise WorkloadError(f"{path}: line {n}: infinite value")
        if value < 0:
            raise WorkloadError(f"{path}: line {n}: negative rate {value}")
        raw_keys.append(key)
        values.append(value)
        lines.append(n)
    if not values:
        raise WorkloadError(f"{path}: no values, every sample is missing")
    import pandas as pd  # here, not at the top: the command line imports this module at its start

    if kind == "date":
        stamps = pd.to_datetime(pd.Series(raw_keys), errors="coerce", format="mixed")
        bad = np.flatnonzero(stamps.isna().to_numpy())
        if len(bad):
            raise WorkloadError(f"{path}: line {lines[bad[0]]}: not a date {raw_keys[bad[0]]!r}")
        keys = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    else:
        keys = pd.to_numeric(pd.Series(raw_keys), errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(keys))
        if len(bad):
            raise WorkloadError(f"{path}: line {lines[bad[0]]}: non-numeric {kind} {raw_keys[bad[0]]!r}")
    return _merge_duplicates(keys, np.asarray(values))


def _merge_duplicates(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort by key and average the values of repeated keys (a duplicated second is one sample)."""
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=values)
    counts = np.bincount(inverse)
    return unique, sums / counts


def _per_second(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One value per second from the first key to the last; missing seconds interpolated linearly."""
    grid = keys[0] + np.arange(math.floor(keys[-1] - keys[0]) + 1)
    return np.interp(grid, keys, values)


def _resample_coarse(keys: np.ndarray, values: np.ndarray, hours: float | None) -> np.ndarray:
    """Interpolate a coarse trace to 1 s, or compress its whole span onto `hours` of seconds."""
    if hours is None:
        grid = np.arange(math.floor(keys[-1]) + 1, dtype=float)
    else:
        grid = np.linspace(0.0, keys[-1], round(hours * 3600))
    return np.interp(grid, keys, values)


def rescale_to_peak(workload: np.ndarray, peak: float) -> np.ndarray:
    """Scale a trace so its maximum is `peak`, as the paper fits every workload under 12 workers."""
    workload = np.asarray(workload, dtype=float)
    if not (math.isfinite(peak) and peak > 0):
        raise ValueError(f"peak must be a positive number, got {peak}")
    top = float(np.max(workload)) if workload.size else 0.0
    if not top > 0:
        raise ValueError("cannot rescale a workload whose maximum is not positive")
    return workload * (peak / top)


def sine_workload(hours: float = 6.0, period_s: float = 10_800, low: float = 5_000, high: float = 60_000) -> np.ndarray:
    """The paper's WordCount workload: a sine from the mid value rising, between `low` and `high`.

    With the defaults it is ``paper/sine_60000_6h.csv`` (two periods in 6 h) without the file's
    truncation to whole tuples.
    """
    if not (math.isfinite(hours) and hours > 0):
        raise ValueError(f"hours must be positive, got {hours}")
    if not period_s > 0:
        raise ValueError(f"period_s must be positive, got {period_s}")
    if not 0 <= low <= high:
        raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
    t = np.arange(round(hours * 3600), dtype=float)
    mid, amplitude = (low + high) / 2, (high - low) / 2
    return mid + amplitude * np.sin(2 * np.pi * t / period_s)
