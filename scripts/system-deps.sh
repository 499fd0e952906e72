#!/usr/bin/env bash
# Debian packages the test suite runs for real: a Prometheus server, headless Chromium (the Prefect UI test) and a
# JDK with javac (Spark, and the Flink job compiled from runtime/flink_job); PostgreSQL, Redis and HAProxy for the
# distributed Prefect fleet (`daedalus fleet up`, runtime/fleet.py).
# Installs only what is missing; needs root (CI and these machines run as root).
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v haproxy >/dev/null 2>&1 || command -v /usr/sbin/haproxy >/dev/null 2>&1 || need+=(haproxy)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]} — run as root or: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
