"""The operator commands without a Prefect API: what they refuse, and what they leave in the store."""

from __future__ import annotations

import time

import pytest
import yaml
from prefect.settings import PREFECT_API_URL, temporary_settings
from typer.testing import CliRunner

from daedalus.cli.main import app
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import Store
from tests.ops.conftest import T0, with_proposal


@pytest.fixture(autouse=True)
def no_prefect_api(monkeypatch, tmp_path):
    """No API configured: the commands must work from the store alone and never start a temporary server.

    The settings context too: a flow test earlier in the session leaves its temporary API configured there.
    """
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.setenv("COLUMNS", "250")
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        yield


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_jobs_check_lists_the_jobs(jobs_file):
    result = run("jobs", "check", str(jobs_file))
    assert result.exit_code == 0, result.output
    assert "2 job(s), valid" in result.output and "ads" in result.output and "09:00–17:00" in result.output


def test_jobs_check_names_file_job_and_field_of_every_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"jobs": [
        {"name": "a", "engine": "sim", "scale_target": {"kind": "sim", "name": "a"}, "replicas": 3},
        {"name": "b", "engine": "flink", "scale_target": {"kind": "Deployment", "name": "tm"},
         "scaleout": {"min": 4, "max": 2}},
    ]}))
    result = run("jobs", "check", str(bad))
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert f"{bad}: job 'a' (jobs[0]), field replicas: Extra inputs are not permitted" in text
    assert f"{bad}: job 'b' (jobs[1]), field scaleout" in text and "max (2) must be ≥ min (4)" in text


def test_deploying_a_job_missing_from_the_file_is_refused(jobs_file):
    result = run("deploy", str(jobs_file), "--job", "ads", "--job", "ghost")
    assert result.exit_code == 1
    assert "no job 'ghost' in the jobs file" in result.output and "nothing was deployed" in result.output


def test_deploy_writes_a_prefect_yaml(jobs_file, tmp_path):
    out = tmp_path / "prefect.yaml"
    result = run("deploy", str(jobs_file), "--prefect-yaml", str(out), "--store", str(tmp_path / "s"))
    assert result.exit_code == 0, result.output
    names = [d["name"] for d in yaml.safe_load(out.read_text())["deployments"]]
    assert names[:2] == ["wordcount", "ads"] and "approve-scale" in names


def test_pause_and_resume_one_job_or_all(jobs_file, store_url):
    assert run("pause", "ads", "--store", store_url, "--jobs-file", str(jobs_file), "--reason", "deploy").exit_code == 0
    (_, msg), = Store(store_url).job("ads").pending()
    assert msg.kind == "pause" and msg.body["reason"] == "deploy"
    unknown = run("pause", "ghost", "--store", store_url, "--jobs-file", str(jobs_file))
    assert unknown.exit_code == 1 and "no job 'ghost'" in unknown.output
    assert run("pause", "--store", store_url).exit_code != 0  # neither a job nor --all
    assert run("pause", "--all", "--store", store_url, "--reason", "incident").exit_code == 0
    assert Store(store_url).kill_switch()["reason"] == "incident"
    assert run("resume", "--all", "--store", store_url).exit_code == 0
    assert Store(store_url).kill_switch() is None


def test_manual_scale_outside_the_limits_is_refused(jobs_file, store_url):
    result = run("scale", "ads", "11", "--reason", "test", "--jobs-file", str(jobs_file), "--store", store_url)
    assert result.exit_code == 1 and "outside the job's limits [2, 10]" in result.output
    assert Store(store_url).job("ads").pending() == []
    ok = run("scale", "ads", "9", "--reason", "test", "--jobs-file", str(jobs_file), "--store", store_url)
    assert ok.exit_code == 0


def test_approve_and_reject_without_an_approval_run(monkeypatch, jobs_file, store_url, prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    spec = load_jobs(jobs_file).job("ads")
    k = with_proposal(spec, store_url, created=time.time())
    pid = k.pending.id
    no_file = run("approve", pid, "--store", store_url)
    assert no_file.exit_code == 1 and "give --jobs-file FILE" in no_file.output
    too_big = run("approve", pid, "--scaleout", "12", "--jobs-file", str(jobs_file), "--store", store_url)
    assert too_big.exit_code == 1 and "outside the job's limits [2, 10]" in too_big.output
    ok = run("approve", pid, "--scaleout", "9", "--jobs-file", str(jobs_file), "--store", store_url)
    assert ok.exit_code == 0, ok.output
    again = run("reject", pid, "--jobs-file", str(jobs_file), "--store", store_url)
    assert again.exit_code == 1 and "already answered" in again.output
    (_, msg), = Store(store_url).job("ads").pending()
    assert (msg.kind, msg.body["scaleout"]) == ("approve", 9)


def test_an_expired_proposal_cannot_be_approved(monkeypatch, jobs_file, store_url, prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=T0)
    result = run("approve", k.pending.id, "--jobs-file", str(jobs_file), "--store", store_url)
    assert result.exit_code == 1 and "expired" in result.output
    assert Store(store_url).job("ads").pending() == []


def test_status_from_the_store_alone(jobs_file, store_url):
    with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time())
    fleet = run("status", "--store", store_url, "--jobs-file", str(jobs_file))
    assert fleet.exit_code == 0, fleet.output
    assert "no Prefect API configured" in fleet.output and "no loop has run yet" in fleet.output
    one = run("status", "ads", "--store", store_url, "--jobs-file", str(jobs_file))
    assert one.exit_code == 0, one.output
    assert "pending proposal ads-" in one.output and "proposed" in one.output
    missing = run("status", "ghost", "--store", store_url, "--jobs-file", str(jobs_file))
    assert missing.exit_code == 1 and "no job 'ghost'; known: wordcount, ads" in " ".join(missing.output.split())
    unchecked = run("status", "ads", "--store", store_url)  # a job name is checked against the jobs file
    assert unchecked.exit_code == 1 and "no jobs file configured" in unchecked.output
