"""`daedalus jobs check` alone: the jobs file by `--jobs-file` (or, as before, as the argument)."""

from __future__ import annotations

import yaml

from daedalus.cli import jobs
from tests.cli.cli_support import flat, tiny_app

run = tiny_app(jobs.check)


def test_check_lists_the_jobs_of_the_file_given_by_option(jobs_file):
    result = run("check", "--jobs-file", jobs_file)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "2 job(s), valid" in text and "wordcount" in text and "ads" in text and "approve" in text


def test_the_file_as_argument_still_works(jobs_file):
    assert flat(run("check", jobs_file).output) == flat(run("check", "--jobs-file", jobs_file).output)
    assert run("check", jobs_file, "--jobs-file", jobs_file).exit_code == 0  # the same file twice is one


def test_no_file_or_two_different_files_are_refused(jobs_file, tmp_path):
    none = run("check")
    assert none.exit_code == 2 and "--jobs-file FILE" in flat(none.output)
    two = run("check", tmp_path / "other.yaml", "--jobs-file", jobs_file)
    assert two.exit_code == 2 and "two jobs files given" in flat(two.output)


def test_an_invalid_file_names_the_job_and_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"jobs": [{"name": "a", "engine": "sim", "scale_target": {"kind": "sim", "name": "a"},
                                             "scaleout": {"min": 4, "max": 2}}]}))
    result = run("check", "--jobs-file", bad)
    assert result.exit_code == 1
    assert f"{bad}: job 'a' (jobs[0]), field scaleout" in flat(result.output)
