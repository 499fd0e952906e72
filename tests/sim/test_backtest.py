"""The backtest's pure part (sim/backtest.py): the history rebuilt from lake rows, the refusals, the actual run's
figures, the capacity fit against the simulator's known capacities, and the replays' exact cases."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from daedalus.bench.backtest import record_history
from daedalus.connectors.lake import Lake
from daedalus.connectors.replay import replay_group
from daedalus.models.config import LoopConfig
from daedalus.sim.backtest import (
    InsufficientHistory,
    ReplayedJob,
    actual_figures,
    backtest,
    check,
    fit_capacity,
    history_from_rows,
    loop_config,
    min_seconds,
)
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import sine_workload

T0 = 1_767_225_600.0


def lake_rows(scaleouts: list[int], workload: list[float], lag: list[float] | None = None,
              skip: tuple[int, ...] = ()) -> pd.DataFrame:
    """Rows as the lake holds them: one per worker and second, throughput shared evenly, CPU proportional."""
    out = []
    for t, (n, w) in enumerate(zip(scaleouts, workload, strict=True)):
        if t in skip:
            continue
        for k in range(n):
            out.append({"worker": f"w{k}", "timestamp": pd.Timestamp(T0 + 1 + t, unit="s", tz="UTC"),
                        "workload": w, "throughput": w / n, "cpu": 0.1 + w / n / 1e5,
                        "lag": 0.0 if lag is None else lag[t], "scaleout": n})
    return pd.DataFrame(out)


def test_the_history_has_one_value_per_second_and_the_scaleout_that_ran() -> None:
    h = history_from_rows("j", lake_rows([2, 2, 3, 3, 3], [100, 200, 300, 300, 600]))
    assert h.timestamps.tolist() == [T0 + 1 + t for t in range(5)]
    assert h.scaleout.tolist() == [2, 2, 3, 3, 3]
    assert h.workload.tolist() == [100, 200, 300, 300, 600]
    assert h.throughput.tolist() == pytest.approx([100, 200, 300, 300, 600])


def test_a_short_gap_is_carried_forward_and_a_long_one_refused() -> None:
    h = history_from_rows("j", lake_rows([2] * 10, [float(t) for t in range(10)], skip=(3, 4)))
    assert h.seconds == 10 and h.workload[3:5].tolist() == [2.0, 2.0]
    with pytest.raises(InsufficientHistory, match=r"job 'j': the history has 6 missing seconds, 6 in a row"):
        history_from_rows("j", lake_rows([2] * 10, [1.0] * 10, skip=(2, 3, 4, 5, 6, 7)))
    with pytest.raises(InsufficientHistory, match="no rows of job 'j'"):
        history_from_rows("j", lake_rows([], []))


def test_the_actual_run_counts_worker_hours_rescales_and_waits_from_the_lag() -> None:
    # 2+2+3+3+1 = 11 worker-seconds; 2 changes; waits lag/workload = 0, 0, 100, 1, 0.5 s
    h = history_from_rows("j", lake_rows([2, 2, 3, 3, 1], [100] * 5, lag=[0, 0, 10_000, 100, 50]))
    a = actual_figures(h, slo_s=60.0)
    assert a["worker_hours"] == pytest.approx(11 / 3600)
    assert a["rescales"] == 2
    assert a["seconds_over_slo"] == 1
    assert a["latency_p95_s"] == pytest.approx(np.percentile([0, 0, 100, 1, 0.5], 95))


def test_too_short_and_too_flat_histories_say_what_is_missing() -> None:
    need = min_seconds()
    assert need == 60 * 30 + 1800  # the forecaster's first fit (60 steps of 30 s) and one 30-minute horizon
    short = history_from_rows("j", lake_rows([1] * 600, list(np.linspace(100, 200, 600))))
    with pytest.raises(InsufficientHistory, match=r"holds 10 min of history; the forecaster needs 60 min .*50 min"):
        check(short)
    flat = history_from_rows("j", lake_rows([1] * need, [1000.0 + (t % 2) for t in range(need)]))
    with pytest.raises(InsufficientHistory, match=r"arrivals vary by 0\.1 % .* needs at least 5 %"):
        check(flat)


@pytest.fixture(scope="module")
def recorded_rows(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """Two hours of a sine workload under DS2 on the default simulated job, as its loop appended them (seed 0)."""
    lake = Lake(str(tmp_path_factory.mktemp("lake")))
    record_history(lake, "sine", sine_workload(hours=2), policy="ds2", seed=0)
    return lake.read("sine")


@pytest.fixture(scope="module")
def recorded(recorded_rows):
    return history_from_rows("sine", recorded_rows)


def test_a_compacted_history_holds_the_loops_rows_in_one_file_before_its_last_minutes(tmp_path) -> None:
    workload = sine_workload(hours=1)
    loops, compacted = Lake(str(tmp_path / "loops")), Lake(str(tmp_path / "compacted"))
    rows = record_history(loops, "j", workload, seed=0)
    assert record_history(compacted, "j", workload, seed=0, compacted_before_s=600) == rows
    assert len(loops.files(["j"])) == 60  # one file per loop
    files = compacted.files(["j"])  # 50 minutes in one file, as compaction leaves them, then one per loop
    assert len(files) == 1 + 10
    assert (files[0].first, files[0].last) == (T0 + 1, T0 + 3000)
    pd.testing.assert_frame_equal(compacted.read("j"), loops.read("j"))


def test_a_fleet_replay_returns_the_report_and_the_cpu_seconds_of_each_phase(recorded_rows, recorded) -> None:
    out = replay_group(recorded_rows, ("static", "ds2"), seed=0)
    assert out["job"].tolist() == ["sine"] and out["error"].tolist() == [None]
    assert json.loads(out["report"].iloc[0]) == json.loads(json.dumps(backtest(recorded, ["static", "ds2"])))
    assert set(json.loads(out["cpu_s"].iloc[0])) == {"history", "static", "ds2"}
    first_ten_minutes = recorded_rows[recorded_rows["timestamp"] <= pd.Timestamp(T0 + 600, unit="s", tz="UTC")]
    refused = replay_group(first_ten_minutes, ("static",), seed=0)
    assert refused["report"].tolist() == [None]
    assert "holds 10 min of history; the forecaster needs 60 min" in refused["error"].iloc[0]
    assert set(json.loads(refused["cpu_s"].iloc[0])) == {"history"}  # refused before any policy ran


def test_the_fitted_capacity_matches_the_simulated_job_where_it_ran(recorded) -> None:
    cfg = loop_config(recorded)
    fit = fit_capacity(recorded, cfg)
    truth = Simulator(np.zeros(1), SimConfig(), seed=0).true_capacities()
    observed = [i for i in range(1, 13) if fit.observed[i - 1]]
    assert observed and set(observed) <= set(recorded.scaleout.tolist())  # only scale-outs that ran are observed
    for i in observed:  # the paper: within 5 % of the true capacity
        assert fit.fitted[i - 1] == pytest.approx(truth[i - 1], rel=0.05)
    assert fit.never_observed == [i for i in range(1, 13) if i not in observed]
    # the replayed job has the fitted capacity at every scale-out, and its CPU is linear in throughput
    job = ReplayedJob(np.full(300, 1e9), SimConfig(skew=0.0, heterogeneity=0.0, cpu_noise=0.0, worker_capacity=1.0),
                      fit.fitted, seed=0, initial_scaleout=3, job="sim")
    assert job.true_capacities().tolist() == list(fit.fitted)
    job.advance(100)
    job.scale(7)
    job.advance(200)
    h = job.history()
    # saturated, every worker processes its capacity: C_n is reached when the fullest of them (⌈128/n⌉ of the 128 key
    # groups) saturates, so all n together process C_n × n⌈128/n⌉/128: 3 × 43 = 129 and 7 × 19 = 133
    assert h.throughput[50] == pytest.approx(fit.fitted[2] * 129 / 128)
    assert h.throughput[-1] == pytest.approx(fit.fitted[6] * 133 / 128)


def test_static_uses_the_maximum_for_the_whole_window_and_unknown_policies_are_named(recorded) -> None:
    report = backtest(recorded, ["static"])
    assert report["max_scaleout"] == int(recorded.scaleout.max()) == 12
    assert report["policies"]["static"]["worker_hours"] == pytest.approx(12 * recorded.seconds / 3600)
    assert report["policies"]["static"]["rescales"] == 0
    assert report["window"] == {"start": "2026-01-01 00:00:00 UTC", "end": "2026-01-01 02:00:00 UTC"}
    assert report["actual"]["worker_hours"] == pytest.approx(recorded.scaleout.sum() / 3600)
    with pytest.raises(ValueError, match=r"no policy 'hpa-99'; known: daedalus, .*static"):
        backtest(recorded, ["static", "hpa-99"])
    with pytest.raises(InsufficientHistory, match="ran at 12 workers, above the maximum scale-out 8"):
        backtest(recorded, ["static"], max_scaleout=8)


def test_learned_downtimes_replace_the_configured_ones(recorded) -> None:
    assert loop_config(recorded).downtime_out_s == LoopConfig().downtime_out_s
    report = backtest(recorded, ["static"], downtimes=(42.0, 21.0))
    assert report["downtime_s"] == {"out": 42.0, "in": 21.0, "source": "learned"}
