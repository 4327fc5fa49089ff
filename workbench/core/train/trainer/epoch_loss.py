"""The training loss of the epoch under way: :class:`EpochLoss`. Qt-free.

Each step adds its loss (a float, or on CUDA the detached device tensor, read
only when the epoch ends or a checkpoint is written) and the values a user's
step logs beside it. A run resumed in the middle of an epoch carries the sum and
count of the steps before its checkpoint, so the epoch's mean covers them all.
"""

from __future__ import annotations

import math

import torch

from workbench.core.train.task.metrics import Mean

__all__ = ["EpochLoss"]


class EpochLoss:
    """The step losses and logged values of one epoch.

    Attributes
    ----------
    losses : list of float or list of Tensor
        This epoch's step losses (0-d device tensors on CUDA).
    logged : dict of str to Mean
        Values a user's step returns beside ``loss``, averaged over the epoch's samples.
    carry : (float, int)
        A resumed epoch's loss sum and step count before the checkpoint.
    """

    def __init__(self):
        self.losses: list = []
        self.logged: dict[str, Mean] = {}
        self.carry: tuple[float, int] = (0.0, 0)

    def start(self) -> None:
        """A new epoch (its first batch): forget the last one's values and any carried sum."""
        self.losses = []
        self.logged = {}
        self.carry = (0.0, 0)

    def add(self, loss) -> None:
        """One step's loss (a float, or a detached 0-d tensor read later)."""
        self.losses.append(loss)

    def log(self, values: dict, n: int) -> None:
        """The values a step logged beside its loss (``TaskResult.logged``), for ``n`` samples."""
        for name, value in values.items():
            self.logged.setdefault(name, Mean(name)).add_value(value, n)

    def so_far(self) -> tuple[float, int]:
        """``(sum, count)`` of this epoch's step losses so far (a mid-epoch checkpoint keeps them)."""
        carry_sum, carry_n = self.carry
        vals = self.losses
        if vals and isinstance(vals[0], torch.Tensor):
            return carry_sum + float(torch.stack([v.float() for v in vals]).sum().item()), carry_n + len(vals)
        return float(sum(vals, carry_sum)), carry_n + len(vals)

    def carry_over(self, total: float | None, count: int | None) -> None:
        """Resume mid-epoch: the epoch's loss sum and step count before the checkpoint (None: none)."""
        self.carry = (float(total), int(count)) if total is not None and count else (0.0, 0)

    def mean(self) -> float:
        """Mean step loss of the epoch, including the steps before a mid-epoch resume (NaN: no step)."""
        vals = self.losses
        carry_sum, carry_n = self.carry
        if not vals and not carry_n:
            return math.nan
        if not carry_n and isinstance(vals[0], torch.Tensor):
            return float(torch.stack([v.float() for v in vals]).mean().item())
        total, count = self.so_far()
        return total / count

    def logged_means(self) -> dict[str, float]:
        """``{"train_<name>": mean}`` of every value logged this epoch."""
        return {f"train_{name}": m.compute() for name, m in self.logged.items()}

    def drop_device_losses(self) -> None:
        """Forget the step losses (after an out-of-memory error they may be device tensors)."""
        self.losses = []
