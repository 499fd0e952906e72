"""Shared pieces of the connectors tests: tool checks, the simulated scenario, the selector and topic, and a
Prometheus behind TLS and basic auth."""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import yaml

from daedalus.models.config import LoopConfig
from daedalus.runtime.ports import free_port
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import SimConfig
from daedalus.sim.workloads import sine_workload

needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                                      reason="prometheus/promtool not installed (apt-get install -y prometheus)")
SELECTOR = {"namespace": "streaming", "cluster": "sim-flink"}
TOPIC = "sim-events"
# The exporter serves exact per-second counter values: irate gives the arrivals of each second exactly.
IRATE_WORKLOAD = "sum(irate(kafka_server_brokertopicmetrics_messagesin_total{topic=${source.topic}}[5s]))"


def sim_hour(seed: int = 0, hours: float = 1.0) -> tuple[SimConfig, LoopConfig, np.ndarray]:
    """A simulated hour that ends about two minutes ago: Prometheus accepts it (3 h out-of-order window)."""
    sim_config, loop_config, workload = scenario(sine_workload(hours=hours), 12, 0.9, seed)
    start = float(int(time.time()) - int(hours * 3600) - 120)
    return SimConfig(**{**sim_config.__dict__, "start": start}), loop_config, workload


# --- a Prometheus behind TLS and basic auth (its own --web.config.file) ------------------------------------

USER, PASSWORD = "daedalus", "s3cr3t-Pa55"
# bcrypt of PASSWORD at cost 4 (the fastest Prometheus accepts), made once with libxcrypt:
# crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)).
PASSWORD_BCRYPT = "$2b$04$TDqOaMEcj66uGg..oS0Xae3HBF9pbYimw2zjkt49G1eBVM5a5G1l2"


def tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA, and a server certificate it signs for 127.0.0.1: (ca.pem, server.pem, server-key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)

    def build(subject: str, issuer: x509.Name, public: Any, signer: Any, ca: bool) -> x509.Certificate:
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(issuer).public_key(public).serial_number(x509.random_serial_number())
             .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False, data_encipherment=False,
                                              key_agreement=False, encipher_only=False, decipher_only=False),
                                critical=True)
        else:
            b = (b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                 critical=False)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                 .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                                critical=False))
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("daedalus test CA", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "daedalus test CA")]),
               ca_key.public_key(), ca_key, ca=True)
    server = build("127.0.0.1", ca.subject, key.public_key(), ca_key, ca=False)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@contextlib.contextmanager
def secured_prometheus(folder: Path, openmetrics: str) -> Iterator[tuple[str, Path]]:
    """The Debian `prometheus` serving https only, with basic auth (USER, PASSWORD), holding `openmetrics`
    (backfilled with promtool). Yields its https URL (no credentials) and the CA file that verifies it."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data"
    data.mkdir(exist_ok=True)
    (folder / "backfill.om").write_text(openmetrics)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(folder / "backfill.om"), str(data)],
                   check=True, capture_output=True, timeout=120)
    ca, cert, key = tls_files(folder)
    web = folder / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                                   "basic_auth_users": {USER: PASSWORD_BCRYPT}}))
    (folder / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}}))
    port = free_port()
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen(["prometheus", f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={web}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/-/ready", auth=(USER, PASSWORD), verify=str(ca), timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready after 30 s: {(folder / 'prometheus.log').read_text()}")
            time.sleep(0.05)
        yield url, ca
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
