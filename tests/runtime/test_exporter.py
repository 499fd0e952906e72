"""The loop's metrics for Prometheus: a store the real loop wrote, scraped by a real Prometheus, read back through
its HTTP API; the Grafana dashboard asks only for what is exported; SIGTERM stops the process cleanly."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import yaml

from daedalus.connectors.store import STATUS, Store
from daedalus.models.config import LoopConfig, Mode
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, Iteration, iterate
from daedalus.models.loop.messages import ControlMessage
from daedalus.models.ports import Target
from daedalus.runtime.exporter import STATES, MetricsServer, StoreCollector, reason_label
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.tasks.dashboards import status_record

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deployments" / "grafana" / "daedalus.json"
GOOD = ("wordcount", "ads", "steady")
AGE = {"wordcount": 30.0, "ads": 5.0, "steady": 400.0}  # seconds since each job's last run, as written
SCRAPE_S = 1.0


def _run(job: str, mode: Mode, workload: np.ndarray, done: Callable[[Knowledge], bool], loops: int = 60,
         last: list[ControlMessage] | None = None) -> tuple[Iteration, Knowledge]:
    """The real loop on a simulated job, a minute per iteration, until `done`; then one more, given `last`."""
    sim = Simulator(workload, SimConfig(max_scaleout=8, downtime_noise_s=0.0), seed=3, initial_scaleout=2)
    sj = SimulatedJob(sim)
    cfg = LoopConfig(max_scaleout=8, mode=mode)
    target, k = Target(job, sj, sj, sj, cfg), Knowledge.new(job, cfg)
    for _ in range(loops):
        if done(k):
            break
        sim.advance(60)
        iterate(target, k, PLAIN)
    sim.advance(60)
    return iterate(target, k, PLAIN, messages=last), k


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three jobs the loop ran (an executed scale-out, a pending proposal, a paused and quarantined job) and one
    job folder whose files are garbage."""
    url = str(tmp_path_factory.mktemp("exporter") / "store")
    ramp = np.concatenate([np.full(1200, 100_000.0), np.linspace(100_000, 400_000, 2400)])
    executed = _run("wordcount", "auto", ramp, lambda k: any(e.state == "executed" for e in k.ledger)
                    and k.watch is None)
    proposed = _run("ads", "approve", ramp, lambda k: k.pending is not None)
    t = SimConfig().start + 1500
    held = _run("steady", "auto", np.full(3600, 100_000.0), lambda k: k.loops >= 24, last=[
        ControlMessage("m1", "steady", "pause", t, {"operator": "sre", "reason": "maintenance"}),
        ControlMessage("m2", "steady", "quarantine", t, {"reason": "throughput above the workload"})])
    wall = time.time()
    for (it, k), mode in ((executed, "auto"), (proposed, "approve"), (held, "auto")):
        Store(url).job(k.job).save(k)
        Store(url).job(k.job).write_json(STATUS, status_record(it, k, mode, None, wall - AGE[k.job]))
    broken = Path(url) / "broken"
    broken.mkdir()
    (broken / STATUS).write_text('{"job": "broken", "current": ')
    (broken / "0000000001.knowledge").write_bytes(b"not a knowledge file\n")
    return url


def _query(prom: str, q: str) -> list[dict[str, Any]]:
    body = requests.get(f"{prom}/api/v1/query", params={"query": q}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def _by_job(prom: str, q: str) -> dict[str, float]:
    return {r["metric"]["daedalus_job"]: float(r["value"][1]) for r in _query(prom, q)}


def _exported_names() -> set[str]:
    """The names of the series the collector can yield, as Prometheus stores them."""
    suffix = {"counter": "_total", "info": "_info"}
    return {f.name + suffix.get(f.type, "") for f in StoreCollector("unused").describe()}


@pytest.mark.slow
def test_prometheus_scrapes_what_the_loop_left(store: str, tmp_path: Path) -> None:
    status = {job: Store(store).job(job).status() for job in GOOD}
    knowledge = {job: Store(store).job(job).load().knowledge for job in GOOD}
    assert Counter(e.state for e in knowledge["wordcount"].ledger)["executed"] == 1  # the loop acted
    assert status["ads"]["pending"] is not None and status["steady"]["kind"] == "hold"

    with MetricsServer(store, port=0) as server, \
            local_prometheus(tmp_path / "prometheus", [f"127.0.0.1:{server.port}"], f"{SCRAPE_S:g}s") as prom:
        deadline = time.monotonic() + 30
        while len(_by_job(prom, "daedalus_exporter_job_readable")) < 4:
            assert time.monotonic() < deadline, "Prometheus has not scraped the exporter"
            time.sleep(0.2)

        for job in GOOD:
            for metric, key in (("daedalus_current_scaleout", "current"), ("daedalus_recommended_scaleout",
                                "recommended"), ("daedalus_capacity_tuples_per_second", "capacity"),
                                ("daedalus_workload_tuples_per_second", "workload"),
                                ("daedalus_forecast_peak_tuples_per_second", "forecast_peak")):
                assert _by_job(prom, metric)[job] == pytest.approx(status[job][key], rel=1e-12), (job, metric)
        [scaled] = [e for e in knowledge["wordcount"].ledger if e.state == "executed"]  # the ramp's scale-out
        assert scaled.current == 2 < scaled.target == status["wordcount"]["current"]

        actions = _query(prom, "daedalus_actions_total")
        for job in GOOD:
            exported = {r["metric"]["state"]: float(r["value"][1]) for r in actions
                        if r["metric"]["daedalus_job"] == job}
            ledger = Counter(e.state for e in knowledge[job].ledger)
            assert exported == {s: float(ledger[s]) for s in STATES}, job
        assert _by_job(prom, 'daedalus_actions_total{state="executed"}')["wordcount"] == 1
        assert _by_job(prom, 'daedalus_actions_total{state="proposed"}')["ads"] == 1

        entry = knowledge["wordcount"].ledger[-1]
        assert entry.predicted_recovery_s is not None and entry.observed_recovery_s is not None
        assert _by_job(prom, "daedalus_predicted_recovery_seconds") == {
            "wordcount": entry.predicted_recovery_s, "ads": knowledge["ads"].ledger[-1].predicted_recovery_s}
        assert _by_job(prom, "daedalus_observed_recovery_seconds") == {"wordcount": entry.observed_recovery_s}

        assert _by_job(prom, "daedalus_proposal_pending") == {"wordcount": 0, "ads": 1, "steady": 0}
        assert _by_job(prom, "daedalus_paused") == {"wordcount": 0, "ads": 0, "steady": 1}
        assert _by_job(prom, "daedalus_quarantined") == {"wordcount": 0, "ads": 0, "steady": 1}
        assert _by_job(prom, "daedalus_forecast_wape_ratio") == {
            job: pytest.approx(status[job]["wape"]) for job in GOOD if status[job]["wape"] is not None}

        info = _query(prom, "daedalus_decision_info")
        assert sorted(r["metric"]["daedalus_job"] for r in info) == sorted(GOOD)  # one series per job
        for r in info:
            s = status[r["metric"]["daedalus_job"]]
            assert float(r["value"][1]) == 1
            assert (r["metric"]["kind"], r["metric"]["reason"]) == (s["kind"], reason_label(s["reasons"]))
            assert 0 < len(r["metric"]["reason"]) <= 100

        asked = time.time()
        ages = _by_job(prom, "daedalus_last_run_age_seconds")
        scraped_at = _by_job(prom, "timestamp(daedalus_last_run_age_seconds)")
        for job in GOOD:
            assert ages[job] == pytest.approx(scraped_at[job] - status[job]["wall"], abs=0.5)
            assert ages[job] >= AGE[job] - 0.5
            assert 0 <= (asked - status[job]["wall"]) - ages[job] <= SCRAPE_S + 3

        everything = _query(prom, '{__name__=~"daedalus_.+"}')
        assert all(math.isfinite(float(r["value"][1])) for r in everything)
        # A bottleneck and a ceiling are exported only while a job has one (rescale verification); these jobs have none.
        assert {r["metric"]["__name__"] for r in everything} == _exported_names() - {"daedalus_bottleneck_info",
                                                                                        "daedalus_ceiling_scaleout"}
        assert _by_job(prom, "daedalus_exporter_job_readable") == {"wordcount": 1, "ads": 1, "steady": 1, "broken": 0}
        errors = _by_job(prom, "daedalus_exporter_read_errors_total")
        assert errors["broken"] >= 1 and all(errors[job] == 0 for job in GOOD)
        assert not _query(prom, '{daedalus_job="broken", __name__!~"daedalus_exporter_.+"}')
        assert [float(r["value"][1]) for r in _query(prom, "up")] == [1.0]  # no scrape failed on the broken job


def test_a_jobs_file_restricts_the_jobs(store: str, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"defaults": {"engine": "sim", "scale_target": {"kind": "sim", "name": "sim"}},
                                    "jobs": [{"name": "wordcount"}, {"name": "not-run-yet"}]}))
    with MetricsServer(store, port=0, jobs_file=jobs) as server:
        text = requests.get(server.url, timeout=5).text
    jobs_seen = set(re.findall(r'daedalus_job="([^"]+)"', text))
    assert jobs_seen == {"wordcount", "not-run-yet"}
    assert 'daedalus_exporter_job_readable{daedalus_job="not-run-yet"} 1.0' in text
    assert 'daedalus_current_scaleout{daedalus_job="not-run-yet"}' not in text


def test_a_manual_scales_hold_is_exported(tmp_path: Path) -> None:
    # The operator's second hour: status and ledger said "held at 6 until …", the exporter had no series for it.
    url = str(tmp_path / "store")
    base = {"wall": time.time(), "current": 6, "recommended": 6, "kind": "hold", "reasons": ["held at 6"]}
    Store(url).job("orders").write_json(STATUS, {**base, "job": "orders", "override": {
        "scaleout": 6, "operator": "carol", "until": time.time() + 1800, "decision": "scale-1"}})
    Store(url).job("clicks").write_json(STATUS, {**base, "job": "clicks", "override": None})
    with MetricsServer(url, port=0) as server:
        text = requests.get(server.url, timeout=5).text
    assert 'daedalus_held{daedalus_job="orders"} 1.0' in text and 'daedalus_held{daedalus_job="clicks"} 0.0' in text


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset"}


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label matchers, ranges, grouping
    labels, functions (a name before `(`) and keywords are gone."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", expr)) - PROMQL_WORDS


def test_metric_names_are_read_from_promql() -> None:
    assert _metric_names('sum by (daedalus_job, state) (increase(daedalus_actions_total{daedalus_job=~"$job"}'
                         "[$__rate_interval])) > 0") == {"daedalus_actions_total"}
    assert _metric_names("up == 0 and on(instance) node_load1") == {"up", "node_load1"}
    assert _metric_names("label_values(daedalus_current_scaleout, daedalus_job)") == {
        "daedalus_current_scaleout", "daedalus_job"}  # not PromQL: variables are checked apart


def test_the_dashboard_asks_only_for_exported_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["schemaVersion"] >= 39
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    exported = _exported_names()
    for expr in exprs:
        names = _metric_names(expr)
        assert names and names <= exported, (expr, names - exported)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    job_query = re.fullmatch(r"label_values\((\w+), (\w+)\)", variables["job"]["query"]["query"])
    assert job_query is not None and job_query[1] in exported and job_query[2] == "daedalus_job"
    panels = {p["title"]: p for p in board["panels"]}
    age = panels["Last loop run"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "red", "value": 180} in age
    assert all(p.get("datasource", {}).get("uid") == "${datasource}" for p in board["panels"] if p["type"] != "row")
    shown = set().union(*(_metric_names(e) for e in exprs))
    assert {"daedalus_current_scaleout", "daedalus_recommended_scaleout", "daedalus_decision_info",
            "daedalus_actions_total", "daedalus_proposal_pending", "daedalus_paused", "daedalus_quarantined",
            "daedalus_last_run_age_seconds", "daedalus_predicted_recovery_seconds"} <= shown


def test_the_exporter_does_not_import_prefect() -> None:
    code = "import sys, daedalus.runtime.exporter; sys.exit(any(m.split('.')[0] == 'prefect' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


CLI = "import typer; from daedalus.cli.exporter import exporter; typer.run(exporter)"


@pytest.mark.parametrize(("command", "sig"), [
    (["-m", "daedalus.runtime.exporter"], signal.SIGTERM),
    (["-m", "daedalus.runtime.exporter"], signal.SIGINT),
    (["-c", CLI], signal.SIGTERM),
], ids=["module-sigterm", "module-sigint", "cli-sigterm"])
def test_a_signal_stops_the_exporter_cleanly(store: str, command: list[str], sig: signal.Signals) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen([sys.executable, *command, "--store", store, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the exporter did not start"
            try:
                text = requests.get(url, timeout=2).text
                break
            except requests.ConnectionError:
                time.sleep(0.2)
        assert "daedalus_exporter_store_up 1.0" in text
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert url in out + err  # the one line with the URL
    with pytest.raises(ProcessLookupError):  # nothing left in its process group
        os.killpg(proc.pid, 0)
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=2)
