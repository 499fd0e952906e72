"""Every benchmark: policies, loop cost, models, monitor, schedule, retrain, validate; and their plots."""
