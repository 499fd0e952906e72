"""Planning deployments from the jobs file, and the prefect.yaml it renders (no Prefect server needed)."""

from __future__ import annotations

import os
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from daedalus.connectors.jobs import load_jobs
from daedalus.deployments.deploy import (
    COLLISION,
    LOOP_QUEUE,
    PIPELINE_QUEUE,
    QUEUES,
    absolute,
    anchor_for,
    plan_deployments,
    prefect_yaml,
    select_jobs,
    spec_version,
)
from daedalus.models.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[2]


def test_one_loop_deployment_per_job_with_its_parameters_schedule_limit_and_tags(jobs_file, tmp_path):
    planned, notes = plan_deployments(load_jobs(jobs_file), "store", lake_url="lake")
    loops = [p for p in planned if p.flow_name == "mape-k"]
    assert [p.name for p in loops] == ["wordcount", "ads"]
    ads = loops[1]
    assert ads.parameters == {"job": "ads", "store_url": os.path.abspath("store"), "jobs_file": str(jobs_file),
                              "lake_url": os.path.abspath("lake")}
    (schedule,) = ads.schedules
    assert (schedule.interval, schedule.anchor_date, ads.concurrency) == (timedelta(seconds=60), anchor_for("ads"), 1)
    assert ads.tags == ("daedalus", "job:ads", "engine:sim", "mode:approve")
    assert ads.entrypoint == "daedalus.flows.mape_k.mape_k"
    assert ads.version == spec_version(load_jobs(jobs_file).job("ads")) and len(ads.version) == 12
    others = {p.full_name for p in planned} - {p.full_name for p in loops}
    assert {"approve-scale/approve-scale", "scale-job/scale-job", "fleet-overview/fleet-overview"} <= others
    assert all(p.parameters.get("store_url", os.path.abspath("store")) == os.path.abspath("store") for p in planned)
    # deployed when installed, else named in a note
    for module in ("daedalus.flows.background", "daedalus.flows.pipeline"):
        assert any(p.entrypoint.startswith(module) for p in planned) or any(module in n for n in notes)


def test_background_flows_get_their_triggers_and_pipeline_flows_their_schedules(jobs_file):
    pytest.importorskip("daedalus.flows.background")
    pytest.importorskip("daedalus.flows.pipeline")
    from daedalus.flows.mape_k import FORECAST_POOR, RESCALED

    planned, notes = plan_deployments(load_jobs(jobs_file), "store", lake_url="lake")
    by_name = {p.full_name: p for p in planned}
    assert notes == []
    monitor = by_name["recovery-monitor/recovery-monitor"]
    assert [set(t.expect) for t in monitor.triggers] == [{RESCALED}] and not monitor.schedules
    assert [set(t.expect) for t in by_name["retrain-forecaster/retrain-forecaster"].triggers] == [{FORECAST_POOR}]
    validate = by_name["validate-metrics/validate-metrics"]
    assert validate.schedules and validate.concurrency == 1
    assert validate.parameters == {"lake_url": os.path.abspath("lake"), "store_url": os.path.abspath("store")}


def test_the_pipeline_and_backtests_never_share_a_queue_with_the_loops(jobs_file):
    # Issue 36: validate-metrics (Spark) on the loops' worker delayed them by a minute and got four cancelled.
    pytest.importorskip("daedalus.flows.pipeline")
    planned, _ = plan_deployments(load_jobs(jobs_file), "store", lake_url="lake")
    queues = {p.name: p.queue for p in planned}
    batch = {"validate-metrics", "retrain-forecasters", "compact-lake", "backtest"}
    assert {queues[name] for name in batch} == {PIPELINE_QUEUE}
    assert {q for name, q in queues.items() if name not in batch} == {LOOP_QUEUE}
    by_name = {q.name: q for q in QUEUES}  # the loops first; the pipeline one run at a time, after them
    assert by_name[LOOP_QUEUE].priority < by_name[PIPELINE_QUEUE].priority and by_name[PIPELINE_QUEUE].concurrency == 1
    doc = yaml.safe_load(prefect_yaml(planned, pool="streaming"))
    assert {d["name"]: d["work_pool"]["work_queue_name"] for d in doc["deployments"]} == queues
    assert "prefect work-queue create pipeline --pool streaming --priority 10 --limit 1" in prefect_yaml(planned,
                                                                                                          "streaming")


def test_schedules_spread_over_the_minute_deterministically():
    assert anchor_for("ads") == datetime(2026, 1, 1, 0, 0, zlib.crc32(b"ads") % 60, tzinfo=UTC)
    seconds = {anchor_for(f"job-{i}").second for i in range(100)}
    assert len(seconds) > 40  # a hundred jobs do not all start at :00


def test_a_job_missing_from_the_jobs_file_is_refused_before_anything(jobs_file):
    jobs = load_jobs(jobs_file)
    with pytest.raises(ConfigurationError, match=r"no job 'nope' in the jobs file \(known: wordcount, ads\); "
                                                 r"nothing was deployed"):
        plan_deployments(jobs, "store", only=["ads", "nope"])
    assert [s.name for s in select_jobs(jobs, ["ads"])] == ["ads"]


def test_the_version_follows_the_jobs_file_entry(tmp_path, jobs_file):
    before = spec_version(load_jobs(jobs_file).job("ads"))
    text = jobs_file.read_text().replace("approval_timeout: 10m", "approval_timeout: 20m")
    changed = tmp_path / "changed.yaml"
    changed.write_text(text)
    assert spec_version(load_jobs(changed).job("ads")) != before
    assert spec_version(load_jobs(changed).job("wordcount")) == spec_version(load_jobs(jobs_file).job("wordcount"))


def test_prefect_yaml_declares_the_same_deployments_with_anchors(jobs_file):
    planned, _ = plan_deployments(load_jobs(jobs_file), "store", job_variables={"command": "python -m x"})
    text = prefect_yaml(planned, pool="streaming")
    assert "&work_pool" in text and "*work_pool" in text and "&one_run_at_a_time" in text
    doc = yaml.safe_load(text)
    by_name = {d["name"]: d for d in doc["deployments"]}
    assert {d["work_pool"]["name"] for d in doc["deployments"]} == {"streaming"}
    assert by_name["ads"]["work_pool"]["job_variables"] == {
        "command": "python -m x", "env": {"PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING",
                                          "PREFECT_CLIENT_SERVER_VERSION_CHECK_ENABLED": "false",
                                          "DAEDALUS_NO_SUSPENSION_OBSERVER": "true"}}
    assert by_name["scale-job"]["work_pool"]["job_variables"] == {"command": "python -m x"}
    assert by_name["ads"]["work_pool"] in doc["definitions"]["work_pools"].values()
    assert len(by_name) == len(planned)
    ads = by_name["ads"]
    assert ads["entrypoint"] == "daedalus.flows.mape_k.mape_k"
    assert ads["concurrency_limit"] == {"limit": 1, "collision_strategy": COLLISION}
    assert ads["schedules"] == [{"interval": 60.0, "anchor_date": anchor_for("ads").isoformat()}]
    assert ads["work_pool"]["name"] == "streaming" and ads["parameters"]["job"] == "ads"
    assert "schedules" not in by_name["approve-scale"]


def test_local_paths_become_absolute_urls_do_not():
    assert absolute("s3://bucket/knowledge") == "s3://bucket/knowledge"
    assert absolute("rel/dir") == os.path.join(os.getcwd(), "rel/dir")


def test_the_repository_prefect_yaml_declares_the_flows():
    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    entrypoints = {d["entrypoint"] for d in doc["deployments"]}
    assert {"daedalus.flows.approval.approve_scale", "daedalus.flows.approval.scale_job",
            "daedalus.flows.dashboards.fleet_overview",
            "daedalus.flows.mape_k.mape_k"} <= entrypoints
    for d in doc["deployments"]:
        module, name = d["entrypoint"].rsplit(".", 1)
        assert hasattr(__import__(module, fromlist=[name]), name), d["entrypoint"]
        assert d["work_pool"]["name"] == doc["definitions"]["work_pools"]["process"]["name"]
    loop = next(d for d in doc["deployments"] if d["entrypoint"] == "daedalus.flows.mape_k.mape_k")
    assert loop["concurrency_limit"] == {"limit": 1, "collision_strategy": COLLISION}
    assert loop["schedules"][0]["interval"] == 60


def test_deploy_warns_when_a_local_sqlite_server_gets_more_than_it_takes():
    # Issue 36: three jobs and the pipeline on SQLite left 64 "database is locked" tracebacks in 20 minutes.
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    from daedalus.deployments.deploy import SQLITE_MAX_JOBS, sqlite_warning

    local = "http://127.0.0.1:4200/api"
    with temporary_settings(updates={PREFECT_SERVER_DATABASE_CONNECTION_URL: "sqlite+aiosqlite:////tmp/p.db"}):
        warning = sqlite_warning(local, 3, pipeline=True)
        assert warning is not None and "3 one-minute loops and the Spark pipeline" in warning
        assert "PostgreSQL" in warning
        assert sqlite_warning(local, SQLITE_MAX_JOBS, pipeline=False) is None
        assert "11 one-minute loops" in sqlite_warning(local, SQLITE_MAX_JOBS + 1, pipeline=False)
        assert sqlite_warning("https://prefect.example.com/api", 500, pipeline=True) is None  # not judged
    with temporary_settings(updates={PREFECT_SERVER_DATABASE_CONNECTION_URL: "postgresql+asyncpg://p@db/prefect"}):
        assert sqlite_warning(local, 500, pipeline=True) is None
