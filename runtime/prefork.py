"""Start flow runs by forking a preloaded process instead of a fresh interpreter.

A process worker starts every flow run as a new `python -m prefect.engine`: about 4 CPU-seconds of imports
(Prefect, pandas, statsmodels, pmdarima) before a loop iteration that itself takes a fraction of a second.
With a hundred jobs a minute on two cores that alone would not keep up. `daedalus worker` therefore starts a
preloaded process (imports done, no threads, no connections) next to a normal `prefect worker start`, and
deployments set the process pool's `command` to a tiny client (`python -I -m daedalus.runtime.prefork`). The
client hands its environment, working folder and stdin/stdout/stderr to the preloaded process, which forks;
the child runs exactly what `python -m prefect.engine` runs and reports its exit code. Cancellation signals
are forwarded to the child. Without the preloaded process (a plain `prefect worker start`), the client simply
becomes `python -m prefect.engine`, so the deployments work with any process worker.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import types
from pathlib import Path

SOCKET_ENV = "DAEDALUS_PREFORK_SOCKET"
PRELOAD = (
    "prefect.flow_engine", "prefect.task_engine", "prefect.flow_runs", "prefect.artifacts",
    "prefect.deployments.flow_runs", "prefect.input", "prefect.events.clients", "prefect.logging.handlers",
    "prefect.client.orchestration", "prefect.results", "prefect.runner.storage", "prefect._internal.metrics",
    "daedalus.flows.mape_k", "daedalus.flows.approval", "daedalus.flows.dashboards", "daedalus.connectors.targets",
    "daedalus.connectors.sim_persistent",
    "pmdarima", "statsmodels.tsa.statespace.sarimax", "matplotlib.pyplot",
    # imported lazily during a loop run (found by comparing sys.modules before and after one run)
    "prefect.utilities.visualization", "fastapi", "starlette.applications", "anyio._backends._asyncio",
    "opentelemetry.metrics", "opentelemetry._logs", "pydantic.color", "encodings.idna", "http.cookies",
    "rich._emoji_codes", "fsspec.implementations.chained", "stringprep",
)
_HEADER = struct.Struct("!I")


def job_variables() -> dict[str, str]:
    """The process pool's `command` for deployments: the client, with this interpreter."""
    return {"command": f"{sys.executable} -I -m daedalus.runtime.prefork"}


# --- framing ---------------------------------------------------------------------------------------------


def _send(sock: socket.socket, data: dict, fds: list[int] | None = None) -> None:
    payload = json.dumps(data).encode()
    frame = _HEADER.pack(len(payload)) + payload
    if fds:
        sent = socket.send_fds(sock, [frame], fds)
        sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, buf: bytes = b"") -> bytes:
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed the connection")
        buf += chunk
    return buf


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, with_fds)
        head = _recv_exact(sock, _HEADER.size, head)
    else:
        head = _recv_exact(sock, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return json.loads(_recv_exact(sock, size)), list(fds)


# --- the client: the command a process worker runs ------------------------------------------------------


def client() -> int:
    """Run one flow run through the preloaded process, or become `python -m prefect.engine` without one."""
    path = os.environ.get(SOCKET_ENV)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not path:
            raise FileNotFoundError(SOCKET_ENV)
        sock.connect(path)
    except OSError:
        sock.close()
        os.execv(sys.executable, [sys.executable, "-m", "prefect.engine", *sys.argv[1:]])
    _send(sock, {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]}, [0, 1, 2])
    child = int(_recv(sock)[0]["pid"])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    try:
        return int(_recv(sock)[0]["exit"])
    except (EOFError, OSError):
        return 1  # the child died without reporting (killed): the worker treats the run as crashed


# --- the preloaded process ---------------------------------------------------------------------------------


def _run_child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the flow run's process, run the engine, report the exit code. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["prefect.engine", *request["argv"]]
        _send(conn, {"pid": os.getpid()})
        import runpy

        import prefect.context
        from prefect.logging.configuration import setup_logging

        prefect.context.refresh_global_settings_context()
        setup_logging()  # logging levels from the run's environment (a deployment's job variables), as at startup
        sys.modules.pop("prefect.engine", None)  # run as __main__ below, as `python -m prefect.engine` would
        try:
            runpy.run_module("prefect.engine", run_name="__main__", alter_sys=False)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # anything else: the run crashed; say so on its stderr
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # flush Prefect's log and event workers, as a normal exit would
            sys.stdout.flush()
            sys.stderr.flush()
            _send(conn, {"exit": code})
        finally:
            os._exit(code)


def share_tls_contexts() -> None:
    """Build Prefect's verified TLS context once per CA file, here, for every child to inherit.

    Prefect loads the CA bundle into a new TLS context for every API client it opens: about 15 ms of CPU,
    seven clients per loop run, which was a quarter of a run's CPU in the child (py-spy over 20 jobs). A
    context is not changed once Prefect hands it to httpx, so runs can share it. Only Prefect's client module
    sees the cache; the context Prefect modifies (`PREFECT_API_TLS_INSECURE_SKIP_VERIFY`) is still built per
    client. Like the code, the CA file is read when the worker starts: restart it after changing the file.
    """
    import ssl

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
    verified(certifi.where())


def _reap(_signum: int, _frame: object) -> None:
    """Reap finished children (waiting, rather than ignoring SIGCHLD, counts their CPU time in this process's)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(path: Path) -> None:
    """Preload, then fork one child per request until terminated."""
    import importlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    # One BLAS thread per run: a loop's matrices are small, and with dozens of runs in flight on a few cores
    # extra threads only spin and contend (load average 60 on 2 cores when a fleet's first fits coincided).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    for name in PRELOAD:
        importlib.import_module(name)
    share_tls_contexts()
    signal.signal(signal.SIGCHLD, _reap)
    if path.exists():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(128)
    print(f"preloaded {len(PRELOAD)} modules; listening on {path}", flush=True)
    try:
        while True:
            conn, _ = listener.accept()
            try:
                request, fds = _recv(conn, with_fds=3)
            except (EOFError, OSError, ValueError):
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                listener.close()
                _run_child(conn, request, fds)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        listener.close()
        if path.exists():
            path.unlink()


def run_worker(pool: str, socket_path: Path | None = None, limit: int | None = None) -> int:
    """`daedalus worker`: the preloaded process plus `prefect worker start --pool POOL`, stopped together.

    `limit` caps the flow runs in flight: a worker that starts after an outage does not start every overdue
    run at once (SQLite would lock up under the burst); the rest start as slots free up.
    """
    import tempfile
    import time

    folder = None
    if socket_path is None:
        folder = tempfile.mkdtemp(prefix="daedalus-prefork-")
        socket_path = Path(folder) / "prefork.sock"
    zygote = subprocess.Popen([sys.executable, "-m", "daedalus.runtime.prefork", "serve", str(socket_path)])
    for _ in range(600):
        if socket_path.exists() or zygote.poll() is not None:
            break
        time.sleep(0.1)
    env = {**os.environ, SOCKET_ENV: str(socket_path)}
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool,
                               "--type", "process", *(["--limit", str(limit)] if limit else [])], env=env)

    def stop(signum: int, _frame: object) -> None:
        worker.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return worker.wait()
    finally:
        zygote.terminate()
        zygote.wait(10)
        if folder is not None:
            socket_path.unlink(missing_ok=True)
            os.rmdir(folder)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]))
    else:
        sys.exit(client())
