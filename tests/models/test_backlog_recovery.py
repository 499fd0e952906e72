"""The backlog-based recovery time (models/recovery/backlog.py): hand-built backlogs with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.models.recovery.backlog import backlog_recovery_time

T = np.arange(90.0, 160.0)  # 1 s samples; the rescale at t = 100
LOAD = np.full(T.size, 50.0)  # 50 records/s: the level before gets 50 records of slack


def backlog(after: list[float], before: float = 10.0, tail: float = 5.0) -> np.ndarray:
    values = np.full(T.size, tail)
    values[T <= 100] = before
    idx = np.flatnonzero(T > 100)[: len(after)]
    values[idx] = after
    return values


def test_back_to_the_level_before_plus_a_second_of_arrivals() -> None:
    # level 10 + 50 = 60. Rises at 101, down to 60 at 106 and stays: 6 s.
    lag = backlog([400, 900, 700, 300, 100, 60, 40])
    assert backlog_recovery_time(T, lag, LOAD, 100.0) == 6.0


def test_a_dip_that_does_not_hold_is_not_the_end() -> None:
    # A restarted source whose readers report one by one: 20 at 103 (below 60), up again at 105; back at 110.
    lag = backlog([400, 900, 20, 20, 800, 600, 400, 200, 100, 50])
    assert backlog_recovery_time(T, lag, LOAD, 100.0) == 10.0
    assert backlog_recovery_time(T, lag, LOAD, 100.0, hold_s=1.0) == 3.0


def test_a_saturated_job_recovers_to_its_backlog_at_the_rescale_not_to_zero() -> None:
    lag = backlog([5_000, 9_000, 6_000, 4_100, 3_000], before=4_000.0)  # level 4,000 + 50: 4,100 is still above
    assert backlog_recovery_time(T, lag, LOAD, 100.0) == 5.0


def test_a_backlog_that_never_rose_ended_at_once_and_one_that_never_returns_is_none() -> None:
    assert backlog_recovery_time(T, backlog([30, 55, 12]), LOAD, 100.0) == 0.0
    assert backlog_recovery_time(T, backlog([], tail=5_000.0), LOAD, 100.0) is None
    unsettled = backlog([400, 900] + [30] * 50)  # back at 103, but the data ends before it held 10 s … at 159: held
    assert backlog_recovery_time(T, unsettled, LOAD, 100.0) == 3.0
    assert backlog_recovery_time(T[:18], unsettled[:18], LOAD[:18], 100.0) is None  # ends at 107: not yet held


def test_missing_samples_are_skipped_and_no_level_is_an_error() -> None:
    lag = backlog([400, np.nan, 900, 40])
    assert backlog_recovery_time(T, lag, LOAD, 100.0) == 4.0
    with pytest.raises(ValueError, match=r"no backlog sample in the 10 s before 80\.0: the level before the rescale"):
        backlog_recovery_time(T, lag, LOAD, 80.0)
    with pytest.raises(ValueError, match="same length"):
        backlog_recovery_time(T, lag[:-1], LOAD, 100.0)


def test_a_rescale_inside_an_unfinished_recovery_counts_from_the_level_before_the_first() -> None:
    lag = backlog([400, 900, 700, 600, 500, 400, 300, 200, 100, 40])  # a second rescale at 103: its own level 900 + 50
    assert backlog_recovery_time(T, lag, LOAD, 103.0) == 0.0
    assert backlog_recovery_time(T, lag, LOAD, 103.0, level_at=100.0) == 7.0  # back at 110 to 10 + 50
