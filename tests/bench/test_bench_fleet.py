"""`bench fleet`'s arithmetic with known answers: start delays, the fitted lines, the sizing table."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from daedalus.bench.fleet import KINDS, fit, kept_up, sizing, start_delays


def _size(jobs: int, ok: bool = True) -> dict:
    # CPU-s per minute per kind: 2 + 0.5 × jobs for every kind (known line), as per job-minute.
    per = {k: (2 + 0.5 * jobs) / jobs for k in KINDS}
    return {"jobs": jobs, "kept_up": ok, "cpu_s_per_job_minute": {"total": sum(per.values()), **per}}


def test_the_lines_come_back_from_sizes_that_kept_up_only() -> None:
    sizes = [_size(10), _size(50), {**_size(100, ok=False), "cpu_s_per_job_minute": dict.fromkeys(("total", *KINDS),
                                                                                                     0.01)}]
    lines = fit(sizes)
    assert lines["api"] == {"intercept_cpu_s_per_min": 2.0, "per_job_cpu_s_per_min": 0.5}
    assert lines["total"] == {"intercept_cpu_s_per_min": 12.0, "per_job_cpu_s_per_min": 3.0}
    table = sizing(lines, cores=2)
    assert table["projected_cores"][0] == {"jobs": 1000, "total": round((12 + 3 * 1000) / 60, 2),
                                           **{k: round((2 + 0.5 * 1000) / 60, 2) for k in KINDS}}
    assert table["jobs_at_machine_cores"] == 36  # (120 − 12) / 3


def test_kept_up_means_every_due_run_completed_and_p95_under_a_minute() -> None:
    assert kept_up({"Completed": 50}, {"p95": 9.8})
    assert not kept_up({"Completed": 289, "Cancelled": 155}, {"p95": 9.8})
    assert not kept_up({"Completed": 50}, {"p95": 82.5})


def _run(expected: float, started: float | None, state: str) -> SimpleNamespace:
    at = lambda t: None if t is None else datetime.fromtimestamp(t, UTC)  # noqa: E731
    return SimpleNamespace(expected_start_time=at(expected), start_time=at(started), state=SimpleNamespace(name=state))


def test_start_delays_count_a_run_that_never_started_as_waiting_until_the_window_closed() -> None:
    runs = [_run(100, 101.5, "Completed"), _run(160, None, "Late"), _run(170, None, "Cancelled"),
            _run(50, 51, "Completed"), _run(300, None, "Scheduled")]
    delays, states = start_delays(runs, since=100, until=200, closed=220)
    assert delays == pytest.approx([1.5, 60.0])
    assert states == {"Completed": 1, "Late": 1, "Cancelled": 1}


def test_the_reference_work_is_fixed_and_timed() -> None:
    from daedalus.bench.reference import _work, reference_cpu_s

    # 35,000 records, two in three not Pending (i % 3 != 0: 23,333 of them), each a 10-character name and 2 tags
    assert _work() == 23_333 * 12
    assert reference_cpu_s(repeats=1) > 0
