"""`daedalus simulate` and `daedalus demo`: a policy on the embedded simulated job, scored and plotted."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from daedalus.cli import bench as cli_bench
from daedalus.cli.common import console, fail, progress
from daedalus.connectors import targets
from daedalus.connectors.store import KnowledgeStore
from daedalus.models import policies
from daedalus.models.errors import DaedalusError
from daedalus.models.knowledge import Knowledge
from daedalus.models.policies.base import Policy, Step
from daedalus.models.ports import Target


class FlowPolicy:
    """The Daedalus policy with every loop run through the real `mape-k` Prefect flow (the demo's path):
    the same loop body as the `daedalus` policy, plus the flow's store, dashboards and events."""

    name = "daedalus"

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self.job: str | None = None

    def step(self, target: Target) -> Step:
        from daedalus.flows.mape_k import mape_k

        self.job = target.job
        targets.register(target)
        try:
            with _in_process_prefect():
                s = mape_k(job=target.job, store_url=self.store_url)
        finally:
            targets.unregister(target.job)
        return Step(s["kind"], s["current"], s["target"], s["loop_ms"], executed=s["action"] == "executed",
                    capacity=s["capacity_current"], forecast_wape=s["forecast_wape"])

    @property
    def knowledge(self) -> Knowledge | None:
        return None if self.job is None else KnowledgeStore(self.store_url).load(self.job).knowledge


@contextlib.contextmanager
def _in_process_prefect() -> Iterator[None]:
    """Flow-run heartbeats detect crashed workers; in one process on a simulated clock they only add a
    second-long thread join to every run, so they are off here."""
    from prefect.settings import PREFECT_RUNNER_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_RUNNER_HEARTBEAT_FREQUENCY: None}):
        yield


def _summary_table(report: dict[str, Any]) -> Table:
    t = Table(title=f"{report['policy']} over {report['duration_s'] / 3600:.1f} simulated hours")
    t.add_column("figure")
    t.add_column("value", justify="right")
    lat, loop = report["latency_s"], report["loop_ms"]
    rows = [
        ("worker-seconds (% of static)", f"{report['worker_seconds_pct_of_static']:.1f} %"),
        ("ratio to the lower bound", f"{report['ratio_to_lower_bound']:.2f}"),
        ("latency p50 / p95 / max (s)", f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['max']:.1f}"),
        (f"seconds over the {report['slo_s']:.0f} s SLO", str(report["seconds_over_slo"])),
        ("rescales", str(report["rescales"])),
        ("downtime (s)", str(report["downtime_s"])),
    ]
    if report["capacity_error_pct"]["median"] is not None:
        rows.append(("capacity error median / p95", "{:.1f} % / {:.1f} %".format(
            report["capacity_error_pct"]["median"], report["capacity_error_pct"]["p95"])))
    if report["forecast_wape"]["median"] is not None:
        rows.append(("forecast WAPE median", f"{100 * report['forecast_wape']['median']:.1f} %"))
    if loop["median"] is not None:
        rows.append(("loop cost: analyze + plan, median / p95 (ms)", f"{loop['median']:.1f} / {loop['p95']:.1f}"))
    for row in rows:
        t.add_row(*row)
    return t


def run_policy(workload_values: Any, policy: str, max_scaleout: int, peak_utilization: float, seed: int,
               description: str, loop_overrides: dict[str, float] | None = None, store_url: str | None = None
               ) -> tuple[Any, dict[str, Any]]:
    """Simulate `policy` on the workload (the paper's scenario) with a progress bar; returns the run and its score.

    With `store_url`, Daedalus runs every loop through the `mape-k` flow, keeping its knowledge there.
    """
    from daedalus.sim.report import score
    from daedalus.sim.runner import run
    from daedalus.sim.scenario import scenario

    sim_config, loop_config, workload = scenario(workload_values, max_scaleout, peak_utilization, seed,
                                                 loop_overrides)
    chosen: Policy = FlowPolicy(store_url) if store_url is not None and policy == "daedalus" else \
        policies.make(policy, max_scaleout, loop_config)
    with progress("simulated loops") as bar_progress:
        bar = bar_progress.add_task(description, total=None)
        result = run(workload, chosen, sim_config, loop_config, seed=seed,
                     on_loop=lambda done, total: bar_progress.update(bar, completed=done, total=total))
    return result, score(result)


def simulate(
    workload: Annotated[Path, typer.Option(help="Workload trace (second|count, timestamp|value or date,messages)")],
    json_out: Annotated[Path, typer.Option("--json", help="Where to write the report (JSON)")],
    policy: Annotated[str, typer.Option(help="static, hpa-80, hpa-85, ds2 or daedalus")] = "daedalus",
    max_scaleout: Annotated[int, typer.Option(min=1, max=128)] = 12,
    peak_utilization: Annotated[float, typer.Option(min=0.05, max=2.0)] = 0.9,
    seed: Annotated[int, typer.Option()] = 0,
    hours: Annotated[float | None, typer.Option(min=0.1, help="Run length; multi-day traces are compressed")] = None,
    prefect: Annotated[bool, typer.Option(help="Run every loop through the Prefect flow")] = False,
    target_recovery: cli_bench.TargetRecovery = None,
    scale_in_interval: cli_bench.ScaleInInterval = None,
) -> None:
    """One simulated run of a policy on a workload trace, scored against static and the lower bound."""
    from daedalus.sim.workloads import load_workload

    if policy not in policies.names():
        fail(ValueError(f"no policy {policy!r}; known: {', '.join(policies.names())}"))
    try:
        values = load_workload(workload, hours=hours)
        with tempfile.TemporaryDirectory() as tmp:
            _, report = run_policy(values, policy, max_scaleout, peak_utilization, seed, workload.name,
                                   cli_bench.loop_overrides(target_recovery, scale_in_interval),
                                   store_url=f"{tmp}/knowledge" if prefect else None)
    except DaedalusError as exc:
        fail(exc)
    report["workload"] = str(workload)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(report, indent=2))
    console.print(_summary_table(report))


def demo(
    out: Annotated[Path, typer.Option(help="Output folder for report.json and report.png")] = Path("demo-output"),
    hours: Annotated[float, typer.Option(min=0.5)] = 6.0,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """The whole loop on the embedded simulator: a 6-hour sine workload through the Prefect flow."""
    from daedalus.sim.plot import plot_run
    from daedalus.sim.workloads import sine_workload

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):  # the progress bar tells the story
        logging.getLogger(name).setLevel(logging.WARNING)
    console.print("Starting Prefect (ephemeral mode) and the simulated job: 12 workers at most, "
                  "sine workload with two periods, peak at 90 % of the true capacity of 12 workers.")
    with tempfile.TemporaryDirectory() as tmp:
        result, report = run_policy(sine_workload(hours=hours), "daedalus", 12, 0.9, seed, "mape-k",
                                    store_url=f"{tmp}/knowledge")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot_run(result, out / "report.png")
    console.print(_summary_table(report))
    console.print(f"Wrote {out / 'report.json'} and {out / 'report.png'}")


