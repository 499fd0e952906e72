"""Prefect settings and logging that a forked flow run inherits instead of building them again.

`python -m prefect.engine` builds Prefect's settings from its environment and configures logging from them at
startup; a run forked from the preloaded process (runtime/prefork.py) did the same, about 0.12 CPU-s, a third of a
steady loop run's CPU, to build the same settings every time. The preloaded process therefore keeps the settings of the
runs it forks most often: every minute at most, it builds them once from the most frequent inputs of the runs it
forked in that minute, and a run whose inputs are those inherits them. Any other run builds its own, as before.

The inputs are compared as Prefect reads them, not by their effect: the `PREFECT_` variables as strings (the
Prefect worker writes its settings back into each run's environment, so `3` and `3.0` differ), the home folder,
the configuration files in the working folder and the profiles and logging files. Two runs with the same inputs
build the same settings; two runs that differ only in spelling both build their own, which costs what it did.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

ADOPT_EVERY_S = 60.0  # the preloaded process builds at most one set of settings a minute (0.12 CPU-s)
_CWD_FILES = (".env", "prefect.toml", "pyproject.toml")  # what Prefect's settings read from the working folder


def settings_inputs(env: Mapping[str, str], cwd: str | Path) -> tuple:
    """What Prefect builds its settings and logging from, in a process with this environment and working folder:
    the `PREFECT_` variables (less a run's own `PREFECT__` markers) and the home folder, the configuration files
    Prefect reads from the working folder, and the profiles and logging files (their size and modification time;
    their paths are settings, so they are equal wherever the variables are)."""
    from prefect.settings import PREFECT_LOGGING_SETTINGS_PATH, PREFECT_PROFILES_PATH

    def content(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def stamp(path: Path) -> tuple[int, int] | None:
        try:
            found = path.stat()
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size

    variables = sorted((k.upper(), v) for k, v in env.items()
                       if k.upper().startswith("PREFECT_") and not k.startswith("PREFECT__"))
    return (tuple(variables), env.get("HOME"), tuple(content(Path(cwd) / name) for name in _CWD_FILES),
            stamp(PREFECT_PROFILES_PATH.value()), stamp(PREFECT_LOGGING_SETTINGS_PATH.value()))


def build_settings() -> None:
    """Build Prefect's settings and logging from this process's environment and folder, as a process starting
    `prefect.engine` does (a deployment's job variables set logging levels, for one)."""
    import prefect.context
    from prefect.logging.configuration import setup_logging

    prefect.context.refresh_global_settings_context()
    setup_logging()


class InheritedSettings:
    """In the preloaded process: whose inputs its settings were built from, and which to build next."""

    def __init__(self, every_s: float = ADOPT_EVERY_S) -> None:
        from prefect.logging.configuration import PROCESS_LOGGING_CONFIG

        # Prefect built its settings and logging when it was imported here; without logging set up, runs build.
        self.inputs: tuple | None = settings_inputs(os.environ, os.getcwd()) if PROCESS_LOGGING_CONFIG else None
        self.every_s = every_s
        self.built_at = -math.inf
        self.seen: Counter[tuple] = Counter()
        self.latest: dict[tuple, dict] = {}

    def inherits(self, request: Mapping) -> bool:
        """Count a run's inputs; True if its settings are this process's, for the forked run to keep."""
        try:
            key = settings_inputs(request["env"], request["cwd"])
        except (KeyError, TypeError, AttributeError):  # not what a client sends: the forked run says what is wrong
            return False
        self.seen[key] += 1
        self.latest[key] = {"env": request["env"], "cwd": request["cwd"]}
        return key == self.inputs

    def adopt(self, now: float) -> bool:
        """Once `every_s` has passed since the last time: build the settings of the runs seen most often since, if
        they are not this process's already. True if built. Call it after forking, so no run waits for it."""
        if now - self.built_at < self.every_s or not self.seen:
            return False
        (key, count), total = self.seen.most_common(1)[0], self.seen.total()
        request = self.latest[key]
        self.built_at = now
        self.seen.clear()
        self.latest.clear()
        if key == self.inputs:
            return False
        saved, folder = dict(os.environ), os.getcwd()
        try:
            os.chdir(request["cwd"])  # Prefect reads `.env`, `prefect.toml` and `pyproject.toml` from here
        except OSError:  # the run finished and its folder is gone: build next time
            return False
        try:
            os.environ.clear()
            os.environ.update(request["env"])
            self.inputs = None  # until built: a failure half-way leaves settings no run should inherit
            build_settings()
            self.inputs = key
            print(f"built the Prefect settings of the runs forked most since the last time ({count} of {total}); "
                  "the runs like them inherit these", flush=True)
        except Exception as exc:  # the run that brought these inputs fails the same way, and says why
            print(f"could not build the runs' Prefect settings here ({type(exc).__name__}); each run builds its own",
                  flush=True)
            return False
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(folder)
        return True
