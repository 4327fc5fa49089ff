"""The Trainer and its parts, each a module of its own.

The loop, hooks, commands, checkpoints, faults, NaN trace, evaluation,
optimizers, the edit log, rank sync, the process strategy, the data set-up,
the run's first files, the epoch's loss, TensorBoard, staged unfreezing, and
the Protocols the parts see the Trainer (or an attached script) through.
"""
