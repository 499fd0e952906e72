"""The embedded simulator as a deployed job's target (engine `sim`), persisted between flow runs.

Each deployed `mape-k` run is a new process, so the simulated job lives in the store next to the job's
knowledge (`<store>/<job>/sim.pickle`, written through the job store's one atomic write) and catches up
with the wall clock at every run: it advances by the wall-clock seconds elapsed since it was last saved,
times `sim.speedup`. The workload (`sine`, one 3-hour period, or a trace file) repeats forever, rescaled
so that its peak is `peak_utilization` × the true capacity at the job's maximum scale-out.

The simulator is kept as a window: its history is trimmed to the last `HISTORY_S` seconds whenever it
advances, so the pickle stays a few hundred kilobytes whatever the job's age. Trimming changes nothing the
loop can observe (a trimmed run and an untrimmed one give the same samples, see the tests).
Loading, advancing and saving happen under a file lock, so a loop and another flow (the recovery monitor)
reading the same simulated job never lose each other's rescale. The lock needs a local store folder.
"""

from __future__ import annotations

import fcntl
import math
import pickle
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np
from pydantic import Field

from daedalus.connectors.fields import Strict
from daedalus.connectors.store import Store, check_job_name
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.types import Observation
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import Simulator
from daedalus.sim.workloads import load_workload, sine_workload


class _Limits(Protocol):
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


class JobSpec(Protocol):
    """What the simulated job reads of its jobs-file entry (`connectors.jobs.JobSpec`, which composes this
    module's settings: naming the class here would put the two modules in a circle)."""

    @property
    def name(self) -> str: ...
    @property
    def scaleout(self) -> _Limits: ...
    @property
    def checkpoint_interval(self) -> float: ...
    @property
    def partitions(self) -> int | None: ...
    @property
    def sim(self) -> SimSettings | None: ...

FORMAT = 1
HISTORY_S = 600  # seconds of history kept: a first loop observes 600 s, later ones the minutes since the last
WARM_S = 600  # history simulated when the job is created, so its first loop has data
MAX_CATCH_UP_S = 6 * 3600  # a worker that was down for days does not simulate days in one run
SINE_PERIOD_S = 10_800  # the paper's sine: two periods in 6 h
OBSERVABLE = ("_tp", "_cpu", "_lag", "_uptime", "_scale_hist", "_down")  # per-second history observe() reads
RECEIVED_KEPT = 1000  # rescales remembered in `SimState.received`
PER_PARTITION = ("_position_hist", "_taken_hist")  # per-second × per-partition: 128 columns, not persisted


def local_root(store_url: str) -> Path:
    """The store folder; the simulated job needs a local one for its lock."""
    url = store_url.rstrip("/")
    if url.startswith("file://"):
        url = url[len("file://"):]
    if "://" in url:
        raise ConfigurationError(
            f"engine 'sim' keeps its simulated job in a local folder, not {store_url!r}: "
            "give the job a local store_url (e.g. .daedalus/knowledge)"
        )
    return Path(url)


def settings(spec: JobSpec) -> SimSettings:
    """The job's `sim:` section, or its defaults."""
    return spec.sim or SimSettings()


def base_workload(spec: JobSpec) -> np.ndarray:
    """One cycle of the job's workload at 1 s, before rescaling: repeats forever."""
    workload = settings(spec).workload
    return sine_workload(hours=SINE_PERIOD_S / 3600) if workload == "sine" else load_workload(workload)


def fingerprint(spec: JobSpec) -> tuple:
    """What the simulated job is made of: a change in the jobs file starts a new simulated job."""
    s = settings(spec)
    return (s.workload, s.peak_utilization, s.seed, spec.scaleout.max, spec.partitions, spec.checkpoint_interval)


def trimmed(sim: Simulator, keep_s: int, extra: np.ndarray) -> Simulator:
    """The same simulated job with only its last `keep_s` seconds of history and `extra` workload appended.

    Copies the simulator's dynamic state (backlogs, positions, checkpoints, random generators, the rescale in
    progress) into a simulator whose step 0 is `keep_s` seconds before now. Nothing observable changes.
    """
    keep = min(keep_s, sim._t)
    cut = sim._t - keep
    workload = np.concatenate([sim._workload[cut: sim._t], np.asarray(extra, dtype=float)])
    config = replace(sim.config, start=sim.config.start + cut)
    new = Simulator(workload if len(workload) else np.zeros(1), config, job=sim.job)
    for name in ("_capacity", "_weights", "_true_capacities", "_cpu_rng", "_tp_rng", "_down_rng", "_scaleout",
                 "_owner", "_backlog", "_position", "_checkpoint"):
        setattr(new, name, getattr(sim, name))
    for name in OBSERVABLE:
        getattr(new, name)[:keep] = getattr(sim, name)[cut: sim._t]
    for name in PER_PARTITION:  # not persisted: they only serve `history()` (latency), never `observe()`
        getattr(new, name)[:keep] = np.nan
    new._t = keep
    new._down_until = max(0, sim._down_until - cut)
    new._restart = sim._restart - cut
    return new


@dataclass
class SimState:
    """What is pickled: the simulator window and where the wall clock and the workload cycle stand."""

    format: int
    fingerprint: tuple
    sim: Simulator
    wall: float  # wall-clock time the simulator was last advanced to
    carry: float  # fraction of a simulated second not simulated yet
    cycle_pos: int  # index of the next second in the rescaled workload cycle
    # Every rescale this job received, as (decision id, from, to, wall clock), saved with the rescale itself in one
    # write: the known answer a fault run checks the ledger against (no action lost, none applied twice).
    received: list[tuple[str, int, int, float]] = field(default_factory=list)


class PersistentSimulatedJob:
    """MetricsSource, Scaler and Clock over a simulated job persisted in the store."""

    def __init__(self, spec: JobSpec, root: Path, wall_clock=time.time) -> None:
        self.spec = spec
        self.settings = settings(spec)
        self.dir = root / check_job_name(spec.name)
        self.path = self.dir / "sim.pickle"
        self.store = Store(str(root)).job(spec.name)
        self.wall_clock = wall_clock
        self._cycle: np.ndarray | None = None
        self.state = self._transaction(lambda state: None)

    @classmethod
    def from_spec(cls, spec: JobSpec, store_url: str) -> PersistentSimulatedJob:
        """Load the job's simulator, catch up with the wall clock and save it."""
        return cls(spec, local_root(store_url))

    # --- persistence ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "sim.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> SimState | None:
        try:
            with open(self.path, "rb") as f:
                state = pickle.load(f)
        except FileNotFoundError:
            return None
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise ConnectorError(f"{self.path}: unreadable simulated job ({exc}); delete it to start afresh") from exc
        if not isinstance(state, SimState) or state.format != FORMAT or state.fingerprint != fingerprint(self.spec):
            return None  # another format or another jobs-file entry: a new simulated job
        return state

    def _save(self, state: SimState) -> None:
        kept = {name: getattr(state.sim, name) for name in PER_PARTITION}
        for name, array in kept.items():
            setattr(state.sim, name, array[:0])
        try:
            blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            for name, array in kept.items():
                setattr(state.sim, name, array)
        self.store.write(self.path.name, blob, durable=True)

    def _transaction(self, change) -> SimState:
        """Load (or create), catch up with the wall clock, apply `change(state)`, save."""
        with self._locked():
            wall = self.wall_clock()
            state = self._load() or self._new(wall)
            self._catch_up(state, wall)
            change(state)
            self._save(state)
        return state

    # --- simulation ----------------------------------------------------------------------------

    def cycle(self) -> np.ndarray:
        """The rescaled workload cycle (tuples/s)."""
        if self._cycle is None:
            _, _, self._cycle = scenario(base_workload(self.spec), self.spec.scaleout.max,
                                         self.settings.peak_utilization, self.settings.seed,
                                         **self._overrides())
        return self._cycle

    def _overrides(self) -> dict:
        over: dict = {"checkpoint_interval": float(self.spec.checkpoint_interval)}
        if self.spec.partitions is not None:
            over["partitions"] = self.spec.partitions
        return over

    def _take(self, state: SimState, seconds: int) -> np.ndarray:
        cycle = self.cycle()
        idx = (state.cycle_pos + np.arange(seconds)) % len(cycle)
        state.cycle_pos = int((state.cycle_pos + seconds) % len(cycle))
        return cycle[idx]

    def _new(self, wall: float) -> SimState:
        sim_config, _, _ = scenario(np.ones(1), self.spec.scaleout.max, self.settings.peak_utilization,
                                    self.settings.seed, start=math.floor(wall) - WARM_S, **self._overrides())
        state = SimState(FORMAT, fingerprint(self.spec), None, wall, 0.0, 0)  # type: ignore[arg-type]
        state.sim = Simulator(self._take(state, WARM_S), sim_config, seed=self.settings.seed, job=self.spec.name)
        state.sim.advance(WARM_S)
        return state

    def _catch_up(self, state: SimState, wall: float) -> None:
        elapsed = max(0.0, wall - state.wall) * self.settings.speedup + state.carry
        steps = min(math.floor(elapsed), MAX_CATCH_UP_S)
        state.carry = elapsed - math.floor(elapsed) if steps < MAX_CATCH_UP_S else 0.0
        state.wall = wall
        state.sim = trimmed(state.sim, HISTORY_S, self._take(state, steps))
        if steps:
            state.sim.advance(steps)

    # --- MetricsSource, Scaler, Clock ----------------------------------------------------------

    def now(self) -> float:
        return self.state.sim.now

    def observe(self, job: str, since: float | None, until: float) -> Observation:
        start = until - 600.0 if since is None else since
        return self.state.sim.observe(start, until)

    def current(self, job: str) -> int:
        return self.state.sim.scaleout

    def true_capacity(self, scaleout: int) -> float:
        """Ground truth, for dashboards and tests."""
        return self.state.sim.true_capacity(scaleout)

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        before = self.state.sim.scaleout
        if not 1 <= target <= self.spec.scaleout.max:
            raise ConnectorError(f"simulated job {job!r} has 1 … {self.spec.scaleout.max} workers, not {target}")
        if dry_run:
            return f"dry run: would scale {job} {before} → {target}"
        def rescale(state: SimState) -> None:
            was = state.sim.scaleout
            state.sim.scale(target)
            received = getattr(state, "received", [])  # a state saved before the record existed has none
            state.received = [*received[-RECEIVED_KEPT + 1:], (decision_id, was, target, self.wall_clock())]

        self.state = self._transaction(rescale)
        return f"scaled simulated job {job} {before} → {target} (decision {decision_id})"


def received(spec_name: str, store_url: str) -> list[tuple[str, int, int, float]]:
    """The rescales the simulated job `spec_name` received, oldest first, read without advancing it."""
    path = local_root(store_url) / check_job_name(spec_name) / "sim.pickle"
    try:
        with open(path, "rb") as f:
            state: SimState = pickle.load(f)
    except FileNotFoundError:
        return []
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ConnectorError(f"{path}: cannot read the simulated job ({exc})") from exc
    return list(getattr(state, "received", []))


def peek_now(spec: JobSpec, store_url: str, wall_now: float | None = None) -> float:
    """The simulated job's clock at `wall_now`, read without advancing or saving the simulated job."""
    path = local_root(store_url) / check_job_name(spec.name) / "sim.pickle"
    try:
        with open(path, "rb") as f:
            state: SimState = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ConnectorError(f"{path}: cannot read the simulated job's clock ({exc})") from exc
    elapsed = max(0.0, (time.time() if wall_now is None else wall_now) - state.wall) * settings(spec).speedup
    elapsed += state.carry
    return state.sim.now + min(math.floor(elapsed), MAX_CATCH_UP_S)


class SimSettings(Strict):
    """The embedded simulated job as a target (engine `sim`)."""

    workload: str = "sine"  # "sine" or a path to a trace
    peak_utilization: float = Field(0.9, gt=0, le=2)
    seed: int = 0
    speedup: float = Field(1.0, gt=0)  # simulated seconds per wall-clock second
