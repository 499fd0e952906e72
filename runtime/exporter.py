"""The loop's own metrics for Prometheus, read from the knowledge store at each scrape.

SREs watch Grafana, not only Prefect: this small process publishes what each job's last loop run left in the
store (`<store>/<job>/status.json` and the newest knowledge version) as Prometheus series. It never runs the
loop and never imports Prefect; a custom collector reads the files when Prometheus scrapes, so the series
cannot drift from the store, and an exporter restart loses nothing but its own error counter.

Every series carries the label `daedalus_job`, not `job`: `job` is the label Prometheus gives each scrape
target, and an exporter reporting on behalf of many jobs would otherwise need `honor_labels: true` in every
scrape config (without it Prometheus renames the label to `exported_job` and the dashboard goes blank). A
plain scrape config works with `daedalus_job`, as kube-state-metrics' `job_name` does for the same clash.

Series (gauges unless named `_total`; one series per job unless said otherwise):
- `daedalus_current_scaleout`, `daedalus_recommended_scaleout`;
- `daedalus_capacity_tuples_per_second` (at the current scale-out), `daedalus_workload_tuples_per_second`
  (average over the last loop), `daedalus_forecast_peak_tuples_per_second` (over the forecast's horizon, 30 min);
- `daedalus_forecast_wape_ratio`: WAPE of the previous forecast, omitted before the first comparison;
- `daedalus_predicted_recovery_seconds`, `daedalus_observed_recovery_seconds`: of the newest scaling decision in
  the ledger, each omitted while unknown (never Inf or NaN);
- `daedalus_decision_info{kind, reason}` = 1: the last decision's kind and its first reason (`REASON_CHARS` at
  most); the reason changes with the numbers in it, so keep the info series out of long-range recording rules;
- `daedalus_actions_total{state}`: the ledger's entries by their state now, every known state present (0 if
  none). Entries in a passing state (proposed, approved, executing; a failed action that is retried) move on to
  another, and the knowledge keeps the newest 1000 entries: a count that falls reads as a counter reset;
- `daedalus_proposal_pending`, `daedalus_paused`, `daedalus_quarantined`, `daedalus_held` (an operator's manual
  scale holds the job: `manual_hold`): 0 or 1;
- `daedalus_last_run_age_seconds`: wall-clock seconds since the last loop run wrote its status;
- rescale verification (models/capacity/verification.py): `daedalus_rescale_verdict_info{verdict, rescale}` = 1 and
  `daedalus_rescale_capacity_ratio` (observed over predicted capacity) of the newest judged rescale;
  `daedalus_bottleneck_info{stage, scalable}` = 1, the stage last seen limiting the job; `daedalus_ceiling_scaleout`
  while an ineffective scale-out's ceiling holds; each omitted while there is none;
- the exporter's own: `daedalus_exporter_store_up` (the store exists and could be listed: 0 for a folder that is not
  there, which is what a wrong `--store` or `DAEDALUS_STORE` looks like), `daedalus_exporter_job_readable`
  (0 when a job's files could not be read this scrape), `daedalus_exporter_read_errors_total` (scrapes that
  could not read the job, since the exporter started), `daedalus_exporter_scrape_duration_seconds`.

A job whose files are unreadable gets `daedalus_exporter_job_readable` 0 and its error counter, never a failed
scrape; the other jobs still export. A job of the jobs file that has not run yet exports only `…_readable` 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, get_args

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from daedalus.connectors.clock import WALL
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import DEFAULT_URL, STATUS, JobStore, Store
from daedalus.models.errors import DaedalusError, KnowledgeError
from daedalus.models.knowledge import SCHEMA_VERSION
from daedalus.models.types import ActionState

log = logging.getLogger(__name__)

JOB = "daedalus_job"
DEFAULT_PORT = 9464
REASON_CHARS = 100  # a label value is shown in tables and legends: the first words say enough
STATES: tuple[str, ...] = get_args(ActionState)

Sample = tuple[str, list[str], Any]  # (family key, label values, value: a float, or the info's labels)


def _families() -> dict[str, Metric]:
    """Fresh, empty metric families: filled by `collect`, returned empty by `describe`."""
    def gauge(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[JOB])

    return {
        "current": gauge("daedalus_current_scaleout", "Scale-out of the job at its last loop run"),
        "recommended": gauge("daedalus_recommended_scaleout", "Scale-out the last loop run decided on"),
        "capacity": gauge("daedalus_capacity_tuples_per_second", "Modelled capacity at the current scale-out"),
        "workload": gauge("daedalus_workload_tuples_per_second", "Average workload over the last loop"),
        "forecast_peak": gauge("daedalus_forecast_peak_tuples_per_second", "Peak of the 30-minute forecast"),
        "wape": gauge("daedalus_forecast_wape_ratio", "WAPE of the previous forecast against what arrived"),
        "predicted": gauge("daedalus_predicted_recovery_seconds", "Predicted recovery time of the newest decision"),
        "observed": gauge("daedalus_observed_recovery_seconds", "Observed recovery time of the newest decision"),
        "decision": InfoMetricFamily("daedalus_decision", "Kind and first reason of the last decision", labels=[JOB]),
        "actions": CounterMetricFamily("daedalus_actions", "Ledger entries by state", labels=[JOB, "state"]),
        "pending": gauge("daedalus_proposal_pending", "1 while a proposal waits for an operator"),
        "paused": gauge("daedalus_paused", "1 while the job's kill switch is on"),
        "quarantined": gauge("daedalus_quarantined", "1 while metric validation has quarantined the job"),
        "held": gauge("daedalus_held", "1 while an operator's manual scale holds the job (manual_hold)"),
        "verdict": InfoMetricFamily("daedalus_rescale_verdict", "Verdict on the newest judged rescale", labels=[JOB]),
        "ratio": gauge("daedalus_rescale_capacity_ratio", "Observed over predicted capacity of that rescale"),
        "bottleneck": InfoMetricFamily("daedalus_bottleneck", "The stage last seen limiting the job", labels=[JOB]),
        "ceiling": gauge("daedalus_ceiling_scaleout", "Largest scale-out allowed under a ceiling"),
        "age": gauge("daedalus_last_run_age_seconds", "Wall-clock seconds since the last loop run"),
        "store_up": GaugeMetricFamily("daedalus_exporter_store_up", "1 if the knowledge store could be listed"),
        "readable": gauge("daedalus_exporter_job_readable", "0 if the job's files could not be read this scrape"),
        "errors": CounterMetricFamily("daedalus_exporter_read_errors", "Scrapes that could not read the job",
                                      labels=[JOB]),
        "duration": GaugeMetricFamily("daedalus_exporter_scrape_duration_seconds", "Time to read the store"),
    }


def _finite(value: Any) -> float | None:
    """The value as a float, None when absent or not finite (Prometheus gets no Inf/NaN from us)."""
    if value is None:
        return None
    number = float(value)  # a wrong type raises: the job's files are unreadable
    return number if math.isfinite(number) else None


def reason_label(reasons: list[str]) -> str:
    """The first reason on one line, cut to `REASON_CHARS`."""
    text = re.sub(r"\s+", " ", str(reasons[0])).strip() if reasons else ""
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


class StoreCollector:
    """Reads every job's status and knowledge at scrape time; one job's broken files never fail a scrape."""

    def __init__(self, store_url: str, jobs: list[str] | None = None) -> None:
        self.store = Store(store_url)
        self.jobs = jobs  # None: every job folder in the store
        self._lock = threading.Lock()  # scrapes may run concurrently (threading HTTP server)
        self._errors: Counter[str] = Counter()
        self._last_error: dict[str, str] = {}

    def describe(self) -> Iterator[Metric]:
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        families = _families()
        try:
            if not self.store.exists():
                raise FileNotFoundError(f"{self.store.url} does not exist (has a loop written to this store yet?)")
            stored = self.store.jobs()
            families["store_up"].add_metric([], 1.0)
            self._note("the store", "")
        except Exception as exc:  # an unreachable store is a series, not a failed scrape
            stored = []
            families["store_up"].add_metric([], 0.0)
            self._note("the store", f"cannot list the store {self.store.url}: {exc}")
        now = WALL.now()
        for job in self.jobs if self.jobs is not None else stored:
            try:
                samples = self._job(job, now)
            except Exception as exc:  # whatever is wrong with one job's files, the others still export
                samples = [("readable", [job], 0.0)]
                with self._lock:
                    self._errors[job] += 1
                self._note(f"job {job!r}", f"cannot read job {job!r}: {type(exc).__name__}: {exc}")
            else:
                samples.append(("readable", [job], 1.0))
                self._note(f"job {job!r}", "")
            with self._lock:
                samples.append(("errors", [job], float(self._errors[job])))
            for key, labels, value in samples:
                families[key].add_metric(labels, value)
        families["duration"].add_metric([], time.perf_counter() - started)
        yield from families.values()

    def _note(self, what: str, error: str) -> None:
        """Log an error of `what` when it first appears or changes, and its end: not once per scrape."""
        with self._lock:
            before = self._last_error.pop(what, "")
            if error:
                self._last_error[what] = error
        if error and error != before:
            log.warning("%s", error)
        elif before and not error:
            log.info("%s is readable again", what)

    def _status(self, store: JobStore) -> dict[str, Any] | None:
        """The job's status.json; None before its first run. Unlike the loop's reading, a corrupt file raises: the
        exporter must tell "not run yet" from "unreadable"."""
        try:
            status = store.read_json(STATUS, strict=True)
        except FileNotFoundError:
            return None
        if not isinstance(status, dict):
            raise ValueError(f"{STATUS} is not a JSON object")
        return status

    def _job(self, job: str, now: float) -> list[Sample]:
        """All samples of one job, or an exception: a job is exported whole or not at all."""
        store = self.store.job(job)  # checks the name
        out: list[Sample] = []

        def put(key: str, value: Any) -> None:
            number = _finite(value)
            if number is not None:
                out.append((key, [job], number))

        s = self._status(store)
        if s is not None:
            for key in ("current", "recommended", "capacity", "workload", "forecast_peak", "wape"):
                put(key, s.get(key))
            put("age", None if s.get("wall") is None else now - float(s["wall"]))
            put("pending", s.get("pending") is not None)
            put("paused", bool(s.get("paused")))
            put("quarantined", s.get("quarantine") is not None)
            put("held", s.get("override") is not None)
            if s.get("kind") is not None:
                info = {"kind": str(s["kind"]), "reason": reason_label(s.get("reasons") or [])}
                out.append(("decision", [job], info))
        state = self._knowledge(store)
        ledger = None if state is None else [dict(e) for e in state["ledger"]]
        if state is not None:
            out += _verification(job, ledger or [], state)
        if ledger is not None:
            counts = Counter(str(e["state"]) for e in ledger)
            out += [("actions", [job, state], float(counts[state])) for state in sorted({*STATES, *counts})]
            if ledger:
                put("predicted", ledger[-1].get("predicted_recovery_s"))
                put("observed", ledger[-1].get("observed_recovery_s"))
        return out

    def _knowledge(self, store: JobStore) -> dict[str, Any] | None:
        """The newest readable knowledge version as plain data (older ones when it is corrupt, as the loop falls
        back); None before the first version. Read as plain data, not through `JobStore.load`: a whole
        Knowledge restores the fitted forecast model, seconds of statsmodels imports and milliseconds per job and
        scrape, to count a few states."""
        problems = []
        for version in reversed(store.versions()):
            try:
                state = json.loads(store.payload(version))
                if state.get("schema_version") != SCHEMA_VERSION:
                    raise KnowledgeError(f"schema version {state.get('schema_version')!r} is not {SCHEMA_VERSION}")
                if not isinstance(state["ledger"], list):
                    raise KnowledgeError("its ledger is not a list")
                return dict(state)
            except (KnowledgeError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                problems.append(f"version {version}: {exc}")
        if problems:
            raise KnowledgeError(f"no readable knowledge version ({'; '.join(problems)})")
        return None


def _verification(job: str, ledger: list[dict[str, Any]], state: dict[str, Any]) -> list[Sample]:
    """The newest verdict, the bottleneck and the ceiling, from the knowledge (absent from older versions)."""
    out: list[Sample] = []
    judged = next((e for e in reversed(ledger) if e.get("verdict")), None)
    if judged is not None:
        rescale = f"{judged['current']} → {judged['target']}"
        out.append(("verdict", [job], {"verdict": str(judged["verdict"]), "rescale": rescale}))
        ratio = _finite(judged.get("capacity_ratio"))
        if ratio is not None:
            out.append(("ratio", [job], ratio))
    if state.get("bottleneck"):
        b = state["bottleneck"]
        out.append(("bottleneck", [job], {"stage": str(b["stage"]), "scalable": str(bool(b["scalable"])).lower()}))
    if state.get("ceiling"):
        out.append(("ceiling", [job], float(state["ceiling"]["scaleout"])))
    return out


class MetricsServer:
    """The collector behind an HTTP server on `host:port` (0: a free port); `close()` stops it."""

    def __init__(self, store_url: str, port: int = DEFAULT_PORT, host: str = "127.0.0.1",
                 jobs_file: Path | None = None) -> None:
        jobs = None if jobs_file is None else [spec.name for spec in load_jobs(jobs_file).jobs]
        registry = CollectorRegistry(auto_describe=True)
        registry.register(StoreCollector(store_url, jobs))
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port = int(self._server.server_port)
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(store_url: str, port: int = DEFAULT_PORT, host: str = "127.0.0.1", jobs_file: Path | None = None,
          ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then close the server and return (systemd and Kubernetes stop it so).

    Call it from the main thread (signal handlers); `ready` gets the metrics URL once the port is bound.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with MetricsServer(store_url, port, host, jobs_file) as server:
            if ready is not None:
                ready(server.url)
            while not stop.wait(1.0):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> None:
    """`python -m daedalus.runtime.exporter`: the exporter without the CLI (a container's command)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    # The environment as `daedalus exporter` reads it (cli/settings.py), without the CLI's settings file.
    parser.add_argument("--store", default=os.environ.get("DAEDALUS_STORE") or DEFAULT_URL,
                        help="knowledge store URL (default: $DAEDALUS_STORE, else a folder)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 in a container)")
    parser.add_argument("--jobs-file", type=Path, default=os.environ.get("DAEDALUS_JOBS_FILE") or None,
                        help="export only the jobs of this jobs file (default: $DAEDALUS_JOBS_FILE)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(args.store, args.port, args.host, args.jobs_file,
              ready=lambda url: print(f"serving {url} from {args.store}", flush=True))
    except (OSError, DaedalusError) as exc:
        sys.exit(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
