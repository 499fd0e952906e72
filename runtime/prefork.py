"""Start flow runs by forking a preloaded process instead of a fresh interpreter.

A process worker starts every flow run as a new `python -m prefect.engine`: about 4 CPU-seconds of imports
(Prefect, pandas, statsmodels, pmdarima) before a loop iteration that itself takes a fraction of a second.
With a hundred jobs a minute on two cores that alone would not keep up. `daedalus worker` therefore starts a
preloaded process (imports done, no threads, no connections) next to a normal `prefect worker start` (started
through `runtime/prefect_worker.py`, which computes once what Prefect computes for every run it submits), and
deployments set the process pool's `command` to a tiny client (`python -I -m daedalus.runtime.prefork`). The
client hands its environment and working folder to the preloaded process, which forks; the child runs exactly
what `python -m prefect.engine` runs and reports its exit code. Cancellation signals are forwarded to the child.
Without the preloaded process (a plain `prefect worker start`), the client simply becomes `python -m
prefect.engine`, so the deployments work with any process worker. The child writes to the worker's own stdout
and stderr, where the Prefect worker would have copied a run's output (a pool's `stream_output: false` is not
honoured): a stopping Prefect worker closes its runs' pipes, and a run still finishing would crash on its next
log line.

Stopping. The flow runs are children of the preloaded process, not of the Prefect worker, so `daedalus worker`
stops them itself: on SIGTERM or SIGINT it tells the Prefect worker to take no new runs, gives the runs in flight a
grace period, ends the rest as Cancelled and kills whatever is still there when its stop timeout
(`DAEDALUS_WORKER_STOP_TIMEOUT`, 25 s) runs out. The preloaded process and the Prefect worker run in sessions of
their own, so a terminal's Ctrl-C reaches `daedalus worker` alone and the stop happens in that order. Under systemd
use `KillMode=mixed`: the default sends SIGTERM to every process at once, which crashes the runs in flight (they
are still recorded as Cancelled).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

SOCKET_ENV = "DAEDALUS_PREFORK_SOCKET"
STOP_TIMEOUT_ENV = "DAEDALUS_WORKER_STOP_TIMEOUT"
STOP_TIMEOUT_S = 25.0  # the whole stop; inside Kubernetes' default termination grace period (30 s)
CANCEL_S = 5.0  # a run told to cancel has this long to record its end and exit before it is killed
TEARDOWN_S = 5.0  # for the Prefect worker and the preloaded process to exit after their runs, and record them
STOPPED = "Cancelled: the worker running it was stopped (daedalus worker, SIGTERM or SIGINT)"
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PRELOAD = (
    "prefect.flow_engine", "prefect.task_engine", "prefect.flow_runs", "prefect.artifacts",
    "prefect.deployments.flow_runs", "prefect.input", "prefect.events.clients", "prefect.logging.handlers",
    "prefect.client.orchestration", "prefect.results", "prefect.runner.storage", "prefect._internal.metrics",
    "daedalus.flows.mape_k", "daedalus.flows.approval", "daedalus.flows.dashboards", "daedalus.flows.release",
    "daedalus.connectors.targets", "daedalus.connectors.sim_persistent",
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


def stop_timeout(env: Mapping[str, str] = os.environ) -> float:
    """Seconds `daedalus worker` takes at most to stop: `DAEDALUS_WORKER_STOP_TIMEOUT`, else 25."""
    raw = env.get(STOP_TIMEOUT_ENV)
    if raw is None:
        return STOP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan  # refused below
    if not 0 <= value < math.inf:
        from daedalus.models.errors import ConfigurationError

        raise ConfigurationError(f"{STOP_TIMEOUT_ENV} must be a number of seconds ≥ 0, got {raw!r}")
    return value


def stop_marker(socket_path: str | Path) -> Path:
    """Exists while `daedalus worker` stops: clients then leave their runs to the preloaded process, which lets
    them finish or cancels them, instead of passing on the Prefect worker's SIGTERM (a crash, without grace)."""
    return Path(f"{socket_path}.stopping")


# --- framing ---------------------------------------------------------------------------------------------


def _send(sock: socket.socket, data: dict) -> None:
    payload = json.dumps(data).encode()
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int, buf: bytes = b"") -> bytes:
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed the connection")
        buf += chunk
    return buf


def _recv(sock: socket.socket) -> dict:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return json.loads(_recv_exact(sock, size))


# --- the client: the command a process worker runs ------------------------------------------------------


def client() -> int:
    """Run one flow run through the preloaded process, or become `python -m prefect.engine` without one."""
    path = os.environ.get(SOCKET_ENV)
    child: list[int] = []
    early: list[int] = []  # signals that came before the child's pid

    def forward(signum: int, _frame: object) -> None:
        if path and stop_marker(path).exists():
            return
        if not child:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], signum)

    for s in _FORWARDED:
        signal.signal(s, forward)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not path:
            raise FileNotFoundError(SOCKET_ENV)
        sock.connect(path)
    except OSError:
        sock.close()
        for s in _FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        for s in early:  # asked to stop before anything ran: end as that signal would have ended it
            os.kill(os.getpid(), s)
        os.execv(sys.executable, [sys.executable, "-m", "prefect.engine", *sys.argv[1:]])
    try:
        _send(sock, {"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]})
        child.append(int(_recv(sock)["pid"]))
        for s in early:
            forward(s, None)
        return int(_recv(sock)["exit"])
    except (EOFError, OSError):
        return 1  # refused (the worker is stopping) or died without reporting (killed): the run did not complete


# --- the preloaded process ---------------------------------------------------------------------------------


def _run_child(conn: socket.socket, request: dict, inherits: bool = False) -> None:
    """In the forked child: become the flow run's process, run the engine, report the exit code. Never returns.
    `inherits`: the preloaded process's Prefect settings are the run's (runtime/inherited_settings.py)."""
    code = 1
    try:
        for signum, handler in ((signal.SIGCHLD, signal.SIG_DFL), (signal.SIGTERM, signal.SIG_DFL),
                                (signal.SIGINT, signal.default_int_handler), (signal.SIGUSR1, _cancel_run)):
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        try:
            os.chdir(request["cwd"])
        except FileNotFoundError:  # the worker stopped and removed the run's folder before it began: not a crash
            print(f"flow run not started: the worker is stopping (its folder {request['cwd']} is gone)",
                  file=sys.stderr)
            raise SystemExit(1) from None
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["prefect.engine", *request["argv"]]
        _send(conn, {"pid": os.getpid()})
        import runpy

        from daedalus.flows.mape_k import NO_SUSPENSION_OBSERVER
        from daedalus.runtime.inherited_settings import build_settings

        if not inherits:
            build_settings()
        if os.environ.get(NO_SUSPENSION_OBSERVER) == "true":
            skip_suspension_observer()
        sys.modules.pop("prefect.engine", None)  # run as __main__ below, as `python -m prefect.engine` would
        try:
            runpy.run_module("prefect.engine", run_name="__main__", alter_sys=False)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
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


def skip_suspension_observer() -> bool:
    """In this forked run only: Prefect's engine starts no suspension observer (flows/mape_k.py says why). False,
    and nothing changed, where this Prefect has none."""
    import prefect.flow_engine as engine

    if not callable(getattr(engine, "observe_flow_run_suspension", None)):
        return False
    engine.observe_flow_run_suspension = _no_suspension_observer  # type: ignore[assignment]
    return True


@contextlib.contextmanager
def _no_suspension_observer(*_args: object, **_kwargs: object) -> Iterator[None]:
    yield


def _cancel_run(_signum: int, _frame: object) -> None:
    """In a run process, on SIGUSR1 from the preloaded process (the worker is stopping): terminate as the Prefect
    worker cancels a run. It sets the intent "cancel" over its control channel before its SIGTERM, and the engine
    then ends the run as a cancellation instead of a crash (Prefect 3.8.8, `prefect._internal.control_listener`).
    Should that module change, the engine reports a crash, and the preloaded process still records Cancelled."""
    listener = sys.modules.get("prefect._internal.control_listener")  # preloaded: no import in a signal handler
    if listener is not None and hasattr(listener, "_set_intent"):
        listener._set_intent("cancel")
    os.kill(os.getpid(), signal.SIGTERM)


def _record_cancelled(runs: set[str], pool: str, worker: str) -> None:
    """Record as Cancelled the runs a stop cut short, and the runs `worker` claimed in `pool` but never started
    (stopped between proposing Pending and starting the process: nothing would ever start them; its log line
    "Worker '<name>' submitting flow run" tells which), unless they reached a final state of their own first.

    A run process leaves its cancelled state to its supervisor, the Prefect worker, which has stopped by now:
    without this the run would stay Running, or Crashed when its engine saw only a signal.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        LogFilter,
        LogFilterFlowRunId,
        WorkPoolFilter,
        WorkPoolFilterName,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled

    unfinished = {StateType.PENDING, StateType.RUNNING, StateType.CANCELLING, StateType.CRASHED}
    claim = f"Worker '{worker}' submitting flow run"
    cancelled = 0
    try:
        with get_client(sync_client=True) as client:
            pending = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType.PENDING]))),
                work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])), limit=200)
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in pending])),
                                    limit=200) if pending else []
            for run in sorted(runs | {str(log.flow_run_id) for log in logs if claim in log.message}):
                state = client.read_flow_run(run).state
                if state is None or state.type in unfinished:
                    client.set_flow_run_state(run, Cancelled(message=STOPPED), force=True)
                    cancelled += 1
    except Exception as exc:  # the API did not answer: say so; the runs keep the states they have
        print(f"could not record the flow runs the stop cut short as cancelled: {exc}", file=sys.stderr, flush=True)
    if cancelled:
        print(f"recorded {cancelled} flow run(s) cut short by the stop as Cancelled", flush=True)


class _Zygote:
    """The preloaded process's loop: fork a run per request; on a stop, let the runs finish, then cancel the rest.

    `live` (pid → flow run id) is kept by the SIGCHLD handler, so it holds exactly the runs still going. A stop
    starts on SIGTERM or SIGINT from `daedalus worker`, or when `parent_fd` closes (the Prefect worker `worker` has
    exited, or `daedalus worker` died): runs in flight get `grace_s`, then SIGUSR1 (cancel), then SIGKILL after
    `CANCEL_S`. Once they are gone and the Prefect worker too, the runs cut short and those it claimed in `pool`
    but never started are recorded Cancelled.
    """

    def __init__(self, listener: socket.socket, grace_s: float, parent_fd: int, pool: str, worker: str) -> None:
        self.listener = listener
        self.grace_s = grace_s
        self.parent_fd: int | None = parent_fd  # None once closed
        self.pool, self.worker = pool, worker
        self.live: dict[int, str] = {}
        self.cut_short: set[str] = set()  # flow run ids the stop ended
        self.cancel_at: float | None = None  # end of the grace period, once stopping
        self.kill_at: float | None = None  # once the runs were told to cancel
        self.announced = False
        from daedalus.runtime.inherited_settings import InheritedSettings

        self.settings = InheritedSettings()

    def stop(self, _signum: int = 0, _frame: object = None) -> None:
        """Start the grace period (a signal handler: it prints nothing, a print it interrupted would raise)."""
        if self.cancel_at is None:
            self.cancel_at = time.monotonic() + self.grace_s

    def reap(self, _signum: int, _frame: object) -> None:
        """Reap finished children (waiting, rather than ignoring SIGCHLD, counts their CPU time in this process's).
        A run killed by a signal during a stop (SIGTERM to every process of a systemd unit) was cut short by it."""
        with contextlib.suppress(ChildProcessError):
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    return
                run = self.live.pop(pid, "")
                if run and self.cancel_at is not None and os.WIFSIGNALED(status):
                    self.cut_short.add(run)

    def _signal_runs(self, signum: int) -> None:
        for pid, run in list(self.live.items()):
            if run:
                self.cut_short.add(run)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _serve_one(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request = _recv(conn)
        except (EOFError, OSError, ValueError):
            conn.close()
            return
        run = str(request["env"].get("PREFECT__FLOW_RUN_ID", ""))
        if self.kill_at is None:
            sys.stdout.flush()
            sys.stderr.flush()
            inherits = self.settings.inherits(request)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # track the pid before it can be reaped
            try:
                pid = os.fork()
                if pid == 0:
                    self.listener.close()
                    if self.parent_fd is not None:
                        os.close(self.parent_fd)
                    _run_child(conn, request, inherits)
                self.live[pid] = run
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        elif run:  # past the grace period a new run is not started: it ends Cancelled at once
            self.cut_short.add(run)
        conn.close()
        if self.kill_at is None:
            self.settings.adopt(time.monotonic())  # after the fork: no run waits for it

    def _stopped(self) -> bool:
        """Move the stop along (grace, cancel, kill); True once it is over: no run left, and no client to come
        (the Prefect worker has exited: `parent_fd` closed)."""
        now = time.monotonic()
        if self.cancel_at is None:
            return False
        if not self.announced:
            print(f"stopping: {len(self.live)} run(s) in flight have {self.grace_s:.0f} s to finish", flush=True)
            self.announced = True
        if self.kill_at is None and now >= self.cancel_at:
            if self.live:
                print(f"grace period over: cancelling {len(self.live)} run(s)", flush=True)
            self._signal_runs(signal.SIGUSR1)
            self.kill_at = now + CANCEL_S
        elif self.kill_at is not None and now >= self.kill_at:
            self._signal_runs(signal.SIGKILL)
        return not self.live and self.parent_fd is None

    def run(self) -> None:
        """Serve until stopped and every run is gone, then record the runs the stop cut short."""
        import select

        watched: list[socket.socket | int] = [self.listener, self.parent_fd]
        while not self._stopped():
            ready = select.select(watched, [], [], 0.2)[0]
            if self.parent_fd is not None and self.parent_fd in ready and not os.read(self.parent_fd, 1):
                watched.remove(self.parent_fd)  # EOF: no more clients will come
                os.close(self.parent_fd)
                self.parent_fd = None
                self.stop()
            if self.listener in ready:
                self._serve_one()
        _record_cancelled(self.cut_short, self.pool, self.worker)


def serve(path: Path, grace_s: float, parent_fd: int, pool: str, worker: str) -> None:
    """Preload, then fork one child per request until stopped (see `_Zygote`)."""
    import importlib

    from daedalus.runtime.process_caches import cache_time_zones, complete_models, share_tls_contexts

    os.environ.setdefault("MPLBACKEND", "Agg")
    # One BLAS thread per run: a loop's matrices are small, and with dozens of runs in flight on a few cores
    # extra threads only spin and contend (load average 60 on 2 cores when a fleet's first fits coincided).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    for name in PRELOAD:
        importlib.import_module(name)
    share_tls_contexts()
    cache_time_zones()
    complete_models()
    if path.exists():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    zygote = _Zygote(listener, grace_s, parent_fd, pool, worker)
    signal.signal(signal.SIGCHLD, zygote.reap)
    signal.signal(signal.SIGTERM, zygote.stop)
    signal.signal(signal.SIGINT, zygote.stop)
    listener.bind(str(path))
    listener.listen(128)
    print(f"preloaded {len(PRELOAD)} modules; listening on {path}", flush=True)
    try:
        zygote.run()
    finally:
        listener.close()
        if path.exists():
            path.unlink()


def run_worker(pool: str, socket_path: Path | None = None, limit: int | None = None,
               stop_timeout_s: float | None = None, queues: tuple[str, ...] = ()) -> int:
    """`daedalus worker`: the preloaded process plus `prefect worker start --pool POOL`, stopped together.

    `queues` limits it to those work queues of the pool (all of them when empty): `--queue pipeline` on another
    machine serves the Spark pipeline there, `--queue default` keeps the loops' worker to the loops.

    `limit` caps the flow runs in flight: a worker that starts after an outage does not start every overdue
    run at once (SQLite would lock up under the burst); the rest start as slots free up.

    On SIGTERM or SIGINT (`stop_timeout_s`, default `stop_timeout()`, bounds it all): the Prefect worker gets
    SIGINT, the one signal it stops on at once (its SIGTERM handler only re-sends SIGINT, and a second signal
    makes it SIGKILL itself, orphaning its runs); it takes no new runs and waits for its clients, which from now
    on ignore its SIGTERM. The preloaded process lets the runs finish for the grace period, cancels the rest and
    records them Cancelled, with any run the Prefect worker claimed but had not started yet. Whatever is left at
    the timeout is killed. Returns 0 after such a stop, else the Prefect worker's own exit code (the runs are
    stopped the same way then).
    """
    import shutil
    import tempfile

    from daedalus.runtime.worker_logging import SETTINGS_ENV, write_worker_logging

    stop_timeout_s = stop_timeout() if stop_timeout_s is None else stop_timeout_s
    # Prefect's logging with a failed websocket keepalive told in one line (runtime/worker_logging.py), for the
    # worker and, through the environment the runs inherit, for every flow run; a configuration of your own wins.
    log_folder = tempfile.mkdtemp(prefix="daedalus-worker-logging-")
    env = dict(os.environ)
    env.setdefault(SETTINGS_ENV, str(write_worker_logging(Path(log_folder))))
    grace_s = max(stop_timeout_s - CANCEL_S - TEARDOWN_S, 0.0)
    name = f"daedalus-{socket.gethostname()}-{os.getpid()}"  # the Prefect worker's: its claims are logged by it
    folder = None
    if socket_path is None:
        folder = tempfile.mkdtemp(prefix="daedalus-prefork-")
        socket_path = Path(folder) / "prefork.sock"
    marker = stop_marker(socket_path)
    marker.unlink(missing_ok=True)  # left by a worker that was killed
    asked: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        asked.append(signum)

    # Handlers before the children start: they then begin with the default dispositions, even when this process
    # inherited an ignored SIGINT (a background job of a shell), with which the Prefect worker would never stop.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    parent_fd, watched_fd = os.pipe()  # the preloaded process sees EOF when no more clients can come
    zygote = worker = None
    import threading

    reaping = threading.Event()
    try:
        zygote = subprocess.Popen([sys.executable, "-m", "daedalus.runtime.prefork", "serve", str(socket_path),
                                   str(grace_s), str(parent_fd), pool, name], pass_fds=(parent_fd,),
                                  stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        os.close(parent_fd)
        _wait_until(lambda: socket_path.exists() or zygote.poll() is not None or bool(asked), 60.0)
        if not asked:
            worker = subprocess.Popen([sys.executable, "-m", "daedalus.runtime.prefect_worker", "worker", "start",
                                       "--pool", pool, "--type", "process", "--name", name,
                                       *(["--limit", str(limit)] if limit else []),
                                       *(arg for q in queues for arg in ("--work-queue", q))],
                                      env={**env, SOCKET_ENV: str(socket_path)}, start_new_session=True,
                                      preexec_fn=_interrupt_when_orphaned())
            if os.environ.get("PREFECT_API_URL"):  # runs another worker claimed and never started (runtime/pending.py)
                from daedalus.runtime.pending import start_reaper

                start_reaper(os.environ["PREFECT_API_URL"].rstrip("/"), pool, reaping)
            _wait_until(lambda: worker.poll() is not None or bool(asked))
        reaping.set()
        stopping_since = time.monotonic()
        deadline = stopping_since + stop_timeout_s
        marker.touch()
        why = signal.Signals(asked[0]).name if asked else f"the Prefect worker exited with {worker.returncode}"
        print(f"daedalus worker: {why}: no new runs; runs in flight have {grace_s:.0f} s to finish, then are "
              f"cancelled; stopped within {stop_timeout_s:.0f} s", file=sys.stderr, flush=True)
        for proc, signum in ((worker, signal.SIGINT), (zygote, signal.SIGTERM)):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signum)
        _wait_until(lambda: worker is None or worker.poll() is not None, deadline - time.monotonic())
        os.close(watched_fd)
        watched_fd = -1
        _wait_until(lambda: zygote.poll() is not None, deadline - time.monotonic())
    finally:
        if watched_fd >= 0:
            os.close(watched_fd)
        for proc in (worker, zygote):
            if proc is not None:
                _kill_session(proc)
        marker.unlink(missing_ok=True)
        shutil.rmtree(log_folder, ignore_errors=True)
        if folder is not None:
            socket_path.unlink(missing_ok=True)
            os.rmdir(folder)
    print(f"daedalus worker: stopped in {time.monotonic() - stopping_since:.1f} s", file=sys.stderr, flush=True)
    return 0 if asked or worker is None else worker.returncode


def _interrupt_when_orphaned() -> Callable[[], None] | None:
    """For the Prefect worker (in a session of its own, out of reach of a signal to `daedalus worker`'s group):
    SIGINT when `daedalus worker` dies, even by SIGKILL, so it never outlives it (Linux's parent-death signal).
    The preloaded process needs none: it stops when its pipe from `daedalus worker` closes."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _wait_until(done: Callable[[], bool], timeout_s: float = float("inf")) -> None:
    """Poll: a signal handler that only records the signal must not leave the caller blocked in a wait."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of a session `run_worker` started (nothing, after a clean stop) and reap its leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
        print(f"killed what was left of process group {proc.pid}", file=sys.stderr, flush=True)
    proc.wait()


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        sys.exit(client())
