"""The Trainer and its parts: the loop, hooks, commands, checkpoints, faults, NaN trace, evaluation, optimizers, the edit log and rank sync."""
