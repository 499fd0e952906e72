"""The Flink demo's run (`daedalus demo --engine flink`): the whole loop on a real Flink 2.3 on this machine.

The demo starts a local session cluster (a JobManager and four one-slot TaskManagers, adaptive scheduler,
checkpoints every 5 s, the Prometheus reporter on ports chosen free) and a real Prometheus scraping it, measures
the job's saturation throughput at parallelism 1 with a short probe, and submits the trace job (runtime/flink_job)
with a compressed workload trace sized on that probe: low, a rise to `PEAK` × the probe, a plateau, a fall.
The `mape-k` flow (through Prefect, in-process) then runs every 7.5 s against the job, as built from a jobs-file
entry (engine `flink`, worker label `tm_id`, scale target `flink-rest`); every executed rescale starts the
`recovery-monitor` flow beside it. At the end the job is stopped with a savepoint (its sink commits everything),
the committed output is counted, and everything is stopped. `DIR/report.json` and `DIR/report.png` hold the run.

Time runs 8× faster than the paper's loop: 7.5 s loops instead of 60 s, and every duration of the loop (warm-up,
grace, recent-rescale window, scale-in interval, recovery target, envelope, forecast horizon and step) divided by 8;
the rescale budget per hour multiplied by 8. The forecaster's minute means stay wall-clock minutes, so the envelope
(225 s) looks back over the last 3 of them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from daedalus.connectors import targets
from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.store import Store
from daedalus.models.config import LoopConfig
from daedalus.models.forecast import Forecaster
from daedalus.models.knowledge import Knowledge
from daedalus.models.ports import Target
from daedalus.runtime.flink import (
    BOTTLENECK_TASK,
    FLINK_VERSION,
    LocalFlink,
    Trace,
    TraceExporter,
    TraceJob,
    bottleneck_cost,
    committed_ids,
    outages,
)
from daedalus.runtime.flink_demo_report import build_report, plot, verification_report
from daedalus.runtime.flink_sampling import flink_label, flood, sample
from daedalus.runtime.local_prefect import LocalPrefect, start_server

JOB = "daedalus-demo"  # the jobs-file entry and the Flink job's name


TOPIC = "daedalus-demo-events"


# The loop's clock runs 8× faster than the wall's (7.5 s loops): the planner holds the load's envelope for
# `envelope_s` (30 paper minutes) after a burst before it scales in, so the trace must span about 80 paper minutes to
# show both a scale-out and the scale-in after it: 10 real minutes at 8×.
SPEEDUP = 8.0


LOOP_S = 60.0 / SPEEDUP


WORK_US = 1000  # CPU time per record: a worker with a core of its own processes about 1,000 records/s


DEFAULT_MINUTES = 10.0  # the trace; with the set-up and the saturation measurements the demo takes ~14 min


LEARN_S = 360.0  # paper seconds (45 s at 8×) in which the loop decides but does not act: capacity needs data


PEAK = 2.5  # the plateau, in probed single-worker capacities: the probe runs against neighbours at their busiest


END = 0.4  # the level after the fall, in the same units: within one worker once the backlog has drained


# `--bottleneck`: the non-parallel stage `aggregate` (runtime/flink_job) takes at most `BOTTLENECK_SHARE` × what one
# worker's `work` processes, as the probe measures it on this machine at start (the stage waits 1e6 / that rate µs a
# record). Below one worker: the stage saturates first at every parallelism, one worker's busiest task is the stage
# (the loop reads its capacity there), and no scale-out raises what the job processes; a stage between one and two
# workers' rate would make the first scale-out partly effective only (and a loop that jumps to the maximum, as
# the default demo's did 1 → 4, would never try one that buys nothing). Half a worker leaves `work` room when the
# machine gets busier than at the probe. The trace then peaks at `BOTTLENECK_PEAK` × the stage's rate.
BOTTLENECK_SHARE = 0.5


BOTTLENECK_PEAK = 1.5


def compressed_config(max_scaleout: int, speedup: float = SPEEDUP) -> LoopConfig:
    """The loop's settings with every duration divided by `speedup` (those this version of LoopConfig has)."""
    base = LoopConfig()
    # The loop's own rhythm is compressed; what the machine does is not: downtime estimates, the checkpoint interval
    # and the latency objective stay physical seconds.
    durations = ("target_recovery_time", "recent_rescale_s", "grace_s", "scale_in_interval", "loop_interval_s",
                 "max_recovery_s", "approval_timeout", "rescale_interval", "verify_after_s", "ceiling", "envelope_s")
    names = {f.name for f in dataclasses.fields(LoopConfig)}
    changes: dict[str, Any] = {k: getattr(base, k) / speedup for k in durations
                               if k in names and getattr(base, k) is not None}
    changes["scale_in_interval"] = base.scale_in_s / speedup  # None in the defaults: the planner's own
    # Worker-seconds on the loop's clock: a switch is weighed against what it saves over a compressed horizon.
    changes["rescale_price"] = base.rescale_price / speedup
    # The budget is per hour of the loop's clock: an hour passes `speedup` times faster here.
    changes["max_rescales_per_hour"] = base.max_rescales_per_hour * speedup
    changes.update(min_scaleout=1, max_scaleout=max_scaleout, checkpoint_interval=5.0, warmup_s=15.0)
    return dataclasses.replace(base, **changes)


def compressed_knowledge(cfg: LoopConfig, speedup: float = SPEEDUP) -> Knowledge:
    """Fresh knowledge whose forecaster works on the compressed clock (at 8×: horizon 112 s in 4 s steps)."""
    k = Knowledge.new(JOB, cfg)
    k.forecaster = Forecaster(horizon_s=round(900 / speedup), step_s=max(round(30 / speedup), 1), min_fit_steps=40,
                              fallback_window_s=round(300 / speedup), max_d=cfg.forecast_max_d)
    return k


def demo_trace(minutes: float, capacity_1: float, seed: int = 0, peak: float = PEAK, end: float = END) -> list[int]:
    """Records per second: low (45 % of one worker's capacity), a rise to `peak` × it, a plateau, a fall to `end`."""
    n = max(int(minutes * 60), 120)
    t = np.arange(n) / n
    low, high, last = 0.45 * capacity_1, peak * capacity_1, end * capacity_1
    shape = np.select([t < 0.15, t < 0.27, t < 0.47, t < 0.55],
                      [np.full(n, low), low + (high - low) * (t - 0.15) / 0.12, np.full(n, high),
                       high + (last - high) * (t - 0.47) / 0.08], np.full(n, last))
    noise = 1 + 0.04 * np.random.default_rng(seed).standard_normal(n)
    return [max(0, round(v)) for v in shape * noise]


def jobs_document(flink: LocalFlink, max_scaleout: int) -> dict[str, Any]:
    """The demo job's jobs-file entry: what a user writes for a standalone Flink."""
    return {"jobs": [{
        "name": JOB, "engine": "flink",
        # 3 s steps: rates over 12 s windows. The TaskManagers answer a scrape late when busy, and over 4 s that
        # jitter alone put the job's throughput above its arrivals (a hold for inconsistent metrics) every few loops.
        "prometheus": {"url": flink.prometheus_url, "step": "3s", "timeout": "5s", "deadline": "10s"},
        "selector": {"job_name": flink_label(JOB)}, "source": {"topic": TOPIC},
        "worker_label": "tm_id",
        "scale_target": {"kind": "flink-rest", "name": JOB, "path": flink.rest_url, "ready_timeout": "90s"},
        "scaleout": {"min": 1, "max": max_scaleout}, "checkpoint_interval": "5s",
    }]}


@contextlib.contextmanager
def prefect_session(server: LocalPrefect) -> Iterator[str]:
    """Every flow run of this thread (and the recovery monitors it starts) sent to `server`, a Prefect server of the
    demo's own: ephemeral mode would start one per process on a port of its choosing, which a busy machine or a
    neighbour's server can time out or take. Yields its API URL."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_RUNNER_HEARTBEAT_FREQUENCY, temporary_settings

    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):  # the progress lines tell the story
        logging.getLogger(name).setLevel(logging.WARNING)
    with temporary_settings(updates={PREFECT_API_URL: server.api_url, PREFECT_RUNNER_HEARTBEAT_FREQUENCY: None}):
        try:
            yield server.api_url
        finally:  # the last runs' logs and events reach the server before it stops
            APILogWorker.drain_all(timeout=30)
            EventsWorker.drain_all(timeout=30)


class _Monitors:
    """Recovery-monitor flow runs beside the loop, one per executed rescale; each waits as long as the job's
    compressed settings say (`flows.background.recovery_wait_s`), and at most until `until` (epoch seconds); the
    demo stops the job only after they have ended."""

    def __init__(self, store_url: str, until: float) -> None:
        self.store_url, self.until = store_url, until
        self.runs: list[tuple[dict[str, Any], threading.Thread, dict[str, Any]]] = []

    def start(self, it: dict[str, Any], rescale_time: float) -> None:
        from daedalus.flows.background import recovery_monitor

        result: dict[str, Any] = {}
        meta = {"decision": it["decision"], "from": it["current"], "to": it["target"], "time": rescale_time}

        def run() -> None:
            try:
                result.update(recovery_monitor(
                    job=JOB, decision=it["decision"], rescale_time=rescale_time, from_scaleout=it["current"],
                    to_scaleout=it["target"], predicted_recovery_s=it.get("predicted_recovery_s"),
                    store_url=self.store_url, timeout_s=max(self.until - rescale_time, 0.0), poll_s=3.0))
            except Exception as exc:  # reported, never fatal to the demo
                result["error"] = f"{type(exc).__name__}: {exc}"

        context = contextvars.copy_context()  # the Prefect settings of the loop (its server, no heartbeats)
        thread = threading.Thread(target=context.run, args=(run,), name=f"recovery-{it['decision']}", daemon=True)
        thread.start()
        self.runs.append((meta, thread, result))

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for _, thread, _ in self.runs:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


@dataclass(frozen=True)
class DemoPlan:
    """What one demo run is: the trace (its length, shape and seed), the cluster, the loop's clock and the saturation
    measurements around it."""

    minutes: float = DEFAULT_MINUTES  # the trace
    taskmanagers: int = 4  # the cluster's one-slot TaskManagers: the largest scale-out
    seed: int = 0
    speedup: float = SPEEDUP  # compresses the loop's clock (the test runs at 8× to see a scale-in within minutes)
    # How long the planner holds a burst's level before it scales in, in paper seconds (None: the loop's own, 30
    # minutes, which needs a 10-minute trace at 8×; the end-to-end test holds 15 minutes and runs a 7-minute trace).
    envelope_s: float | None = None
    peak: float = PEAK  # the trace's plateau and last level, in the probed worker's capacities
    end: float = END
    # How long the saturation measurements before and after the trace take at each parallelism (`flood_s` 0: none
    # after it, the estimates then judged against the run's own saturation only).
    probe_s: float = 45.0
    flood_s: float = 35.0
    # A non-parallel stage that saturates below the trace's peak, at `BOTTLENECK_SHARE` of what the probe measured one
    # worker processing: a scale-out buys nothing, and the loop is to see that and roll it back.
    bottleneck: bool = False


def run_demo(out: Path, plan: DemoPlan = DemoPlan(), workdir: Path | None = None,
             log: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """The whole loop on a real Flink job, as `plan` describes it; writes `out/report.json` and `out/report.png`,
    returns the report."""
    from daedalus.runtime.prometheus import local_prometheus

    loop_s, peak = 60.0 / plan.speedup, plan.peak

    say = log or print
    wall0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="daedalus-flink-demo-")))
        workdir.mkdir(parents=True, exist_ok=True)
        store_url = str(workdir / "knowledge")
        exporter = TraceExporter(None, TOPIC)
        stack.callback(exporter.close)
        say(f"Starting Flink {FLINK_VERSION} (a JobManager and {plan.taskmanagers} one-slot TaskManagers, adaptive "
            "scheduler), a Prometheus scraping them every second, and a Prefect server.")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with ThreadPoolExecutor(1) as pool:  # the Prefect server starts while the cluster does
            starting = pool.submit(start_server, workdir / "prefect", None, 240.0)
            try:
                flink = stack.enter_context(LocalFlink(workdir / "cluster", taskmanagers=plan.taskmanagers,
                                                       max_taskmanagers=plan.taskmanagers, prometheus=local_prometheus,
                                                       extra_targets=[exporter.target]))
                started_s = time.time() - wall0
                say(f"Cluster up after {started_s:.0f} s ({flink.rss_bytes() / 2**30:.2f} GiB resident). Measuring "
                    "one worker's saturation throughput …")
                probes = {p: [m["throughput_median"]] for p, m in
                          flood(flink, exporter, workdir, "daedalus-probe", [1], WORK_US,
                                seconds=plan.probe_s, skip_s=plan.probe_s / 3).items()}
            finally:
                server = starting.result()
                stack.callback(server.stop)
        stack.enter_context(prefect_session(server))
        capacity_1 = probes[1][0]
        bottleneck_us, base = 0, capacity_1
        if plan.bottleneck:  # the probe measured `work` alone: it is no saturation of the job with its stage
            base, peak, probes = BOTTLENECK_SHARE * capacity_1, BOTTLENECK_PEAK, {}
            bottleneck_us = bottleneck_cost(base)
            say(f"One worker's `work` processes about {capacity_1:,.0f} records/s now: the stage "
                f"`{BOTTLENECK_TASK}` waits {bottleneck_us:,} µs a record, at most {1e6 / bottleneck_us:,.0f}/s.")
        rates = demo_trace(plan.minutes, base, plan.seed, peak, plan.end)
        say(f"The job processes about {base:,.0f} records/s at one worker now; the trace runs "
            f"{len(rates) / 60:.0f} min between {min(rates):,} and {max(rates):,} records/s.")
        cfg = compressed_config(plan.taskmanagers, plan.speedup)
        if plan.envelope_s is not None:
            cfg = dataclasses.replace(cfg, envelope_s=plan.envelope_s / plan.speedup)
        document = jobs_document(flink, plan.taskmanagers)
        (out / "jobs.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        target = targets.build_target(parse_jobs(document, str(out / "jobs.yaml")).job(JOB), store_url)
        target.config = cfg
        trace = Trace.of(rates, int(time.time() * 1000) + 5000)
        knowledge = compressed_knowledge(cfg, plan.speedup)
        knowledge.last_observation_end = trace.start_ms / 1000  # the first loop reads from the job's start only
        Store(store_url).job(JOB).save(knowledge)
        exporter.trace = trace
        job = TraceJob(JOB, trace.write(workdir / "trace.txt"), trace.start_ms, workdir / "output", work_us=WORK_US,
                       bottleneck_us=bottleneck_us)
        job_id = flink.submit(job, parallelism=1)
        flink.wait_running(job_id, 1)
        monitors = _Monitors(store_url, until=trace.end_ms / 1000 + 60.0)
        targets.register(target)
        stack.callback(targets.unregister, JOB)
        loops, peak_rss = _loop(target, cfg, store_url, trace, flink, monitors, say, loop_s,
                                learning_until=trace.start_ms / 1000 + LEARN_S / plan.speedup)
        say("Trace over: draining the backlog, then stopping the job with a savepoint …")
        assert flink.prometheus_url is not None
        drained = _drain(flink.prometheus_url, trace.end_ms / 1000, 180.0)
        # The job runs on until every recovery monitor has ended: one for a rescale in the trace's last loops would
        # otherwise see seconds of metrics and give up (a run alone: a scale-in at 296 s of 300, 9 s of metrics).
        monitors.join(60.0)
        savepoint = flink.stop_with_savepoint(job_id)
        lines, distinct = committed_ids(workdir / "output")
        s = sample(flink.prometheus_url, JOB, TOPIC, trace.start_ms / 1000, time.time())
        estimated = sorted({int(it["current"]) for it in loops if it.get("kind") not in ("hold", "error")
                            and it.get("current") and it.get("capacity_current")})
        say(f"{lines:,} records committed of {trace.total:,} generated ({distinct:,} distinct).")
        if plan.flood_s > 0:
            say(f"Measuring the saturation throughput at parallelism {', '.join(map(str, estimated or [1]))} …")
            for p, m in flood(flink, exporter, workdir, "daedalus-saturation", estimated or [1], WORK_US,
                              seconds=plan.flood_s, skip_s=plan.flood_s / 3, bottleneck_us=bottleneck_us).items():
                probes.setdefault(p, []).append(m["throughput_median"])
        log_file = flink.jobmanager.log_file() if flink.jobmanager else None
        found = outages(log_file) if log_file else []
        if log_file is not None:
            (out / "jobmanager.log").write_text(log_file.read_text(errors="replace"))
        knowledge = Store(store_url).job(JOB).load().knowledge
        peak_rss = max(peak_rss, flink.rss_bytes())
        report = build_report(trace, loops, s, found, monitors.runs, knowledge, lines, distinct, probes, peak_rss,
                              started_s, drained, savepoint)
        report.update(speedup=plan.speedup, loop_interval_s=loop_s, envelope_s=cfg.envelope_s * plan.speedup,
                      peak=peak, end=plan.end, probe_capacity_1=round(capacity_1, 1), bottleneck_us=bottleneck_us,
                      bottleneck_rate=round(1e6 / bottleneck_us, 1) if bottleneck_us else None,
                      **verification_report(loops, knowledge, found, cfg.ceiling))
    report["wall_s"] = round(time.time() - wall0, 1)
    report["jvms_left"] = _jvms_left(flink)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot(s, loops, report, out / "report.png")
    return report


def _loop(target: Target, cfg: LoopConfig, store_url: str, trace: Trace, flink: LocalFlink, monitors: _Monitors,
          say: Callable[[str], Any], loop_s: float, learning_until: float) -> tuple[list[dict[str, Any]], int]:
    """The `mape-k` flow every `loop_s` until the trace ends, in dry-run until `learning_until` (capacity needs
    data), a recovery monitor beside each executed rescale; the loops' summaries and the cluster's peak memory."""
    from daedalus.flows.mape_k import mape_k

    loops: list[dict[str, Any]] = []
    peak_rss = flink.rss_bytes()
    next_at = time.time() + loop_s
    target.config = dataclasses.replace(cfg, mode="dry-run")
    while next_at < trace.end_ms / 1000 + loop_s / 2:
        if target.config.mode == "dry-run" and next_at >= learning_until:
            target.config = cfg  # learned enough: the loop acts from now on
        time.sleep(max(0.0, next_at - time.time()))
        began = time.time()
        try:
            summary = mape_k(job=JOB, store_url=store_url)
        except Exception as exc:  # a failed run is a finding, not the plan.end of the demo
            summary = {"kind": "error", "current": None, "target": None, "action": None,
                       "reasons": [f"{type(exc).__name__}: {exc}"]}
        summary = {**summary, "time": began, "elapsed_s": round(began - trace.start_ms / 1000, 1)}
        loops.append(summary)
        peak_rss = max(peak_rss, flink.rss_bytes())
        if summary.get("action") == "executed":
            summary["action_time"] = _action_time(store_url, summary["decision"], began)
            monitors.start(summary, summary["action_time"])
        say(_line(summary))
        next_at += loop_s * max(1, math.ceil((time.time() - next_at) / loop_s + 1e-9))
    return loops, peak_rss



def _action_time(store_url: str, decision: str, fallback: float) -> float:
    """When the ledger says the rescale was applied: the recovery is followed from there."""
    k = Store(store_url).job(JOB).load().knowledge
    entry = k.entry(decision) if k else None
    return float(k.last_rescale) if (k is not None and entry is not None and k.last_rescale) else fallback


def _drain(url: str, trace_end_s: float, timeout_s: float) -> bool:
    """Wait until the trace is over and the job's backlog is empty: then everything due has been emitted. (The last
    loop may end seconds before the trace does; a backlog of 0 then only means the source keeps up, and a job
    stopped there would leave the trace's last records unemitted in its savepoint.)"""
    import requests

    q = f'sum(flink_taskmanager_job_task_operator_pendingRecords{{job_name="{flink_label(JOB)}"}})'
    time.sleep(max(0.0, trace_end_s + 1.0 - time.time()))
    deadline = time.monotonic() + timeout_s
    calm = 0
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException, KeyError, IndexError, ValueError):
            result = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=5).json()["data"]["result"]
            calm = calm + 1 if result and float(result[0]["value"][1]) == 0 else 0
            if calm >= 3:
                return True
        time.sleep(1.0)
    return False


def _jvms_left(flink: LocalFlink) -> list[int]:
    """JVMs of this cluster still alive after the stop (there must be none)."""
    procs = [flink.jobmanager, *flink.taskmanagers.values()]
    return [p.pid for p in procs if p is not None and p.alive()]


def _line(s: dict[str, Any]) -> str:
    reasons = "; ".join(s.get("reasons") or [])
    head = f"[{s['elapsed_s']:>6.0f} s] {s['kind']:<9} {s.get('current')} → {s.get('target')}"
    if s.get("action"):
        head += f" ({s['action']})"
    return f"{head}  {reasons[:150]}"
