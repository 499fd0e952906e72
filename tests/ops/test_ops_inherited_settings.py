"""A forked run keeps the preloaded process's Prefect settings only when it would build the same ones: its inputs
(the `PREFECT_` variables, the home folder, the working folder's configuration files, the profiles and logging
files) are compared as Prefect reads them; the preloaded process builds the most frequent inputs of the last minute,
once, and a failure to build them leaves every run building its own. Real Prefect settings and logging throughout."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import PREFECT_PROFILES_PATH, temporary_settings

from daedalus.runtime.inherited_settings import InheritedSettings, build_settings, settings_inputs

TASK_RUNS = "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL"  # what the loops' deployments set (LOOP_ENV)


@pytest.fixture
def restored() -> Iterator[None]:
    """Whatever a test builds, this process's environment, folder, settings and logging are its own again after."""
    env, folder = dict(os.environ), os.getcwd()
    yield
    os.environ.clear()
    os.environ.update(env)
    os.chdir(folder)
    build_settings()


def run(env: dict[str, str], cwd: Path, flow_run: str = "0") -> dict:
    """A request as the client sends it: the run's whole environment and its folder."""
    return {"env": {**env, "PREFECT__FLOW_RUN_ID": flow_run}, "cwd": str(cwd), "argv": []}


def test_a_runs_own_markers_and_other_variables_leave_its_inputs_as_they_were(tmp_path: Path) -> None:
    base = {"PREFECT_API_URL": "http://127.0.0.1:4200/api", "HOME": "/root", "PATH": "/usr/bin"}
    same = {**base, "PREFECT__FLOW_RUN_ID": "a1", "PREFECT__FLOW_ID": "f", "MPLBACKEND": "Agg", "PATH": "/bin"}
    assert settings_inputs(same, tmp_path) == settings_inputs(base, tmp_path)
    # Prefect reads its variables whatever their case
    lower = {"prefect_api_url": base["PREFECT_API_URL"], "HOME": "/root"}
    assert settings_inputs(lower, tmp_path) == settings_inputs(base, tmp_path)


@pytest.mark.parametrize("change", [
    {"PREFECT_LOGGING_LEVEL": "DEBUG"},  # a level a deployment's job variables set
    {"PREFECT_WORKER_QUERY_SECONDS": "3.0"},  # "3" and "3.0": spelled differently, compared as spelled
    {"HOME": "/home/other"},  # Prefect's home folder defaults to ~/.prefect
])
def test_any_prefect_variable_or_the_home_folder_changes_the_inputs(tmp_path: Path, change: dict[str, str]) -> None:
    base = {"PREFECT_API_URL": "http://127.0.0.1:4200/api", "PREFECT_WORKER_QUERY_SECONDS": "3", "HOME": "/root"}
    assert settings_inputs({**base, **change}, tmp_path) != settings_inputs(base, tmp_path)


@pytest.mark.parametrize("name", [".env", "prefect.toml", "pyproject.toml"])
def test_a_configuration_file_in_the_runs_folder_changes_the_inputs(tmp_path: Path, name: str) -> None:
    env = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    empty = settings_inputs(env, tmp_path)
    (tmp_path / name).write_text("[tool.prefect]\n" if name == "pyproject.toml" else "PREFECT_LOGGING_LEVEL=DEBUG\n")
    assert settings_inputs(env, tmp_path) != empty


def test_an_edited_profiles_file_changes_the_inputs(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    env = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    with temporary_settings({PREFECT_PROFILES_PATH: profiles}):
        before = settings_inputs(env, tmp_path)
        profiles.write_text('active = "default"\n')
        assert settings_inputs(env, tmp_path) != before


def test_the_most_frequent_runs_settings_are_built_once_a_minute_and_inherited(restored: None, tmp_path: Path) -> None:
    os.environ.pop(TASK_RUNS, None)
    build_settings()  # from here: other tests set the level by hand, as `daedalus step` does for its output
    mine, folder = dict(os.environ), os.getcwd()
    loop = {**mine, TASK_RUNS: "WARNING"}
    task_runs = logging.getLogger("prefect.task_runs")
    level = task_runs.level
    assert level == logging.NOTSET  # as Prefect's logging.yml sets it
    settings = InheritedSettings(every_s=60.0)

    # the test runs in the repository, whose pyproject.toml a run's folder lacks: their inputs differ
    assert settings.inherits(run(mine, tmp_path)) is False
    for i in range(3):
        assert settings.inherits(run(loop, tmp_path, flow_run=f"loop-{i}")) is False
    assert settings.adopt(now=1000.0) is True  # the loops' inputs, seen 3 times against 1
    assert task_runs.level == logging.WARNING  # built from the loops' environment...
    assert dict(os.environ) == mine and os.getcwd() == folder  # ...without keeping it
    assert settings.inherits(run(loop, tmp_path, flow_run="loop-3")) is True

    for i in range(2):
        assert settings.inherits(run(mine, tmp_path, flow_run=f"other-{i}")) is False  # these build their own
    assert settings.adopt(now=1030.0) is False  # within the minute: nothing built
    assert task_runs.level == logging.WARNING
    assert settings.adopt(now=1060.0) is True  # the most frequent since the last build: that run's
    assert task_runs.level == level
    assert settings.inherits(run(loop, tmp_path)) is False


def test_nothing_seen_or_the_same_inputs_again_builds_nothing(restored: None, tmp_path: Path) -> None:
    settings = InheritedSettings()
    assert settings.adopt(now=0.0) is False
    loop = {**os.environ, TASK_RUNS: "WARNING"}
    settings.inherits(run(loop, tmp_path))
    assert settings.adopt(now=0.0) is True
    settings.inherits(run(loop, tmp_path))
    assert settings.adopt(now=100.0) is False  # already these


def test_settings_that_fail_to_build_are_inherited_by_no_run(restored: None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    settings = InheritedSettings()
    bad = {**os.environ, "PREFECT_API_KEY": "pnu_not-to-be-printed", "PREFECT_CLIENT_MAX_RETRIES": "many"}
    assert settings.inherits(run(bad, tmp_path)) is False
    assert settings.adopt(now=0.0) is False
    out = capsys.readouterr().out
    assert "each run builds its own" in out and "ValidationError" in out
    assert "pnu_not-to-be-printed" not in out and "many" not in out
    assert dict(os.environ) != bad and "PREFECT_CLIENT_MAX_RETRIES" not in os.environ
    assert settings.inherits(run(bad, tmp_path)) is False
    assert settings.inherits(run(dict(os.environ), Path.cwd())) is False  # not even the process's own, until built


def test_a_request_that_is_not_a_runs_is_left_to_its_child(tmp_path: Path) -> None:
    assert InheritedSettings().inherits({"argv": []}) is False
