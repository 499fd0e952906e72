"""`daedalus bench chaos`: the fault plan, and a short real run on a real fleet (PostgreSQL, Redis, HAProxy, Prefect,
two workers) with one fault of each kind, checked against the simulated jobs' own records of what they received."""

from __future__ import annotations

import pytest

from daedalus.bench.chaos import KINDS, MEAN_GAP_S, TAIL_S, WARMUP_S, fault_plan, run_chaos


@pytest.mark.parametrize("seed", range(20))
def test_twelve_minutes_or_more_inject_every_kind_and_an_hour_every_3_to_6_minutes(seed: int) -> None:
    for minutes in (12, 20, 60):
        plan = fault_plan(minutes, seed)
        assert {kind for _, kind in plan} == set(KINDS)
        times = [at for at, _ in plan]
        assert times == sorted(times) and times[0] >= WARMUP_S and times[-1] <= 60 * minutes - TAIL_S
    gaps = [b - a for (a, _), (b, _) in zip(fault_plan(60, seed), fault_plan(60, seed)[1:], strict=False)]
    assert all(2 / 3 * MEAN_GAP_S - 1 <= g <= 4 / 3 * MEAN_GAP_S + 1 for g in gaps), gaps  # 3–6 min
    assert fault_plan(60, seed) == fault_plan(60, seed)  # seeded
    assert fault_plan(60, seed) != fault_plan(60, seed + 1)


@pytest.mark.slow
def test_a_short_fault_run_loses_and_duplicates_no_action() -> None:
    """Three jobs, each kind of fault once; the jobs rescale within the run (their workloads peak at 30, 60 and 90 %
    of the capacity of the largest scale-out, where a simulated job starts)."""
    report = run_chaos(jobs=3, minutes=4, seed=0, say=lambda _: None, warmup_s=60, tail_s=90)
    assert sorted(f["kind"] for f in report["faults"]) == sorted(KINDS)
    assert report["actions_received"] >= 1  # the answer below is about real rescales
    assert report["actions_duplicated"] == 0, report["duplicated_ids"]
    assert report["actions_lost"] == 0, report["lost_ids"]
    assert report["stuck_runs"] == 0, report["stuck_run_ids"]
    assert report["checksums_ok"] and report["knowledge_versions_checked"] > 0, report["checksum_failures"]
    assert report["loop_run_states"].get("Completed", 0) > 0
