"""Execute on a user's own Spark Structured Streaming application by restarting it (scale target `spark-submit`).

Outside Kubernetes no operator restarts a Spark application with new resources, so this scaler does what an operator
would do by hand: it runs the application's own submit command from the jobs file with the scale-out substituted
for `{scaleout}` (`--master local[{scaleout}]`, `--total-executor-cores {scaleout}`, `--num-executors
{scaleout}`), and rescales by stopping the application and submitting it again; its queries restart from their
checkpoints, so a sink with exactly-once commits (files, Delta, an idempotent foreachBatch) gets every row once.

The scaler and the application talk through the scale target's folder (`scale_target.path`), which the command
receives in the environment variable `DAEDALUS_SPARK_CONTROL`; the progress listener the job already installs
(runtime/spark_progress.py) reads it, so the job needs no other line:

- `stop` (written here): the listener stops every active query, between two micro-batches when the query waits for
  its next trigger, the job's `awaitTermination()` returns and the driver exits;
- `running.json` (written by the listener): a micro-batch of the restarted application completed;
- `state.json` (written here): the process, its scale-out and the decision that set it; `driver.log`: its output.

The driver must run on this machine (client deploy mode); the loop's process may come and go between loops, the
application keeps running (its own session). A decision already in `state.json` is not applied twice.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daedalus.connectors.polling import poll
from daedalus.connectors.spark_local import read_json, write_json
from daedalus.models.errors import ConfigurationError, ConnectorError

if TYPE_CHECKING:
    from daedalus.connectors.jobs import JobSpec

CONTROL_ENV = "DAEDALUS_SPARK_CONTROL"  # the folder, in the application's environment
STOP, RUNNING, STATE, LOG = "stop", "running.json", "state.json", "driver.log"
SCALEOUT = "{scaleout}"


def render(command: str, scaleout: int) -> list[str]:
    """The command's arguments with the scale-out in place of every `{scaleout}` (no shell: quotes as in a shell).

    >>> render("spark-submit --master 'local[{scaleout}]' job.py --conf x={y}", 3)
    ['spark-submit', '--master', 'local[3]', 'job.py', '--conf', 'x={y}']
    """
    return [arg.replace(SCALEOUT, str(scaleout)) for arg in shlex.split(command)]


def alive(pid: int) -> bool:
    """Whether the process runs: a child of ours that exited is reaped here, and an exited process that its parent
    has not reaped yet (a zombie, when the starter exited and the new parent reaps late) counts as gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: another process started it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: the signal check is all there is
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class SparkSubmitScaler:
    """Scaler for a Spark application started by `command` (with `{scaleout}`), controlled through `folder`."""

    def __init__(self, folder: str | Path, command: str, ready_timeout_s: float = 120.0, stop_timeout_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if SCALEOUT not in command:
            raise ConfigurationError(f"spark-submit command {command!r} has no {SCALEOUT}: the scale-out would not "
                                     "change anything")
        self.folder, self.command = Path(folder), command
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self._sleep = sleep

    @classmethod
    def from_spec(cls, spec: JobSpec) -> SparkSubmitScaler:
        target = spec.scale_target
        if not target.path or not target.command:
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.path and command: a spark-submit target "
                                     "needs a folder of its own and the application's submit command with "
                                     f"{SCALEOUT}")
        return cls(target.path, target.command, target.ready_timeout)

    def _where(self, job: str) -> str:
        return f"Spark application of {job} ({self.folder})"

    def state(self) -> dict[str, Any] | None:
        """The last submit (process, scale-out, decision), None before the first."""
        return read_json(self.folder / STATE)

    def _running(self, job: str) -> dict[str, Any]:
        state = self.state()
        if state is None or not alive(int(state["pid"])):
            raise ConnectorError(f"{self._where(job)}: not running; start it with `python -m "
                                 f"daedalus.runtime.spark_submit start JOBS_FILE {job}`")
        return state

    def current(self, job: str) -> int:
        return int(self._running(job)["scaleout"])

    def start(self, scaleout: int, decision: str | None = None) -> int:
        """Submit the application at `scaleout` in a session of its own; returns the process id."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in (STOP, RUNNING):
            (self.folder / name).unlink(missing_ok=True)
        argv = render(self.command, scaleout)
        with (self.folder / LOG).open("ab") as log:
            try:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env={**os.environ, CONTROL_ENV: str(self.folder.resolve())},
                                           start_new_session=True)
            except OSError as exc:
                raise ConnectorError(f"spark-submit target {self.folder}: cannot run {argv[0]!r}: {exc}") from exc
        write_json(self.folder / STATE, {"pid": process.pid, "scaleout": scaleout, "decision": decision,
                                         "started": time.time()})
        return process.pid

    def wait_running(self, pid: int, timeout_s: float) -> bool:
        """Until a micro-batch of the application completed; False if it did not within timeout_s."""
        def probe() -> tuple[bool, None]:
            if (self.folder / RUNNING).exists():
                return True, None
            if not alive(pid):
                tail = (self.folder / LOG).read_text(errors="replace")[-1500:]
                raise ConnectorError(f"spark-submit target {self.folder}: the application exited before its first "
                                     f"micro-batch; the end of {LOG}:\n{tail}")
            return False, None

        return poll(probe, timeout_s, self._sleep, first=0.2)[0]

    def stop(self) -> str:
        """Ask the application to stop (its listener stops the queries, between micro-batches when it can); past
        stop_timeout_s, terminate its process group."""
        state = self.state()
        if state is None or not alive(pid := int(state["pid"])):
            return "not running"
        began = time.monotonic()
        (self.folder / STOP).write_text("")

        def gone() -> tuple[bool, None]:
            return not alive(pid), None

        poll(gone, self.stop_timeout_s, self._sleep, first=0.2, most=0.2)
        if not alive(pid):
            return f"stopped on request: exited {time.monotonic() - began:.1f} s after it"
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            if poll(gone, grace, self._sleep, first=0.2, most=0.2)[0]:
                break
        return (f"did not exit within {self.stop_timeout_s:g} s of the stop request: terminated "
                "(its queries resume from their checkpoints)")

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        state = self.state()
        where = self._where(job)
        if state is not None and state.get("decision") == decision_id:
            return (f"{where}: decision {decision_id} already applied (scale-out {state['scaleout']}): not applying it "
                    "twice")
        if target < 1:
            raise ConnectorError(f"{where}: scale-out {target} is below 1")
        before = state["scaleout"] if state is not None else "?"
        argv = shlex.join(render(self.command, target))
        if dry_run:
            return f"dry run: would stop the {where} and submit it again with scale-out {before} → {target}: {argv}"
        stopped = self.stop()
        began = time.monotonic()
        pid = self.start(target, decision_id)
        if self.wait_running(pid, self.ready_timeout_s):
            return (f"restarted the {where} from its checkpoints with scale-out {before} → {target} (decision "
                    f"{decision_id}): {stopped}; its first micro-batch {time.monotonic() - began:.1f} s after the "
                    "submit")
        return (f"submitted the {where} again with scale-out {before} → {target} (decision {decision_id}): {stopped}; "
                f"no micro-batch within {self.ready_timeout_s:g} s")
