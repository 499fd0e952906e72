"""What the policy benchmark runs and reports, read by the runner (policies.py) and the plots (plot.py) alike."""

from __future__ import annotations

import numpy as np

# In the order tables list them; `oracle` (the offline optimum) is the yardstick every ratio is also taken to.
POLICIES = ("static", "hpa-80", "hpa-85", "ds2", "flink-autoscaler", "daedalus-paper", "daedalus", "oracle")
CDF_QUANTILES = np.linspace(0.0, 100.0, 201)  # the latency CDF's points, in per cent
