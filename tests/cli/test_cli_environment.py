"""Issue 25: every command that takes the store, the jobs file, the lake or the Prefect API reads them from the
environment alone (`DAEDALUS_*`, `PREFECT_API_URL`), and what a script reads from them is whole: tables piped to a
file keep every job's full name on its row, `--output json` names the jobs.

Each test sets only environment variables, as an operator's shell after `export DAEDALUS_…`, and runs the whole
`daedalus` application: no option names the store or the jobs file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from daedalus.cli.main import app
from daedalus.cli.settings import login
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import STATUS, Store
from daedalus.models.knowledge import Knowledge
from daedalus.runtime.ports import free_port
from tests.cli.test_cli_observe import closed_port
from tests.cli.test_cli_settings import sources
from tests.ops.conftest import T0, with_proposal, write_jobs

LONG = "clicks-stream-eu-west-production"  # longer than rich's 80-column table leaves a name when piped
OTHER = "clicks-stream-eu-west-staging"  # the same first 22 characters: a cut name cannot tell them apart


def daedalus(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Only the environment names the fleet: two jobs with long names, one of them waiting for approvals."""
    jobs = write_jobs(tmp_path / "jobs.yaml", [{"name": LONG}, {"name": OTHER, "mode": "approve"}])
    values = {"DAEDALUS_JOBS_FILE": str(jobs), "DAEDALUS_STORE": str(tmp_path / "store"),
              "DAEDALUS_LAKE": str(tmp_path / "lake"), "DAEDALUS_POOL": "env-pool"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLUMNS", "80")  # what a pipe gets from rich
    return values


def _loop_ran(store: str, job: str, current: int, recommended: int, health: str = "ok") -> None:
    """The status file a loop run leaves (tasks/dashboards.py status_record)."""
    Store(store).job(job).write_json(STATUS, {
        "job": job, "wall": time.time(), "mode": "auto", "current": current, "recommended": recommended,
        "kind": "scale-out" if recommended > current else "no-change", "reasons": ["cheapest: keep"],
        "health": health, "capacity": 500_000.0, "workload": 250_000.0, "forecast_peak": 300_000.0,
        "last_action": {"id": f"{job}-1", "time": T0 + 90, "from": 4, "to": current, "state": "executed",
                        "operator": "alice", "events": "proposed 00:00:00 → approved by alice 00:01:30"},
        "pending": None})


def test_status_piped_keeps_each_jobs_full_name_on_its_row(env):
    # The operator's second hour: the health was cut to fit the UI's column ("manual scale by ca…").
    held = "held at 6 until 2026-11-26 23:14:55 UTC: manual scale by carol"
    _loop_ran(env["DAEDALUS_STORE"], LONG, 6, 6, health=held)
    _loop_ran(env["DAEDALUS_STORE"], OTHER, 4, 9)
    code, out, _ = daedalus("status")
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert set(rows) == {LONG, OTHER}  # `daedalus status | grep JOB` finds the job's one row
    assert "4 → 9" in rows[OTHER] and "approve" not in rows[LONG]
    assert "4 → 6 executed at 2026-01-01 00:01:30 (operator alice)" in rows[LONG]  # the event's time, who answered
    assert held in rows[LONG]


def test_status_output_json_names_the_jobs_with_values_not_cells(env):
    _loop_ran(env["DAEDALUS_STORE"], LONG, 6, 6)
    code, out, _ = daedalus("status", "--output", "json")
    assert code == 0
    fleet = json.loads(out)
    assert fleet["store"] == env["DAEDALUS_STORE"]
    jobs = {j["job"]: j for j in fleet["jobs"]}
    assert set(jobs) == {LONG, OTHER} and jobs[OTHER]["mode"] == "approve"
    assert (jobs[LONG]["scaleout"], jobs[LONG]["capacity"]) == (6, 500_000.0)
    assert jobs[LONG]["last_action"]["time"] == "2026-01-01T00:01:30+00:00"
    assert jobs[OTHER]["scaleout"] is None and jobs[OTHER]["health"] == "no loop has run yet"


def test_status_wide_adds_the_figures_and_the_reason(env):
    _loop_ran(env["DAEDALUS_STORE"], LONG, 6, 6)
    code, out, _ = daedalus("status", "-o", "wide")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "capacity (tuples/s)" in header and "forecast peak (tuples/s)" in header and "reason" in header
    row = next(line for line in out.splitlines() if LONG in line)
    assert "500,000" in row and "300,000" in row and "cheapest: keep" in row


def test_status_of_one_job_shows_the_inbox_readably_and_as_json(env):
    spec = load_jobs(env["DAEDALUS_JOBS_FILE"]).job(OTHER)
    pid = with_proposal(spec, env["DAEDALUS_STORE"], created=time.time()).pending.id
    Store(env["DAEDALUS_STORE"]).job(OTHER).post("approve", {"proposal": pid, "scaleout": 7, "operator": "alice"})
    code, out, _ = daedalus("status", OTHER)
    assert code == 0
    assert f"approve {pid} at scale-out 7 by alice" in out and "{" not in out  # not a Python dict
    code, out, _ = daedalus("status", OTHER, "-o", "json")
    detail = json.loads(out)
    assert detail["job"] == OTHER and detail["pending"]["id"] == pid
    assert detail["inbox"][0]["message"] == f"approve {pid} at scale-out 7 by alice"


def test_jobs_check_piped_and_as_json(env):
    code, out, _ = daedalus("jobs", "check")
    assert code == 0 and LONG in out and OTHER in out
    code, out, _ = daedalus("jobs", "check", "-o", "json")
    checked = json.loads(out)
    assert checked["file"] == env["DAEDALUS_JOBS_FILE"] and checked["valid"] is True
    assert [(j["name"], j["mode"]) for j in checked["jobs"]] == [(LONG, "auto"), (OTHER, "approve")]
    code, out, _ = daedalus("jobs", "check", "-o", "wide")
    assert code == 0 and "manual hold" in out and "30 min" in out


@pytest.mark.parametrize("command", [("pause", LONG, "--reason", "r"), ("resume", LONG),
                                     ("scale", LONG, 5, "--reason", "load test"),
                                     ("release", LONG, "--reason", "false positive")])
def test_operator_commands_post_to_the_store_and_check_the_jobs_file_of_the_environment(env, command):
    if command[0] == "release":  # only a quarantined job can be released
        k = Knowledge.new(LONG, load_jobs(env["DAEDALUS_JOBS_FILE"]).job(LONG).loop_config())
        k.quarantine = "metric validation failed"
        Store(env["DAEDALUS_STORE"]).job(k.job).save(k)
    before = time.time()
    code, out, err = daedalus(*command)
    assert code == 0, err
    (_, msg), = Store(env["DAEDALUS_STORE"]).job(LONG).pending()
    assert msg.kind == command[0] and msg.body["operator"] == login()  # whom `daedalus config` names
    if command[0] == "scale":  # the ledger dates the manual scale when it was asked, not when a loop got to it
        assert before <= msg.body["wall"] <= time.time()
    # The operator's second hour: `daedalus scale … | grep posted` found nothing (the sentence went to stderr only,
    # wrapped at 80 columns); stdout has one JSON line, as approve and reject print.
    (line,) = out.strip().splitlines()
    assert json.loads(line) | {"job": LONG, "operator": login(), "message": msg.id} == json.loads(line)
    assert len(err.strip().splitlines()) == 1 and LONG in err
    code, _, err = daedalus(command[0], "ghost", *command[2:])
    assert code == 1 and f"no job 'ghost'; known: {LONG}, {OTHER}" in " ".join(err.split())


def test_approve_and_reject_answer_into_the_store_of_the_environment(monkeypatch, env, prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    spec = load_jobs(env["DAEDALUS_JOBS_FILE"]).job(OTHER)
    created = time.time()
    pid = with_proposal(spec, env["DAEDALUS_STORE"], created=created).pending.id
    code, out, err = daedalus("reject", pid, "--reason", "peak ahead")
    assert code == 0, err
    (line,) = out.strip().splitlines()  # one JSON line for a script, not wrapped at 80 columns
    assert json.loads(line)["operator"] == login()
    (_, msg), = Store(env["DAEDALUS_STORE"]).job(OTHER).pending()
    assert (msg.kind, msg.body["proposal"]) == ("reject", pid) and created <= msg.body["wall"] <= time.time()
    # An answer needs no Prefect API (issue 36): a second answer is refused from the store alone.
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{closed_port()}/api")
    code, _, err = daedalus("approve", pid)
    assert code == 1 and "was already answered (reject by" in " ".join(err.split())


def test_config_names_the_environment_and_the_operator_the_ledger_records(env):
    code, out, _ = daedalus("config")
    assert code == 0
    table = sources(out)
    assert table["store"] == (env["DAEDALUS_STORE"], "env") and table["jobs_file"][1] == "env"
    assert table["lake"] == (env["DAEDALUS_LAKE"], "env") and table["pool"] == ("env-pool", "env")
    assert table["operator"] == (login(), "login")  # was "(not set)" while the ledger recorded the login


def test_deploy_worker_and_observe_take_the_environment(env, tmp_path, monkeypatch):
    out_yaml = tmp_path / "prefect.yaml"
    code, _, err = daedalus("deploy", "--prefect-yaml", out_yaml)
    assert code == 0, err
    text = out_yaml.read_text()
    assert f"name: {LONG}" in text and env["DAEDALUS_STORE"] in text and env["DAEDALUS_LAKE"] in text
    assert "env-pool" in text
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{closed_port()}/api")
    code, _, err = daedalus("worker")
    assert code == 1 and "(env PREFECT_API_URL) is not reachable" in " ".join(err.split())
    code, _, err = daedalus("observe", "ghost")
    assert code == 1 and f"no job 'ghost'; known: {LONG}, {OTHER}" in " ".join(err.split())


def _exporter(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    """`daedalus exporter --port P` with nothing but the environment (as the outside check runs it)."""
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("DAEDALUS_")}, **env,
                   "DAEDALUS_SETTINGS": os.environ["DAEDALUS_SETTINGS"]}  # the test's own: none
    return subprocess.Popen([sys.executable, "-c", "from daedalus.cli.main import main; main()", "exporter",
                             "--port", str(port)], env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _scrape(proc: subprocess.Popen[str], port: int) -> str:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the exporter did not start"
        try:
            return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except requests.ConnectionError:
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    return err


def test_the_exporter_serves_the_store_of_the_environment_and_no_store_is_not_up(env, tmp_path):
    _loop_ran(env["DAEDALUS_STORE"], LONG, 6, 6)
    port = free_port()
    proc = _exporter({k: env[k] for k in ("DAEDALUS_JOBS_FILE", "DAEDALUS_STORE")}, port)
    text = _scrape(proc, port)
    err = _stop(proc)
    assert f'daedalus_current_scaleout{{daedalus_job="{LONG}"}} 6.0' in text
    assert "daedalus_exporter_store_up 1.0" in text and "(env DAEDALUS_STORE)" in err
    missing = str(tmp_path / "no-such-store")
    proc = _exporter({"DAEDALUS_STORE": missing}, port := free_port())
    text = _scrape(proc, port)
    err = _stop(proc)
    assert "daedalus_exporter_store_up 0.0" in text and "does not exist yet" in " ".join(err.split())


@pytest.mark.slow  # a temporary Prefect server starts for the flow run, as it does for a user
def test_step_with_only_the_environment_prints_no_telemetry_line(env, tmp_path):
    environment = {**{k: v for k, v in os.environ.items()
                      if not k.startswith(("DAEDALUS_", "PREFECT_"))},
                   "DAEDALUS_JOBS_FILE": env["DAEDALUS_JOBS_FILE"], "DAEDALUS_STORE": env["DAEDALUS_STORE"],
                   "PREFECT_HOME": str(tmp_path / "prefect-home"), "DAEDALUS_SETTINGS": str(tmp_path / "none.toml"),
                   # the temporary server `step` starts may take longer than Prefect's 20 s on a loaded machine
                   "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    report = tmp_path / "step.json"
    done = subprocess.run([sys.executable, "-c", "from daedalus.cli.main import main; main()", "step", LONG,
                           "--json", str(report)], env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "telemetry" not in (done.stdout + done.stderr).lower()
    assert json.loads(report.read_text())["job"] == LONG
