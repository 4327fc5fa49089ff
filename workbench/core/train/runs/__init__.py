"""Run folders on disk: run.toml, metrics.csv and checkpoints, the index of a runs folder, and the trash."""
