"""`daedalus release JOB` alone: an operator lifts a job's quarantine through its inbox, and the loop applies it."""

from __future__ import annotations

import numpy as np

from daedalus.cli import release
from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import Store
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(release.release)
REASON = "false positive: one row inside a rescale"


def test_release_lifts_the_quarantine_of_an_overloaded_job_and_the_loop_scales_it(jobs_file, store_url):
    cfg = load_jobs(jobs_file).job("wordcount").loop_config()
    sim = Simulator(np.full(3600, 943_540.0), SimConfig(), seed=1, initial_scaleout=5, job="wordcount")
    job = SimulatedJob(sim)
    target, k = Target("wordcount", job, job, job, cfg), Knowledge.new("wordcount", cfg)
    k.quarantine = "metric validation failed: workers_match_scaleout (1 rows)"
    sim.advance(60)
    assert iterate(target, k, PLAIN).decision.kind == "hold"
    Store(store_url).job(k.job).save(k)

    result = run("release", "wordcount", "--reason", REASON, "--operator", "ana", "--jobs-file", jobs_file,
                 "--store", store_url)
    assert result.exit_code == 0, result.output
    assert "release of wordcount posted" in flat(result.output)
    waiting = Store(store_url).job("wordcount").pending()
    (_, msg), = waiting
    assert (msg.kind, msg.body) == ("release", {"operator": "ana", "reason": REASON})

    sim.advance(60)
    it = iterate(target, k, PLAIN, [m for _, m in waiting])
    assert k.quarantine is None
    assert any(note.startswith("released from quarantine") for note in it.notes)
    assert f"released from quarantine by ana: {REASON}" in it.notes
    (entry,) = [e for e in k.ledger if e.id == msg.id]
    assert (entry.state, entry.current, entry.target, entry.reasons) == (
        "decided", 5, 5, (f"released from quarantine by ana: {REASON}",))
    assert it.decision.kind == "scale-out" and it.decision.target > 5


def test_release_refuses_unknown_jobs_jobs_not_quarantined_and_a_missing_reason(jobs_file, store_url):
    where = ("--jobs-file", jobs_file, "--store", store_url)
    ghost = run("release", "ghost", "--reason", REASON, *where)
    assert ghost.exit_code == 1 and "no job 'ghost'" in flat(ghost.output)
    free = run("release", "ads", "--reason", REASON, *where)
    assert free.exit_code == 1 and "ads is not quarantined" in flat(free.output)
    assert run("release", "ads", *where).exit_code == 2  # --reason is required

    Store(store_url).job("ads").post("quarantine", {"reason": "cpu_in_range (3 rows)"})  # not applied yet: releasable
    blank = run("release", "ads", "--reason", " ", *where)
    assert blank.exit_code == 1 and "give a reason" in flat(blank.output)
    assert run("release", "ads", "--reason", REASON, *where).exit_code == 0
    again = run("release", "ads", "--reason", REASON, *where)
    assert again.exit_code == 1 and "ads is not quarantined" in flat(again.output)
    assert [m.kind for _, m in Store(store_url).job("ads").pending()] == ["quarantine", "release"]
