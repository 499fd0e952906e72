"""The worker image's recipe (Dockerfile): its COPY and RUN lines, carried out here as a build would (no Docker
engine on these machines), install the package into a clean virtual environment, and its command starts a
`daedalus worker` that registers with a Prefect server.

Only the project's third-party dependencies are taken from the project's own environment (a path in the new
environment, like a warm wheel cache): installing 1.5 GB of them again would take minutes; `make install-test`
resolves and installs them from pyproject.toml on every CI run. The project itself is built and installed by the
Dockerfile's own `pip install .`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from daedalus.runtime.local_prefect import start_server

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _instructions() -> list[tuple[str, str]]:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines
            if line and not line.startswith("#")]


def test_the_recipe_uses_only_this_repositorys_install_command() -> None:
    runs = [arg for op, arg in _instructions() if op == "RUN"]
    assert runs == ["pip install ."]
    copied = {shlex.split(arg)[0] for op, arg in _instructions() if op == "COPY"}
    assert {"pyproject.toml", "runtime", "cli"} <= copied


def test_the_recipe_installs_and_starts_a_worker_in_a_clean_venv(tmp_path: Path) -> None:
    context, venv = tmp_path / "src", tmp_path / "venv"
    context.mkdir()
    for op, arg in _instructions():  # the build, step by step
        if op == "COPY":
            *sources, dest = shlex.split(arg)
            for source in sources:
                target = context / dest if dest not in ("./", ".") else context / source
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / source, target)
        elif op == "RUN":
            if not venv.exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                (venv / "lib" / "python3.11" / "site-packages" / "deps.pth").write_text(
                    site.getsitepackages()[0] + "\n")  # the dependencies only (see the module's docstring)
            env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
                   "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            done = subprocess.run(arg, shell=True, cwd=context, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    python = venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import daedalus.runtime.prefork as m; print(m.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed copy, not this checkout
    cmd = json.loads(next(arg for op, arg in _instructions() if op == "CMD"))
    assert cmd[:2] == ["daedalus", "worker"]
    server = start_server(tmp_path / "prefect")
    worker = None
    try:
        env = {**server.env(), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
        worker = subprocess.Popen([*cmd, "--limit", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True, cwd=tmp_path)
        registered = []
        deadline = time.monotonic() + 120
        while not registered and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(1)
            req = urllib.request.Request(f"{server.api_url}/work_pools/{cmd[3]}/workers/filter", data=b"{}",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    registered = [w["name"] for w in json.load(r) if w["name"].endswith(f"-{worker.pid}")]
            except OSError:
                continue
        assert registered, f"the image's worker did not register; exit {worker.poll()}"
    finally:
        if worker is not None and worker.poll() is None:
            worker.terminate()
            worker.wait(60)
        server.stop()
