"""The rescale budget as the benchmark counts it, and the generated families of issue 38, on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.bench import families
from daedalus.sim.report import budget_exceeded


def test_a_rescale_is_beyond_the_budget_when_it_makes_more_than_the_budget_in_the_window_ending_at_it():
    assert budget_exceeded([], 6) == 0
    assert budget_exceeded([0, 60, 120, 180, 240, 300], 6) == 0  # six in 5 minutes: all within the budget
    assert budget_exceeded([0, 60, 120, 180, 240, 300, 360], 6) == 1  # the seventh
    # Budget 2 in 7,200 s: 200 is the third within (−7,000, 200]; at 7,300 the window (100, 7,300] holds 200 and
    # 7,300 only; 7,301 is the third again within (101, 7,301].
    assert budget_exceeded([0, 100, 200, 7_300, 7_301], 2) == 2
    assert budget_exceeded([0, 7_200, 14_400], 1) == 0  # exactly a window apart: the older one has left it


@pytest.mark.parametrize("family", families.FAMILIES[4:])
def test_the_new_families_are_six_hours_non_negative_and_their_seed_decides(family):
    a, b, c = (families.generate(family, s) for s in (0, 0, 1))
    assert a.size == 21_600 and (a >= 0).all() and np.array_equal(a, b) and not np.array_equal(a, c)


def test_each_new_family_has_the_shape_it_is_named_for():
    minute = {f: families.generate(f, 0).reshape(-1, 60).mean(axis=1) for f in families.FAMILIES[4:]}
    flat = minute["flat"][30:]  # after the fall from the peak
    assert 0.25 <= np.median(flat) <= 0.4 and flat.max() / flat.min() < 1.05 and minute["flat"][0] > 0.9
    steps = np.abs(np.diff(minute["flapping"])) / np.median(minute["flapping"])
    assert (steps > 0.5).mean() > 0.3  # a third of the minutes jump by more than half the median level or more
    drift = minute["slow-drift"]
    assert np.median(np.abs(np.diff(drift))) / np.median(drift) < 0.02  # moves by < 2 % a minute
    heavy = families.generate("heavy-tailed", 1)
    assert heavy.max() / np.median(heavy) > 5  # a burst several × the level


def test_the_groups_of_families():
    assert [f for f, _ in families.parse("families")][::3] == ["random-walk", "spikes", "level-shifts",
                                                                "noisy-diurnal"]
    assert [f for f, _ in families.parse("new-families")][::3] == ["heavy-tailed", "flapping", "flat", "slow-drift"]
    assert len(families.parse("all-families")) == 24 and families.parse("flat-2") == [("flat", 2)]
