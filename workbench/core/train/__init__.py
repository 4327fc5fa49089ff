"""A training run: config, data, optimizer, the loop and its control, checkpoints, faults, ``workbench train``."""
