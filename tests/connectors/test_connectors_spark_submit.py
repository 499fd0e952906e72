"""The `spark-submit` scale target against real processes that keep its contract without Spark (the Spark side of the
contract, the listener stopping queries between micro-batches, runs in test_connectors_spark_user_job_e2e.py).

The stand-in application records the scale-out it was submitted with, notes a first micro-batch in `running.json`
and exits when asked (`stop`); variants exit at once with an error, or ignore the request.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
import yaml

from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.spark_submit import SparkSubmitScaler, alive
from daedalus.connectors.targets import scaler
from daedalus.models.errors import ConfigurationError, ConnectorError

APP = """
import os, pathlib, sys, time
folder = pathlib.Path(os.environ["DAEDALUS_SPARK_CONTROL"])
mode, scaleout = sys.argv[1], sys.argv[2]
with (folder / "submitted").open("a") as out:
    out.write(scaleout + "\\n")
if mode == "crash":
    print("AnalysisException: table orders not found", flush=True)
    sys.exit(1)
(folder / "running.json").write_text("{}")
while mode == "stubborn" or not (folder / "stop").exists():
    time.sleep(0.05)
"""


def _scaler(tmp_path, mode: str = "ok", **kw) -> SparkSubmitScaler:
    app = tmp_path / "app.py"
    app.write_text(APP)
    return SparkSubmitScaler(tmp_path / "target", shlex.join([sys.executable, str(app), mode, "--x={scaleout}"]),
                             **kw)


def _submitted(s: SparkSubmitScaler) -> list[str]:
    return (s.folder / "submitted").read_text().split()


def test_it_submits_restarts_with_the_new_scaleout_and_applies_a_decision_once(tmp_path):
    s = _scaler(tmp_path)
    with pytest.raises(ConnectorError, match="not running; start it with"):
        s.current("orders")
    first = s.start(1)
    try:
        assert s.wait_running(first, 10) and s.current("orders") == 1
        assert s.scale("orders", 3, "d-1", dry_run=True).startswith("dry run: would stop")
        assert alive(first) and _submitted(s) == ["--x=1"]
        message = s.scale("orders", 3, "d-1")
        assert "scale-out 1 → 3" in message and "stopped on request" in message
        assert not alive(first) and s.current("orders") == 3 and _submitted(s) == ["--x=1", "--x=3"]
        assert "already applied" in s.scale("orders", 3, "d-1")  # a retried loop: no second restart
        assert _submitted(s) == ["--x=1", "--x=3"]
    finally:
        assert s.stop().startswith("stopped")
    assert s.stop() == "not running"


def test_a_dead_application_is_submitted_again_by_the_next_decision(tmp_path):
    s = _scaler(tmp_path)
    pid = s.start(2)
    s.wait_running(pid, 10)
    s.stop()  # as if the loop died between stopping and submitting
    try:
        assert "scale-out 2 → 1" in s.scale("orders", 1, "d-2") and s.current("orders") == 1
    finally:
        s.stop()


def test_an_application_that_ignores_the_request_is_terminated(tmp_path):
    s = _scaler(tmp_path, "stubborn", stop_timeout_s=1.0)
    pid = s.start(1)
    s.wait_running(pid, 10)
    assert "did not exit within 1 s of the stop request: terminated" in s.stop() and not alive(pid)


def test_an_application_that_fails_to_start_is_reported_with_its_log(tmp_path):
    s = _scaler(tmp_path, "crash")
    with pytest.raises(ConnectorError, match=r"exited before its first micro-batch(?s:.)*table orders not found"):
        s.wait_running(s.start(1), 10)


JOB = {"name": "orders", "engine": "spark", "prometheus": {"url": "http://prom:9090"}, "selector": {"query": "orders"},
       "source": {"topic": "orders"}}


@pytest.mark.parametrize(("target", "error"), [
    ({"kind": "spark-submit", "name": "orders", "path": "/t"}, "fields path and command: a spark-submit target needs"),
    ({"kind": "spark-submit", "name": "orders", "path": "/t", "command": "spark-submit --master local[2] j.py"},
     r"field command: .* has no \{scaleout\}"),
    ({"kind": "SparkApplication", "name": "orders", "command": "spark-submit j.py {scaleout}"},
     "only a spark-submit target runs a command, not 'SparkApplication'"),
])
def test_the_jobs_file_refuses_an_incomplete_target(target, error):
    with pytest.raises(ConfigurationError, match=error):
        parse_jobs({"jobs": [{**JOB, "scale_target": target}]}, "jobs.yaml")


def test_the_jobs_file_builds_the_scaler():
    spec = parse_jobs({"jobs": [{**JOB, "scale_target": {
        "kind": "spark-submit", "name": "orders", "path": "/t", "ready_timeout": "3m",
        "command": "spark-submit --master 'local[{scaleout}]' job.py"}}]}).job("orders")
    built = scaler(spec, "/store")
    assert isinstance(built, SparkSubmitScaler) and built.ready_timeout_s == 180
    with pytest.raises(ConfigurationError, match=r"has no \{scaleout\}"):
        SparkSubmitScaler("/t", "spark-submit job.py")


def test_the_command_line_starts_it_once_and_another_process_stops_it(tmp_path):
    """`python -m daedalus.runtime.spark_submit start` exits after the first micro-batch, leaving the application to
    run on its own: the scaler of a later loop run, not its parent, must still see it run and see it end."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    jobs = tmp_path / "jobs.yaml"
    command = shlex.join([sys.executable, str(app), "ok", "--x={scaleout}"])
    jobs.write_text(yaml.safe_dump({"jobs": [{**JOB, "scaleout": {"min": 2, "max": 4}, "scale_target": {
        "kind": "spark-submit", "name": "orders", "path": str(tmp_path / "target"), "command": command}}]}))
    cli = [sys.executable, "-m", "daedalus.runtime.spark_submit"]
    started = subprocess.run([*cli, "start", str(jobs), "orders"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and "submitted at scale-out 2" in started.stdout, started.stderr
    again = subprocess.run([*cli, "start", str(jobs), "orders"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already running" in again.stderr  # never two of them
    s = SparkSubmitScaler(tmp_path / "target", command)
    pid = s.state()["pid"]
    assert s.current("orders") == 2 and alive(pid)
    stopped = subprocess.run([*cli, "stop", str(jobs), "orders"], capture_output=True, text=True, timeout=60)
    assert "stopped on request" in stopped.stdout and not alive(pid)
    with pytest.raises(ConnectorError, match="not running"):
        s.current("orders")
