"""The local Flink runtime's parts that need no cluster: the trace (and its Java twin), the JobManager log's
outages, the committed-output count, the cluster's configuration, the job's build."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import requests
from flink_support import needs_flink

from daedalus.models.errors import ConfigurationError
from daedalus.runtime import flink as runtime
from daedalus.runtime.flink import LocalFlink, Trace, TraceExporter, committed_ids, outages

HERE = Path(__file__).parent


def test_the_trace_counts_whole_records_as_the_source_does():
    trace = Trace.of([10, 0, 3.4, 7], start_ms=1_000_000)
    assert trace.rates == (10, 0, 3, 7) and trace.total == 20 and trace.end_ms == 1_004_000
    assert [trace.due(t) for t in (999_999, 1_000_000, 1_000_500, 1_001_000, 1_002_000, 1_002_999, 1_003_500,
                                   1_004_000, 9_999_999)] == [0, 0, 5, 10, 10, 12, 16, 20, 20]
    assert trace.rate_at(1_000.2) == 10 and trace.rate_at(1_002.5) == 3 and trace.rate_at(1_010.0) == 0
    with pytest.raises(ValueError, match="≥ 0"):
        Trace.of([1, -1], 0)


def test_the_exporter_publishes_what_is_due_as_a_broker_counter():
    trace = Trace.of([100] * 5, start_ms=0)  # long over: everything is due
    exporter = TraceExporter(trace, "events")
    try:
        text = requests.get(f"http://{exporter.target}/metrics", timeout=5).text
    finally:
        exporter.close()
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="events"} 500.0' in text


def test_the_jobmanager_log_gives_each_rescale_its_outage():
    """A real log (Flink 2.3, adaptive scheduler): 1 → 2 then 2 → 1 through resource requirements; the stop at the
    end (tasks cancelled, nothing restarted) is no outage."""
    found = outages(HERE / "jobmanager-rescale.log")
    assert [o.parallelism for o in found] == [2, 1]
    assert [round(o.seconds, 3) for o in found] == [3.67, 0.482]
    assert all(o.restarted is not None and 0 < o.restarted - o.down < 0.5 for o in found)


def test_each_rescale_has_its_outage_after_a_probe_of_another_shape():
    """The bottleneck demo's real log (2026-11-26): a probe job of the plain shape (`work` chained to the sink), then
    the job with its own `aggregate` task, rescaled 1 → 4 and rolled back 4 → 1. The probe's tasks, absent from the
    job, must not hold up its "every subtask RUNNING" (they did: no outage was found, and report.json had none), and
    the switch from the probe to the job is no outage of the job's."""
    text = (HERE / "jobmanager-bottleneck.log").read_text()
    found = outages(text)
    assert [(o.parallelism, round(o.seconds, 3)) for o in found] == [(4, 4.312), (1, 29.065)]
    assert [round(o.restarted - o.down, 3) for o in found if o.restarted] == [0.155, 0.395]
    # without the lines naming each graph's job, the switch from the probe reads as one more interruption
    anonymous = "\n".join(line for line in text.splitlines() if "Created execution graph" not in line)
    assert [o.parallelism for o in outages(anonymous)] == [1, 4, 1]


def test_only_committed_part_files_count(tmp_path):
    (tmp_path / "part-a-0.txt").write_text("1,1\n2,1\n")
    (tmp_path / "part-b-0.txt").write_text("3,1\n2,2\n")  # 2 twice: a duplicate the count shows
    (tmp_path / ".part-c-1.txt.inprogress.0f").write_text("4,1\n")  # not committed: hidden, not counted
    assert committed_ids(tmp_path) == (4, 3)
    assert committed_ids(tmp_path / "nothing") == (0, 0)


def test_a_wrong_flink_home_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("FLINK_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"pip install --no-deps apache-flink==2\.3\.0"):
        runtime.flink_home()


@needs_flink
def test_the_cluster_configuration_is_its_own(tmp_path):
    flink = LocalFlink(tmp_path / "c", taskmanagers=2, max_taskmanagers=3)
    conf = flink.config()
    ports = [flink.rest_port, flink.rpc_port, *flink.metrics_ports]
    assert len(set(ports)) == len(ports) == 6 and len(flink.scrape_targets) == 4
    assert conf["jobmanager.scheduler"] == "adaptive" and conf["taskmanager.numberOfTaskSlots"] == 1
    assert conf["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
    assert conf["state.checkpoints.dir"].startswith("file://") and "scheduler-mode" not in conf
    with pytest.raises(ValueError, match="reactive mode runs an application cluster"):
        LocalFlink(tmp_path / "r", mode="reactive")


@needs_flink
def test_the_job_compiles_once_and_its_trace_agrees_with_pythons(tmp_path):
    jar = runtime.job_jar(cache=tmp_path)
    assert runtime.job_jar(cache=tmp_path) == jar  # cached: no second compile
    trace = Trace.of([7, 1234, 0, 99, 5], start_ms=1_700_000_000_000)
    rates = trace.write(tmp_path / "rates.txt")
    moments = [trace.start_ms + d for d in (-5, 0, 1, 333, 999, 1000, 1001, 1999, 2500, 3017, 4999, 5000, 99_999)]
    classpath = f"{jar}:{runtime.flink_home() / 'lib'}/*"
    done = subprocess.run([shutil.which("java") or "java", "-cp", classpath, "daedalus.flink.Trace", str(rates),
                           str(trace.start_ms), *map(str, moments)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [int(x) for x in done.stdout.split()] == [trace.due(t) for t in moments]


def test_bench_flink_refuses_levels_it_cannot_measure_before_starting_anything():
    from typer.testing import CliRunner

    from daedalus.cli.flink import parse_levels
    from daedalus.cli.main import app

    assert parse_levels("1,2") == (1, 2) and parse_levels(" 1, 3,4") == (1, 3, 4)
    for bad in ("2,1", "1,1", "0,1", "1,9", "one", "1,,2", ""):
        res = CliRunner().invoke(app, ["bench", "flink", "--levels", bad])
        assert res.exit_code != 0 and "--levels" in res.output, (bad, res.output)
        assert "Traceback" not in res.output and "session cluster" not in res.output


def test_the_bottleneck_waits_what_makes_its_rate():
    assert runtime.bottleneck_cost(500.0) == 2000 and runtime.bottleneck_cost(333.0) == 3004  # ⌈1e6 / 333⌉
    assert 1e6 / runtime.bottleneck_cost(287.4) <= 287.4  # never faster than asked
    for bad in (0.0, -5.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="records per second > 0"):
            runtime.bottleneck_cost(bad)


@needs_flink
def test_the_bottleneck_is_a_task_of_its_own_at_parallelism_1_at_every_parallelism(tmp_path):
    # Chained to `work` (as it was), one worker's thread paid the stage's wait on top of its own work: one worker ran
    # below the stage's rate, and the scale-out that unchained them bought capacity.
    (tmp_path / "t.txt").write_text("5\n")
    job = runtime.TraceJob("j", tmp_path / "t.txt", 1, tmp_path / "out", bottleneck_us=2000)
    for p in (1, 4):
        tasks = {name: (par, top) for name, par, top in runtime.job_graph(job, p)}
        assert tasks[runtime.BOTTLENECK_TASK] == (1, 1), tasks
        assert tasks["work"][0] == p and tasks["Source: trace"][0] == p
    plain = runtime.job_graph(runtime.TraceJob("j", tmp_path / "t.txt", 1, tmp_path / "out"), 2)
    assert [name for name, _, _ in plain] == ["Source: trace", "work -> committed-output: Writer -> "
                                              "committed-output: Committer"]
