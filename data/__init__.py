"""The workload traces and recorded metrics that ship with the project (sources and licences: data/README.md).

Installed as package data, so a user's clone, a wheel and the docs' examples read the same files.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent
WORKLOADS = DATA / "workloads"
METRICS = DATA / "metrics"
WORKLOAD_FOLDERS = ("paper", "recorded", "multiday")
