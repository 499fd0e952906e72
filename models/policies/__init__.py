"""Autoscaling policies: the Daedalus loop and the baselines it is compared with."""
