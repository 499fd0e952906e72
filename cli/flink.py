"""`daedalus demo --engine flink` and `daedalus bench flink`: the whole loop on a real Flink 2.3 on this machine.

The demo starts a local session cluster (a JobManager and four one-slot TaskManagers, adaptive scheduler,
checkpoints every 5 s, the Prometheus reporter on ports chosen free) and a real Prometheus scraping it, measures
the job's saturation throughput at parallelism 1 with a short probe, and submits the trace job (runtime/flink_job)
with a compressed workload trace sized on that probe: low, a rise to `PEAK` × the probe, a plateau, a fall.
The `mape-k` flow (through Prefect, in-process) then runs every 15 s against the job, as built from a jobs-file
entry (engine `flink`, worker label `tm_id`, scale target `flink-rest`); every executed rescale starts the
`recovery-monitor` flow beside it. At the end the job is stopped with a savepoint (its sink commits everything),
the committed output is counted, and everything is stopped. `DIR/report.json` and `DIR/report.png` hold the run.

Time runs 4× faster than the paper's loop: 15 s loops instead of 60 s, and every duration of the loop (warm-up,
grace, recent-rescale window, scale-in interval, recovery target, forecast horizon and step) divided by 4.
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
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
import yaml

from daedalus.bench import flink as bench_flink
from daedalus.cli.common import console, fail
from daedalus.connectors import targets
from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.store import Store
from daedalus.models.config import LoopConfig
from daedalus.models.errors import DaedalusError
from daedalus.models.forecast import Forecaster
from daedalus.models.knowledge import Knowledge
from daedalus.models.recovery.backlog import backlog_recovery_time
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
from daedalus.runtime.local_prefect import LocalPrefect, start_server

JOB = "daedalus-demo"  # the jobs-file entry and the Flink job's name
TOPIC = "daedalus-demo-events"
SPEEDUP = 4.0
LOOP_S = 60.0 / SPEEDUP
WORK_US = 1000  # CPU time per record: a worker with a core of its own processes about 1,000 records/s
DEFAULT_MINUTES = 12.0  # the trace; with the set-up and the saturation measurements the demo takes ~17 min
MAX_LEVEL = 8  # TaskManagers (1 GB each) `daedalus bench flink --levels` may start
MIN_SATURATED_S = 15  # seconds of saturation in the run that make a measurement of its own
LEARN_S = 360.0  # paper seconds (90 s at 4×) in which the loop decides but does not act: capacity needs data
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
                 "max_recovery_s", "approval_timeout", "rescale_interval", "verify_after_s", "ceiling_s")
    names = {f.name for f in dataclasses.fields(LoopConfig)}
    changes: dict[str, Any] = {k: getattr(base, k) / speedup for k in durations
                               if k in names and getattr(base, k) is not None}
    changes["scale_in_interval"] = base.scale_in_s / speedup  # None in the defaults: the planner's own
    # Worker-seconds on the loop's clock: a switch is weighed against what it saves over a compressed horizon.
    changes["rescale_price"] = base.rescale_price / speedup
    changes.update(min_scaleout=1, max_scaleout=max_scaleout, checkpoint_interval=5.0, warmup_s=15.0)
    return dataclasses.replace(base, **changes)


def compressed_knowledge(cfg: LoopConfig, speedup: float = SPEEDUP) -> Knowledge:
    """Fresh knowledge whose forecaster works on the compressed clock (at 4×: horizon 225 s in 8 s steps)."""
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
        "selector": {"job_name": bench_flink.flink_label(JOB)}, "source": {"topic": TOPIC},
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


def run_demo(out: Path, minutes: float = DEFAULT_MINUTES, taskmanagers: int = 4, seed: int = 0,
             workdir: Path | None = None, log: Callable[[str], Any] | None = None, speedup: float = SPEEDUP,
             peak: float = PEAK, probe_s: float = 45.0, flood_s: float = 35.0, bottleneck: bool = False,
             end: float = END) -> dict[str, Any]:
    """The whole loop on a real Flink job; writes `out/report.json` and `out/report.png`, returns the report.

    `bottleneck` gives the job a non-parallel stage that saturates below the trace's peak, at `BOTTLENECK_SHARE` of
    what the probe measured one worker processing: a scale-out buys nothing, and the loop is to see that and roll it
    back.

    `speedup` compresses the loop's clock (the test runs at 8× to see a scale-in within minutes); `probe_s` and
    `flood_s` are how long the saturation measurements before and after the trace take at each parallelism (`flood_s`
    0: none after it, the estimates then judged against the run's own saturation only); `peak` and `end` are the
    trace's plateau and last level in the probed worker's capacities."""
    loop_s = 60.0 / speedup
    from daedalus.flows.mape_k import mape_k
    from daedalus.runtime.prometheus import local_prometheus

    say = log or console.print
    wall0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="daedalus-flink-demo-")))
        workdir.mkdir(parents=True, exist_ok=True)
        store_url = str(workdir / "knowledge")
        exporter = TraceExporter(None, TOPIC)
        stack.callback(exporter.close)
        say(f"Starting Flink {FLINK_VERSION} (a JobManager and {taskmanagers} one-slot TaskManagers, adaptive "
            "scheduler), a Prometheus scraping them every second, and a Prefect server.")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        with ThreadPoolExecutor(1) as pool:  # the Prefect server starts while the cluster does
            starting = pool.submit(start_server, workdir / "prefect", None, 240.0)
            try:
                flink = stack.enter_context(LocalFlink(workdir / "cluster", taskmanagers=taskmanagers,
                                                       max_taskmanagers=taskmanagers, prometheus=local_prometheus,
                                                       extra_targets=[exporter.target]))
                started_s = time.time() - wall0
                say(f"Cluster up after {started_s:.0f} s ({flink.rss_bytes() / 2**30:.2f} GiB resident). Measuring "
                    "one worker's saturation throughput …")
                probes = {p: [m["throughput_median"]] for p, m in
                          bench_flink.flood(flink, exporter, workdir, "daedalus-probe", [1], WORK_US,
                                            seconds=probe_s, skip_s=probe_s / 3).items()}
            finally:
                server = starting.result()
                stack.callback(server.stop)
        stack.enter_context(prefect_session(server))
        capacity_1 = probes[1][0]
        bottleneck_us, base = 0, capacity_1
        if bottleneck:  # the probe measured `work` alone: it is no saturation of the job with its stage
            base, peak, probes = BOTTLENECK_SHARE * capacity_1, BOTTLENECK_PEAK, {}
            bottleneck_us = bottleneck_cost(base)
            say(f"One worker's `work` processes about {capacity_1:,.0f} records/s now: the stage "
                f"`{BOTTLENECK_TASK}` waits {bottleneck_us:,} µs a record, at most {1e6 / bottleneck_us:,.0f}/s.")
        rates = demo_trace(minutes, base, seed, peak, end)
        say(f"The job processes about {base:,.0f} records/s at one worker now; the trace runs "
            f"{len(rates) / 60:.0f} min between {min(rates):,} and {max(rates):,} records/s.")
        cfg = compressed_config(taskmanagers, speedup)
        document = jobs_document(flink, taskmanagers)
        (out / "jobs.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        target = targets.build_target(parse_jobs(document, str(out / "jobs.yaml")).job(JOB), store_url)
        target.config = cfg
        trace = Trace.of(rates, int(time.time() * 1000) + 5000)
        knowledge = compressed_knowledge(cfg, speedup)
        knowledge.last_observation_end = trace.start_ms / 1000  # the first loop reads from the job's start only
        Store(store_url).job(JOB).save(knowledge)
        exporter.trace = trace
        job = TraceJob(JOB, trace.write(workdir / "trace.txt"), trace.start_ms, workdir / "output", work_us=WORK_US,
                       bottleneck_us=bottleneck_us)
        job_id = flink.submit(job, parallelism=1)
        flink.wait_running(job_id, 1)
        monitors = _Monitors(store_url, until=trace.end_ms / 1000 + 60.0)
        loops: list[dict[str, Any]] = []
        peak_rss = flink.rss_bytes()
        targets.register(target)
        stack.callback(targets.unregister, JOB)
        next_at = time.time() + loop_s
        learning_until = trace.start_ms / 1000 + LEARN_S / speedup
        target.config = dataclasses.replace(cfg, mode="dry-run")
        while next_at < trace.end_ms / 1000 + loop_s / 2:
            if target.config.mode == "dry-run" and next_at >= learning_until:
                target.config = cfg  # learned enough: the loop acts from now on
            time.sleep(max(0.0, next_at - time.time()))
            began = time.time()
            try:
                summary = mape_k(job=JOB, store_url=store_url)
            except Exception as exc:  # a failed run is a finding, not the end of the demo
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
        say("Trace over: draining the backlog, then stopping the job with a savepoint …")
        assert flink.prometheus_url is not None
        drained = _drain(flink.prometheus_url, trace.end_ms / 1000, 180.0)
        # The job runs on until every recovery monitor has ended: one for a rescale in the trace's last loops would
        # otherwise see seconds of metrics and give up (a run alone: a scale-in at 296 s of 300, 9 s of metrics).
        monitors.join(60.0)
        savepoint = flink.stop_with_savepoint(job_id)
        lines, distinct = committed_ids(workdir / "output")
        s = bench_flink.sample(flink.prometheus_url, JOB, TOPIC, trace.start_ms / 1000, time.time())
        estimated = sorted({int(it["current"]) for it in loops if it.get("kind") not in ("hold", "error")
                            and it.get("current") and it.get("capacity_current")})
        say(f"{lines:,} records committed of {trace.total:,} generated ({distinct:,} distinct).")
        if flood_s > 0:
            say(f"Measuring the saturation throughput at parallelism {', '.join(map(str, estimated or [1]))} …")
            for p, m in bench_flink.flood(flink, exporter, workdir, "daedalus-saturation", estimated or [1], WORK_US,
                                          seconds=flood_s, skip_s=flood_s / 3, bottleneck_us=bottleneck_us).items():
                probes.setdefault(p, []).append(m["throughput_median"])
        log_file = flink.jobmanager.log_file() if flink.jobmanager else None
        found = outages(log_file) if log_file else []
        if log_file is not None:
            (out / "jobmanager.log").write_text(log_file.read_text(errors="replace"))
        knowledge = Store(store_url).job(JOB).load().knowledge
        peak_rss = max(peak_rss, flink.rss_bytes())
        report = build_report(trace, loops, s, found, monitors, knowledge, lines, distinct, probes, peak_rss,
                              started_s, drained, savepoint)
        report.update(speedup=speedup, loop_interval_s=loop_s, peak=peak, end=end,
                      probe_capacity_1=round(capacity_1, 1), bottleneck_us=bottleneck_us,
                      bottleneck_rate=round(1e6 / bottleneck_us, 1) if bottleneck_us else None,
                      **verification_report(loops, knowledge, found, cfg.ceiling_s))
    report["wall_s"] = round(time.time() - wall0, 1)
    report["jvms_left"] = _jvms_left(flink)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot(s, loops, report, out / "report.png")
    return report


def verification_report(loops: list[dict[str, Any]], knowledge: Knowledge | None, found: list[Any],
                        ceiling_s: float) -> dict[str, Any]:
    """report.json's verification keys: `rollbacks` and `bottleneck` (the contract), and `rollback_checks`."""
    return {"rollbacks": rollbacks(loops), "bottleneck": named_bottleneck(loops, knowledge),
            "rollback_checks": rollback_checks(loops, found, ceiling_s)}


def _is_rollback(it: dict[str, Any]) -> bool:
    """An executed decision that undoes the previous rescale: its loop judged that one ineffective, and the decision
    is verification's (its reasons say it rolled back or forward), not the planner's."""
    return (it.get("verdict") == "ineffective" and it.get("action") == "executed" and it["current"] != it["target"]
            and any(r.startswith(("rolled back", "rolled forward")) for r in it.get("reasons") or ()))


def rollbacks(loops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """report.json's `rollbacks` (the contract): the rescales the loop undid, `{"from", "to", "time" (epoch seconds,
    when the ledger says it was applied), "reason"}` (the reasons give the evidence)."""
    return [{"from": int(it["current"]), "to": int(it["target"]), "time": float(it.get("action_time", it["time"])),
             "reason": "; ".join(it["reasons"])} for it in loops if _is_rollback(it)]


def rollback_checks(loops: list[dict[str, Any]], found: list[Any], ceiling_s: float) -> list[dict[str, Any]]:
    """For each rollback of a scale-out: the rescale it undid, how long after that rescale's restart (the job RUNNING
    again, from the JobManager's log) it came, and the scale-outs executed above its ceiling within the ceiling's
    time (there must be none)."""
    executed = [it for it in loops if it.get("action") == "executed"]
    out = []
    for back in rollbacks(loops):
        if back["to"] > back["from"]:
            continue  # a scale-in rolled forward sets no ceiling
        undone = max((it for it in executed if it.get("action_time", it["time"]) < back["time"]),
                     key=lambda it: it.get("action_time", it["time"]), default=None)
        if undone is None:
            continue
        at = float(undone.get("action_time", undone["time"]))
        outage = next((o for o in found if o.down >= at - 1.0), None)
        restarted = None if outage is None else (outage.restarted or outage.up)
        above = [{"from": it["current"], "to": it["target"], "time": it.get("action_time", it["time"])}
                 for it in executed if back["time"] < it.get("action_time", it["time"]) < back["time"] + ceiling_s
                 and it["target"] > back["to"]]
        out.append({"undone": {"from": int(undone["current"]), "to": int(undone["target"]), "time": at},
                    "restarted": restarted, "after_restart_s": None if restarted is None
                    else round(back["time"] - restarted, 1), "ceiling": back["to"],
                    "ceiling_until": back["time"] + ceiling_s, "scale_outs_above_ceiling": above})
    return out


def named_bottleneck(loops: list[dict[str, Any]], knowledge: Knowledge | None) -> str | None:
    """The Flink task that kept the job from scaling: the ceiling's stage, else the stage most often seen saturated
    that cannot scale out; None when none was."""
    if knowledge is not None and knowledge.ceiling is not None and knowledge.ceiling.stage:
        return knowledge.ceiling.stage
    seen = [it["bottleneck"] for it in loops if it.get("bottleneck") and it.get("bottleneck_scalable") is False]
    return max(set(seen), key=seen.count) if seen else None


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

    q = f'sum(flink_taskmanager_job_task_operator_pendingRecords{{job_name="{bench_flink.flink_label(JOB)}"}})'
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


def build_report(trace: Trace, loops: list[dict[str, Any]], s: bench_flink.Sampled, found: list[Any],
                 monitors: _Monitors, knowledge: Knowledge | None, lines: int, distinct: int,
                 probes: dict[int, list[float]], peak_rss: int, started_s: float, drained: bool, savepoint: str
                 ) -> dict[str, Any]:
    """report.json: what happened, what it cost, and how right the loop's estimates were.

    The capacity estimate of each loop is compared with the throughput at saturation at the same parallelism:
    measured in the run itself where the job saturated there for at least `MIN_SATURATED_S` (the machine is shared,
    so its capacity moves with its neighbours' load: the closest measurement in time is the fairest), else by the
    flood jobs (a backlog far above capacity) at the start and the end. Both comparisons are reported.
    """
    flood = {p: float(np.median(v)) for p, v in sorted(probes.items())}
    in_run = bench_flink.saturation_throughput(s)
    saturation = {**flood, **{p: v["throughput"] for p, v in in_run.items() if v["seconds"] >= MIN_SATURATED_S}}
    errors, per_p, against_flood = [], {}, []
    for it in loops:
        p, c = it.get("current"), it.get("capacity_current")
        if it.get("kind") in ("hold", "error") or p is None or c is None or not math.isfinite(c) or c <= 0:
            continue
        if p in saturation:
            e = 100.0 * abs(c - saturation[p]) / saturation[p]
            errors.append(e)
            per_p.setdefault(p, []).append(e)
        if p in flood:
            against_flood.append(100.0 * abs(c - flood[p]) / flood[p])
    estimates = knowledge.capacity.observed if knowledge is not None else {}
    rescales = []
    level_at: float | None = None  # the first rescale of a recovery still unfinished at the next one
    for meta, _, result in monitors.runs:
        backlog = _backlog_recovery(s, meta["time"], level_at)
        level_at = (level_at or meta["time"]) if backlog is None or meta["time"] + backlog > _next_rescale(
            monitors, meta["time"]) else None
        o = next((o for o in found if o.down >= meta["time"] - 1.0), None)
        entry = knowledge.entry(meta["decision"]) if knowledge is not None else None
        ledger = entry.observed_recovery_s if entry is not None else None
        rescales.append({
            **meta, "downtime_s": result.get("downtime_s"),
            # The ledger's, set by whichever of the loop and the recovery monitor noticed the recovery first; else the
            # monitor's, when it posted it after the loop's last run.
            "observed_recovery_s": _rounded(ledger if ledger is not None else result.get("observed_recovery_s")),
            "backlog_recovery_s": _rounded(backlog),
            "predicted_recovery_s": _rounded(entry.predicted_recovery_s if entry is not None else None),
            "monitor": result.get("reason") or result.get("error"),
            "jobmanager_log": None if o is None else {
                "cancel_after_s": round(o.down - meta["time"], 2), "down_s": round(o.seconds, 2),
                "job_running_after_s": None if o.restarted is None else round(o.restarted - meta["time"], 2),
                "all_running_after_s": round(o.up - meta["time"], 2)}})
    pct = (lambda a, q: float(np.percentile(a, q)) if len(a) else None)  # noqa: E731
    lag = s.lag[np.isfinite(s.lag)]
    return {
        "engine": "flink", "flink_version": FLINK_VERSION,
        "duration_s": len(trace.rates), "setup_s": round(started_s, 1),
        "work_us_per_record": WORK_US,
        "rescales": sum(1 for it in loops if it.get("action") == "executed"),
        "records_generated": trace.total, "records_committed": lines, "records_distinct": distinct,
        "duplicates": lines - distinct, "lost": trace.total - distinct, "drained_before_stop": drained,
        "savepoint": savepoint,
        "max_lag_records": float(lag.max()) if lag.size else None,
        "downtime_s": rescales,
        "capacity_error_pct": {"median": pct(errors, 50), "p95": pct(errors, 95), "loops": len(errors),
                               "by_parallelism": {str(p): {"median": pct(v, 50), "loops": len(v)}
                                                  for p, v in sorted(per_p.items())}},
        # Where the job ran saturated in the run, the loop had seen its capacity there: the estimate it made is
        # judged against that measurement. Elsewhere the estimate is an extrapolation from a busy share below 1.
        "capacity_error_where_saturated_pct": {str(p): {"median": pct(per_p[p], 50), "loops": len(per_p[p]),
                                                        "last_estimate": round(estimates[p], 1) if p in estimates
                                                        else None, "saturation": round(in_run[p]["throughput"], 1)}
                                               for p in sorted(per_p) if p in in_run
                                               and in_run[p]["seconds"] >= MIN_SATURATED_S},
        "capacity_error_vs_flood_pct": {"median": pct(against_flood, 50), "loops": len(against_flood)},
        "saturation_throughput": {str(p): round(v, 1) for p, v in sorted(saturation.items())},
        "saturation_flood": {str(p): [round(x, 1) for x in v] for p, v in sorted(probes.items())},
        "saturated_in_run": {str(p): v for p, v in in_run.items()},
        "capacity_estimates": {str(p): round(c, 1) for p, c in sorted(estimates.items())},
        # What a record cost each worker at each parallelism, below saturation and saturated: where the first is
        # higher, records per busy second from a quiet period read the capacity low by the ratio (docs/engines.md).
        "record_cost_ms": {str(p): v for p, v in bench_flink.record_cost(s).items()},
        "peak_rss_bytes": peak_rss,
        "decisions": [{"time": it["time"], "elapsed_s": it["elapsed_s"], "kind": it["kind"],
                       "current": it.get("current"), "target": it.get("target"), "action": it.get("action"),
                       "capacity": it.get("capacity_current"), "reasons": it.get("reasons"),
                       "verdict": it.get("verdict"), "bottleneck": it.get("bottleneck"),
                       "verification": _verification(it)} for it in loops],
    }


def _verification(it: dict[str, Any]) -> str | None:
    """The loop's verdict on the last executed rescale, with its evidence (capacity before, observed and predicted, the
    busy share per stage), as the loop noted it; None in a loop that judged nothing."""
    if it.get("verdict") is None:
        return None
    return next((n for n in it.get("notes") or () if n.startswith("rescale ") and it["verdict"] in n), None)


def _backlog_recovery(s: bench_flink.Sampled, rescale_time: float, level_at: float | None) -> float | None:
    """The independent measure: seconds from the rescale until the source's pending records (the trace's own
    due − emitted count, per second) are back to their level before it, or before the first rescale of a recovery
    still unfinished at this one (`level_at`)."""
    try:
        return backlog_recovery_time(s.ts, s.lag, s.workload, rescale_time, level_at=level_at)
    except ValueError:  # no backlog sample before the rescale
        return None


def _next_rescale(monitors: _Monitors, after: float) -> float:
    return min((meta["time"] for meta, _, _ in monitors.runs if meta["time"] > after), default=math.inf)


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else round(seconds, 1)


def plot(s: bench_flink.Sampled, loops: list[dict[str, Any]], report: dict[str, Any], path: Path) -> Path:
    """report.png: workload, throughput and capacity estimates; scale-out; backlog."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from daedalus.sim.plot import save

    t0 = s.ts[0] if s.ts.size else 0.0
    minutes = (s.ts - t0) / 60
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True, constrained_layout=True)
    ax1.plot(minutes, s.workload, lw=0.8, label="workload (trace)")
    ax1.plot(minutes, s.throughput, lw=0.6, alpha=0.8, label="throughput")
    caps = [(it["time"], it.get("capacity_current")) for it in loops  # as report.json judges them: holds act on none
            if it.get("capacity_current") and it.get("kind") not in ("hold", "error")]
    if caps:
        ax1.plot([(t - t0) / 60 for t, _ in caps], [c for _, c in caps], "o", ms=3, label="capacity estimate")
    span = float(minutes[-1]) if minutes.size else 1.0
    for i, (p, v) in enumerate(report["saturation_throughput"].items()):
        ax1.axhline(v, lw=0.6, ls=":", color="grey")
        ax1.annotate(f"saturation at {p}", (i * span / 6, v), fontsize=7, color="grey")  # apart: levels can be close
    ax1.set_ylabel("records/s")
    ax1.legend(loc="upper right", fontsize=8)
    n = report["rescales"]
    ax1.set_title(f"Daedalus on Flink {FLINK_VERSION}: {n} rescale{'' if n == 1 else 's'}, "
                  f"{report['records_committed']:,} of {report['records_generated']:,} records committed once")
    ax2.step(minutes, s.scaleout, where="post", lw=1.2, label="parallelism (metrics)")
    for it in loops:
        if it.get("action") == "executed":
            ax2.axvline((it["time"] - t0) / 60, color="red", lw=0.6, ls="--")
    ax2.set_ylabel("workers")
    ax2.legend(loc="upper right", fontsize=8)
    ax3.plot(minutes, s.lag, lw=0.8)
    ax3.set_ylabel("pending records")
    ax3.set_xlabel("minutes")
    return save(fig, path, dpi=110)


def flink_demo(out: Path, minutes: float = DEFAULT_MINUTES, seed: int = 0, bottleneck: bool = False) -> None:
    """`daedalus demo --engine flink [--bottleneck]`: run, print the summary, and fail loudly on lost or duplicated
    records."""
    try:
        report = run_demo(out, minutes, seed=seed, bottleneck=bottleneck)
    except DaedalusError as exc:
        fail(exc)
    console.print(json.dumps({k: report[k] for k in ("rescales", "records_generated", "records_committed",
                                                     "duplicates", "max_lag_records", "capacity_error_pct",
                                                     "saturation_throughput", "rollbacks", "bottleneck",
                                                     "wall_s")}, indent=2))
    console.print(f"Wrote {out / 'report.json'} and {out / 'report.png'}")


def parse_levels(text: str) -> tuple[int, ...]:
    """`--levels 1,2,4` → (1, 2, 4): whole numbers from 1 to 8 (a TaskManager each on this machine), rising."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DaedalusError(f"--levels: {text!r} is not a comma-separated list of parallelisms, e.g. 1,2,4") from None
    if not levels or any(not 1 <= p <= MAX_LEVEL for p in levels) or list(levels) != sorted(set(levels)):
        raise DaedalusError(f"--levels: {text!r} must rise, each from 1 to {MAX_LEVEL}, e.g. 1,2,4")
    return levels


def bench(
    out: Annotated[Path | None, typer.Option(help="Write the figures here (JSON)")] = None,
    work_us: Annotated[int, typer.Option(min=50, help="CPU microseconds per record")] = WORK_US,
    reactive: Annotated[bool, typer.Option(help="Also measure reactive mode's rescales")] = True,
    levels: Annotated[str, typer.Option(help="Parallelisms to measure, comma-separated and rising (one "
                                             "TaskManager each; utilisation is measured at 1 and 2)")] = "1,2,3,4",
) -> None:
    """Calibrate the simulator against a real Flink here: saturation at 1…4 workers, utilisation against
    throughput, rescale downtime per method."""
    try:
        results = bench_flink.calibrate(levels=parse_levels(levels), work_us=work_us, reactive=reactive,
                                        log=console.print)
    except DaedalusError as exc:
        fail(exc)
    from rich.table import Table

    table = Table(title=f"Flink {FLINK_VERSION} on this machine ({work_us} µs of CPU per record)")
    for column in ("measurement", "value", "compared", "detail"):
        table.add_column(column)
    for row in bench_flink.summary_rows(results):
        table.add_row(*row)
    console.print(table)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))
