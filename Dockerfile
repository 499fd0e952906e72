# The image deployments/k8s names (ghcr.io/example/daedalus-prefect): the Prefect server parts (API replicas,
# services, migrations) and the `daedalus worker`, from this repository's own install command and nothing else.
# Build: docker build -t ghcr.io/example/daedalus-prefect:0.1.0 .
# tests/runtime/test_dockerfile.py runs the RUN commands below in a clean virtual environment and starts a worker.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PREFECT_HOME=/tmp/prefect PREFECT_SERVER_ANALYTICS_ENABLED=false
WORKDIR /src
COPY pyproject.toml README.md ./
COPY models models
COPY data data
COPY tasks tasks
COPY flows flows
COPY connectors connectors
COPY sim sim
COPY deployments deployments
COPY cli cli
COPY bench bench
COPY runtime runtime
RUN pip install .
USER 10001
CMD ["daedalus", "worker", "--pool", "daedalus"]
