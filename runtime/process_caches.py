"""What Prefect computes anew for every flow run, computed once by the long-lived process that starts the runs.

Profiled in a fleet (py-spy, 20 jobs), the Prefect worker spent about 0.19 CPU-s on each run it submitted, as much
as a loop run's own engine: a quarter loading the CA bundle into a new TLS context for each API client it opened,
a seventh serialising its settings into the run's environment (twice a run), a twelfth listing the time zones to
validate the deployment's schedule. The results are the same for every run, so the preloaded process
(`runtime/prefork.py`) and the Prefect worker of `daedalus worker` (`runtime/prefect_worker.py`) compute each once;
the preloaded process also builds, once, the validators Prefect's models defer to their first use in each run.
Like the code, what they read (the CA file, the time-zone database) is read when the worker starts: restart it after
changing either.
"""

from __future__ import annotations

import functools
import ssl
import types


def share_tls_contexts() -> None:
    """Build Prefect's verified TLS context once per CA file, for every API client of this process and its children.

    Prefect loads the CA bundle into a new TLS context for every API client it opens: about 15 ms of CPU, seven
    clients per loop run and two per run the worker submits. A context is not changed once Prefect hands it to
    httpx, so clients can share it. Only Prefect's client module sees the cache; the context Prefect modifies
    (`PREFECT_API_TLS_INSECURE_SKIP_VERIFY`) is still built per client.
    """
    import certifi
    from prefect.client import orchestration

    @functools.cache
    def verified(cafile: str) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=cafile)

    def create_default_context(purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH, *, cafile: str | None = None,
                               capath: str | None = None, cadata: str | bytes | None = None) -> ssl.SSLContext:
        if cafile is not None and capath is None and cadata is None and purpose == ssl.Purpose.SERVER_AUTH:
            return verified(str(cafile))
        return ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)

    orchestration.ssl = types.SimpleNamespace(**{**vars(ssl), "create_default_context": create_default_context})
    from prefect.settings import get_current_settings

    # the file Prefect will load: `PREFECT_API_SSL_CERT_FILE` (by default the environment's `SSL_CERT_FILE`), else
    # certifi's bundle. Warming certifi's alone missed wherever SSL_CERT_FILE is set: every run loaded its file again.
    verified(get_current_settings().api.ssl_cert_file or certifi.where())


def complete_models() -> int:
    """Build the validators Prefect's models defer until first use, for every child to inherit.

    Prefect declares its API schemas with pydantic's deferred build: each class builds its validator the first
    time it is used, in every process. In a forked run that was eight classes per run, about a twentieth of the
    run's CPU in the child (cProfile over 20 runs of a fleet). Building all of them once in the preloaded process costs
    less than a tenth of a second. Returns how many were built; a class that cannot be built yet is left to build
    itself as before."""
    import pydantic

    def subclasses(cls: type) -> list[type]:
        found = cls.__subclasses__()
        return found + [s for c in found for s in subclasses(c)]

    deferred = {c for c in subclasses(pydantic.BaseModel) if not c.__pydantic_complete__}
    return sum(bool(c.model_rebuild(raise_errors=False)) for c in deferred)


def cache_time_zones() -> None:
    """List the time zones on disk once, for every schedule Prefect validates in this process and its children.

    Every schedule Prefect reads (a deployment's, each time a run or the worker reads the deployment) checks its
    time zone against `zoneinfo.available_timezones()`, which walks the whole time-zone database: about 4 ms of CPU
    a time, and a loop run and its worker read the deployment four times."""
    from prefect._internal.schemas import validators

    if not hasattr(validators.get_timezones, "cache_info"):  # not already cached here
        validators.get_timezones = functools.cache(validators.get_timezones)


def cache_settings_environment() -> None:
    """Serialise this process's settings into environment variables once per settings object, not once per run.

    A worker hands every run its own settings as `PREFECT_` variables, serialising them twice a run (the job's
    base environment and the command that starts the run): a walk of every setting, the same for every run while
    the settings are the same object. Prefect replaces its settings object (a settings context) rather than change
    one, so the object is the key; every caller still gets a dict of its own."""
    from prefect.settings import Settings

    serialise = Settings.to_environment_variables
    if getattr(serialise, "cached", False):
        return
    # the settings object last asked for (held, so that its id is not reused) and its variables per set of arguments
    last: list = [None, {}]

    def to_environment_variables(self: Settings, exclude_unset: bool = False, include_secrets: bool = True,
                                 include_aliases: bool = False) -> dict[str, str]:
        if last[0] is not self:
            last[:] = [self, {}]
        key = (exclude_unset, include_secrets, include_aliases)
        if key not in last[1]:
            last[1][key] = serialise(self, exclude_unset=exclude_unset, include_secrets=include_secrets,
                                     include_aliases=include_aliases)
        return dict(last[1][key])

    to_environment_variables.cached = True  # type: ignore[attr-defined]
    Settings.to_environment_variables = to_environment_variables  # type: ignore[method-assign]
