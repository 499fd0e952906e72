"""One settings source for every command: which store, jobs file, lake, work pool and Prefect API it talks about.

Precedence: a command's option > an environment variable > the settings file > the default. The settings file is
TOML: `$DAEDALUS_SETTINGS` when set, else `./daedalus.toml` when it exists, else
`~/.config/daedalus/settings.toml` (`$XDG_CONFIG_HOME/daedalus/settings.toml`). `daedalus deploy` writes the
settings it deployed with into that file, so afterwards every command without options talks about the same fleet;
`daedalus config` shows each setting in force and where it came from.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from daedalus.connectors.fields import redact
from daedalus.connectors.lake import DEFAULT_URL as DEFAULT_LAKE
from daedalus.connectors.store import DEFAULT_URL as DEFAULT_STORE
from daedalus.models.errors import ConfigurationError

SETTINGS_ENV = "DAEDALUS_SETTINGS"
LOCAL_FILE = Path("daedalus.toml")
HOW = ("give --jobs-file FILE, set DAEDALUS_JOBS_FILE, or deploy once (`daedalus deploy --jobs-file FILE` writes "
       "it to the settings file); `daedalus config` shows what is in force")
HOW_API = ("set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api) or `prefect_api_url` in the settings file "
           "(`daedalus deploy` writes the one it used); `daedalus config` shows what is in force")


def settings_file() -> Path:
    """The settings file in force, whether it exists or not (the one `daedalus deploy` writes)."""
    if os.environ.get(SETTINGS_ENV):
        return Path(os.environ[SETTINGS_ENV]).expanduser()
    if LOCAL_FILE.is_file():
        return LOCAL_FILE
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "daedalus" / "settings.toml"


class Settings(BaseSettings):
    """What the commands share. Environment variables are `DAEDALUS_<NAME>` (Prefect's own `PREFECT_API_URL`
    for the API); keys of the settings file are the names below."""

    model_config = SettingsConfigDict(env_prefix="DAEDALUS_", extra="forbid")

    store: str = Field(DEFAULT_STORE, description="knowledge store URL (a folder, or any fsspec URL)")
    jobs_file: Path | None = Field(None, description="the jobs file (YAML)")
    lake: str = Field(DEFAULT_LAKE, description="metric-history lake URL")
    pool: str = Field("daedalus", description="Prefect work pool of the loops")
    operator: str | None = Field(None, description="who acts, recorded in the ledger (default: your login)")
    prefect_api_url: str | None = Field(None, validation_alias=AliasChoices("prefect_api_url", "PREFECT_API_URL"),
                                        description="the Prefect API the loops are deployed on")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Options (passed as arguments), then the environment, then the settings file: nothing else."""
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=settings_file())


ENV_NAMES = {name: "PREFECT_API_URL" if name == "prefect_api_url" else f"DAEDALUS_{name.upper()}"
             for name in Settings.model_fields}


@dataclass(frozen=True)
class Resolved:
    """The settings in force, with where each came from: `option`, `env NAME`, `file PATH` or `default`."""

    settings: Settings
    sources: dict[str, str]
    file: Path


def resolve(**options: Any) -> Resolved:
    """The settings with these command options (None: not given) over the environment, file and defaults."""
    given = {k: v for k, v in options.items() if v is not None}
    path = settings_file()
    try:
        file_values = TomlConfigSettingsSource(Settings, toml_file=path)()
        settings = Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigurationError(f"settings ({path} or the DAEDALUS_* environment): {problems}") from None
    except ValueError as exc:  # TOML syntax
        raise ConfigurationError(f"{path}: not valid TOML ({exc})") from None
    env_values = EnvSettingsSource(Settings)()
    sources = {name: "option" if name in given else f"env {ENV_NAMES[name]}" if name in env_values
               else f"file {path}" if name in file_values else "default" for name in Settings.model_fields}
    return Resolved(settings, sources, path)


def prefect_api_url(resolved: Resolved) -> tuple[str | None, str]:
    """The Prefect API URL in force and where it came from; with none configured here, Prefect's own profile
    (`prefect config set PREFECT_API_URL=…`). Looked up only by the commands that need it: Prefect imports
    slowly."""
    if resolved.settings.prefect_api_url:
        return resolved.settings.prefect_api_url, resolved.sources["prefect_api_url"]
    from prefect.settings import PREFECT_API_URL

    profile_url = PREFECT_API_URL.value()
    return (profile_url, "Prefect profile") if profile_url else (None, "default")


def login() -> str:
    """Who acts when no operator is set: the login, or `cli` where there is none (a container's uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def operator_in_force(option: str | None, resolved: Resolved) -> str:
    """Who the ledger records as acting: the option, else the settings' operator, else the login."""
    return option or resolved.settings.operator or login()


def shown(name: str, value: Any) -> str:
    """A setting's value as `daedalus config` prints it: URLs without their credentials."""
    if value is None:
        return "(not set)"
    return redact(str(value)) if name in ("store", "lake", "prefect_api_url") else str(value)


def save(values: dict[str, Any]) -> Path:
    """Merge `values` into the settings file in force (its other keys stay) and return its path."""
    path = settings_file()
    try:
        current = TomlConfigSettingsSource(Settings, toml_file=path)()
    except ValueError:
        current = {}
    merged = {**current, **{k: str(v) for k, v in values.items() if v is not None}}
    lines = ["# Written by `daedalus deploy`: the fleet every `daedalus` command talks about without options.",
             "# Options and DAEDALUS_* / PREFECT_API_URL environment variables override it; `daedalus config` shows "
             "what is in force."]
    # A TOML basic string takes JSON's escapes.
    lines += [f"{key} = {json.dumps(merged[key])}" for key in Settings.model_fields if key in merged]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def known_job(resolved: Resolved, job: str) -> Any:
    """The job's spec from the jobs file in force; refused (naming the known jobs, or how to configure a jobs
    file) rather than acting on a job nobody declared."""
    from daedalus.connectors.jobs import load_jobs

    if resolved.settings.jobs_file is None:
        raise ConfigurationError(f"no jobs file configured, so job {job!r} cannot be checked: {HOW}")
    return load_jobs(resolved.settings.jobs_file).job(job)


def api_url(resolved: Resolved) -> str:
    """The Prefect API URL in force, once it answers; else why not and how to set it."""
    import httpx

    url, source = prefect_api_url(resolved)
    if not url:
        raise ConfigurationError(f"no Prefect API configured: {HOW_API}")
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise ConfigurationError(f"the Prefect API at {redact(url)} ({source}) is not reachable "
                                 f"({type(exc).__name__}): start the server, or {HOW_API}") from None
    return url


@contextlib.contextmanager
def prefect_api(url: str) -> Iterator[None]:
    """Prefect's client and any process started here talk to `url`, whichever source it came from."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


def config() -> None:
    """Every setting in force and where it came from (option, environment, settings file, default); URLs
    without credentials, the Prefect API key only as set or not."""
    from rich.table import Table

    from daedalus.cli.common import fail, show

    try:
        resolved = resolve()
    except ConfigurationError as exc:
        fail(exc)
    state = "exists" if resolved.file.is_file() else "does not exist yet: `daedalus deploy` writes it"
    # The file and the variable have their own places (title, column), so `from` is one word and the values,
    # paths and URLs, keep the width of an 80-column terminal.
    t = Table(title=f"settings file {resolved.file} ({state})")
    t.add_column("setting", no_wrap=True)
    t.add_column("environment variable", no_wrap=True)
    t.add_column("value", overflow="fold", ratio=1)
    t.add_column("from", no_wrap=True)
    url, source = prefect_api_url(resolved)
    for name in Settings.model_fields:
        value, where = (url, source) if name == "prefect_api_url" else (getattr(resolved.settings, name),
                                                                         resolved.sources[name])
        if name == "operator" and value is None:  # whom the ledger records: the login
            value, where = operator_in_force(None, resolved), "login"
        t.add_row(name, ENV_NAMES[name], shown(name, value), where if where == "Prefect profile" else where.split()[0])
    from prefect.settings import PREFECT_API_KEY

    from_env = bool(os.environ.get("PREFECT_API_KEY"))
    t.add_row("Prefect API key", "PREFECT_API_KEY", "set (not shown)" if from_env or PREFECT_API_KEY.value()
              else "(not set)", "env" if from_env else "Prefect profile")
    show(t)
