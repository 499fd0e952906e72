"""The Flink scalers against a fake JobManager: what they send, exactly once, and what the ledger says on faults.

`flink-rest` sets every vertex's resource requirements (`PUT /jobs/:id/resource-requirements`) after reading them:
a target already asked for is never asked for again. Faults (409, 5xx, unreachable, a job gone or resubmitted)
end in one clear ledger entry and never in a second request for the same change.
"""

from __future__ import annotations

import json

import pytest
from fake_jobmanager import FakeJob, FakeJobManager

from daedalus.connectors.flink_rest import FlinkReactiveScaler, FlinkRestScaler
from daedalus.connectors.jobs import parse_jobs
from daedalus.connectors.targets import scaler as build_scaler
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.execute import apply
from daedalus.models.types import Decision
from daedalus.runtime.ports import free_port

NAME = "daedalus-demo"
JID = "a" * 32


@pytest.fixture
def jm():
    server = FakeJobManager(jobs=[FakeJob(JID, NAME)])
    yield server
    server.close()


def _scaler(url: str) -> FlinkRestScaler:
    return FlinkRestScaler(url, NAME, ready_timeout_s=5, sleep=lambda s: None)


def _decision(n: int, current: int, target: int) -> Decision:
    return Decision(f"d-{n}", 1000.0 + n, "scale-out" if target > current else "scale-in", current, target, ("test",))


def test_a_rescale_sets_every_vertex_once_and_waits_until_it_runs(jm):
    scaler = _scaler(jm.url)
    assert scaler.current(NAME) == 1
    message = scaler.scale(NAME, 3, "d-1")
    assert "1 → 3" in message and "running at 3" in message
    assert jm.puts() == [(f"/jobs/{JID}/resource-requirements",
                          {v: {"parallelism": {"lowerBound": 1, "upperBound": 3}} for v in jm.jobs[0].vertices})]
    assert scaler.current(NAME) == 3


def test_a_target_already_asked_for_is_not_asked_for_again(jm):
    scaler = _scaler(jm.url)
    scaler.scale(NAME, 2, "d-1")
    again = scaler.scale(NAME, 2, "d-1")  # replayed after a crash, or a second decision for the same target
    assert "already asks for parallelism 2" in again
    assert len(jm.puts()) == 1


def test_the_ledger_says_executed_once_even_when_the_loop_applies_a_decision_twice(jm):
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    scaler = _scaler(jm.url)
    first = apply(_decision(1, 1, 2), k, scaler, 1001.0)
    second = apply(_decision(1, 1, 2), k, scaler, 1002.0)
    assert first.state == "executed" and second.message == "already applied: not applying twice"
    assert len(jm.puts()) == 1


def test_a_job_resubmitted_under_a_new_id_is_found_by_its_name(jm):
    scaler = _scaler(jm.url)
    scaler.scale(NAME, 2, "d-1")
    jm.jobs[0].state = "CANCELED"
    jm.jobs.append(FakeJob("b" * 32, NAME, parallelism=2, upper=2))
    assert scaler.current(NAME) == 2
    scaler.scale(NAME, 1, "d-2")
    assert jm.puts()[-1][0] == f"/jobs/{'b' * 32}/resource-requirements"


def test_no_running_job_of_that_name_fails_naming_the_job_in_the_ledger(jm):
    jm.jobs[0].state = "FAILED"
    jm.jobs.append(FakeJob("c" * 32, "another-job"))
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    action = apply(_decision(1, 1, 2), k, _scaler(jm.url), 1001.0)
    assert action.state == "failed"
    assert f"no running job called {NAME!r}" in action.message and "another-job (RUNNING)" in action.message
    assert k.entry("d-1").state == "failed" and jm.puts() == []
    with pytest.raises(ConnectorError, match="no running job called"):
        _scaler(jm.url).current(NAME)


def test_two_live_jobs_of_one_name_are_not_guessed_between(jm):
    jm.jobs.append(FakeJob("d" * 32, NAME))
    with pytest.raises(ConnectorError, match="2 live jobs are called"):
        _scaler(jm.url).scale(NAME, 2, "d-1")
    assert jm.puts() == []


def test_5xx_is_retried_as_the_same_absolute_request(jm):
    jm.faults = [("PUT", f"/jobs/{JID}/resource-requirements", 503), ("PUT", f"/jobs/{JID}", 502)]
    message = _scaler(jm.url).scale(NAME, 2, "d-1")
    assert "running at 2" in message
    bodies = {json.dumps(body, sort_keys=True) for _, body in jm.puts()}
    assert len(jm.puts()) == 3 and len(bodies) == 1  # the same requirements, set once in effect


def test_5xx_that_persists_is_a_failed_action_and_the_next_loop_does_not_ask_twice(jm):
    jm.faults = [("PUT", f"/jobs/{JID}/resource-requirements", 500)] * 4
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    action = apply(_decision(1, 1, 2), k, _scaler(jm.url), 1001.0)
    assert action.state == "failed"
    assert "answered HTTP 500" in action.message and "4 times" in action.message
    assert k.last_action is None  # refused: nothing changed, the loop may decide again
    again = apply(_decision(2, 1, 2), k, _scaler(jm.url), 1061.0)
    assert again.state == "executed" and len(jm.puts()) == 5


def test_409_rereads_and_fails_with_flinks_message_when_not_asked_for(jm):
    jm.faults = [("PUT", f"/jobs/{JID}/resource-requirements", 409)]
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    action = apply(_decision(1, 1, 2), k, _scaler(jm.url), 1001.0)
    assert action.state == "failed"
    assert "refused with HTTP 409" in action.message and "scripted 409" in action.message
    assert len(jm.puts()) == 1


def test_409_after_a_concurrent_request_for_the_same_target_is_one_request_in_effect(jm):
    # Between our read and our PUT another request for the same parallelism landed: Flink refuses ours with 409;
    # the re-read finds the target asked for, and the action is done, not failed and not repeated.
    jm.lost = [("PUT", f"/jobs/{JID}/resource-requirements", 409)]
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    action = apply(_decision(1, 1, 2), k, _scaler(jm.url), 1001.0)
    assert action.state == "executed" and "running at 2" in action.message
    assert len(jm.puts()) == 1


def test_a_5xx_after_the_request_took_effect_repeats_the_same_absolute_request_only(jm):
    # The answer was lost: the retry sets the same requirements again (absolute, not "one more"), so the job runs at
    # 2, not 3, and the next decision for 2 reads them and sends nothing.
    jm.lost = [("PUT", f"/jobs/{JID}/resource-requirements", 503)]
    scaler = _scaler(jm.url)
    assert "running at 2" in scaler.scale(NAME, 2, "d-1")
    assert len(jm.puts()) == 2 and jm.puts()[0] == jm.puts()[1]
    assert "already asks for parallelism 2" in scaler.scale(NAME, 2, "d-2") and len(jm.puts()) == 2


def test_an_unreachable_jobmanager_is_a_failed_action_naming_it():
    url = f"http://127.0.0.1:{free_port()}"
    k = Knowledge.new(NAME, LoopConfig(max_scaleout=4))
    action = apply(_decision(1, 1, 2), k, _scaler(url), 1001.0)
    assert action.state == "failed" and f"Flink JobManager {url} unreachable" in action.message
    with pytest.raises(ConnectorError, match="unreachable"):
        _scaler(url).current(NAME)


def test_dry_run_and_limits_send_nothing(jm):
    scaler = _scaler(jm.url)
    assert scaler.scale(NAME, 2, "d-1", dry_run=True).startswith("dry run: would set")
    jm.jobs[0].max_parallelism = 4
    with pytest.raises(ConnectorError, match=r"outside 1\.\.4"):
        scaler.scale(NAME, 5, "d-2")
    assert jm.puts() == []


def test_a_non_parallel_vertex_keeps_its_maximum_while_the_others_take_the_target():
    requirements = {"source": {}, "work": {}, "aggregate": {}}
    limits = {"source": 128, "work": 128, "aggregate": 1}
    assert FlinkRestScaler._wanted(requirements, limits, 4) == {"source": 4, "work": 4, "aggregate": 1}


def test_a_rescale_not_running_in_time_is_said_so(jm):
    jm.apply_after = 10_000
    message = FlinkRestScaler(jm.url, NAME, ready_timeout_s=0.5, sleep=lambda s: None).scale(NAME, 2, "d-1")
    assert "not running at 2 within 0.5 s" in message


def _spec(kind: str, path: str | None) -> dict:
    return {"name": "demo", "engine": "flink", "prometheus": {"url": "http://prom:9090"},
            "selector": {"job_name": "daedalus_demo"}, "source": {"topic": "t"}, "worker_label": "tm_id",
            "scale_target": {"kind": kind, "name": NAME, **({"path": path} if path else {})}}


def test_the_jobs_file_builds_both_flink_scalers_and_checks_their_address(tmp_path):
    spec = parse_jobs({"jobs": [_spec("flink-rest", "http://jobmanager:8081")]}).job("demo")
    assert spec.worker_label == "tm_id"
    assert isinstance(build_scaler(spec, str(tmp_path)), FlinkRestScaler)
    spec = parse_jobs({"jobs": [_spec("flink-reactive", str(tmp_path))]}).job("demo")
    assert isinstance(build_scaler(spec, str(tmp_path)), FlinkReactiveScaler)
    with pytest.raises(ConfigurationError, match=r"scale_target\.path: a flink-rest target needs the JobManager"):
        build_scaler(parse_jobs({"jobs": [_spec("flink-rest", None)]}).job("demo"), str(tmp_path))
    with pytest.raises(ConfigurationError, match="worker_label"):
        parse_jobs({"jobs": [{**_spec("flink-rest", "http://jm:8081"), "worker_label": "tm id"}]})


def test_the_reactive_scaler_applies_a_decision_once(tmp_path, jm):
    (tmp_path / "state.json").write_text(json.dumps({"taskmanagers": 1, "decision": "d-1", "rest": jm.url,
                                                     "max": 3, "running": True}))
    reactive = FlinkReactiveScaler(tmp_path, NAME, ready_timeout_s=1, sleep=lambda s: None)
    assert "already applied" in reactive.scale(NAME, 2, "d-1")
    with pytest.raises(ConnectorError, match=r"outside 1\.\.3"):
        reactive.scale(NAME, 4, "d-2")
    assert not (tmp_path / "control.json").exists()
    (tmp_path / "state.json").write_text(json.dumps({"running": False}))
    with pytest.raises(ConnectorError, match="not running"):
        reactive.current(NAME)
