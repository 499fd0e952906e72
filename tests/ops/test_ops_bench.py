"""`daedalus bench schedule`'s arithmetic on hand-made runs and CPU samples (the bench itself needs minutes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from prefect.states import Cancelled, Completed, Scheduled

from daedalus.bench.schedule import _cpu_between, summarise

T0 = 1_800_000_000.0


def run(due_s: float, delay_s: float | None, state, took_s: float = 1.0) -> SimpleNamespace:
    expected = datetime.fromtimestamp(T0 + due_s, UTC)
    return SimpleNamespace(expected_start_time=expected, state=state,
                           start_time=None if delay_s is None else expected + timedelta(seconds=delay_s),
                           total_run_time=timedelta(seconds=took_s))


def test_runs_due_in_the_window_with_their_delays_states_and_run_times() -> None:
    runs = [run(0, 0.5, Completed(), 2.0), run(60, 1.5, Completed(), 4.0), run(120, 30.0, Cancelled()),
            run(179, None, Scheduled()), run(180, 0.1, Completed())]  # the last one is after the window
    s = summarise(runs, T0, T0 + 180)
    assert s["due"] == 4
    assert s["states"] == {"Completed": 2, "Cancelled": 1, "Scheduled": 1}
    assert s["start_delay_s"] == {"p50": 1.5, "p95": 1.5, "max": 30.0}  # p95 of three: the 2nd by index 0.95·2
    assert s["run_s"] == {"p50": 3.0, "p95": 2.0, "max": 4.0}  # completed runs only


def test_cpu_between_minutes_is_the_difference_of_the_nearest_samples() -> None:
    samples = [{"minute": 1.0, "cpu_s": 50.0}, {"minute": 2.1, "cpu_s": 120.0}, {"minute": 2.9, "cpu_s": 200.0}]
    assert _cpu_between(samples, 0, 2) == 120.0  # from the start (0 CPU-s) to the sample at minute 2.1
    assert _cpu_between(samples, 2, 3) == 80.0
    assert _cpu_between(samples, 3, 4) is None  # no sample near minute 4
