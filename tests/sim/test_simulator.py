"""The simulated streaming job against hand-computed answers and the calibration targets."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import sine_workload

START = SimConfig().start


def quiet(**overrides: float) -> SimConfig:
    """Identical workers, uniform partitions, no noise: every number below is computable by hand."""
    base = {"heterogeneity": 0.0, "skew": 0.0, "cpu_noise": 0.0, "downtime_noise_s": 0.0, "partitions": 12}
    return SimConfig(**(base | overrides))


def constant(rate: float, seconds: int) -> np.ndarray:
    return np.full(seconds, float(rate))


# --- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_scaleout", 0),
        ("max_scaleout", 2.5),
        ("partitions", 0),
        ("worker_capacity", -1.0),
        ("worker_capacity", float("inf")),
        ("heterogeneity", 1.0),
        ("skew", -0.1),
        ("idle_cpu", 1.0),
        ("cpu_noise", -0.01),
        ("throughput_noise", float("nan")),
        ("downtime_out_s", -1.0),
        ("downtime_in_s", float("nan")),
        ("downtime_noise_s", -3.0),
        ("checkpoint_interval", 0.0),
        ("start", float("nan")),
        ("base_latency_s", -0.5),
    ],
)
def test_config_rejects_nonsense_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"SimConfig.{field}"):
        SimConfig(**{field: value})


def test_partitions_default_to_flinks_128_key_groups() -> None:
    assert SimConfig(max_scaleout=7).n_partitions == 128
    assert SimConfig(max_scaleout=7, partitions=None).n_partitions == 7
    assert SimConfig(max_scaleout=7, partitions=21).n_partitions == 21


def test_128_partitions_make_capacity_nearly_linear() -> None:
    sim = Simulator(constant(1, 10), quiet(partitions=128))
    # 7 workers: 128 = 7 × 18 + 2, so workers 0 and 1 read 19 partitions: 110,000 × 128 / 19.
    assert sim.true_capacity(7) == pytest.approx(110_000 * 128 / 19)
    assert sim.true_capacity(8) == pytest.approx(8 * 110_000)


def test_constructor_and_control_validation() -> None:
    with pytest.raises(ValueError, match="initial_scaleout"):
        Simulator(constant(1, 10), quiet(), initial_scaleout=13)
    with pytest.raises(ValueError, match="non-negative"):
        Simulator(np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="non-empty"):
        Simulator(np.array([]))
    sim = Simulator(constant(1, 10), quiet())
    for bad in (0, 13, 2.5):
        with pytest.raises(ValueError, match="target"):
            sim.scale(bad)
    with pytest.raises(ValueError, match="seconds"):
        sim.advance(-1)
    with pytest.raises(ValueError, match="workload has 10 s"):
        sim.advance(11)
    with pytest.raises(ValueError, match="scaleout"):
        sim.true_capacity(0)


# --- calibration: CPU against throughput ----------------------------------------------------------


def test_throughput_on_cpu_regression_recovers_worker_capacity() -> None:
    """Like sine_*_p2.csv: 2 workers under a sine, throughput linear in CPU from 0.085 idle.

    throughput = (cpu − 0.085) × 110000 / 0.915: slope 120218.579…, intercept −10218.579….
    """
    workload = sine_workload(hours=3, low=5_000, high=200_000)  # ≤ 100,000 per worker: never saturated
    sim = Simulator(workload, quiet(max_scaleout=2))
    sim.advance(len(workload))
    obs = sim.observe(START)
    slope, intercept = np.polyfit(obs.cpu["worker-0"], obs.throughput["worker-0"], 1)
    assert slope == pytest.approx(120_218.5792349727, rel=1e-9)
    assert intercept == pytest.approx(-10_218.579234972678, rel=1e-6)


def test_regression_with_cpu_noise_is_as_tight_as_the_recordings() -> None:
    workload = sine_workload(hours=3, low=5_000, high=200_000)
    sim = Simulator(workload, quiet(max_scaleout=2, cpu_noise=0.01), seed=4)
    sim.advance(len(workload))
    obs = sim.observe(START)
    for worker in ("worker-0", "worker-1"):
        x, y = obs.cpu[worker], obs.throughput[worker]
        r2 = np.corrcoef(x, y)[0, 1] ** 2
        assert r2 > 0.99
        assert np.polyfit(x, y, 1)[0] == pytest.approx(120_218.58, rel=0.01)


def test_idle_and_saturated_cpu() -> None:
    sim = Simulator(np.array([0.0] * 5 + [1e7] * 5), quiet(max_scaleout=3))
    sim.advance(10)
    obs = sim.observe(START)
    assert obs.cpu["worker-1"][:5].tolist() == [0.085] * 5
    assert obs.cpu["worker-1"][5:].tolist() == [1.0] * 5  # a worker with backlog is at full CPU
    assert obs.throughput["worker-1"][5:].tolist() == [110_000.0] * 5


# --- ground truth ---------------------------------------------------------------------------------


def test_true_capacity_uniform_partitions() -> None:
    sim = Simulator(constant(1, 10), quiet())
    for n in (1, 2, 3, 4, 6, 12):  # 12 partitions divide evenly: n × 110,000
        assert sim.true_capacity(n) == pytest.approx(n * 110_000)
    # 5 workers: workers 0 and 1 read 3 of the 12 partitions, saturating at 110,000 × 12 / 3.
    assert sim.true_capacity(5) == pytest.approx(440_000)
    # 7 … 11 workers: worker 0 still reads 2 partitions, 110,000 × 12 / 2.
    assert sim.true_capacities()[6:11] == pytest.approx([660_000] * 5)


@pytest.mark.parametrize("scaleout", [3, 7, 12])
def test_true_capacity_is_where_skewed_heterogeneous_workers_saturate(scaleout: int) -> None:
    """Just below the true capacity nothing queues; just above it the hot worker falls behind."""
    probe = Simulator(constant(1, 10), SimConfig(), seed=3)
    capacity = probe.true_capacity(scaleout)
    assert capacity < scaleout * 110_000 * 1.1
    below = Simulator(constant(0.999 * capacity, 120), SimConfig(), seed=3, initial_scaleout=scaleout)
    below.advance(120)
    assert below.history().lag.max() < 1e-6 * capacity
    above = Simulator(constant(1.01 * capacity, 120), SimConfig(), seed=3, initial_scaleout=scaleout)
    above.advance(120)
    lag = above.history().lag
    assert lag[-1] > lag[59] > 0


def test_heterogeneity_is_fixed_per_slot_and_seed() -> None:
    config = quiet(heterogeneity=0.1, downtime_out_s=0)
    sim = Simulator(constant(1e8, 10), config, seed=5, initial_scaleout=3)
    caps = sim.worker_capacities
    assert np.all((caps >= 99_000) & (caps <= 121_000))
    assert len(np.unique(caps)) == 12
    assert Simulator(constant(1, 1), config, seed=5).worker_capacities.tolist() == caps.tolist()
    sim.advance(5)
    sim.scale(5)
    sim.advance(5)
    obs = sim.observe(START)
    # Saturated, each worker processes its slot's capacity, before and after the rescale.
    assert obs.throughput["worker-0"] == pytest.approx([caps[0]] * 10)
    assert obs.throughput["worker-4"][5:] == pytest.approx([caps[4]] * 5)


def test_skew_zero_is_uniform_and_weights_sum_to_one() -> None:
    assert Simulator(constant(1, 1), quiet()).partition_weights == pytest.approx([1 / 12] * 12)
    weights = Simulator(constant(1, 1), SimConfig(skew=0.3), seed=2).partition_weights
    assert weights.sum() == pytest.approx(1.0)
    assert weights.max() / weights.min() > 1.1


def test_lower_bound_scaleout_hand_made() -> None:
    # Uniform capacities: 110k, 220k, 330k, 440k, 440k (5), 660k (6 … 11), 1,320k (12).
    sim = Simulator(constant(1, 1), quiet())
    workload = np.array([0, 100_000, 110_000, 110_001, 400_000, 500_000, 700_000, 2_000_000])
    assert sim.lower_bound_scaleout(workload).tolist() == [1, 1, 1, 2, 4, 6, 12, 12]


# --- dynamics -------------------------------------------------------------------------------------


def test_constant_workload_below_capacity() -> None:
    sim = Simulator(constant(500_000, 300), quiet())
    sim.advance(300)
    h = sim.history()
    assert h.lag.max() < 1e-6
    assert h.latency_s == pytest.approx([0.5] * 300)
    assert h.throughput == pytest.approx([500_000] * 300)
    # 500,000 / 12 per worker: 0.085 + 0.915 × 41,666.67 / 110,000 = 0.4315909…
    assert sim.observe(START).cpu["worker-7"] == pytest.approx([0.43159091] * 300)
    assert h.true_capacity.tolist() == [1_320_000] * 300
    assert not h.down.any()


def test_overload_lag_grows_at_the_excess() -> None:
    """2 workers (220,000/s) under 250,000/s: lag grows by 30,000 each second.

    FIFO: second t's last tuple arrives at t + 1 and leaves at (t + 1) × 250/220, so it waits
    (t + 1) × 0.13636… s on top of the base latency, if that is before the end of the run.
    """
    sim = Simulator(constant(250_000, 100), quiet(), initial_scaleout=2)
    sim.advance(100)
    h = sim.history()
    assert h.lag == pytest.approx(30_000 * np.arange(1, 101))
    assert h.latency_s[0] == pytest.approx(0.5 + 0.13636363636)
    assert h.latency_s[49] == pytest.approx(0.5 + 6.8181818182)
    # second 99's tuples are still queued at the end (100 s): they have waited 0 s so far.
    assert h.latency_s[99] == pytest.approx(0.5)
    obs = sim.observe(START)
    assert obs.throughput["worker-1"] == pytest.approx([110_000] * 100)
    assert obs.cpu["worker-1"].tolist() == [1.0] * 100


def test_rescale_stops_processing_and_reprocesses_since_the_checkpoint() -> None:
    """4 → 6 workers at second 25 under 60,000/s, checkpoints at uptime 10 and 20, 30 s downtime.

    - the last checkpoint holds 20 s = 1,200,000 tuples; 300,000 processed after it go back;
    - after the downtime: lag = 300,000 + 30 × 60,000 = 2,100,000;
    - first second up: 6 × 110,000 processed, lag 2,100,000 + 60,000 − 660,000 = 1,500,000;
    - second 25's last tuple (cumulative 1,560,000) leaves when the position, restarting from
      1,200,000 at 55 s at 660,000/s, reaches it: 55 + 360/660 s; it arrived at 26 s.
    """
    sim = Simulator(constant(60_000, 200), quiet(checkpoint_interval=10), initial_scaleout=4)
    sim.advance(25)
    assert sim.now == START + 25
    sim.scale(6)
    assert sim.rescaling and sim.scaleout == 6
    sim.advance(30)
    assert not sim.rescaling
    h = sim.history()
    assert h.down.tolist() == [False] * 25 + [True] * 30
    assert h.scaleout.tolist() == [4] * 25 + [6] * 30
    assert h.lag[54] == pytest.approx(2_100_000)
    assert h.throughput[25:].tolist() == [0.0] * 30
    sim.advance(1)
    obs = sim.observe(START + 55)
    assert obs.lag[0] == pytest.approx(1_500_000)
    assert obs.uptime_s.tolist() == [1.0]
    assert [obs.throughput[f"worker-{k}"][0] for k in range(6)] == pytest.approx([110_000] * 6)
    sim.advance(60)
    h = sim.history()
    assert h.lag[57] == pytest.approx(300_000)  # drains at 600,000/s
    assert h.lag[58] == pytest.approx(0, abs=1e-6)
    assert h.latency_s[24] == pytest.approx(0.5)  # processed the first time before the stop
    assert h.latency_s[25] == pytest.approx(55 + 360 / 660 - 26 + 0.5)
    assert h.latency_s[100:] == pytest.approx([0.5] * 16)


def test_restart_from_checkpoint_replay_and_conservation_hand_case() -> None:
    sim = Simulator(constant(60_000, 100), quiet(checkpoint_interval=10, downtime_in_s=15))
    sim.advance(25)
    sim.scale(12)  # same scale-out: a restart, with the scale-in downtime
    sim.advance(15)
    h = sim.history()
    assert h.down.sum() == 15
    assert h.replay[24] == 0
    assert h.replay[25] == pytest.approx(300_000)  # processed after the checkpoint, to do again
    assert h.processed[39] == pytest.approx(25 * 60_000)  # the first-time curve did not move


def test_observe_window_and_workers_that_did_not_exist() -> None:
    sim = Simulator(constant(100_000, 100), quiet(downtime_out_s=5), initial_scaleout=2, job="wordcount")
    sim.advance(10)
    sim.scale(4)
    sim.advance(10)
    obs = sim.observe(START)
    assert obs.job == "wordcount"
    assert obs.scaleout == 4
    assert obs.timestamps.tolist() == [START + s for s in range(1, 21)]
    assert obs.workers == ("worker-0", "worker-1", "worker-2", "worker-3")
    tp2 = obs.throughput["worker-2"]
    assert np.isnan(tp2[:10]).all()
    assert tp2[10:15].tolist() == [0.0] * 5
    assert obs.cpu["worker-2"][10:15].tolist() == [0.0] * 5
    assert np.all(tp2[15:] > 0)
    assert obs.uptime_s.tolist() == [*range(1, 11), 0, 0, 0, 0, 0, *range(1, 6)]
    window = sim.observe(START + 10, START + 15)
    assert window.timestamps.tolist() == [START + s for s in range(11, 16)]
    assert window.workload.tolist() == [100_000] * 5
    early = sim.observe(START, START + 10)
    assert early.workers == ("worker-0", "worker-1")
    assert len(sim.observe(sim.now).timestamps) == 0


def test_rescale_during_a_rescale_restarts_the_downtime() -> None:
    sim = Simulator(constant(60_000, 200), quiet(), initial_scaleout=4)
    sim.advance(25)
    sim.scale(6)
    sim.advance(10)
    sim.scale(8)
    assert sim.scaleout == 8
    sim.advance(40)
    h = sim.history()
    assert h.down.tolist() == [False] * 25 + [True] * 40 + [False] * 10
    assert h.scaleout[35:].tolist() == [8] * 40


def test_downtime_noise_and_direction() -> None:
    for seed in range(10):
        sim = Simulator(constant(1, 200), SimConfig(), seed=seed, initial_scaleout=4)
        sim.scale(6)
        sim.advance(100)
        assert 27 <= sim.history().down.sum() <= 33
    sim = Simulator(constant(1, 200), quiet(), initial_scaleout=6)
    sim.scale(4)
    sim.advance(100)
    assert sim.history().down.sum() == 15


def test_conservation_through_rescales() -> None:
    """Arrivals = first-time processed + lag − replay, every second, through out, in and restart."""
    workload = sine_workload(hours=1, period_s=1_800, low=5_000, high=900_000)
    sim = Simulator(workload, SimConfig(), seed=7, initial_scaleout=3)
    for seconds, target in [(305, 8), (10, 12), (400, 5), (700, 5), (900, 2), (600, 7)]:
        sim.advance(seconds)
        sim.scale(target)
    sim.advance(len(workload) - int(sim.now - START))
    h = sim.history()
    arrived = np.cumsum(h.workload)
    assert h.processed + h.lag - h.replay == pytest.approx(arrived, rel=1e-6, abs=1e-6)
    assert h.replay[:305].max() == 0
    assert h.replay[305] > 0  # 5 s processed after the checkpoint at 300 s
    assert np.all(np.diff(h.processed) >= -1e-6)
    assert np.isfinite(h.latency_s).all()


# --- determinism and speed ------------------------------------------------------------------------


def test_same_seed_same_run_however_it_is_chunked() -> None:
    workload = sine_workload(hours=0.5, period_s=900, high=800_000)
    one = Simulator(workload, SimConfig(), seed=11)
    one.advance(600)
    one.scale(5)
    one.advance(1200)
    chunked = Simulator(workload, SimConfig(), seed=11)
    for _ in range(10):
        chunked.advance(60)
    chunked.scale(5)
    for _ in range(20):
        chunked.advance(60)
    a, b = one.observe(START), chunked.observe(START)
    for worker in a.workers:
        np.testing.assert_array_equal(a.cpu[worker], b.cpu[worker])
        np.testing.assert_array_equal(a.throughput[worker], b.throughput[worker])
    np.testing.assert_array_equal(one.history().latency_s, chunked.history().latency_s)
    other = Simulator(workload, SimConfig(), seed=12)
    assert other.worker_capacities.tolist() != one.worker_capacities.tolist()


def test_six_hours_with_twelve_workers_and_six_rescales() -> None:
    """Six simulated hours end to end (its speed is a benchmark figure: `daedalus bench loop`, not a test)."""
    workload = sine_workload(hours=6, high=600_000)
    sim = Simulator(workload, SimConfig(), seed=0)
    for minute in range(360):
        if minute % 60 == 30:
            sim.scale(6 if minute % 120 == 30 else 12)
        sim.advance(60)
        assert sim.observe(sim.now - 60).timestamps.size == 60
    h = sim.history()
    assert h.timestamps.size == 6 * 3600
    assert set(np.unique(h.scaleout)) == {6, 12}
