"""Build a job's Target (metrics source, scaler, clock, loop settings) from its jobs-file entry.

Engines map to metrics sources and scale-target kinds to scalers; a registry fails with the known names.
Connectors are imported lazily so a simulated installation needs no cluster libraries at import time.
"""

from __future__ import annotations

from connectors.targets import MetricsSource, Scaler, Target
from deployments.jobs import JobSpec
from models.clock import WallClock
from models.errors import ConfigurationError


def metrics_source(spec: JobSpec, store_url: str) -> MetricsSource:
    if spec.engine in ("flink", "kafka-streams", "spark"):
        from connectors.prometheus import PrometheusSource

        return PrometheusSource.from_spec(spec)
    if spec.engine == "sim":
        from connectors.sim_persistent import PersistentSimulatedJob

        return PersistentSimulatedJob.from_spec(spec, store_url)
    raise ConfigurationError(f"job {spec.name!r}: no engine {spec.engine!r}; known: flink, kafka-streams, spark, sim")


def scaler(spec: JobSpec, store_url: str) -> Scaler:
    kind = spec.scale_target.kind
    if kind in ("Deployment", "StatefulSet", "FlinkDeployment", "SparkApplication"):
        from connectors.kubernetes import KubernetesScaler

        return KubernetesScaler.from_spec(spec)
    if kind == "spark-local":
        from connectors.spark_local import SparkLocalScaler

        return SparkLocalScaler.from_spec(spec)
    if kind == "sim":
        from connectors.sim_persistent import PersistentSimulatedJob

        return PersistentSimulatedJob.from_spec(spec, store_url)
    raise ConfigurationError(
        f"job {spec.name!r}: no scale target kind {kind!r}; known: Deployment, FlinkDeployment, "
        "SparkApplication, StatefulSet, sim, spark-local"
    )


def build_target(spec: JobSpec, store_url: str) -> Target:
    """The target a deployed `mape-k` run drives for this job."""
    source = metrics_source(spec, store_url)
    scale = source if spec.engine == "sim" else scaler(spec, store_url)
    clock = source if spec.engine == "sim" else WallClock()
    return Target(spec.name, metrics=source, scaler=scale, clock=clock, config=spec.loop_config())  # type: ignore[arg-type]
