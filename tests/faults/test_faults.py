"""Fault injection through the real `mape-k` flow (`daedalus step --at`): a real Prometheus holding backfilled bad
data, the loopback Kubernetes API answering faults, runs killed between plan and execute, between patch and record,
and mid-write (issue 11).

Every case ends with the same checks: the step did not crash (exit 0), it patched nothing or exactly once, the
reason is shown (in the JSON and on the console), the stored ledger has an entry for an actionable decision and
none left `executing`, and no secret (the Prometheus bearer token from the environment, the kubeconfig's token, a
password in a URL) is in any output: stdout, stderr, the JSON, the store's files, the Prefect API's logs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.connectors.connectors_support import needs_prometheus
from tests.faults import faults_support as fs
from tests.faults.faults_support import AT, DEP, Fault, Kube, Step

pytestmark = [needs_prometheus, pytest.mark.slow]


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with fs.prometheus(tmp_path_factory.mktemp("prom")) as url:
        yield url


class Run:
    """One test's store, jobs file and loopback API; every step's output is kept for the secret check."""

    def __init__(self, tmp: Path, prom_url: str) -> None:
        self.tmp, self.prom_url = tmp, prom_url
        self.store = tmp / "store"
        self.steps: list[Step] = []
        self.logs_before = set(fs.prefect_logs())  # the Prefect API's logs are the session's: this test's are new
        self.kube: Kube | None = None
        self._kube_cm: Any = None
        self.checked = False

    def start_kube(self, replicas: int = 3) -> Kube:
        self._kube_cm = fs.kube(self.tmp / "kube", replicas)
        self.kube = self._kube_cm.__enter__()
        return self.kube

    def jobs(self, *entries: dict[str, Any]) -> Path:
        return fs.write_jobs(self.tmp / "jobs.yaml", *entries)

    def step(self, job: str, at: float | None = AT, **kw: Any) -> Step:
        jobs = self.tmp / "jobs.yaml"
        out = self.tmp / f"step-{len(self.steps)}.json"
        if kw:
            s = fs.step_process(job, jobs, self.store, at, self.kube, out, **kw)
        else:
            s = fs.step(job, jobs, self.store, at, self.kube, out)
        self.steps.append(s)
        return s

    def close(self) -> None:
        if self._kube_cm is not None:
            self._kube_cm.__exit__(None, None, None)

    def no_secret(self) -> None:
        if self.checked:  # once: the teardown does not check again what a test checked itself
            return
        self.checked = True
        texts = [t for s in self.steps for t in s.texts]
        if self.store.exists():
            texts += fs.stored_texts(self.store)
        texts += [line for line in fs.prefect_logs() if line not in self.logs_before]
        assert fs.leaked(texts) == []


@pytest.fixture
def run(tmp_path: Path, prom_url: str, prefect_harness: None) -> Any:
    r = Run(tmp_path, prom_url)
    try:
        yield r
        r.no_secret()
    finally:
        r.close()


def shown(s: Step, *needles: str) -> None:
    """Each needle is in the decision's reasons (the JSON) and on the console."""
    assert s.exit_code == 0, s.output
    for needle in needles:
        assert needle in s.reasons, (needle, s.reasons)
        assert needle in " ".join(s.stdout.split()), (needle, s.stdout)


# --- the 14 bad-input classes, against the real Prometheus ------------------------------------------------------

HOLD = {"hold"}
INJECTIONS = {  # selector or topic values that would widen the query if they were pasted in unescaped
    "inj-quote": {"selector": {"namespace": 'ok", cluster=~".+'}},
    "inj-brace": {"selector": {"namespace": 'ok"} or vector(1) or up{namespace="ok'}},
    "inj-vector": {"selector": {"namespace": "ok"}, "source": {"topic": 'ok-events"}[1m])) or vector(1) #'}},
}
BAD_INPUT = [
    # (job, its entry's overrides, the Deployment's replicas, decisions allowed, reasons expected)
    ("nan", {}, 3, HOLD, ["NaN: pod tm-0 reports NaN throughput or CPU at 1 steps"]),
    ("negative", {}, 3, HOLD, ["tm-1: negative throughput"]),
    ("partial", {}, 3, HOLD, ["partial: pod tm-1 has no sample at 2 steps between its first and last"]),
    ("stale", {}, 3, HOLD, ["stale: pod tm-2 has no sample within 30s of", "while the job counts 3 workers"]),
    ("reset", {}, 3, HOLD, ["counter reset: 1 reset(s) within the last 600 s"]),
    ("empty", {}, 3, HOLD, ["no data for lag: `sum(flink_taskmanager_job_task_operator_pendingRecords"
                            '{cluster="c1", namespace="empty"})` matched no series']),
    ("misspelt", {"selector": {"namespace": "okk"}}, 3, HOLD,
     ["metrics unavailable: prometheus", "no current scaleout; no data for workload", "matched no series"]),
    ("cpuhigh", {}, 3, HOLD, ["tm-0: CPU outside [0, 1] (min 0.180, max 1.700)"]),
    ("inj-quote", INJECTIONS["inj-quote"], 3, HOLD,
     ["no current scaleout", r'namespace="ok\", cluster=~\".+"']),
    ("inj-brace", INJECTIONS["inj-brace"], 3, HOLD,
     ["no current scaleout", r'namespace="ok\"} or vector(1) or up{namespace=\"ok"']),
    ("inj-vector", INJECTIONS["inj-vector"], 3, HOLD,
     [r'no data for workload: `sum(rate(kafka_server_brokertopicmetrics_messagesin_total{topic="ok-events\"}[1m])) '
      r'or vector(1) #"}[60s]))` matched no series']),
    # `.*` after `=~` matches the namespace literally named `.*` (2 TaskManagers, the Deployment at 2) and no other:
    # unescaped it would match every namespace, 3 TaskManagers each, and hold on the disagreement and duplicates.
    ("regex", {"selector": {"namespace": ".*"}, "queries": fs.regex_queries()}, 2, {"no-change", "scale-in"}, []),
    ("dup", {}, 3, HOLD, ["duplicate series: pod tm-1 is scraped 2× (instance=a:9249, instance=b:9249)"]),
    ("idle", {}, 3, {"hold", "no-change", "scale-in"}, []),
    ("overrun", {}, 3, HOLD, ["throughput 4,002/s above workload 1,000/s plus what the backlog of 20,000 tuples",
                              "inconsistent metrics"]),
    ("disagree", {"selector": {"namespace": "ok"}}, 8, HOLD,
     ["the scale target reports 8 but the metrics show 3 workers", "holding until they agree"]),
]


@pytest.mark.parametrize(("name", "overrides", "replicas", "kinds", "reasons"), BAD_INPUT,
                         ids=[c[0] for c in BAD_INPUT])
def test_bad_input_holds_or_stays_within_limits(run: Run, name: str, overrides: dict[str, Any], replicas: int,
                                               kinds: set[str], reasons: list[str]) -> None:
    kube = run.start_kube(replicas)
    ns = overrides.get("selector", {}).get("namespace", name)
    run.jobs(fs.job(name, run.prom_url, namespace=ns, **overrides))
    s = run.step(name)
    assert s.exit_code == 0, s.output
    assert s.kind in kinds, (s.kind, s.reasons)
    shown(s, *reasons)
    if s.kind == "scale-in":  # the idle job: to the minimum, never towards the maximum
        assert s.report["decision"]["target"] == 1 and len(kube.changes()) == 1
    else:
        assert kube.patches() == [] and kube.replicas == replicas
    if name == "regex":
        assert s.report["decision"]["current"] == 2
    fs.check_ledger(run.store, name, s.report)


def scaled_in(s: Step) -> int:
    """The target of the sound job's first decision: a scale-in from 3 (one TaskManager carries its load; how far in
    is the planner's choice)."""
    assert s.exit_code == 0 and s.kind == "scale-in", (s.kind, s.reasons, s.output)
    target = s.report["decision"]["target"]
    assert s.report["decision"]["current"] == 3 and 1 <= target < 3
    return target


def test_a_job_whose_metrics_stopped_holds(run: Run) -> None:
    """Stale as a whole: the job's newest samples are 400 s old (Prometheus repeats them for its 5-minute lookback,
    then has nothing)."""
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    s = run.step("ok", at=fs.T0 + fs.STEP * (fs.SAMPLES - 1) + 400)
    assert s.kind == "hold", s.reasons
    shown(s, "stale: pod tm-0 has no sample within 30s of", "while the job counts 3 workers")
    assert kube.patches() == []
    fs.check_ledger(run.store, "ok", s.report)


def test_a_sound_job_scales_once_and_records_it(run: Run) -> None:
    """The baseline the faults below break: the first step scales the sound job in from 3, once."""
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    s = run.step("ok")
    t = scaled_in(s)
    assert s.report["action"] == "executed" and s.report["executed"] is True
    assert kube.changes() == [(3, t)] and len(kube.patches()) == 1
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert entry.state == "executed" and f"scaled Deployment streaming/flink-taskmanager 3 → {t}" in entry.message


# --- refused at load: credentials in the URL, path traversal in names ------------------------------------------

@pytest.mark.parametrize(("name", "overrides", "message"), [
    ("ok", {"prometheus": {"url": f"http://daedalus:{fs.URL_PASSWORD}@127.0.0.1:9090"}},
     "field prometheus.url: credentials do not belong in the URL"),
    ("..", {"selector": {"namespace": "ok"}}, "field name: '..' must be a lowercase RFC 1123 label"),
    ("ok", {"scale_target": {"namespace": ".."}}, "field scale_target.namespace: '..' must be a lowercase RFC 1123"),
    ("ok", {"scale_target": {"name": "../../deployments/victim"}},
     "field scale_target.name: '../../deployments/victim' must be a lowercase RFC 1123 subdomain"),
], ids=["password-in-url", "dotdot-job", "dotdot-namespace", "dotdot-name"])
def test_refused_at_load_with_the_field_named(run: Run, name: str, overrides: dict[str, Any], message: str) -> None:
    kube = run.start_kube(3)
    run.jobs(fs.job(name, run.prom_url, **overrides))
    s = run.step(name)
    assert s.exit_code == 1 and s.report is None
    assert message in " ".join(s.output.split()), s.output
    assert kube.fake.requests == [] and not run.store.exists()  # nothing was touched, nothing was created


# --- Prometheus down, slow, failing -------------------------------------------------------------------------------

def test_prometheus_down_holds(run: Run) -> None:
    kube = run.start_kube(3)
    url = fs.nothing_listening()
    run.jobs(fs.job("ok", url))
    s = run.step("ok")
    assert s.kind == "hold"
    shown(s, f"metrics unavailable: prometheus {url} unreachable or timing out after 2 retries (ConnectionError")
    assert kube.patches() == [] and s.report["decision"]["current"] == 3  # the scale-out the scaler reports
    fs.check_ledger(run.store, "ok", s.report)


def test_a_slow_prometheus_holds_and_the_run_ends_within_its_deadline(run: Run) -> None:
    """The run waits the deadline and ends well before a retry of the whole observation could (3 × the deadline +
    6 s of backoff) or the answer came (60 s): within 3 × the deadline plus what a run takes anyway (measured here,
    on the same machine, with a Prometheus that answers). The bound leaves a run on a loaded machine seconds to spare:
    beside the suite's other workers one took 6.7 s with a deadline of 3 s and a run of 1.4 s (2026-11-27)."""
    deadline = 3.0
    kube = run.start_kube(3)
    run.jobs(fs.job("nan", run.prom_url))
    base = run.step("nan").seconds  # a hold on bad data: every query answered, nothing to execute
    with fs.failing_prometheus(200, delay=60) as url:
        run.jobs(fs.job("ok", url, prometheus={"deadline": f"{deadline:g}s"}))
        s = run.step("ok")
    assert s.kind == "hold"
    shown(s, f"metrics unavailable: metrics too slow: prometheus {url} did not answer",
          f"within the observation's deadline of {deadline:g} s (prometheus.deadline)")
    assert deadline <= s.seconds < 3 * deadline + base, f"{s.seconds:.1f} s: deadline {deadline:g} s, run {base:.1f} s"
    assert kube.patches() == []
    fs.check_ledger(run.store, "ok", s.report)


def test_prometheus_5xx_holds(run: Run) -> None:
    kube = run.start_kube(3)
    with fs.failing_prometheus(503) as url:
        run.jobs(fs.job("ok", url))
        s = run.step("ok")
    assert s.kind == "hold"
    shown(s, f"metrics unavailable: prometheus {url}: the ", "query failed (HTTP Status Code 503")
    assert kube.patches() == []
    fs.check_ledger(run.store, "ok", s.report)


def test_a_5xx_that_echoes_the_request_headers_shows_no_token(run: Run) -> None:
    run.start_kube(3)
    with fs.failing_prometheus(503, echo=True) as url:
        run.jobs(fs.job("ok", url))
        s = run.step("ok")
    assert s.kind == "hold" and "HTTP Status Code 503" in s.reasons
    run.no_secret()


# --- the Kubernetes API refusing, conflicting, failing, timing out ------------------------------------------------

def _scale_in(run: Run, replicas: int = 3, **scale_target: Any) -> tuple[Kube, Step]:
    kube = run.kube or run.start_kube(replicas)
    run.jobs(fs.job("ok", run.prom_url, **({"scale_target": scale_target} if scale_target else {})))
    return kube, run.step("ok")


@pytest.mark.parametrize(("fault", "expected"), [
    (Fault("PATCH", "/scale", 403, 'deployments.apps "flink-taskmanager" is forbidden: User "system:serviceaccount:'
                                   'daedalus:daedalus-worker" cannot patch resource "deployments/scale"'),
     'patch refused: 403 Forbidden: deployments.apps "flink-taskmanager" is forbidden'),
    (Fault("PATCH", "/scale", 422, 'Scale.autoscaling "flink-taskmanager" is invalid'),
     'patch refused: 422 Unprocessable Entity: Scale.autoscaling "flink-taskmanager" is invalid'),
], ids=["403", "422"])
def test_a_refused_patch_is_a_failed_action_with_the_api_message(run: Run, fault: Fault, expected: str) -> None:
    kube = run.start_kube(3)
    kube.fake.faults.append(fault)
    _, s = _scale_in(run)
    assert (s.kind, s.report["action"], s.report["executed"]) == ("scale-in", "failed", False)
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert expected in entry.message
    assert len(kube.patches()) == 1 and kube.changes() == [] and kube.replicas == 3


def test_a_target_the_role_does_not_name_is_forbidden_and_nothing_is_patched(run: Run) -> None:
    kube, s = _scale_in(run, name="victim")
    assert s.report["action"] == "failed"
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert ('Deployment streaming/victim: patch refused: 403 Forbidden: deployments.apps "victim" is forbidden: '
            'User "system:serviceaccount:daedalus:daedalus-worker" cannot get resource "deployments/scale"'
            ) in entry.message
    assert kube.patches() == [] and kube.replicas == 3


def test_a_missing_target_is_a_failed_action(run: Run) -> None:
    kube = run.start_kube(3)
    del kube.fake.objects[DEP]
    _, s = _scale_in(run)
    assert s.report["action"] == "failed"
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert 'patch refused: 404 Not Found: deployments.apps "flink-taskmanager" not found' in entry.message
    assert kube.patches() == []


@pytest.mark.parametrize(("faults", "patches", "action"), [
    ([Fault("PATCH", "/scale", 409, "the object has been modified")], 2, "executed"),
    ([Fault("PATCH", "/scale", 503, "etcdserver: leader changed")] * 2, 3, "executed"),
    ([Fault("PATCH", "/scale", 503, "unavailable")] * 4, 4, "failed"),
    ([Fault("GET", "/scale", 500, "internal"), Fault("PATCH", "/scale", 504, "gateway timeout", applied=True)], 2,
     "executed"),
], ids=["409-retried", "5xx-retried", "5xx-persistent", "504-after-the-write"])
def test_conflicts_and_5xx_are_retried_and_apply_at_most_once(run: Run, faults: list[Fault], patches: int,
                                                             action: str) -> None:
    kube = run.start_kube(3)
    kube.fake.faults += faults
    _, s = _scale_in(run)
    assert s.report["action"] == action, s.report
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert len(kube.patches()) == patches
    assert kube.changes() == ([(3, scaled_in(s))] if action == "executed" else [])
    if action == "failed":
        assert "patch refused: 503 Service Unavailable: unavailable" in entry.message and kube.replicas == 3


@pytest.mark.parametrize("applied", [False, True], ids=["lost-request", "lost-answer"])
def test_a_patch_that_times_out_is_retried_and_applies_once(run: Run, applied: bool) -> None:
    """The scaler's request timeout is 10 s: the API answers after 11 s, having written the patch or not."""
    kube = run.start_kube(3)
    kube.fake.faults.append(Fault("PATCH", "/scale", 200, delay=11.0, applied=applied))
    _, s = _scale_in(run)
    assert s.report["action"] == "executed"
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    t = scaled_in(s)
    assert kube.changes() == [(3, t)]  # one write, whichever request carried it
    if applied:  # the retry carried the resourceVersion it read: 409, read again, already there
        assert [p.code for p in kube.patches()][1:] == [409]
        assert f"already at {t}: nothing to patch" in entry.message


@pytest.mark.parametrize("failing_reads", [4, 8], ids=["back-at-once", "gone-for-the-run"])
def test_an_api_server_gone_after_the_write_is_not_recorded_as_failed(run: Run, failing_reads: int) -> None:
    """The patch is written, its answer is lost (a 504 from the way back), and the reads after it fail: the scaler
    gives up without knowing whether its write took effect. The target's own scale-out settles it, now if it can be
    read (4 failing reads: the scaler's), else in the next run (8: the scaler's and the check after it); never as
    "failed"."""
    kube = run.start_kube(3)
    kube.fake.faults.append(Fault("PATCH", "/scale", 504, "gateway timeout", applied=True))

    def gone(request: Any, when: str) -> None:  # from the write on, reads fail (the retried patch: 409)
        if request.method == "PATCH" and when == "received" and not kube.patches():
            kube.fake.faults += [Fault("GET", "/scale", 503, "unavailable")] * failing_reads

    kube.fake.on_request = gone
    _, s = _scale_in(run)
    kube.fake.on_request = None
    t = scaled_in(s)
    assert kube.changes() == [(3, t)] and [p.code for p in kube.patches()] == [504, 409]
    (entry,) = fs.ledger(run.store, "ok")
    if failing_reads == 4:
        assert s.report["action"] == "executed" and entry.state == "executed"
        assert f"the target reports {t} although the scaler failed" in entry.message
        fs.check_ledger(run.store, "ok", s.report)
    else:
        assert s.report["action"] == entry.state == "executing" and "unsettled: " in entry.message
    nxt = run.step("ok", at=AT + 60)  # the API is back: settled, nothing patched again
    assert nxt.kind == "hold" and kube.changes() == [(3, t)]
    shown(nxt, f"the scale target reports {t} but the metrics show 3 workers")
    (entry,) = fs.check_ledger(run.store, "ok", nxt.report)
    assert entry.state == "executed"


# --- runs killed between plan and execute, between patch and record, mid-write -----------------------------------

def _kill_on(kube: Kube, method: str, nth: int, phase: str) -> Any:
    """Start hook: SIGKILL the step's process at the nth request of `method` (when it is received or answered)."""
    seen: list[Any] = []
    holder: dict[str, Any] = {}

    def hook(request: Any, when: str) -> None:
        if request.method != method or when != phase:
            return
        seen.append(request)
        if len(seen) == nth and "proc" in holder:
            os.kill(holder["proc"].pid, signal.SIGKILL)
            holder["killed"] = request

    kube.fake.on_request = hook
    return lambda proc: holder.__setitem__("proc", proc), holder


def _intent(run: Run) -> Any:
    (entry,) = [e for e in fs.ledger(run.store, "ok") if e.state == "executing"]
    return entry


def test_killed_between_plan_and_execute_the_intent_is_abandoned_and_decided_afresh_once(run: Run) -> None:
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    on_start, holder = _kill_on(kube, "GET", 2, "received")  # the scaler's read before its patch: after the intent
    s = run.step("ok", on_start=on_start)
    assert s.exit_code == -signal.SIGKILL and "killed" in holder and s.report is None
    intent = _intent(run)
    assert intent.current == 3 and intent.target < 3 and kube.patches() == []
    kube.fake.on_request = None

    nxt = run.step("ok", at=AT + 60)
    assert any(f"unfinished action {intent.id} (3 → {intent.target}) abandoned: the target reports 3" in n
               for n in nxt.report["notes"])
    assert nxt.kind in ("hold", "no-change") and kube.patches() == []  # the grace period of the intent
    assert fs.ledger(run.store, "ok")[0].state == "abandoned"
    fs.check_ledger(run.store, "ok", nxt.report)

    later = run.step("ok", at=AT + 240)  # past the intent's grace period: decided afresh, applied once
    assert later.report["action"] == "executed" and kube.changes() == [(3, scaled_in(later))]
    assert [e.state for e in fs.check_ledger(run.store, "ok", later.report)] == ["abandoned", "executed"]


def test_killed_between_patch_and_record_the_intent_is_reconciled_never_patched_again(run: Run) -> None:
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    on_start, holder = _kill_on(kube, "PATCH", 1, "answered")
    s = run.step("ok", on_start=on_start)
    assert s.exit_code == -signal.SIGKILL and "killed" in holder
    intent = _intent(run)
    t = intent.target
    assert kube.changes() == [(3, t)] and kube.replicas == t
    kube.fake.on_request = None

    for at in (AT + 60, AT + 240, AT + 480):
        nxt = run.step("ok", at=at)
        assert nxt.kind == "hold" and kube.changes() == [(3, t)], nxt.reasons
        shown(nxt, f"the scale target reports {t} but the metrics show 3 workers")  # both numbers, no patch
        (entry,) = fs.check_ledger(run.store, "ok", nxt.report)
        assert entry.id == intent.id and entry.state == "executed"
    first = run.steps[1].report["notes"]
    assert any(f"unfinished action {intent.id} (3 → {t}) executed: the target reports {t}" in n for n in first)


def _versions(run: Run) -> list[Path]:
    return sorted((run.store / "ok").glob("*.knowledge"))


@pytest.mark.parametrize("damage", ["half-written", "garbled-header", "temporary-file"])
def test_a_damaged_newest_version_falls_back_with_a_warning(run: Run, damage: str) -> None:
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    first = run.step("ok")
    t = scaled_in(first)
    assert first.report["action"] == "executed" and kube.changes() == [(3, t)]
    newest = _versions(run)[-1]
    blob = newest.read_bytes()
    bad = newest.with_name(f"{int(newest.stem) + 1:010d}.knowledge")
    if damage == "half-written":
        bad.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbled-header":
        bad.write_bytes(blob.replace(b"sha256=", b"sha2\xff6=", 1))
    else:
        (newest.parent / ".tmp-0123456789abcdef").write_bytes(blob[: len(blob) // 3])  # died before the rename
    s = run.step("ok", at=AT + 60)
    assert s.exit_code == 0 and s.kind == "hold"
    if damage != "temporary-file":
        warning = f"knowledge version {int(bad.stem)} of 'ok' is unreadable"
        assert warning in " ".join(s.output.split()) or any(warning in line for line in fs.prefect_logs())
    (entry,) = fs.check_ledger(run.store, "ok", s.report)
    assert entry.id == first.report["decision"]["id"] and entry.state == "executed"
    assert kube.changes() == [(3, t)]


def test_the_intent_itself_destroyed_still_patches_nothing_twice(run: Run) -> None:
    """Beyond what the store promises (its writes are atomic): the only version holding an applied intent is torn.
    The run starts afresh with no record of that action, and the target/metrics disagreement still keeps it from
    patching again."""
    kube = run.start_kube(3)
    run.jobs(fs.job("ok", run.prom_url))
    on_start, _ = _kill_on(kube, "PATCH", 1, "answered")
    run.step("ok", on_start=on_start)
    kube.fake.on_request = None
    (only,) = _versions(run)
    t = kube.replicas
    assert kube.changes() == [(3, t)]
    only.write_bytes(only.read_bytes()[:100])
    s = run.step("ok", at=AT + 60)
    assert s.kind == "hold" and kube.changes() == [(3, t)]
    shown(s, f"the scale target reports {t} but the metrics show 3 workers")
    assert fs.check_ledger(run.store, "ok", s.report) == []  # what the torn version held is gone
