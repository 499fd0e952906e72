"""Start or stop a Spark application through its `spark-submit` scale target, as the loop restarts it.

`python -m daedalus.runtime.spark_submit start JOBS_FILE JOB [--scaleout N]` submits the job's command (its
`scale_target.command`) at scale-out N (default: the job's `scaleout.min`) and waits for its first micro-batch;
`... stop JOBS_FILE JOB` stops its queries between micro-batches and lets the driver exit. The first start goes
through here so the scaler knows the process it later restarts.
"""

from __future__ import annotations

import argparse
import sys

from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.spark_submit import SparkSubmitScaler, alive
from daedalus.models.errors import ConfigurationError, ConnectorError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("jobs_file")
    parser.add_argument("job")
    parser.add_argument("--scaleout", type=int, help="default: the job's scaleout.min")
    args = parser.parse_args(argv)
    try:
        spec = load_jobs(args.jobs_file).job(args.job)
        if spec.scale_target.kind != "spark-submit":
            raise ConfigurationError(f"job {spec.name!r}: field scale_target.kind: {spec.scale_target.kind!r}, not "
                                     "spark-submit")
        scaler = SparkSubmitScaler.from_spec(spec)
        if args.action == "stop":
            print(f"{spec.name}: {scaler.stop()}")
            return 0
        state = scaler.state()
        if state is not None and alive(int(state["pid"])):
            raise ConnectorError(f"job {spec.name!r}: already running (process {state['pid']}, scale-out "
                                 f"{state['scaleout']}); stop it first")
        scaleout = args.scaleout or spec.scaleout.min
        pid = scaler.start(scaleout)
        ready = scaler.wait_running(pid, scaler.ready_timeout_s)
        print(f"{spec.name}: submitted at scale-out {scaleout} (process {pid}); "
              + ("its first micro-batch completed" if ready else f"no micro-batch within {scaler.ready_timeout_s:g} s"))
        return 0 if ready else 1
    except (ConfigurationError, ConnectorError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
