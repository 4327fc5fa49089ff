"""The task of a run: how a batch becomes a loss and metrics (built-in kinds or the user's step, loss and metrics)."""
