"""A real Prometheus on loopback, owned by this process: the Debian package's server with a config of its own.

Tests, `daedalus bench monitor`, `daedalus bench flink` and `daedalus demo --engine flink` scrape the simulator's
exporter, a local Flink or the loop's own exporter with it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import requests
import yaml

from daedalus.runtime.ports import free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


@contextlib.contextmanager
def local_prometheus(folder: Path, targets: Sequence[str] = (), scrape_interval: str = "1s",
                     lookback: str | None = None, openmetrics: str | None = None) -> Iterator[str]:
    """Start the Debian `prometheus` on a free loopback port with its own config and data dir.

    It scrapes `targets` (host:port) with honor_labels (the exporter's labels win, no `exported_` rename) and
    accepts samples up to 3 h old (simulated hours lie in the past). `openmetrics` (text ending in `# EOF`,
    timestamps in seconds) is backfilled with promtool before the start. Yields the base URL once ready and,
    with targets, once scraping; always stops the server.
    """
    if PROMETHEUS is None or PROMTOOL is None:
        raise FileNotFoundError("prometheus/promtool not found: apt-get install -y prometheus")
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data"
    data.mkdir(exist_ok=True)
    if openmetrics is not None:
        source = folder / "backfill.om"
        source.write_text(openmetrics)
        subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       check=True, capture_output=True, timeout=120)
    # Simulated hours lie in the past: accept samples up to 3 h older than the newest one.
    config = {"global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
              "storage": {"tsdb": {"out_of_order_time_window": "3h"}},
              "scrape_configs": [{"job_name": "daedalus-test", "honor_labels": True,
                                  "static_configs": [{"targets": list(targets)}]}] if targets else []}
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    # Never a port it is told to scrape: a target started next (a Spark job takes seconds) has not bound its port yet,
    # and a port just released may be handed out again (CI: the job then failed with "Address already in use").
    port = free_port(avoid={int(p) for target in targets if (p := target.rpartition(":")[2]).isdigit()})
    cmd = [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
           f"--web.listen-address=127.0.0.1:{port}", "--web.enable-admin-api"]
    if lookback:
        cmd.append(f"--query.lookback-delta={lookback}")
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: requests.get(f"{url}/-/ready", timeout=1).status_code == 200, 30, "ready")
        if targets:
            _wait(lambda: len(requests.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=1)
                              .json()["data"]["result"]) >= len(targets), 60, "scraping")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait(ok: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException, KeyError, ValueError):
            if ok():
                return
        time.sleep(0.05)
    raise TimeoutError(f"prometheus not {what} after {timeout} s")
