"""How numbers reach people (models/text.py): one helper each for numbers, percentages and durations."""

from __future__ import annotations

import math

from daedalus.models.text import duration, number, percent


def test_numbers_have_thousands_separators_units_and_no_inf():
    assert number(123_456.7, "tuples/s") == "123,457 tuples/s"
    assert number(18) == "18" and number(74.94, "ms") == "74.9 ms" and number(1.1912) == "1.19"
    assert number(1.1912, digits=1) == "1.2" and number(math.inf, "tuples/s") == "∞ tuples/s"
    assert number(None) == "—" and number(math.nan) == "—" and number(None, unknown="") == ""


def test_a_tiny_share_is_not_zero():
    assert percent(3e-5) == "< 0.1 %" and percent(0.0) == "0 %" and percent(0.583) == "58.3 %"
    assert percent(0.00062) == "0.1 %" and percent(0.004, digits=0) == "< 1 %" and percent(None) == "—"
    assert percent(12.5) == "1,250.0 %"


def test_durations_read_as_seconds_minutes_and_hours():
    assert [duration(s) for s in (0.5, 3.0, 14.04, 95.4, 119.6, 372, 7_500)] == [
        "0.5 s", "3 s", "14 s", "95 s", "120 s", "6 min 12 s", "2 h 5 min"]
    assert duration(math.inf) == "never" and duration(None) == "—" and duration(600) == "10 min"
