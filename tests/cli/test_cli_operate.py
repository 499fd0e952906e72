"""`daedalus status | approve | reject | pause | resume | scale` alone, configured as an operator's shell is: by
DAEDALUS_* environment variables and PREFECT_API_URL, no options (issue 14 item 4)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from daedalus.cli import operate
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import Store
from daedalus.models.knowledge import Knowledge
from daedalus.models.types import LedgerEntry
from tests.cli.cli_support import flat, tiny_app
from tests.ops.conftest import T0, with_proposal

run = tiny_app(operate.status, operate.approve, operate.reject, operate.pause, operate.resume, operate.scale)


@pytest.fixture
def fleet(monkeypatch, jobs_file, store_url) -> None:
    """The jobs file and the store from the environment, as after `export DAEDALUS_…`."""
    monkeypatch.setenv("DAEDALUS_JOBS_FILE", str(jobs_file))
    monkeypatch.setenv("DAEDALUS_STORE", store_url)


def test_status_names_the_jobs_of_the_file_before_any_loop_ran(fleet):
    result = run("status")
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "2 job(s) in" in text and "wordcount" in text and "ads" in text and "approve" in text
    assert "no loop has run yet" in text and "store only: no Prefect API configured" in text


def test_status_without_a_jobs_file_or_a_stored_job_says_how_to_configure_them(tmp_path):
    # Issue 14 item 4: `daedalus status` showed "0 job(s)" for the default folder.
    result = run("status")
    assert result.exit_code == 1
    text = flat(result.output)
    assert "no jobs file configured and no job in the store .daedalus/knowledge (default)" in text
    assert "set DAEDALUS_JOBS_FILE" in text and "daedalus config" in text


def test_status_of_one_job_shows_its_pending_proposal(fleet, jobs_file, store_url):
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    result = run("status", "ads")
    assert result.exit_code == 0, result.output
    assert f"pending proposal {pid}" in flat(result.output)
    ghost = run("status", "ghost")
    assert ghost.exit_code == 1 and "no job 'ghost'; known: wordcount, ads" in flat(ghost.output)
    never_ran = run("status", "wordcount")
    assert never_ran.exit_code == 1 and "nothing stored for job 'wordcount'" in flat(never_ran.output)


def test_status_of_a_job_whose_older_loop_stored_infinite_values(fleet, jobs_file, store_url):
    # Issue 14 item 7: status.json and the ledger may hold Infinity from older runs.
    k = Knowledge.new("wordcount", load_jobs(jobs_file).job("wordcount").loop_config())
    k.record(LedgerEntry("wordcount-1", T0, 4, 6, "scale-out", ("C_4 below the peak",), "executed", float("inf"),
                         None, "", [(T0, "executed")]))
    Store(store_url).job(k.job).save(k)
    Store(store_url).job("wordcount").write_json("status.json", {
        "job": "wordcount", "mode": "auto", "wall": T0, "current": 6, "recommended": 6, "kind": "no-change",
        "health": "ok", "capacity": float("inf"), "workload": 120_000.0, "forecast_peak": None,
        "forecast_method": "linear", "wape": 3e-5, "reasons": ["kept"]})
    result = run("status", "wordcount")
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "capacity now ∞ tuples/s" in text and "forecast peak — (linear, WAPE < 0.1 %)" in text
    assert "120,000 tuples/s" in text and "never" in text and "inf" not in text


def _strict(text: str) -> dict:
    """JSON as jq reads it: `Infinity` or `NaN` is an error."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_status_of_one_job_as_json_gives_values_with_dated_events(fleet, jobs_file, store_url):
    # The operator's second hour: the ledger came as table cells ("12 → 6", "proposed 00:00:00 → …" with no date,
    # "95 s / —") and the status and proposal as epoch seconds on two clocks: a script had to parse text.
    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=T0 + 600, ttl=300.0)
    k.record(LedgerEntry("ads-1", T0, 4, 6, "scale-out", ("C_4 below the peak",), "executed", float("inf"), None,
                         "", [(T0, "proposed")], wall=T0, operator="alice",
                         events=[(T0, "proposed"), (T0 + 57, "approved by alice"), (T0 + 58, "executed")]))
    Store(store_url).job(k.job).save(k)
    Store(store_url).job("ads").write_json("status.json", {
        "job": "ads", "mode": "approve", "time": T0 + 9_999, "wall": T0 + 61, "current": 6, "recommended": 6,
        "kind": "scale-out", "health": "ok", "capacity": 600_000.0, "workload": 120_000.0, "forecast_peak": None,
        "reasons": ["approved by alice"], "paused": False,
        "last_action": {"id": "ads-1", "time": T0 + 58, "from": 4, "to": 6, "state": "executed", "operator": "alice"},
        "pending": {"id": k.pending.id, "from": 4, "to": 6, "expires": T0 + 900}, "override": None})
    result = run("status", "ads", "-o", "json")
    assert result.exit_code == 0, result.output
    detail = _strict(result.stdout)
    status = detail["status"]
    assert (status["mode"], status["scaleout"], status["decision"]) == ("approve", 6, "scale-out")
    assert status["last_loop"] == "2026-01-01T00:01:01+00:00"
    assert status["last_action"]["time"] == "2026-01-01T00:00:58+00:00"
    assert status["pending"]["expires"] == "2026-01-01T00:15:00+00:00"
    executed = next(e for e in detail["ledger"] if e["decision"] == "ads-1")
    assert executed == {
        "decision": "ads-1", "time": "2026-01-01T00:00:00+00:00", "from": 4, "to": 6, "kind": "scale-out",
        "state": "executed", "operator": "alice",
        "events": [{"time": "2026-01-01T00:00:00+00:00", "event": "proposed"},
                   {"time": "2026-01-01T00:00:57+00:00", "event": "approved by alice"},
                   {"time": "2026-01-01T00:00:58+00:00", "event": "executed"}],
        "predicted_recovery_s": "never", "observed_recovery_s": None, "verdict": None, "capacity_ratio": None,
        "reasons": ["C_4 below the peak"], "held_until": None, "hold_ended": None}
    assert detail["pending"] == {"id": k.pending.id, "from": 4, "to": 6, "expires": "2026-01-01T00:15:00+00:00",
                                 "reasons": ["C_4 below the forecast peak"]}


def test_an_answer_is_recorded_without_any_prefect_api(monkeypatch, fleet, jobs_file, store_url):
    # Issue 36: an answer waited on the approval run (86 s under load) and was lost when that run started late. It
    # is recorded in the job's inbox before the command returns, dated when it was given: no API, no worker needed.
    from tests.cli.test_cli_observe import closed_port

    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{closed_port()}/api")  # nothing answers there
    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time())
    before = time.time()
    result = run("reject", k.pending.id, "--reason", "peak ahead", "--operator", "bob")
    assert result.exit_code == 0, result.output
    (_, msg), = Store(store_url).job("ads").pending()
    assert (msg.kind, msg.body["operator"], msg.body["reason"]) == ("reject", "bob", "peak ahead")
    assert before <= msg.body["wall"] <= time.time()  # the command's start: the ledger dates the rejection then
    text = flat(result.output)
    assert f"rejected {k.pending.id} by bob (given " in text and "recorded in the inbox of ads" in text
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["expires"] == datetime.fromtimestamp(k.pending.expires, UTC).isoformat(timespec="seconds")


def test_an_answer_given_after_the_deadline_is_refused_and_says_when(fleet, jobs_file, store_url):
    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time() - 601)  # expired a second ago
    result = run("approve", k.pending.id)
    assert result.exit_code == 1
    assert f"proposal {k.pending.id} expired at" in flat(result.output) and "before the answer given at" in \
        flat(result.output)
    assert Store(store_url).job("ads").pending() == []


def test_an_answer_that_could_not_be_recorded_fails_and_says_why(monkeypatch, fleet, jobs_file, store_url):
    from daedalus.connectors.store import JobStore

    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time())

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(JobStore, "post", full)
    result = run("approve", k.pending.id)
    assert result.exit_code == 1
    assert f"the answer to {k.pending.id} could not be recorded" in flat(result.output)
    assert "No space left on device" in flat(result.output) and "answer again" in flat(result.output)


def test_approve_posts_the_answer_when_the_proposal_has_no_approval_run(monkeypatch, fleet, jobs_file, store_url,
                                                                         prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    monkeypatch.setenv("DAEDALUS_OPERATOR", "ana")
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    result = run("approve", pid, "--scaleout", 5, "--reason", "load test")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["decision"] == "approve" and answer["scaleout"] == 5 and answer["operator"] == "ana"
    (_, msg), = Store(store_url).job("ads").pending()
    assert (msg.kind, msg.body["scaleout"], msg.body["operator"]) == ("approve", 5, "ana")


def test_reject_posts_the_answer_and_an_unknown_proposals_job_is_refused(monkeypatch, fleet, jobs_file, store_url,
                                                                          prefect_api_url):
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    result = run("reject", pid, "--reason", "not now")
    assert result.exit_code == 0, result.output
    assert f"rejected {pid}" in flat(result.output)
    (_, msg), = Store(store_url).job("ads").pending()
    assert (msg.kind, msg.body["reason"]) == ("reject", "not now")
    ghost = run("reject", "ghost-1767225600")
    assert ghost.exit_code == 1 and "no job 'ghost'; known: wordcount, ads" in flat(ghost.output)


def test_pause_and_resume_check_the_job_against_the_jobs_file(fleet, store_url):
    assert run("pause", "ads", "--reason", "deploy").exit_code == 0
    ghost = run("pause", "ghost")
    assert ghost.exit_code == 1 and "no job 'ghost'; known: wordcount, ads" in flat(ghost.output)
    assert run("resume", "ads").exit_code == 0
    assert [m.kind for _, m in Store(store_url).job("ads").pending()] == ["pause", "resume"]
    assert Store(store_url).job("ghost").pending() == []
    assert run("pause").exit_code == 2  # neither a job nor --all
    assert run("pause", "--all", "--reason", "incident").exit_code == 0
    assert Store(store_url).kill_switch()["reason"] == "incident"
    assert "kill switch off" in run("resume", "--all").output
    assert Store(store_url).kill_switch() is None


def test_a_job_named_without_any_jobs_file_creates_nothing(monkeypatch, store_url):
    # Issue 14 item 4: `pause nosuchjob` without a jobs file succeeded and created a phantom job.
    monkeypatch.setenv("DAEDALUS_STORE", store_url)
    for args in (("pause", "nosuchjob"), ("resume", "nosuchjob"), ("scale", "nosuchjob", 3, "--reason", "r"),
                 ("status", "nosuchjob")):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert "no jobs file configured, so job 'nosuchjob' cannot be checked" in flat(result.output)
        assert "DAEDALUS_JOBS_FILE" in flat(result.output)
    assert Store(store_url).jobs() == [] and Store(store_url).job("nosuchjob").pending() == []


def test_scale_stays_within_the_limits(fleet, store_url):
    too_big = run("scale", "ads", 11, "--reason", "test")
    assert too_big.exit_code == 1 and "outside the job's limits [2, 10]" in flat(too_big.output)
    ok = run("scale", "ads", 6, "--reason", "test")
    assert ok.exit_code == 0, ok.output
    assert "manual scale of ads to 6 by" in flat(ok.output) and "recorded" in flat(ok.output)
    (_, msg), = Store(store_url).job("ads").pending()
    assert msg.kind == "scale"


def test_an_option_overrides_the_environment(monkeypatch, fleet, jobs_file, tmp_path):
    monkeypatch.setenv("DAEDALUS_STORE", str(tmp_path / "elsewhere"))
    assert run("pause", "ads", "--store", str(tmp_path / "store")).exit_code == 0
    assert len(Store(str(tmp_path / "store")).job("ads").pending()) == 1
    assert Store(str(tmp_path / "elsewhere")).job("ads").pending() == []


def test_a_run_the_one_at_a_time_limit_cancelled_is_not_the_last_run():
    assert operate._skipped({"type": "CANCELLED", "message": "Deployment concurrency limit reached."})
    assert not operate._skipped({"type": "CANCELLED", "message": "cancelled by alice"})
    assert not operate._skipped({"type": "COMPLETED", "name": "Completed", "message": None})
    assert not operate._skipped({"type": "SCHEDULED", "name": "Late"})


def test_answering_a_proposal_the_loop_closed_unanswered_says_it_expired(fleet, jobs_file, store_url):
    # The operator's second hour: "was already answered" for a proposal nobody answered.
    k = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=T0)
    entry = k.entry(k.pending.id)
    entry.mark("expired", k.pending.expires)
    pid, k.pending = k.pending.id, None
    Store(store_url).job(k.job).save(k)
    result = run("approve", pid)
    assert result.exit_code == 1
    assert f"proposal {pid} is no longer pending: it was expired" in flat(result.output)
    assert "already answered" not in result.output


@pytest.mark.parametrize("command", ["approve", "reject", "scale"])
def test_the_answering_commands_help_is_whole_at_80_columns(monkeypatch, command):
    # Issue 36: `approve --help` cut its option text.
    monkeypatch.setenv("COLUMNS", "80")
    text = flat(run(command, "--help").output)
    assert "Recorded in the job's inbox before the command returns, dated when it started; applied at the loop's " \
           "next run." in text
    assert "Who acts; recorded in the ledger (default: the settings' operator, else your login)" in text
    assert "Why; recorded in the ledger" in text and "…" not in text


def test_answering_imports_no_prefect(tmp_path, jobs_file, store_url):
    # Issue 36: answers took 9–86 s under load; the commands that answer must not start Prefect's machinery.
    import subprocess
    import sys

    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('PREFECT', 'prefect' in sys.modules, file=sys.stderr))\n"
            "from daedalus.cli.main import main\n"
            f"sys.argv = ['daedalus', 'reject', {pid!r}, '--jobs-file', {str(jobs_file)!r}, '--store', "
            f"{store_url!r}]\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "PREFECT False" in done.stderr and f"rejected {pid}" in flat(done.stderr)
