"""The Probes wing: the Probes panel, its tabs and the probe-batch worker."""
