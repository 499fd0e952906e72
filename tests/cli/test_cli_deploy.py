"""`daedalus deploy` and `daedalus worker` alone: the prefect.yaml written without a server, and the deployments
applied through `deploy_jobs` (the Prefect API's writes stood in for) with its progress reported."""

from __future__ import annotations

import yaml

from daedalus.cli import deploy
from daedalus.deployments import deploy as deployments
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(deploy.deploy, deploy.worker)


def test_deploy_writes_a_prefect_yaml_from_the_jobs_file_option(jobs_file, store_url, tmp_path):
    out = tmp_path / "prefect.yaml"
    result = run("deploy", "--jobs-file", jobs_file, "--prefect-yaml", out, "--store", store_url)
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}" in flat(result.output)
    deployed = yaml.safe_load(out.read_text())["deployments"]
    names = [d["name"] for d in deployed]
    assert names[:2] == ["wordcount", "ads"] and "approve-scale" in names and "scale-job" in names
    assert deployed[0]["parameters"]["store_url"] == store_url and deployed[0]["parameters"]["jobs_file"] == str(
        jobs_file)


def test_a_job_missing_from_the_file_is_refused(jobs_file, tmp_path):
    result = run("deploy", "--jobs-file", jobs_file, "--job", "ghost", "--prefect-yaml", tmp_path / "p.yaml")
    assert result.exit_code == 1
    assert "no job 'ghost' in the jobs file" in flat(result.output) and not (tmp_path / "p.yaml").exists()


def fake_api(monkeypatch, gone: list[str] | None = None) -> list[dict]:
    """Stand in for the Prefect API's writes; returns the calls made to it."""
    calls: list[dict] = []

    async def apply(planned, pool, create_pool=True, on_done=None):
        calls.append({"names": [p.full_name for p in planned], "pool": pool, "create_pool": create_pool,
                      "job_variables": [p.job_variables for p in planned]})
        for p in planned:
            on_done(p)
        return deployments.Applied(ids={p.full_name: f"id-{i}" for i, p in enumerate(planned)},
                                   written=[p.full_name for p in planned])

    async def prune(keep):
        return [f"mape-k/{name}" for name in gone or []]

    monkeypatch.setattr(deployments, "apply_deployments", apply)
    monkeypatch.setattr(deployments, "prune_deployments", prune)
    return calls


def test_deploy_applies_every_planned_deployment_and_names_the_worker(monkeypatch, jobs_file, store_url,
                                                                      prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    calls = fake_api(monkeypatch, gone=["retired"])
    result = run("deploy", "--jobs-file", jobs_file, "--store", store_url, "--pool", "p1", "--no-create-pool",
                 "--no-prefork", "--prune", "--no-background")
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    (call,) = calls
    assert call["pool"] == "p1" and call["create_pool"] is False
    assert "mape-k/wordcount" in call["names"] and "mape-k/ads" in call["names"]
    assert all("command" not in jv for jv in call["job_variables"])  # no preloaded process asked for
    assert f"{len(call['names'])} deployments applied" in text and "mape-k/ads" in text
    assert "Start a worker: daedalus worker --pool p1" in text
    assert "deleted mape-k/retired: not in the jobs file" in text


def test_deploy_jobs_reports_its_progress_and_takes_the_worker_command(monkeypatch, jobs_file, store_url):
    calls = fake_api(monkeypatch)
    seen: list[tuple[int, int]] = []
    ids, notes, seconds = deployments.deploy_jobs(jobs_file, store_url, "p1", only=["ads"], background=False,
                                                  job_variables={"command": "python -m x"},
                                                  on_progress=lambda done, total: seen.append((done, total)))
    n = len(calls[0]["names"])
    assert seen == [(k, n) for k in range(n + 1)]
    assert "mape-k/ads" in ids and "mape-k/wordcount" not in ids and seconds >= 0
    assert all(jv["command"] == "python -m x" for jv in calls[0]["job_variables"])
    assert notes == ["background and pipeline flows not deployed (--no-background)"]


def test_worker_is_registered_with_its_options():
    result = run("worker", "--help")
    assert result.exit_code == 0, result.output
    assert "--socket" in result.output and "--limit" in result.output
