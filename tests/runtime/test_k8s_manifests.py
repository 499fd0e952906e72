"""deployments/k8s: every manifest valid against the Kubernetes 1.30 schemas (strict: no unknown field), and the
cluster's topology the same as `daedalus fleet up`'s: the settings and commands are compared with runtime/fleet.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from daedalus.runtime.fleet import LEASE_S, WORKER_LIMIT, WORKER_SETTINGS, redis_settings
from daedalus.runtime.local_prefect import server_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deployments" / "k8s"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"ghcr.io/example/daedalus-prefect:{VERSION}"


def _docs(name: str | None = None) -> list[dict[str, Any]]:
    paths = [K8S / name] if name else sorted(K8S.glob("*.yaml"))
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def _one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _container(deployment: str) -> dict[str, Any]:
    (c,) = _one("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_kubernetes_1_30(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_the_check_refuses_an_unknown_field() -> None:
    bad = {**_one("Service", "prefect-server")}
    bad["spec"] = {**bad["spec"], "selectr": {"app": "x"}}
    with pytest.raises(kubernetes_validate.ValidationError, match="selectr"):
        kubernetes_validate.validate(bad, "1.30.0", strict=True)


def test_the_topology_is_the_fleets() -> None:
    api, services, worker = _container("prefect-api"), _container("prefect-services"), _container("daedalus-worker")
    assert api["args"][:3] == ["prefect", "server", "start"] and "--no-services" in api["args"]
    assert _one("Deployment", "prefect-api")["spec"]["replicas"] == 2
    assert services["args"] == ["prefect", "server", "services", "start"]
    assert _one("Deployment", "prefect-services")["spec"]["replicas"] == 1
    assert worker["args"] == ["daedalus", "worker", "--pool", "daedalus", "--limit", str(WORKER_LIMIT)]
    assert _one("Deployment", "daedalus-worker")["spec"]["replicas"] == 2
    (job,) = _one("Job", "prefect-migrate")["spec"]["template"]["spec"]["containers"]
    assert job["args"] == ["prefect", "server", "database", "upgrade", "-y"]
    # One image, this version, for every container of ours.
    ours = [c["image"] for d in _docs() if d["kind"] in ("Deployment", "Job")
            for c in d["spec"]["template"]["spec"]["containers"] if "daedalus" in c["image"]]
    assert ours and set(ours) == {IMAGE}
    # The load balancer is the Service in front of the replicas; the workers use it.
    server = _one("Service", "prefect-server")
    assert server["spec"]["selector"] == _one("Deployment", "prefect-api")["spec"]["selector"]["matchLabels"]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["PREFECT_API_URL"] == f"http://prefect-server.daedalus:{server['spec']['ports'][0]['port']}/api"
    assert {k: env[k] for k in WORKER_SETTINGS} == WORKER_SETTINGS


def test_the_server_settings_are_those_fleet_up_uses() -> None:
    config = _one("ConfigMap", "prefect-server")["data"]
    port = _one("Service", "prefect-redis")["spec"]["ports"][0]["port"]
    expected = {k: v.replace("127.0.0.1", "prefect-redis.daedalus") for k, v in redis_settings(port).items()}
    assert {k: config[k] for k in expected} == expected
    settings = server_settings(many_deployments=True)
    assert {k: config[k] for k in settings if k != "PREFECT_SERVER_ANALYTICS_ENABLED"} == {
        k: v for k, v in settings.items() if k != "PREFECT_SERVER_ANALYTICS_ENABLED"}
    assert config["PREFECT_API_DATABASE_MIGRATE_ON_START"] == "false"
    assert config["PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION"] == str(LEASE_S)
    # The database URL comes from the Secret, never from the ConfigMap; PostgreSQL is outside the cluster.
    assert not any("postgresql" in str(v) for v in config.values())
    for name in ("prefect-api", "prefect-services"):
        (url,) = [e for e in _container(name)["env"] if e["name"] == "PREFECT_API_DATABASE_CONNECTION_URL"]
        assert url["valueFrom"]["secretKeyRef"] == {"name": "prefect-database", "key": "connection-url"}
    assert _one("Service", "prefect-postgres")["spec"]["type"] == "ExternalName"
