"""One settings source for the CLI (issue 14 item 4): option > environment > settings file > default, the file
written by `daedalus deploy`, and `daedalus config` saying where each setting came from, secrets never shown."""

from __future__ import annotations

import tomllib

import pytest

from daedalus.cli import deploy, jobs, operate, settings
from daedalus.connectors.store import Store
from tests.cli.cli_support import flat, tiny_app
from tests.cli.test_cli_deploy import fake_api

run = tiny_app(settings.config, deploy.deploy, operate.pause, operate.status, jobs.check)


def sources(text: str) -> dict[str, tuple[str, str]]:
    """`daedalus config`'s table as setting → (value, source)."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 4 and cells[0] and cells[0] != "setting":
            found[cells[0]] = (cells[2], cells[3])
    return found


def test_precedence_option_over_environment_over_file_over_default(monkeypatch, tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('store = "/from/file"\nlake = "/lake/from/file"\npool = "file-pool"\n')
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(path))
    monkeypatch.setenv("DAEDALUS_POOL", "env-pool")
    resolved = settings.resolve(store="/from/option")
    assert resolved.settings.store == "/from/option" and resolved.sources["store"] == "option"
    assert resolved.settings.pool == "env-pool" and resolved.sources["pool"] == "env DAEDALUS_POOL"
    assert resolved.settings.lake == "/lake/from/file" and resolved.sources["lake"] == f"file {path}"
    assert resolved.settings.jobs_file is None and resolved.sources["jobs_file"] == "default"


def test_config_shows_each_setting_and_where_it_came_from_without_secrets(monkeypatch, tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('jobs_file = "/srv/jobs.yaml"\n')
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(path))
    monkeypatch.setenv("DAEDALUS_STORE", "s3://key:hunter2@bucket/knowledge")
    monkeypatch.setenv("PREFECT_API_URL", "https://ops:s3cret@prefect.example.com/api")
    monkeypatch.setenv("PREFECT_API_KEY", "pnu_topsecret")
    result = run("config")
    assert result.exit_code == 0, result.output
    table = sources(result.output)
    assert table["store"] == ("s3://***@bucket/knowledge", "env")
    assert table["jobs_file"] == ("/srv/jobs.yaml", "file") and f"settings file {path} (exists)" in flat(result.output)
    assert table["pool"] == ("daedalus", "default")
    assert table["prefect_api_url"] == ("https://***@prefect.example.com/api", "env")
    assert table["Prefect API key"][0] == "set (not shown)"
    assert "hunter2" not in result.output and "s3cret" not in result.output and "topsecret" not in result.output


def test_a_bad_settings_file_names_itself_and_the_key(monkeypatch, tmp_path):
    path = tmp_path / "settings.toml"
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(path))
    path.write_text('stroe = "/typo"\n')
    result = run("config")
    assert result.exit_code == 1 and f"settings ({path} or the DAEDALUS_* environment): stroe: Extra inputs" in flat(
        result.output)
    path.write_text("store = \n")
    assert f"{path}: not valid TOML" in flat(run("config").output)


def test_the_settings_file_is_found_by_env_then_the_working_folder_then_the_user_config(monkeypatch, tmp_path):
    monkeypatch.delenv("DAEDALUS_SETTINGS")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    assert settings.settings_file() == tmp_path / "config" / "daedalus" / "settings.toml"
    (tmp_path / "daedalus.toml").write_text('pool = "here"\n')
    assert settings.settings_file() == settings.LOCAL_FILE
    assert settings.resolve().settings.pool == "here"
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(tmp_path / "elsewhere.toml"))
    assert settings.settings_file() == tmp_path / "elsewhere.toml"


def test_deploy_writes_the_settings_every_later_command_uses(monkeypatch, jobs_file, tmp_path, prefect_api_url):
    path = tmp_path / "settings.toml"
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(path))
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    fake_api(monkeypatch)
    store = tmp_path / "fleet-store"
    result = run("deploy", "--jobs-file", jobs_file, "--store", store, "--pool", "fleet", "--no-prefork",
                 "--no-background")
    assert result.exit_code == 0, result.output
    assert f"Settings saved to {path}" in flat(result.output)
    saved = tomllib.loads(path.read_text())
    lake = saved.pop("lake")
    assert saved == {"store": str(store), "jobs_file": str(jobs_file), "pool": "fleet",
                     "prefect_api_url": prefect_api_url}
    assert lake.startswith("/") and lake.endswith(".daedalus/lake")  # absolute, as deployed

    # Afterwards, with no option and no DAEDALUS_* variable, the commands talk about the same fleet.
    monkeypatch.delenv("PREFECT_API_URL")
    table = sources(run("config").output)
    assert table["store"] == (str(store), "file") and table["pool"] == ("fleet", "file")
    assert table["prefect_api_url"] == (prefect_api_url, "file")
    assert run("pause", "ads", "--reason", "r").exit_code == 0
    assert [m.kind for _, m in Store(str(store)).job("ads").pending()] == ["pause"]
    assert "2 job(s), valid" in flat(run("check").output)
    status = flat(run("status").output)
    assert f"2 job(s) in {store}" in status and "store only" not in status  # the saved API answered


def test_deploy_to_a_prefect_yaml_needs_no_api_and_writes_no_settings(monkeypatch, jobs_file, tmp_path):
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(tmp_path / "settings.toml"))
    result = run("deploy", "--jobs-file", jobs_file, "--prefect-yaml", tmp_path / "p.yaml")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "settings.toml").exists()


@pytest.mark.parametrize("args", [("deploy",), ("check",)])
def test_no_jobs_file_anywhere_is_refused_with_how_to_configure_one(args):
    result = run(*args)
    assert result.exit_code == 2 and "DAEDALUS_JOBS_FILE" in flat(result.output)


def test_deploy_without_a_prefect_api_writes_nothing(monkeypatch, jobs_file, tmp_path):
    calls = fake_api(monkeypatch)
    ghost = run("deploy", "--jobs-file", jobs_file, "--job", "ghost")  # the jobs are checked first
    assert ghost.exit_code == 1 and "no job 'ghost' in the jobs file" in flat(ghost.output)
    result = run("deploy", "--jobs-file", jobs_file)
    assert result.exit_code == 1 and "no Prefect API configured: set PREFECT_API_URL" in flat(result.output)
    assert calls == [] and not (tmp_path / "settings.toml").exists()
