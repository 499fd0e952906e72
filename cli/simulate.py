"""`daedalus simulate` and `daedalus demo`: a policy on the embedded simulated job, scored and plotted."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from daedalus.cli import bench as cli_bench
from daedalus.cli.common import Seed, console, fail, progress
from daedalus.connectors import targets
from daedalus.connectors.store import Store
from daedalus.models import policies
from daedalus.models.errors import DaedalusError
from daedalus.models.knowledge import Knowledge
from daedalus.models.policies.base import Policy, Step
from daedalus.models.ports import Target
from daedalus.models.text import duration, number, percent

if TYPE_CHECKING:
    import numpy as np

    from daedalus.runtime.local_prefect import LocalPrefect


class FlowPolicy:
    """The Daedalus policy with every loop run through the real `mape-k` Prefect flow (the demo's path):
    the same loop body as the `daedalus` policy, plus the flow's store, dashboards and events."""

    name = "daedalus"

    def __init__(self, store_url: str, lake_url: str | None = None) -> None:
        self.store_url = store_url
        self.lake_url = lake_url  # where each loop appends its observation (the history a backtest replays)
        self.job: str | None = None

    def step(self, target: Target) -> Step:
        from daedalus.flows.mape_k import mape_k

        self.job = target.job
        targets.register(target)
        try:
            with _no_heartbeats():
                s = mape_k(job=target.job, store_url=self.store_url, lake_url=self.lake_url)
        finally:
            targets.unregister(target.job)
        return Step(s["kind"], s["current"], s["target"], s["loop_ms"], executed=s["action"] == "executed",
                    capacity=s["capacity_current"], forecast_wape=s["forecast_wape"])

    @property
    def knowledge(self) -> Knowledge | None:
        return None if self.job is None else Store(self.store_url).job(self.job).load().knowledge


@contextlib.contextmanager
def _no_heartbeats() -> Iterator[None]:
    """Flow-run heartbeats detect crashed workers; in one process on a simulated clock they only add a
    second-long thread join to every run, so they are off here. Entering a settings context costs a tenth of a
    demo loop (py-spy), so a session that already turned them off (`flow_session`) is not entered again."""
    from prefect.settings import PREFECT_RUNNER_HEARTBEAT_FREQUENCY, temporary_settings

    if PREFECT_RUNNER_HEARTBEAT_FREQUENCY.value() is None:
        yield
        return
    with temporary_settings(updates={PREFECT_RUNNER_HEARTBEAT_FREQUENCY: None}):
        yield


# Server services a one-process simulation has no use for: no schedules, workers, pauses or automations. The
# task-run recorder and the event persister stay, so the UI shows every run's tasks.
IDLE_SERVICES = ("SCHEDULER", "LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS", "REPOSSESSOR",
                 "CLEANUP_RECONCILER", "TRIGGERS")
SERVER_START_S = 180.0  # migrations of a fresh database take ~10 s on 2 idle cores, far more on busy ones


def _start_server(home: Path) -> LocalPrefect:
    """`prefect server start` on a loopback port with its own database in `home` (SQLite in WAL mode, the writes
    of task runs and events batched) and its output in `home/server.log`, not on the terminal."""
    from daedalus.runtime.local_prefect import LocalPrefect, server_settings
    from daedalus.runtime.ports import free_port

    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, **server_settings(), "PREFECT_HOME": str(home),
           **{f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in IDLE_SERVICES}}
    env.pop("PREFECT_API_URL", None)
    log = home / "server.log"
    with open(log, "ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port), "--no-ui"], env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return LocalPrefect(home, port, proc, log)


def _wait_until_healthy(server: LocalPrefect, timeout_s: float = SERVER_START_S) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.server.poll() is not None:
            raise DaedalusError(f"the Prefect server exited with {server.server.returncode}; see {server.log}")
        try:
            if httpx.get(f"{server.api_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise DaedalusError(f"the Prefect server did not answer within {timeout_s:.0f} s; see {server.log}")


@contextlib.contextmanager
def _quiet_console() -> Iterator[None]:
    """Prefect writes eight INFO lines per flow run to the terminal, which buried the progress bar under
    thousands of lines: its console handler is silenced for the duration, and its API handler sends the lines
    to the server instead (the UI shows them). As on the deployed loops, the task runs' "Finished" lines are
    left out (a sixth of the server's CPU per run, docs/operate.md); the flow's own lines stay."""
    import prefect  # noqa: F401 - importing Prefect configures its logging, which this then quiets
    from prefect.logging.handlers import PrefectConsoleHandler

    handlers = [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
    task_runs = logging.getLogger("prefect.task_runs")
    levels = [h.level for h in handlers], task_runs.level
    for h in handlers:
        h.setLevel(logging.CRITICAL + 1)
    task_runs.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for h, level in zip(handlers, levels[0], strict=True):
            h.setLevel(level)
        task_runs.setLevel(levels[1])


@contextlib.contextmanager
def flow_session(home: Path) -> Iterator[None]:
    """Where a simulation's flow runs go: a Prefect server of its own, its database kept in `home`.

    Ephemeral mode made each demo loop about three times slower (median 1.0 s against 0.35 s on the same busy
    machine; py-spy showed where): a server on the shared `~/.prefect` database with unbatched writes, a new API
    client and settings context per flow run, heartbeats; and its output, "database is locked" tracebacks
    included, went to the terminal. Here one client serves every run, and the server's imports and migrations
    overlap the flow's imports.
    """
    server = _start_server(home)
    try:
        from prefect.context import SyncClientContext
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker
        from prefect.settings import PREFECT_API_URL, PREFECT_RUNNER_HEARTBEAT_FREQUENCY, temporary_settings

        import daedalus.flows.mape_k  # noqa: F401 - the flow's imports (pmdarima, matplotlib) while the server starts

        _wait_until_healthy(server)
        with _quiet_console(), temporary_settings(updates={PREFECT_API_URL: server.api_url,
                                                            PREFECT_RUNNER_HEARTBEAT_FREQUENCY: None}):
            try:
                with SyncClientContext.get_or_create():
                    yield
            finally:  # the last runs' logs and task-run events reach the server before it stops
                APILogWorker.drain_all(timeout=30)
                EventsWorker.drain_all(timeout=30)
    finally:
        server.stop()


def _summary_table(report: dict[str, Any]) -> Table:
    """The figures of a run for people: shares as percentages, times as durations."""
    t = Table(title=f"{report['policy']} over {report['duration_s'] / 3600:.1f} simulated hours")
    t.add_column("figure")
    t.add_column("value", justify="right")
    lat, loop = report["latency_s"], report["loop_ms"]
    rows = [
        ("worker-seconds, share of static", percent(report["worker_seconds_pct_of_static"] / 100)),
        ("ratio to the lower bound", number(report["ratio_to_lower_bound"], digits=2)),
        ("latency p50 / p95 / max", " / ".join(duration(lat[q]) for q in ("p50", "p95", "max"))),
        (f"seconds over the {duration(report['slo_s'])} SLO", number(report["seconds_over_slo"])),
        ("rescales", number(report["rescales"])),
        ("downtime", duration(report["downtime_s"])),
    ]
    if report["capacity_error_pct"]["median"] is not None:
        rows.append(("capacity error median / p95", " / ".join(
            percent(report["capacity_error_pct"][q] / 100) for q in ("median", "p95"))))
    if report["forecast_wape"]["median"] is not None:
        rows.append(("forecast WAPE median", percent(report["forecast_wape"]["median"])))
    if loop["median"] is not None:
        rows.append(("loop cost: analyze + plan, median / p95", " / ".join(
            number(loop[q], "ms") for q in ("median", "p95"))))
    for row in rows:
        t.add_row(*row)
    return t


def run_policy(workload_values: Any, policy: str, max_scaleout: int, peak_utilization: float, seed: int,
               description: str, loop_overrides: dict[str, float] | None = None, store_url: str | None = None,
               prefect_home: Path | None = None, lake_url: str | None = None) -> tuple[Any, dict[str, Any]]:
    """Simulate `policy` on the workload (the paper's scenario) with a progress bar; returns the run and its score.

    With `store_url` and `prefect_home`, Daedalus runs every loop through the `mape-k` flow, keeping its
    knowledge in the store, on a Prefect server whose database is kept in `prefect_home`, and appending each
    loop's observation to the lake at `lake_url` (if given).
    """
    from daedalus.sim.report import score
    from daedalus.sim.runner import run
    from daedalus.sim.scenario import scenario

    sim_config, loop_config, workload = scenario(workload_values, max_scaleout, peak_utilization, seed,
                                                 loop_overrides)
    flows = store_url is not None and prefect_home is not None and policy == "daedalus"
    chosen: Policy = FlowPolicy(store_url, lake_url) if flows else policies.make(policy, max_scaleout, loop_config)
    with progress("simulated loops") as bar_progress:
        bar = bar_progress.add_task(f"{description}: starting Prefect" if flows else description, total=None)
        with flow_session(prefect_home) if flows else contextlib.nullcontext():
            bar_progress.update(bar, description=description)
            result = run(workload, chosen, sim_config, loop_config, seed=seed,
                         on_loop=lambda done, total: bar_progress.update(bar, completed=done, total=total))
    return result, score(result)


def generated(workload: Path, hours: float | None) -> np.ndarray | None:
    """The trace of a generated family's draw named like `heavy-tailed-1` (the benchmark's own, so a cell of `bench
    policies` is one `simulate` away; `hours`: its first hours), else None: a path."""
    from daedalus.bench import families

    named = families.parse(str(workload))
    if len(named) != 1 or str(workload) != families.name(*named[0]):
        return None
    values = families.generate(*named[0])
    return values if hours is None else values[:max(1, round(hours * 3600))]


def simulate(
    workload: Annotated[Path, typer.Option(help="Workload trace (second|count, timestamp|value or date,messages), "
                                                "or a generated family and its seed, as `bench policies` names it "
                                                "(heavy-tailed-1)")],
    json_out: Annotated[Path, typer.Option("--json", help="Where to write the report (JSON)")],
    policy: Annotated[str, typer.Option(help=f"One of {', '.join(policies.names())} (oracle: the offline optimum, "
                                             "knowing the whole run)")] = "daedalus",
    max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
    peak_utilization: Annotated[float, typer.Option(min=0.05, max=2.0)] = 0.9,
    seed: Seed = 0,
    hours: Annotated[float | None, typer.Option(min=0.1, help="Run length; multi-day traces are compressed")] = None,
    prefect: Annotated[bool, typer.Option(help="Run every loop through the Prefect flow")] = False,
    target_recovery: cli_bench.TargetRecovery = None,
    scale_in_interval: cli_bench.ScaleInInterval = None,
    max_rescales_per_hour: cli_bench.MaxRescalesPerHour = None,
    rescale_price: cli_bench.RescalePrice = None,
    forecast_z: cli_bench.ForecastZ = None,
    setting: Annotated[list[str] | None, typer.Option(
        "--set", metavar="NAME=VALUE", help="Daedalus: any numeric loop setting for this run, as `bench cv --grid` "
                                            "names it (repeatable: --set grace_breach_band=1 --set envelope_s=0)")
    ] = None,
) -> None:
    """One simulated run of a policy on a workload trace, scored against static and the lower bound."""
    from daedalus.bench.explain import trace_path
    from daedalus.sim.report import trace
    from daedalus.sim.workloads import load_workload

    if policy not in policies.names():
        fail(ValueError(f"no policy {policy!r}; known: {', '.join(policies.names())}"))
    try:
        overrides = cli_bench.loop_overrides(target_recovery, scale_in_interval, max_rescales_per_hour,
                                             rescale_price, forecast_z, setting or [])
        values = generated(workload, hours) if not workload.exists() else None
        values = load_workload(workload, hours=hours) if values is None else values
        with tempfile.TemporaryDirectory() as tmp:
            result, report = run_policy(values, policy, max_scaleout, peak_utilization, seed, workload.name,
                                   overrides, store_url=f"{tmp}/knowledge" if prefect else None,
                                   prefect_home=Path(tmp) / "prefect" if prefect else None)
    except DaedalusError as exc:
        fail(exc)
    report["workload"] = str(workload)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(report, indent=2))
    trace_path(json_out).write_text(json.dumps(trace(result)))  # what `daedalus explain OUT` reads
    console.print(_summary_table(report))


def demo(
    out: Annotated[Path, typer.Option(help="Output folder for report.json, report.png and the Prefect database "
                                           "of the demo's flow runs (prefect/)")] = Path("demo-output"),
    hours: Annotated[float, typer.Option(min=0.5)] = 6.0,
    seed: Seed = 0,
    engine: Annotated[str, typer.Option(help="sim (the embedded simulator) or flink (a real local Flink 2.3: "
                                             "docs/engines.md)")] = "sim",
    minutes: Annotated[float, typer.Option(min=3.0, help="--engine flink: the compressed trace's length")] = 12.0,
    bottleneck: Annotated[bool, typer.Option(help="--engine flink: the job gets a non-parallel stage that saturates "
                                                  "below the trace's peak: the loop sees its scale-out buy nothing "
                                                  "and rolls it back (docs/engines.md)")] = False,
) -> None:
    """The whole loop on the embedded simulator (a 6-hour sine workload through the Prefect flow), or with
    `--engine flink` on a real Flink job started on this machine."""
    if engine not in ("sim", "flink"):
        fail(DaedalusError(f"--engine: {engine!r} is not an engine the demo runs; known: flink, sim"))
    if bottleneck and engine != "flink":
        fail(DaedalusError("--bottleneck: only the Flink demo has a bottleneck stage; add --engine flink"))
    if engine == "flink":
        from daedalus.cli.flink import flink_demo

        flink_demo(out, minutes, seed, bottleneck)
        return
    from daedalus.sim.plot import plot_run
    from daedalus.sim.runner import JOB
    from daedalus.sim.workloads import sine_workload

    home = out / "prefect"
    if home.exists():
        if not (home / "server.log").exists():
            fail(DaedalusError(f"{home} exists and is not a previous demo's Prefect database: choose another --out"))
        shutil.rmtree(home)  # each demo's runs alone, and no schema of an older Prefect
    lake = out / "lake"
    if lake.exists():
        if any(not p.name.startswith("job=") for p in lake.iterdir()):
            fail(DaedalusError(f"{lake} exists and is not a previous demo's lake: choose another --out"))
        shutil.rmtree(lake)  # the history of this demo alone: a backtest of it replays one run
    console.print(f"Daedalus on a simulated job: {hours:g} h of a sine workload, one `mape-k` flow run per minute.")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result, report = run_policy(sine_workload(hours=hours), "daedalus", 12, 0.9, seed, "mape-k",
                                        store_url=f"{tmp}/knowledge", prefect_home=home, lake_url=str(lake))
    except DaedalusError as exc:
        fail(exc)
    out.mkdir(parents=True, exist_ok=True)
    report = {"job": JOB, **report}  # the job whose history is in the lake: `daedalus backtest JOB --lake OUT/lake`
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot_run(result, out / "report.png")
    console.print(_summary_table(report))
    console.print(f"Report: {out / 'report.json'} and {out / 'report.png'}; the loops' history: {lake} "
                  f"(`daedalus backtest {JOB} --lake {lake}`)", soft_wrap=True)
    console.print(f"The {len(result.loop_ms)} flow runs and their artifacts in the Prefect UI: "
                  f"PREFECT_HOME={home} prefect server start, then open http://127.0.0.1:4200", soft_wrap=True)
