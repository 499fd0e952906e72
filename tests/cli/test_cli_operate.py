"""`daedalus status | approve | reject | pause | resume | scale` alone, from a store folder and `--jobs-file`."""

from __future__ import annotations

import json
import time

from daedalus.cli import operate
from daedalus.connectors.inbox import Inbox
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.switches import kill_switch
from tests.cli.cli_support import flat, tiny_app
from tests.ops.conftest import with_proposal

run = tiny_app(operate.status, operate.approve, operate.reject, operate.pause, operate.resume, operate.scale)


def test_status_names_the_jobs_of_the_file_before_any_loop_ran(jobs_file, store_url):
    result = run("status", "--jobs-file", jobs_file, "--store", store_url)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "2 job(s) in" in text and "wordcount" in text and "ads" in text and "approve" in text
    assert "no loop has run yet" in text and "no Prefect API configured" in text


def test_status_of_one_job_shows_its_pending_proposal(jobs_file, store_url):
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    result = run("status", "ads", "--store", store_url)
    assert result.exit_code == 0, result.output
    assert f"pending proposal {pid}" in flat(result.output)
    missing = run("status", "ghost", "--store", store_url)
    assert missing.exit_code == 1 and "nothing stored for job 'ghost'" in flat(missing.output)


def test_approve_with_the_jobs_file_posts_the_answer(jobs_file, store_url):
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    refused = run("approve", pid, "--store", store_url)
    assert refused.exit_code == 1 and "give --jobs-file FILE" in flat(refused.output)
    result = run("approve", pid, "--scaleout", 5, "--jobs-file", jobs_file, "--store", store_url,
                 "--operator", "ana", "--reason", "load test")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["decision"] == "approve" and answer["scaleout"] == 5 and answer["operator"] == "ana"
    (_, msg), = Inbox(store_url).pending("ads")
    assert (msg.kind, msg.body["scaleout"], msg.body["operator"]) == ("approve", 5, "ana")


def test_reject_with_the_jobs_file_posts_the_answer(jobs_file, store_url):
    pid = with_proposal(load_jobs(jobs_file).job("ads"), store_url, created=time.time()).pending.id
    result = run("reject", pid, "--jobs-file", jobs_file, "--store", store_url, "--reason", "not now")
    assert result.exit_code == 0, result.output
    assert f"rejected {pid}" in flat(result.output)
    (_, msg), = Inbox(store_url).pending("ads")
    assert (msg.kind, msg.body["reason"]) == ("reject", "not now")


def test_pause_and_resume_check_the_job_against_the_jobs_file(jobs_file, store_url):
    assert run("pause", "ads", "--jobs-file", jobs_file, "--store", store_url, "--reason", "deploy").exit_code == 0
    ghost = run("pause", "ghost", "--jobs-file", jobs_file, "--store", store_url)
    assert ghost.exit_code == 1 and "no job 'ghost'" in flat(ghost.output)
    assert run("resume", "ads", "--jobs-file", jobs_file, "--store", store_url).exit_code == 0
    assert [m.kind for _, m in Inbox(store_url).pending("ads")] == ["pause", "resume"]
    assert run("pause", "--store", store_url).exit_code == 2  # neither a job nor --all
    assert run("pause", "--all", "--store", store_url, "--reason", "incident").exit_code == 0
    assert kill_switch(store_url)["reason"] == "incident"
    assert "kill switch off" in run("resume", "--all", "--store", store_url).output
    assert kill_switch(store_url) is None


def test_scale_needs_the_jobs_file_and_stays_within_the_limits(jobs_file, store_url):
    missing = run("scale", "ads", 6, "--reason", "test", "--store", store_url)
    assert missing.exit_code == 2 and "--jobs-file" in flat(missing.output)
    too_big = run("scale", "ads", 11, "--reason", "test", "--jobs-file", jobs_file, "--store", store_url)
    assert too_big.exit_code == 1 and "outside the job's limits [2, 10]" in flat(too_big.output)
    ok = run("scale", "ads", 6, "--reason", "test", "--jobs-file", jobs_file, "--store", store_url)
    assert ok.exit_code == 0, ok.output
    assert "manual scale of ads to 6 posted" in flat(ok.output)
    (_, msg), = Inbox(store_url).pending("ads")
    assert msg.kind == "scale"
