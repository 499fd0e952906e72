"""`daedalus bench chaos`: faults injected into a running fleet, checked against known answers.

A fleet (`runtime/fleet.py`) runs N simulated jobs in real time, sped up (`--speedup`, 10 by default: the 3-hour
sine workload then turns in 18 minutes), their workloads peaking at 30, 60 or 90 % of their largest scale-out's
capacity: a simulated job starts at that scale-out, so most loops scale in within minutes, and out again as the
sine rises; the faults strike while actions are being taken. After a warm-up a seeded injector
SIGKILLs one part at a time and starts it again a few seconds later, as a supervisor (Kubernetes, systemd) would:

- `api`: one of the two API replicas (HAProxy sends everything to the other meanwhile);
- `services`: the process running Prefect's services (scheduler, event persister, automations, …);
- `worker`: a `daedalus worker` while it has a flow run in flight (its whole tree: the run dies with it);
- `redis`: Redis (append-only file on: it comes back with what it had written);
- `postgres`: PostgreSQL, by `pg_ctl stop -m immediate` (a crash: no shutdown checkpoint, WAL replay at start).

Faults come every 3–6 minutes on an hour's run; shorter runs squeeze the same number of steps into the window they
have, so that any run of 12 minutes or more injects each kind at least once (each round of five is a seeded
shuffle of the kinds). Any part that dies on its own meanwhile is restarted too, and listed.

The known answers, read at the end once the workers have stopped:

- each simulated job records every rescale it received, with the rescale itself (`SimState.received`); against
  the job's ledger: a decision received twice is a duplicated action, an action the ledger says was executed but
  the job never received, or one it received that the ledger does not hold as executed (or executing, the
  write-ahead intent), is a lost one. Both must be 0;
- no flow run is left Running, Pending or Paused past its deadline (`STUCK_AFTER_S`; a recovery monitor's own
  timeout plus a margin for it);
- after each restart every job completed a loop run that started after it, within 2 minutes (`recovered_s` is the
  slowest job's);
- every stored knowledge version's checksum is valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daedalus.bench.fleet import POOL, fleet_client
from daedalus.bench.schedule import _deploy, _zygote, bench_jobs_file
from daedalus.connectors.sim_persistent import received
from daedalus.connectors.store import Store
from daedalus.flows.background import RECOVERY_DEADLINE_S
from daedalus.models.errors import DaedalusError
from daedalus.runtime.fleet import Fleet, descendants, down, postgres_crash, up

KINDS = ("api", "services", "worker", "redis", "postgres")
MEAN_GAP_S = 270.0  # 4.5 min: an hour's run gets a fault every 3–6 min (± a third)
WARMUP_S = 120.0  # the jobs' first runs (model fits) before the first fault
TAIL_S = 150.0  # after the last fault: room for its recovery to be seen
RESTART_AFTER_S = 5.0  # a supervisor's restart delay
RECOVERY_LIMIT_S = 120.0  # every job back on schedule within this of each restart
PEAKS = (0.3, 0.6, 0.9)  # workload peaks (× capacity at the largest scale-out): most jobs scale in within minutes
STUCK_AFTER_S = 300.0  # a loop run Running/Pending/Paused longer than this is stuck (a loop run takes seconds)
SUPERVISE_S = 5.0
APPLIED = ("executed", "executing")  # ledger states that mean the scaler was (or may have been) called


def fault_plan(minutes: float, seed: int, warmup_s: float = WARMUP_S, tail_s: float = TAIL_S
               ) -> list[tuple[float, str]]:
    """(seconds after the start, kind) of every fault: seeded, a round of all five kinds at a time, between the
    warm-up and the tail."""
    rng = random.Random(seed)
    window = 60 * minutes - warmup_s - tail_s
    if window <= 0:
        return []
    gaps: list[float] = []
    while sum(gaps) <= window:
        gaps.append(MEAN_GAP_S * rng.uniform(2 / 3, 4 / 3))  # 3–6 minutes
    gaps = gaps[:-1]  # the last one ran past the window
    if len(gaps) < len(KINDS) - 1:  # a short run: five faults, the same shape squeezed into the window
        gaps = [MEAN_GAP_S * rng.uniform(2 / 3, 4 / 3) for _ in range(len(KINDS) - 1)]
        gaps = [g * window / sum(gaps) for g in gaps]
    times = [warmup_s]
    for gap in gaps:
        times.append(times[-1] + gap)
    kinds: list[str] = []
    while len(kinds) < len(times):
        kinds += rng.sample(KINDS, len(KINDS))
    return [(round(at, 1), kind) for at, kind in zip(times, kinds, strict=False)]


class Injector:
    """Kills and restarts the fleet's parts; restarts whatever else died meanwhile (a supervisor)."""

    def __init__(self, fleet: Fleet, rng: random.Random, say: Callable[[str], None]) -> None:
        self.fleet, self.rng, self.say = fleet, rng, say
        self.unplanned: list[dict[str, Any]] = []

    def inject(self, kind: str) -> tuple[str, float, float]:
        """The fault of `kind`; (the process hit, the wall time it was killed, the time it was serving again)."""
        fleet = self.fleet
        if kind == "api":
            name = self.rng.choice([f"api-{i}" for i in range(len(fleet.ports.api))])
        elif kind == "worker":
            name = self._worker_mid_run()
        else:
            name = kind
        killed = time.time()
        if kind == "postgres":
            postgres_crash(fleet)
        else:
            fleet.kill(name)
        self.say(f"fault: {name} killed")
        time.sleep(RESTART_AFTER_S)
        fleet.serve(name)
        self.say(f"fault: {name} serving again")
        return name, killed, time.time()

    def _worker_mid_run(self, wait_s: float = 90.0) -> str:
        """A worker with a flow run in flight (its preloaded process has a child), waiting up to `wait_s`."""
        names = [f"worker-{i}" for i in range(self.fleet.workers)]
        self.rng.shuffle(names)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for name in names:
                found = self.fleet.process(name)
                zygote = None if found is None else _zygote(found.pid)
                if zygote is not None and descendants(zygote):
                    return name
            time.sleep(0.2)
        return names[0]

    def supervise(self) -> None:
        """Restart any part that died without being killed here (and note it)."""
        for name, alive in self.fleet.running().items():
            if alive:
                continue
            self.say(f"supervisor: {name} was not running; restarting it")
            with contextlib.suppress(DaedalusError):
                self.fleet.serve(name)
            self.unplanned.append({"process": name, "time": time.time()})


async def _all_runs(flow_names: list[str] | None = None) -> list[Any]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    flows = None if flow_names is None else FlowFilter(name=FlowFilterName(any_=flow_names))
    found: list[Any] = []
    async with get_client() as client:
        while True:
            page = await client.read_flow_runs(flow_filter=flows, limit=200, offset=len(found))
            found += page
            if len(page) < 200:
                return found


def recovery_s(loop_runs: list[Any], deployments: set[str], restarted: float) -> float | None:
    """Seconds from `restarted` until every job's deployment completed a loop run that started after it (the slowest
    job's); None when some job has not."""
    first: dict[str, float] = {}
    for r in loop_runs:
        if r.start_time is None or not (r.state and r.state.is_completed()) or r.deployment_id is None:
            continue
        started = r.start_time.timestamp()
        dep = str(r.deployment_id)
        if started >= restarted and started < first.get(dep, float("inf")):
            first[dep] = started
    if set(first) < deployments or not deployments:
        return None
    return round(max(first[d] for d in deployments) - restarted, 1)


def stuck(runs: list[Any], loops: set[str], now: float) -> list[str]:
    """Runs still Running, Pending or Paused past their deadline: a loop run (of a deployment in `loops`)
    STUCK_AFTER_S, any other (a recovery monitor waits up to its own timeout) RECOVERY_DEADLINE_S + 2 minutes."""
    out = []
    for r in runs:
        if r.state is None or r.state.type.value not in ("RUNNING", "PENDING", "PAUSED"):
            continue
        since = (r.start_time or r.expected_start_time or r.created).timestamp()
        deadline = STUCK_AFTER_S if str(r.deployment_id) in loops else RECOVERY_DEADLINE_S + 120.0
        if now - since > deadline:
            out.append(f"{r.id} {r.state.name} for {now - since:.0f} s")
    return out


def check_actions(store_url: str, jobs: list[str]) -> dict[str, Any]:
    """Each job's received rescales against its ledger: duplicated and lost actions, with the ids."""
    store = Store(store_url)
    duplicated, lost, got_total, executed_total = 0, [], 0, 0
    duplicated_ids: list[str] = []
    for job in jobs:
        got = [r[0] for r in received(job, store_url)]
        got_total += len(got)
        duplicated += len(got) - len(set(got))
        duplicated_ids += [f"{job}:{d}" for d in sorted({d for d in got if got.count(d) > 1})]
        loaded = store.job(job).load().knowledge
        ledger = {} if loaded is None else {e.id: e.state for e in loaded.ledger}
        executed = {d for d, state in ledger.items() if state == "executed"}
        executed_total += len(executed)
        lost += [f"{job}:{d} executed, never received" for d in sorted(executed - set(got))]
        lost += [f"{job}:{d} received, ledger says {ledger.get(d, 'nothing')}" for d in sorted(set(got))
                 if ledger.get(d) not in APPLIED]
    return {"actions_received": got_total, "actions_executed": executed_total, "actions_duplicated": duplicated,
            "actions_lost": len(lost), "duplicated_ids": duplicated_ids, "lost_ids": lost}


def check_checksums(store_url: str) -> tuple[bool, int, list[str]]:
    """Every stored knowledge version decodes (header, length, SHA-256): (all valid, versions read, failures)."""
    store = Store(store_url)
    bad, count = [], 0
    for job in store.jobs():
        for version in store.job(job).versions():
            count += 1
            try:
                store.job(job).read(version)
            except (DaedalusError, OSError) as exc:
                bad.append(f"{job} v{version}: {exc}")
    return not bad, count, bad


def run_chaos(jobs: int, minutes: float, seed: int, keep: Path | None = None, speedup: float = 10.0,
              say: Callable[[str], None] = print, warmup_s: float = WARMUP_S, tail_s: float = TAIL_S
              ) -> dict[str, Any]:
    """The whole fault run: start, deploy, inject on the plan, stop the workers, check; the figures."""
    tmp = None
    if keep is None:
        tmp = tempfile.mkdtemp(prefix="daedalus-chaos-")
        os.chmod(tmp, 0o755)  # the cluster's `postgres` user reaches its folder
    root = keep or Path(tmp)  # type: ignore[arg-type]
    plan = fault_plan(minutes, seed, warmup_s, tail_s)
    say(f"fault plan (seed {seed}): " + ", ".join(f"{kind} at {at / 60:.1f} min" for at, kind in plan))
    fleet = up(root / "fleet", pool=POOL)
    try:
        with fleet_client(fleet):
            path = bench_jobs_file(root / "jobs.yaml", jobs, speedup, peaks=PEAKS)
            ids, deploy_s = _deploy("deploying", path, root, True, True, None)
            loops = {d for name, d in ids.items() if name.startswith("mape-k/")}
            say(f"deployed {jobs} jobs in {deploy_s:.0f} s; running {minutes:g} min")
            injector = Injector(fleet, random.Random(seed + 1), say)
            start = time.time()
            faults: list[dict[str, Any]] = []
            for at, kind in plan:
                while time.time() < start + at:
                    time.sleep(min(SUPERVISE_S, start + at - time.time()))
                    injector.supervise()
                name, killed_at, restarted = injector.inject(kind)
                faults.append({"kind": kind, "process": name, "time": round(killed_at - start, 1),
                               "at": datetime.fromtimestamp(killed_at, UTC).isoformat(), "restarted": restarted})
            while time.time() < start + 60 * minutes:
                time.sleep(max(0.0, min(SUPERVISE_S, start + 60 * minutes - time.time())))
                injector.supervise()
            say("run over: stopping the workers (their runs finish or are cancelled), then checking")
            for i in range(fleet.workers):
                fleet.stop(f"worker-{i}")
            time.sleep(5)
            runs = asyncio.run(_all_runs())
            loop_runs = [r for r in runs if r.deployment_id is not None and str(r.deployment_id) in loops]
            now = time.time()
    finally:
        store = str(root / "store")
        with contextlib.suppress(DaedalusError):
            down(root / "fleet")
    for f in faults:
        f["recovered_s"] = recovery_s(loop_runs, loops, f.pop("restarted"))
    job_names = [f"bench-{i:03d}" for i in range(jobs)]
    actions = check_actions(store, job_names)
    ok, versions, bad = check_checksums(store)
    stuck_runs = stuck(runs, loops, now)
    report = {
        "jobs": jobs, "minutes": minutes, "seed": seed, "speedup": speedup,
        "faults": faults, "unplanned_restarts": [{**u, "time": round(u["time"] - start, 1)}
                                                 for u in injector.unplanned],
        **{k: actions[k] for k in ("actions_received", "actions_executed", "actions_duplicated", "actions_lost")},
        "duplicated_ids": actions["duplicated_ids"], "lost_ids": actions["lost_ids"],
        "stuck_runs": len(stuck_runs), "stuck_run_ids": stuck_runs,
        "all_recovered_within_s": RECOVERY_LIMIT_S,
        "all_recovered": all(f["recovered_s"] is not None and f["recovered_s"] <= RECOVERY_LIMIT_S for f in faults),
        "checksums_ok": ok, "knowledge_versions_checked": versions, "checksum_failures": bad,
        "loop_runs": len(loop_runs),
        "loop_run_states": _count(r.state.name if r.state else "?" for r in loop_runs),
    }
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _count(names: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return out
