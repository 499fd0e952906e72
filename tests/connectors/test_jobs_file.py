"""The jobs file: every error names the file, the job and the field; unknown keys are errors."""

from __future__ import annotations

import pytest
import yaml

from daedalus.connectors.jobs import load_jobs, parse_jobs
from daedalus.models.errors import ConfigurationError

GOOD = {
    "defaults": {"prometheus": {"url": "http://prometheus.monitoring:9090"}, "target_recovery_time": "10m"},
    "jobs": [{
        "name": "ysb-ads", "engine": "flink", "selector": {"namespace": "streaming", "job_name": "ysb"},
        "source": {"topic": "ad-events"},
        "scale_target": {"kind": "Deployment", "namespace": "streaming", "name": "flink-taskmanager"},
        "scaleout": {"min": 2, "max": 12, "max_step": 4}, "checkpoint_interval": "10s", "mode": "approve",
        "blackout": [{"start": "22:00", "end": "02:00"}],
    }],
}


def job(**changes):
    entry = {**GOOD["jobs"][0], **changes}
    return {"defaults": GOOD["defaults"], "jobs": [entry]}


def test_a_good_file_maps_onto_the_loop_settings(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    spec = load_jobs(path).job("ysb-ads")
    cfg = spec.loop_config()
    assert (cfg.min_scaleout, cfg.max_scaleout, cfg.max_step, cfg.mode) == (2, 12, 4, "approve")
    assert (cfg.target_recovery_time, cfg.checkpoint_interval) == (600.0, 10.0)
    from datetime import time

    assert spec.blackout[0].contains(time(23, 30)) and spec.blackout[0].contains(time(1, 0))
    assert not spec.blackout[0].contains(time(12, 0))
    assert (cfg.max_rescales_per_hour, cfg.rescale_budget) == (3.0, 6)  # the default: 6 in any 2 hours


def test_the_rescale_budget_maps_from_the_jobs_file():
    spec = parse_jobs(job(max_rescales_per_hour=1.5)).job("ysb-ads")
    assert (spec.loop_config().max_rescales_per_hour, spec.loop_config().rescale_budget) == (1.5, 3)


def test_the_loop_settings_are_loopconfigs_own_names_and_defaults():
    import dataclasses

    from daedalus.connectors.jobs import JobSpec
    from daedalus.models.config import JOBS_FILE, LoopConfig

    declared = {f.name: f.default for f in dataclasses.fields(LoopConfig) if JOBS_FILE in f.metadata}
    assert set(declared) == {"partitions", "target_recovery_time", "checkpoint_interval", "scale_in_interval", "mode",
                             "approval_timeout", "manual_hold", "planner", "latency_slo", "ceiling",
                             "max_rescales_per_hour"}
    assert {name: JobSpec.model_fields[name].default for name in declared} == declared
    spec = parse_jobs(job(manual_hold="2m", ceiling="20m", partitions=24, planner="daedalus-paper"), "j.yaml").jobs[0]
    cfg = spec.loop_config()
    assert (cfg.manual_hold, cfg.ceiling, cfg.partitions, cfg.planner) == (120.0, 1200.0, 24, "daedalus-paper")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (job(engine="storm"), "job 'ysb-ads' (jobs[0]), field engine: Input should be"),
        (job(selector={}), "field selector: engine 'flink' needs labels"),
        (job(prometheus={"url": "not a url"}), "field prometheus.url: Input should be a valid URL"),
        (job(scale_target={"kind": "Pod", "name": "x"}), "field scale_target.kind: Input should be"),
        (job(surprise=1), "field surprise: Extra inputs are not permitted"),
        (job(scaleout={"min": 5, "max": 2}), "field scaleout: Value error, max (2) must be ≥ min (5)"),
        (job(checkpoint_interval="soon"), "field checkpoint_interval: Value error, not a duration: 'soon'"),
        (job(queries={"bogus": "up"}), "field queries.bogus: not a query the monitor uses"),
        (job(selector={"bad label": "x"}), "field selector"),
        (job(name="Bad_Name"), "field name: 'Bad_Name' must be a lowercase RFC 1123 label"),
        (job(partitions=0), "field partitions: Input should be greater than or equal to 1"),
        (job(manual_hold="-5m"), "field manual_hold"),
        (job(rescale_price=10), "field rescale_price: Extra inputs are not permitted"),  # not a jobs-file setting
        (job(max_rescales_per_hour=0), "field max_rescales_per_hour: Input should be greater than 0"),
    ],
)
def test_each_error_names_file_job_and_field(data, expected):
    with pytest.raises(ConfigurationError) as info:
        parse_jobs(data, "jobs.yaml")
    assert str(info.value).startswith("jobs.yaml: ") and expected in str(info.value), str(info.value)


def test_all_errors_are_collected_and_duplicates_refused():
    data = {"jobs": [GOOD["jobs"][0] | {"prometheus": {"url": "http://p:9090"}},
                     GOOD["jobs"][0] | {"prometheus": {"url": "http://p:9090"}},
                     {"name": "x", "engine": "flink"}]}
    with pytest.raises(ConfigurationError) as info:
        parse_jobs(data, "f.yaml")
    lines = str(info.value).splitlines()
    assert "f.yaml: job 'x' (jobs[2]), field scale_target: Field required" in lines
    assert "f.yaml: job 'ysb-ads' is defined twice" in lines


def test_a_simulated_job_scales_the_simulator_unless_told_otherwise():
    sim = parse_jobs({"jobs": [{"name": "demo", "engine": "sim"}]}, "jobs.yaml").job("demo")
    assert sim.scale_target.kind == "sim"
    with pytest.raises(ConfigurationError) as info:  # one error for a bad name, not a second for the default target
        parse_jobs({"jobs": [{"name": "Bad_Name", "engine": "sim"}]}, "jobs.yaml")
    assert len(str(info.value).splitlines()) == 1 and "field name: 'Bad_Name'" in str(info.value)
    with pytest.raises(ConfigurationError, match="engine 'sim' scales through kind 'sim'"):
        parse_jobs({"jobs": [{"name": "demo", "engine": "sim", "scale_target": {"kind": "Deployment", "name": "d"}}]})


def test_unknown_job_and_unreadable_files(tmp_path):
    good = parse_jobs(GOOD, "jobs.yaml")
    with pytest.raises(ConfigurationError, match="no job 'nope'; known: ysb-ads"):
        good.job("nope")
    with pytest.raises(ConfigurationError, match="cannot read the jobs file"):
        load_jobs(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("jobs: [unclosed")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        load_jobs(tmp_path / "bad.yaml")
    with pytest.raises(ConfigurationError, match="nothing else"):
        parse_jobs({"jobs": [], "extra": 1}, "x.yaml")
