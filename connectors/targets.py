"""Where a control-loop run finds its job: a Target built from the jobs file, or one registered in-process.

Engines map to metrics sources and scale-target kinds to scalers; a registry fails with the known names.
Connectors are imported lazily so a simulated installation needs no cluster libraries at import time.
In-process targets (simulations, tests) are registered per job name; a flow run looks its job up.
"""

from __future__ import annotations

from daedalus.connectors.clock import FixedClock, WallClock
from daedalus.connectors.jobs import JobSpec, load_jobs
from daedalus.models.errors import ConfigurationError
from daedalus.models.ports import MetricsSource, Scaler, Target

_REGISTRY: dict[str, Target] = {}


def register(target: Target) -> None:
    _REGISTRY[target.job] = target


def unregister(job: str) -> None:
    _REGISTRY.pop(job, None)


def get(job: str) -> Target:
    try:
        return _REGISTRY[job]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigurationError(f"no target registered for job {job!r}; known: {known}") from None


def metrics_source(spec: JobSpec, store_url: str) -> MetricsSource:
    if spec.engine in ("flink", "kafka-streams", "spark"):
        from daedalus.connectors.prometheus import PrometheusSource

        return PrometheusSource.from_spec(spec)
    if spec.engine == "sim":
        from daedalus.connectors.sim_persistent import PersistentSimulatedJob

        return PersistentSimulatedJob.from_spec(spec, store_url)
    raise ConfigurationError(f"job {spec.name!r}: no engine {spec.engine!r}; known: flink, kafka-streams, spark, sim")


def scaler(spec: JobSpec, store_url: str) -> Scaler:
    kind = spec.scale_target.kind
    if kind in ("Deployment", "StatefulSet", "FlinkDeployment", "SparkApplication"):
        from daedalus.connectors.kubernetes import KubernetesScaler

        return KubernetesScaler.from_spec(spec)
    if kind == "flink-rest":
        from daedalus.connectors.flink_rest import FlinkRestScaler

        return FlinkRestScaler.from_spec(spec)
    if kind == "flink-reactive":
        from daedalus.connectors.flink_rest import FlinkReactiveScaler

        return FlinkReactiveScaler.from_spec(spec)
    if kind == "spark-local":
        from daedalus.connectors.spark_local import SparkLocalScaler

        return SparkLocalScaler.from_spec(spec)
    if kind == "spark-submit":
        from daedalus.connectors.spark_submit import SparkSubmitScaler

        return SparkSubmitScaler.from_spec(spec)
    if kind == "sim":
        from daedalus.connectors.sim_persistent import PersistentSimulatedJob

        return PersistentSimulatedJob.from_spec(spec, store_url)
    raise ConfigurationError(
        f"job {spec.name!r}: no scale target kind {kind!r}; known: Deployment, FlinkDeployment, "
        "SparkApplication, StatefulSet, flink-reactive, flink-rest, sim, spark-local, spark-submit"
    )


def build_target(spec: JobSpec, store_url: str, at: float | None = None) -> Target:
    """The target a deployed `mape-k` run drives for this job; with `at`, as of that moment (metrics replayed
    from Prometheus; a simulated job has only its own present)."""
    if at is not None and spec.engine == "sim":
        raise ConfigurationError(f"job {spec.name!r}: engine 'sim' runs on its own clock; evaluating it at a past "
                                 "moment (--at) needs a job whose metrics are in Prometheus")
    source = metrics_source(spec, store_url)
    scale = source if spec.engine == "sim" else scaler(spec, store_url)
    wall = WallClock()
    clock = source if spec.engine == "sim" else (wall if at is None else FixedClock(at))
    return Target(spec.name, metrics=source, scaler=scale, clock=clock, config=spec.loop_config(),  # type: ignore[arg-type]
                  wall=wall)


def resolve(job: str, store_url: str, jobs_file: str | None, at: float | None = None
            ) -> tuple[Target, JobSpec | None]:
    """A registered in-process target (simulation, tests) or one built from the jobs file (deployments),
    with the job's entry: the jobs file is read once per run."""
    if jobs_file is None:
        if at is not None:
            raise ConfigurationError(f"job {job!r}: evaluating at a past moment needs the jobs file")
        return get(job), None
    spec = load_jobs(jobs_file).job(job)
    return build_target(spec, store_url, at), spec
