"""The Prefect worker of `daedalus worker`: `prefect worker start`, in a process that computes once what Prefect
computes for every run it submits (runtime/process_caches.py).

`python -m daedalus.runtime.prefect_worker worker start --pool POOL ...` takes Prefect's own command line.
"""

from __future__ import annotations


def main() -> None:
    from daedalus.runtime.process_caches import cache_settings_environment, cache_time_zones, share_tls_contexts

    share_tls_contexts()
    cache_time_zones()
    cache_settings_environment()
    from prefect.cli import app

    app()


if __name__ == "__main__":
    main()
