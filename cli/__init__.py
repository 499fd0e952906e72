"""The `daedalus` command line: one module per command group.

Prefect's anonymous usage reports are off in every command, set here before any command imports Prefect: a
temporary server (`daedalus step`) would otherwise try to send them and print "Failed to send telemetry" where
there is no network. Setting a variable yourself still wins.
"""

import os

# Prefect 3.8.8's settings: server.analytics_enabled and cloud.enable_orchestration_telemetry.
for _name in ("PREFECT_SERVER_ANALYTICS_ENABLED", "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY"):
    os.environ.setdefault(_name, "false")
