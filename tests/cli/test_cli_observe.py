"""`daedalus observe` alone: the job found by `--jobs-file`, and what the loop would do when Prometheus is down."""

from __future__ import annotations

import json
import socket

from daedalus.cli import observe
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(observe.observe)


def closed_port() -> int:
    """A local port nothing listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_simulated_job_is_refused_by_name(jobs_file):
    result = run("observe", "ads", "--jobs-file", jobs_file)
    assert result.exit_code == 1
    assert "job 'ads' has engine 'sim'" in flat(result.output)


def test_without_a_jobs_file_it_says_how_to_configure_one(monkeypatch, jobs_file):
    result = run("observe", "ads")
    assert result.exit_code == 1 and "no jobs file configured" in flat(result.output)
    assert "--jobs-file FILE, set DAEDALUS_JOBS_FILE" in flat(result.output)
    monkeypatch.setenv("DAEDALUS_JOBS_FILE", str(jobs_file))
    assert "job 'ads' has engine 'sim'" in flat(run("observe", "ads").output)


def test_an_unreachable_prometheus_shows_the_queries_and_the_hold(tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""
jobs:
  - name: dark
    engine: flink
    prometheus: {{url: "http://127.0.0.1:{closed_port()}", step: 15s, timeout: 1s, retries: 0}}
    selector: {{namespace: dark, cluster: c1}}
    source: {{topic: dark-events}}
    scale_target: {{kind: Deployment, namespace: streaming, name: flink-taskmanager}}
""")
    out = tmp_path / "seen" / "dark.json"
    result = run("observe", "dark", "--jobs-file", jobs, "--json", out, "--window", 120)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "dark: what the monitor phase sees (no samples)" in text and "The loop would hold" in text
    assert "unreachable or timing out after 0 retries" in text and f"Wrote {out}" in text
    seen = json.loads(out.read_text())
    assert seen["job"] == "dark" and seen["timestamps"] == [] and seen["holds"][0].startswith("metrics unavailable")
    assert 'namespace="dark"' in seen["queries"]["cpu"]
