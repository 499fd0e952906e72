"""Processes we start: the preloaded worker, local servers, the local streaming applications."""
