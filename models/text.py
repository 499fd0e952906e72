"""How values are shown to people: one helper each for UTC times, numbers, percentages and durations, so every
report, table and artifact reads the same, and no `inf s`, `nan` or `0.0 %` for a tiny share reaches a person."""

from __future__ import annotations

import math
from datetime import UTC, datetime

UNKNOWN = "—"


def utc(t: float | None, *, zone: bool = True, unknown: str = "?") -> str:
    """Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC` (without ` UTC` under a column that says so)."""
    if t is None:
        return unknown
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S" + (" UTC" if zone else ""))


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def number(x: float | None, unit: str = "", *, digits: int | None = None, unknown: str = UNKNOWN) -> str:
    """`12,346 tuples/s`: thousands separators; by default no decimals for whole numbers and from 100 up, one from
    10, two below (a capacity of 123,456.7/s needs no decimals, a ratio of 1.19 does); ∞ for an infinite value."""
    if _missing(x):
        return unknown
    assert x is not None
    if math.isinf(x):
        text = "∞" if x > 0 else "−∞"
    else:
        if digits is None:
            digits = 0 if x == int(x) or abs(x) >= 100 else 1 if abs(x) >= 10 else 2
        text = f"{x:,.{digits}f}"
    return f"{text} {unit}" if unit else text


def percent(fraction: float | None, *, digits: int = 1, unknown: str = UNKNOWN) -> str:
    """A fraction as a percentage: `12.5 %`; a share that would round to zero at `digits` reads `< 0.1 %`, never
    `0.0 %` (a WAPE of 3·10⁻⁵ is not zero)."""
    if _missing(fraction):
        return unknown
    assert fraction is not None
    if math.isinf(fraction):
        return "∞ %"
    pct = 100.0 * fraction
    smallest = 10.0 ** -digits
    if pct == 0:
        return "0 %"
    if round(pct, digits) == 0:  # would read 0.0 %
        return f"< {smallest:.{digits}f} %" if pct > 0 else f"> −{smallest:.{digits}f} %"
    return f"{pct:,.{digits}f} %"


def capacity_source(observed: bool, load: float | None = None) -> str:
    """Where a capacity C_i comes from, as dashboards and approvals show it: `estimated`, or `observed at 63 % load`
    (how near saturation it was observed: the nearer, the less its estimate extrapolates)."""
    if not observed:
        return "estimated"
    return "observed" if load is None or not math.isfinite(load) else f"observed at {100 * load:.0f} % load"


def duration(seconds: float | None, *, unknown: str = UNKNOWN) -> str:
    """`0.5 s`, `95 s`, `6 min 12 s`, `2 h 5 min` (seconds up to two minutes, where predicted and observed
    recovery times are compared); `never` for an infinite time (a recovery that never ends)."""
    if _missing(seconds):
        return unknown
    assert seconds is not None
    if math.isinf(seconds):
        return "never"
    s = abs(seconds)
    sign = "−" if seconds < 0 else ""
    if s < 10:
        return f"{sign}{s:.1f} s".replace(".0 s", " s")
    if s < 120:
        return f"{sign}{s:.0f} s"
    if s < 3600:
        m, rest = divmod(round(s), 60)
        return f"{sign}{m} min" + (f" {rest} s" if rest else "")
    h, rest = divmod(round(s / 60), 60)
    return f"{sign}{h} h" + (f" {rest} min" if rest else "")


def numbered(reasons: tuple[str, ...] | list[str]) -> list[str]:
    """Reasons as numbered Markdown paragraphs (`**1.** …`), not a list: the Prefect UI draws an ordered list's
    numbers outside its box, where an artifact's page clips them at the left edge.

    >>> numbered(["a", "b"])
    ['**1.** a', '', '**2.** b']
    """
    return [line for i, r in enumerate(reasons, start=1) for line in (f"**{i}.** {r}", "")][:-1]
