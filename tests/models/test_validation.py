"""Bad metrics give hold reasons, never exceptions: one case per rule."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from daedalus.models.loop.validation import validate_observation
from tests.helpers import T0, observation

NOW = T0 + 61


def check(obs, previous_end=None, now=NOW):
    return validate_observation(obs, now, previous_end, warmup_s=60.0, stale_after_s=180.0)


def test_sound_observation_passes():
    assert check(observation()) == ()


def poisoned(field, worker=None, index=5, value=np.nan):
    obs = observation()
    if worker is None:
        arr = getattr(obs, field).copy()
        arr[index] = value
        return replace(obs, **{field: arr})
    series = dict(getattr(obs, field))
    arr = series[worker].copy()
    arr[index] = value
    series[worker] = arr
    return replace(obs, **{field: series})


@pytest.mark.parametrize(
    ("obs", "expected"),
    [
        (poisoned("workload"), "workload has missing or NaN samples"),
        (poisoned("lag", value=-5.0), "lag is negative"),
        (poisoned("cpu", "worker-1", value=1.2), "worker-1: CPU outside [0, 1]"),
        (poisoned("cpu", "worker-0", value=-0.1), "worker-0: CPU outside [0, 1]"),
        (poisoned("throughput", "worker-0", value=-1.0), "worker-0: negative throughput"),
        (poisoned("throughput", "worker-0", value=np.nan), "worker-0: missing or NaN samples in steady state"),
        (poisoned("throughput", "worker-0", value=5_000.0), "above workload"),
        (replace(observation(), scaleout=3), "2 of 3 workers reporting"),
        (poisoned("timestamps", index=10, value=T0), "timestamps go backwards"),
        (replace(observation(), holds=("metrics unavailable: connection refused",)), "connection refused"),
    ],
)
def test_each_bad_input_is_named(obs, expected):
    reasons = check(obs)
    assert any(expected in r for r in reasons), reasons


def test_stale_and_repeated_windows():
    assert any("stale" in r for r in check(observation(), now=T0 + 60 + 181))
    assert any("backwards or repeat" in r for r in check(observation(), previous_end=T0 + 30))


def test_empty_observation():
    empty = observation(n=0)
    assert check(empty) == ("no samples since the previous loop",)


def test_warmup_nan_is_tolerated_after_a_restart():
    obs = poisoned("throughput", "worker-0", value=np.nan)
    uptime = obs.uptime_s.copy()
    uptime[:10] = 0.0  # restarting: not steady state
    assert check(replace(obs, uptime_s=uptime)) == ()


def test_a_backlog_excuses_only_what_it_can_add_per_second_of_the_step():
    # Issue 11 item 4: throughput 4× the workload with 20,000 tuples of lag passed when a rate was compared with
    # a count. Over a 15 s step a backlog of 20,000 adds at most 1,333/s: 1,000 + 1,333 < 4,000 → inconsistent.
    obs = observation(workload=1_000.0, lag=20_000.0)
    obs = replace(obs, step_s=15.0, throughput={w: np.full(60, 2_000.0) for w in obs.throughput})
    assert any("above workload" in r and "15 s step" in r for r in check(obs))
    # Draining a real backlog is consistent: 1,000/s arriving plus 20,000 / 15 s = 2,333/s at most.
    draining = replace(obs, throughput={w: np.full(60, 1_100.0) for w in obs.throughput})
    assert check(draining) == ()


def test_a_rate_over_a_window_is_excused_by_the_backlog_at_the_windows_start():
    # A restart's backlog of 40,000 drained in one micro-batch, counted at t = 3: the 4 s rate of rows read is
    # (40,000 + 4 × 1,000) / 4 = 11,000/s at t = 3…6 while the backlog one step back is 1,000 from t = 3 on.
    # At t = 4…6 the window starts at t = 0…2, when 40,000 were waiting: at most 1,000 + 40,000 / 4 = 11,000/s.
    # At t = 3 the window starts before the first sample: that backlog is unknown, the step is not judged.
    n, window = 10, 4.0
    obs = observation(n=n, workload=1_000.0, lag=1_000.0)
    lag = np.full(n, 1_000.0)
    lag[:3] = 40_000.0
    rate = np.full(n, 1_000.0)
    rate[3:7] = 11_000.0
    workers = {w: rate / len(obs.throughput) for w in obs.throughput}
    drained = replace(obs, lag=lag, window_s=window, throughput=workers)
    assert check(drained) == ()
    # The same rates against the backlog one step back alone (a window no longer than the step) are inconsistent
    # from t = 4, where 1,000 were waiting one step back.
    assert any("above workload 1,000/s plus what the backlog of 1,000 tuples" in r for r in
               check(replace(drained, window_s=1.0)))
    # More than the window's start allows is still inconsistent: 11,600/s > (1,000 + 10,000) × 1.05 + 1.
    more = {w: np.where(rate > 1_000.0, 11_600.0, 1_000.0) / len(obs.throughput) for w in obs.throughput}
    reasons = check(replace(drained, throughput=more))
    assert any("11,600/s above" in r and "40,000 at the start of its 4 s rate window" in r for r in reasons), reasons
