"""Anomaly detection and observed recovery: a hand-made series and recorded Flink rescalings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from daedalus.data import METRICS
from daedalus.models.errors import KnowledgeError
from daedalus.models.recovery import AnomalyDetector, RecoveryTracker, observed_recovery_time
from daedalus.models.recovery.anomaly import learn_normal, track_recovery
from daedalus.models.types import Observation


def read_series(name: str) -> pd.Series:
    """A one-series Prometheus export (BOM, quoted "Time" header), indexed by epoch seconds."""
    path = METRICS / f"{name}.csv"
    frame = pd.read_csv(path, encoding="utf-8-sig")
    index = pd.to_datetime(frame["Time"]).astype("int64").to_numpy() / 1e9
    return pd.Series(frame.iloc[:, 1].to_numpy(dtype=float), index=index, name=name)


def epoch(text: str) -> float:
    return pd.Timestamp(text).value / 1e9


# --- the hand-made series -----------------------------------------------------------------------
# 1 s steps. t = 0 … 39: steady, residual alternating +1 / -1 (mean 0, std 1: ±1 is normal, k = 1).
# Rescale at t = 40. t = 40, 41: still normal (metrics lag the rescale). t = 42 … 46: downtime, the
# residual is the whole workload (100). t = 47: one normal point on the way down (0.4). t = 48 … 53:
# catch-up, throughput above workload (-60). t = 54: normal, t = 55: a last catch-up blip (-30).
# From t = 56 on: steady again (|r| ≤ 0.9). Recovery ends at 56, 16 s after the rescale.
STEADY = [1.0, -1.0] * 20
RECOVERY = [0.5, -0.5] + [100.0] * 5 + [0.4] + [-60.0] * 6 + [0.2, -30.0]
AFTER = [0.9, -0.3, 0.0, 0.6, -0.9, 0.1, -0.2, 0.3]
HAND = np.array(STEADY + RECOVERY + AFTER)
HAND_T = np.arange(len(HAND), dtype=float) + 1_000.0
RESCALE = 1_040.0


def test_detector_statistics_equal_numpy_and_one_sigma_rule() -> None:
    detector = AnomalyDetector()
    for value in STEADY:
        detector.update(value)
    assert detector.n == 40
    assert detector.mean == pytest.approx(0.0, abs=1e-12)
    assert detector.std == pytest.approx(np.std(STEADY), rel=1e-12)
    assert detector.std == pytest.approx(1.0, rel=1e-12)
    assert not detector.is_anomalous(0.99) and not detector.is_anomalous(-0.99)
    assert detector.is_anomalous(1.01) and detector.is_anomalous(-1.5) and detector.is_anomalous(100.0)
    assert AnomalyDetector(k=2.0).k == 2.0


def test_detector_batch_learning_equals_point_learning_and_skips_missing() -> None:
    point, batch = AnomalyDetector(), AnomalyDetector()
    rng = np.random.default_rng(3)
    values = rng.normal(-2_000, 400, 100)
    for value in values:
        point.update(value)
    point.update(float("nan"))
    batch.update_many(np.append(values, [np.nan, np.inf]))
    assert point.n == batch.n == 100
    assert batch.mean == pytest.approx(np.mean(values), rel=1e-12)
    assert batch.std == pytest.approx(np.std(values), rel=1e-12)
    assert point.std == pytest.approx(batch.std, rel=1e-12)


def test_missing_residual_is_not_normal_and_nothing_is_judged_before_two_points() -> None:
    detector = AnomalyDetector()
    assert not detector.is_anomalous(1e9)  # nothing learned yet
    detector.update(5.0)
    assert not detector.is_anomalous(1e9)
    detector.update(7.0)
    assert detector.is_anomalous(1e9) and detector.is_anomalous(float("nan"))


def test_hand_made_recovery_end_is_known_exactly() -> None:
    detector = AnomalyDetector()
    detector.update_many(HAND[HAND_T < RESCALE])
    tracker = RecoveryTracker(RESCALE, detector)
    for t, r in zip(HAND_T, HAND, strict=True):
        tracker.update(t, r)  # points before the rescale are ignored
    assert tracker.recovered
    assert tracker.recovered_at == 1_056.0
    assert tracker.observed_recovery_s == 16.0
    assert observed_recovery_time(HAND_T, HAND + 500.0, np.full(len(HAND), 500.0), RESCALE, RESCALE) == 16.0


def test_consecutive_and_require_anomaly_change_the_answer_as_documented() -> None:
    detector = AnomalyDetector()
    detector.update_many(STEADY)
    one = RecoveryTracker(RESCALE, detector, consecutive=1)
    one.update_many(HAND_T, HAND)
    assert one.recovered_at == 1_047.0  # the single normal point between downtime and catch-up
    eager = RecoveryTracker(RESCALE, detector, consecutive=2, require_anomaly=False)
    eager.update_many(HAND_T, HAND)
    assert eager.recovered_at == RESCALE  # the two points before the downtime became visible
    never = RecoveryTracker(RESCALE, detector)
    never.update_many(HAND_T[:56], HAND[:56])
    assert not never.recovered and never.recovered_at is None and never.observed_recovery_s is None


def test_tracker_freezes_the_statistics_and_ignores_repeated_points() -> None:
    detector = AnomalyDetector()
    detector.update_many(STEADY)
    tracker = RecoveryTracker(RESCALE, detector)
    detector.update_many([1e6, -1e6])  # the caller's detector changes later: the tracker's does not
    assert tracker.detector.std == pytest.approx(1.0)
    tracker.update_many(HAND_T[:50], HAND[:50])
    tracker.update_many(HAND_T[40:], HAND[40:])  # overlapping window fed again
    assert tracker.recovered_at == 1_056.0
    tracker.update(2_000.0, 1e9)  # after recovery, nothing changes
    assert tracker.recovered_at == 1_056.0


def test_missing_points_during_recovery_count_as_anomalous() -> None:
    detector = AnomalyDetector()
    detector.update_many(STEADY)
    residual = HAND.copy()
    residual[57] = np.nan  # the job does not report in the middle of the steady run
    tracker = RecoveryTracker(RESCALE, detector)
    tracker.update_many(HAND_T, residual)
    assert tracker.recovered_at == 1_058.0


def test_states_round_trip_through_json_mid_recovery() -> None:
    detector = AnomalyDetector(k=1.5)
    detector.update_many(STEADY)
    restored = AnomalyDetector.from_state(json.loads(json.dumps(detector.to_state())))
    assert restored.to_state() == detector.to_state() and restored.k == 1.5

    detector = AnomalyDetector()
    detector.update_many(STEADY)
    tracker = RecoveryTracker(RESCALE, detector)
    tracker.update_many(HAND_T[:57], HAND[:57])  # stops inside the final normal run
    state = json.loads(json.dumps(tracker.to_state()))
    assert all(isinstance(v, float) for v in state.values())
    resumed = RecoveryTracker.from_state(state)
    assert resumed.to_state() == tracker.to_state()
    resumed.update_many(HAND_T[57:], HAND[57:])
    assert resumed.recovered_at == 1_056.0
    done = RecoveryTracker.from_state(json.loads(json.dumps(resumed.to_state())))
    assert done.recovered_at == 1_056.0 and done.observed_recovery_s == 16.0


@pytest.mark.parametrize(
    ("state", "message"),
    [({"n": 2.0, "mean": 0.0, "m2": 1.0}, "lacks k"), ({"k": 0.0, "n": 2.0, "mean": 0.0, "m2": 1.0}, "positive")],
)
def test_corrupt_detector_state_is_a_knowledge_error(state: dict, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        AnomalyDetector.from_state(state)


def test_corrupt_tracker_state_is_a_knowledge_error() -> None:
    detector = AnomalyDetector()
    detector.update_many(STEADY)
    state = RecoveryTracker(RESCALE, detector).to_state()
    del state["rescale_time"]
    with pytest.raises(KnowledgeError, match="rescale_time"):
        RecoveryTracker.from_state(state)
    state = RecoveryTracker(RESCALE, detector).to_state()
    state["consecutive"] = 0.0
    with pytest.raises(KnowledgeError, match="consecutive"):
        RecoveryTracker.from_state(state)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="k"):
        AnomalyDetector(k=0.0)
    with pytest.raises(ValueError, match="consecutive"):
        RecoveryTracker(0.0, AnomalyDetector(), consecutive=0)
    with pytest.raises(ValueError, match="after rescale_time"):
        observed_recovery_time(HAND_T, HAND, np.zeros(len(HAND)), RESCALE, RESCALE + 1)
    with pytest.raises(ValueError, match="fewer than two"):
        observed_recovery_time(HAND_T, HAND, np.zeros(len(HAND)), RESCALE, HAND_T[1])
    with pytest.raises(ValueError, match="same length"):
        observed_recovery_time(HAND_T, HAND, np.zeros(3), RESCALE, RESCALE)


# --- recorded Flink rescalings (15 s steps) -----------------------------------------------------
# The first rescale: throughput stops following the workload after 20:52:00 (savepoint and stop),
# drops to 0 at 20:53:15 (downtime), overshoots while catching up and settles a few minutes later.
FIRST_RESCALE = "2023-01-21 20:52:00"


def recorded() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    workload = read_series("anomaly_detection_workload")
    throughput = read_series("anomaly_detection_throughput")
    assert np.array_equal(workload.index, throughput.index)
    return workload.index.to_numpy(), workload.to_numpy(), throughput.to_numpy()


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of every run of True."""
    edges = np.diff(np.concatenate([[0], flags.astype(int), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return list(zip(starts.tolist(), (ends - starts).tolist(), strict=True))


def test_recorded_rescaling_has_anomalous_stretches_and_a_recovery_end() -> None:
    t, workload, throughput = recorded()
    assert np.all(np.diff(t) == 15.0)
    residual = workload - throughput
    rescale = epoch(FIRST_RESCALE)
    # learn on the first steady stretch: the 12 minutes before the first rescale
    detector = AnomalyDetector()
    detector.update_many(residual[t < rescale])
    assert detector.n == 48 and 0 < detector.std < 1_000
    anomalous = np.array([detector.is_anomalous(r) for r in residual])
    # the downtime is a long anomalous stretch right after the rescale
    after = [(start, length) for start, length in runs(anomalous) if t[start] >= rescale]
    first_start, first_length = after[0]
    assert t[first_start] - rescale <= 60 and first_length >= 8
    assert throughput[first_start : first_start + first_length].min() == 0.0  # the downtime is inside
    # there are more anomalous stretches later in the trace (the other rescalings)
    assert sum(length >= 3 for _, length in runs(anomalous)) >= 3
    # the end of recovery: after the job came back, within the paper's 600 s target
    recovery_s = observed_recovery_time(t, workload, throughput, rescale, rescale)
    assert recovery_s is not None
    downtime_end = t[(t > rescale) & (throughput > 0) & (np.arange(len(t)) > np.argmin(throughput))][0]
    assert downtime_end - rescale < recovery_s <= 600
    assert recovery_s % 15 == 0
    assert recovery_s == 375.0  # measured: 20:58:15, after the catch-up overshoot has settled
    tracker = RecoveryTracker(rescale, detector)
    tracker.update_many(t, residual)
    assert tracker.recovered_at == rescale + recovery_s
    assert not any(detector.is_anomalous(r) for r in residual[(t >= tracker.recovered_at)][:3])


def test_recorded_second_scale_out_recovers_too() -> None:
    t, workload, throughput = recorded()
    rescale = epoch("2023-01-21 21:51:45")  # throughput stalls, then drops to 0 at 21:52:30
    recovery_s = observed_recovery_time(t, workload, throughput, rescale, rescale)
    assert recovery_s is not None and 60 < recovery_s <= 600


# --- issue 27: what normal is, the noise floor, rate windows, the restart -----------------------------------------

def _obs(residuals: list[float], workload: float = 100.0, lag: list[float] | None = None,
         uptime: list[float] | None = None, start: float = 0.0, window_s: float = 0.0) -> Observation:
    n = len(residuals)
    t = start + np.arange(n, dtype=float)
    return Observation(job="j", timestamps=t, workload=np.full(n, workload),
                       throughput={"w": workload - np.asarray(residuals, dtype=float)}, cpu={},
                       lag=np.zeros(n) if lag is None else np.asarray(lag, dtype=float),
                       uptime_s=np.full(n, 1_000.0) if uptime is None else np.asarray(uptime, dtype=float),
                       scaleout=1, window_s=window_s)


def test_normal_is_learned_only_from_steady_samples_of_a_job_that_keeps_up() -> None:
    # Six samples: two in the warm-up (uptime < 60 s), one with 600 tuples waiting (6 s of arrivals at 100/s: a
    # saturated job), three steady and keeping up (500 tuples = 5 s is still normal). Learned: 1, -1, 3.
    obs = _obs([50.0, 40.0, 1.0, 90.0, -1.0, 3.0], lag=[0, 0, 0, 600, 500, 0], uptime=[10, 50, 60, 70, 80, 90])
    detector = AnomalyDetector()
    learn_normal(detector, obs, warmup_s=60.0)
    assert detector.n == 3 and detector.mean == pytest.approx(1.0) and detector.std == pytest.approx(np.std([1, -1, 3]))


def test_the_noise_floor_is_a_share_of_the_workload_at_the_point_judged() -> None:
    detector = AnomalyDetector()  # 1 % of the workload
    detector.update_many([-1.0, 1.0] * 10)  # std 1
    assert detector.band() == 1.0 and detector.band(1_000.0) == 10.0
    assert detector.is_anomalous(5.0) and not detector.is_anomalous(5.0, workload=1_000.0)
    assert detector.is_anomalous(10.5, workload=1_000.0)
    assert not AnomalyDetector(noise_floor=0.0).is_anomalous(1e9, workload=1e6)  # nothing learned, no floor
    assert AnomalyDetector().is_anomalous(11.0, workload=1_000.0)  # nothing learned: judged around 0 by the floor
    old = {"k": 1.0, "min_std": 25.0, **detector.statistics.to_state()}  # a state stored before the floor was relative
    assert AnomalyDetector.from_state(old).noise_floor == 0.01 and AnomalyDetector.from_state(old).n == 20


def test_a_rate_window_moves_the_end_of_recovery_to_the_start_of_the_first_normal_window() -> None:
    detector = AnomalyDetector()
    detector.update_many(STEADY)
    plain = RecoveryTracker(RESCALE, detector)
    plain.update_many(HAND_T, HAND)
    windowed = RecoveryTracker(RESCALE, detector, window_s=4.0)
    windowed.update_many(HAND_T, HAND)
    assert plain.recovered_at == 1_056.0 and windowed.recovered_at == 1_052.0
    early = RecoveryTracker(RESCALE, detector, window_s=60.0)  # never before the rescale (nor the restart)
    early.update_many(HAND_T, HAND)
    assert early.recovered_at == RESCALE


def test_a_restart_is_the_disturbance_when_the_window_hides_a_short_downtime_and_recovery_ends_after_it() -> None:
    # A 1-second downtime averaged into a 12 s rate: the residual never leaves the band (±2 at 100/s), but the uptime
    # restarts 4 s after the rescale at t = 10. Recovery ends at the restart, not at the normal points before it.
    detector = AnomalyDetector()
    detector.update_many([-1.0, 1.0] * 10)
    obs = _obs([0.5, -0.5] * 10, uptime=[100 + i for i in range(14)] + [0, 1, 2, 3, 4, 5], window_s=12.0)
    quiet = RecoveryTracker(10.0, detector)
    quiet.update_many(obs.timestamps, obs.workload - obs.throughput["w"], obs.workload)
    assert not quiet.recovered and "never disturbed" in quiet.status
    tracker = RecoveryTracker(10.0, detector)
    restart = track_recovery(tracker, obs)
    assert restart == 14.0 and tracker.recovered_at == 14.0 and tracker.observed_recovery_s == 4.0


def test_a_tracker_says_why_it_has_not_recovered() -> None:
    detector = AnomalyDetector(noise_floor=0.0)
    detector.update_many([-1.0, 1.0] * 10)
    tracker = RecoveryTracker(100.0, detector)
    assert tracker.status == "no metrics since the rescale"
    tracker.update_many([100.0, 101.0, 102.0, 103.0], [50.0, 40.0, 0.0, 30.0])
    assert tracker.status == ("still recovering after 3 s of metrics after the rescale: the last workload − throughput "
                              "was 30/s (normal band 0 ± 1/s); 0 of 3 normal points in a row")
    state = RecoveryTracker.from_state(json.loads(json.dumps(tracker.to_state())))
    assert state.status == tracker.status
