"""Faults on a real local Flink: a TaskManager killed mid-run, and a job that comes back under a new id.

The loop (models.loop.iteration.iterate, plain phases, dry-run so it never rescales by itself) watches the job through
a real Prometheus. When a TaskManager running the job is killed with SIGKILL, the job fails over and restarts on the
remaining TaskManagers: every loop in between holds (the job's series stop, then restart), none acts, and the
loop's first sound observation comes after the job runs again. Then the job is cancelled and resubmitted under its
name: `flink-rest` finds it again by name and rescales the new id. No JVM is left afterwards.
"""

from __future__ import annotations

import time

import pytest
import requests
from flink_support import flink_jvms, needs_flink, needs_prometheus

from daedalus.connectors.clock import WallClock
from daedalus.connectors.flink_rest import FlinkRestScaler
from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import QuerySet
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.runtime.flink import JAVA_OPTS, LocalFlink, Trace, TraceExporter, TraceJob, outages
from daedalus.runtime.prometheus import local_prometheus
from tests.helpers import SHORT_JVM

pytestmark = [needs_flink, needs_prometheus, pytest.mark.slow]

NAME, LABEL, TOPIC = "fault-job", "fault_job", "fault-events"


def _job_taskmanagers(url: str) -> list[str]:
    query = f'count by (tm_id) (flink_taskmanager_job_task_operator_numRecordsOut{{job_name="{LABEL}"}})'
    result = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=5).json()["data"]["result"]
    return sorted(r["metric"]["tm_id"] for r in result)


def test_a_killed_taskmanager_holds_the_loop_and_a_resubmitted_job_is_found_by_name(tmp_path):
    exporter = TraceExporter(None, TOPIC)
    marker = str(tmp_path / "cluster")
    try:
        with LocalFlink(tmp_path / "cluster", taskmanagers=3, max_taskmanagers=3, prometheus=local_prometheus,
                        extra_targets=[exporter.target],
                        extra_config={"env.java.opts.all": f"{JAVA_OPTS} {SHORT_JVM}"}) as flink:
            trace = Trace.of([150] * 1200, int(time.time() * 1000) + 3000)
            exporter.trace = trace
            spec = TraceJob(NAME, trace.write(tmp_path / "trace.txt"), trace.start_ms, tmp_path / "out", work_us=500)
            job_id = flink.submit(spec, parallelism=2)
            flink.wait_running(job_id, 2)
            cfg = LoopConfig(min_scaleout=1, max_scaleout=3, warmup_s=10, loop_interval_s=5, mode="dry-run",
                             checkpoint_interval=5)
            queries = QuerySet(NAME, "flink", {"job_name": LABEL}, {"topic": TOPIC}, {}, 4, 2, worker_label="tm_id")
            assert flink.prometheus_url is not None
            scaler = FlinkRestScaler(flink.rest_url, NAME, ready_timeout_s=90)
            target = Target(NAME, PrometheusSource(NAME, queries, flink.prometheus_url, step_s=1), scaler,
                            WallClock(), cfg)
            knowledge = Knowledge.new(NAME, cfg)

            def loop() -> tuple[float, tuple[str, ...], str | None]:
                it = iterate(target, knowledge, PLAIN)
                return time.time(), it.analysis.holds, None if it.action is None else it.action.state

            sound = None
            for _ in range(12):  # until the loop sees the job steady
                time.sleep(5)
                t, holds, _ = loop()
                if not holds:
                    sound = t
                    break
            assert sound is not None, "the loop never saw the job steady before the fault"

            victim = _job_taskmanagers(flink.prometheus_url)[0]
            slot = LocalFlink.slot_of(victim)
            assert slot is not None, victim
            killed_at = time.time()
            flink.remove_taskmanager(slot, kill=True)
            after = []
            deadline = time.time() + 150
            while time.time() < deadline:
                time.sleep(3)
                after.append(loop())
                if time.time() - killed_at > 30 and not after[-1][1] and flink.running_parallelism(job_id) == 2:
                    break
            held = [h for _, h, _ in after if h]
            assert held, "no loop held while the job failed over"
            assert all(state in (None, "dry-run") for _, _, state in after)
            assert not after[-1][1], f"the loop still holds after the failover: {after[-1][1]}"
            assert flink.running_parallelism(job_id) == 2  # restarted on the TaskManagers left
            restarts = [o for o in outages(flink.jobmanager.log_file()) if o.down >= killed_at - 1]
            assert restarts, "the JobManager log shows no failover"
            print(f"\nkilled {victim}; failover {restarts[0].seconds:.1f} s in the JobManager log; "
                  f"{len(held)} of {len(after)} loops held, e.g. {held[0][:2]}")

            # The job is cancelled and submitted again under its name: a new id, found by name.
            flink.rest("PATCH", f"/jobs/{job_id}?mode=cancel")
            flink.wait_state(job_id, "CANCELED")
            again = flink.submit(spec, parallelism=1)
            flink.wait_running(again, 1)
            assert again != job_id and scaler.current(NAME) == 1
            message = scaler.scale(NAME, 2, "resubmitted-1")
            assert again in message and "running at 2" in message
    finally:
        exporter.close()
    assert flink_jvms(marker) == []
