"""Analyze learns only from sound data, and follows a rescale until the job has recovered."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.analyze import analyze
from daedalus.models.loop.execute import apply
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.types import Decision
from daedalus.sim.simulator import SimConfig, Simulator
from tests.helpers import T0, observation, simulated_target


def test_bad_observation_teaches_nothing_and_holds():
    cfg = LoopConfig()
    k = Knowledge.new("j", cfg)
    analyze(cfg, observation(), k, T0 + 61)
    before = k.to_bytes()
    lag = observation(start=T0 + 60).lag.copy()
    lag[3] = np.nan
    a = analyze(cfg, replace(observation(start=T0 + 60), lag=lag), k, T0 + 121)
    assert a.holds == ("lag has missing or NaN samples",)
    after = Knowledge.from_bytes(k.to_bytes())
    assert after.capacity.to_state() == Knowledge.from_bytes(before).capacity.to_state()
    assert after.forecaster.window.size == Knowledge.from_bytes(before).forecaster.window.size


def test_recovery_after_a_rescale_is_observed_within_10_s_of_the_truth():
    workload = np.full(3600, 150_000.0)
    sim = Simulator(workload, SimConfig(max_scaleout=12, downtime_noise_s=0.0), seed=3, initial_scaleout=4)
    cfg = LoopConfig(max_scaleout=12, mode="dry-run")  # only the manual action below rescales
    target = simulated_target(sim, cfg)
    k = Knowledge.new("sim", cfg)
    for _ in range(20):  # learn normal operation
        sim.advance(60)
        iterate(target, k, PLAIN)
    now = sim.now
    apply(Decision("sim-manual", now, "scale-out", 4, 6, ("test",)), k, target.scaler, now)
    while k.watch is not None and sim.now < now + 900:
        sim.advance(60)
        iterate(target, k, PLAIN)
    observed = k.entry("sim-manual").observed_recovery_s
    h = sim.history()
    after = h.timestamps > now
    caught_up = h.timestamps[after & (h.lag <= 1.0) & ~h.down]
    true_recovery = caught_up[0] - now
    assert observed is not None
    assert abs(observed - true_recovery) <= 10.0, (observed, true_recovery)
    assert k.downtime.observations == 1 and 27 <= k.downtime.out_s <= 33  # learned from a 30 s restart


def test_a_rescale_is_followed_through_held_observations_and_normal_is_learned_only_from_sound_ones():
    cfg = LoopConfig()
    k = Knowledge.new("j", cfg)
    analyze(cfg, observation(), k, T0 + 61)  # 60 steady samples, residual 0: normal 0 ± 0 (the floor: 10/s)
    assert k.anomaly.n == 60
    apply(Decision("d-1", T0 + 61, "scale-out", 2, 3, ("test",)), k, _Scaler(), T0 + 61)
    down = observation(start=T0 + 60)
    thr = {w: s.copy() for w, s in down.throughput.items()}
    for s in thr.values():
        s[:10] = 0.0  # down for 10 s after the rescale, then normal again
    held = replace(down, throughput=thr, holds=("NaN: pod worker-1 reports NaN throughput or CPU at 10 steps",))
    a = analyze(cfg, held, k, T0 + 121)
    assert a.holds and k.watch is None  # followed although held, and settled
    assert k.entry("d-1").observed_recovery_s == 10.0
    assert k.anomaly.n == 60  # the held observation taught nothing


class _Scaler:
    def scale(self, job, target, decision_id, dry_run=False):
        return f"scaled to {target}"

    def current(self, job):
        return None


def test_a_rescale_before_the_last_one_recovered_ends_its_watch_and_says_so():
    sim = Simulator(np.full(3600, 150_000.0), SimConfig(max_scaleout=12, downtime_noise_s=0.0), seed=3,
                    initial_scaleout=4)
    cfg = LoopConfig(max_scaleout=12, mode="dry-run")  # only the manual actions below rescale
    target = simulated_target(sim, cfg)
    k = Knowledge.new("sim", cfg)
    for _ in range(5):
        sim.advance(60)
        iterate(target, k, PLAIN)
    first = sim.now
    apply(Decision("sim-first", first, "scale-out", 4, 6, ("test",)), k, target.scaler, first)
    sim.advance(20)  # still restarting: not recovered
    apply(Decision("sim-second", first + 20, "scale-out", 6, 8, ("test",)), k, target.scaler, first + 20)
    assert k.watch is not None and k.watch.decision_id == "sim-second"
    assert k.entry("sim-first").observed_recovery_s is None
    assert k.entry("sim-first").history[-1] == (
        first + 20, "superseded by the rescale 20 s after it (sim-second), before it recovered")
    assert k.entry("sim-second").history[-1] == (first + 20, "executed")  # the new one's own story is untouched
