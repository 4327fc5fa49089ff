"""Criteria called as ``loss(output, target)``: the built-in names, or a user's class or function.

A criterion here sees the float32 output (``Task`` casts mixed-precision outputs)
and a target moved to the output's device. The built-ins adapt the target the
way a user of plain PyTorch would by hand: integer class targets ``(N,)``
become one-hot ``(N, C)`` for mse / l1 / huber / bce_with_logits against
``(N, C)`` outputs, and a target with as many elements as the output but another
shape (``(N,)`` against ``(N, 1)``) takes the output's shape, where PyTorch
would broadcast to ``(N, N)`` with only a warning.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

__all__ = ["LOSS_NAMES", "build_loss", "adapt_target"]

#: Built-in criteria by name.
LOSS_NAMES = ("cross_entropy", "mse", "l1", "huber", "smooth_l1", "bce_with_logits")


def adapt_target(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``target`` shaped and typed like ``output`` for an element-wise loss.

    Integer class indices ``(N,)`` against ``(N, C)`` logits: one-hot ``(N, C)``;
    the same number of elements in another shape: reshaped to ``output.shape``;
    another dtype: cast to ``output.dtype``.
    """
    if not target.is_floating_point() and output.dim() == 2 and target.dim() == 1 \
            and output.shape[1] > 1 and target.shape[0] == output.shape[0]:
        return nn.functional.one_hot(target.long(), output.shape[1]).to(output.dtype)
    if target.shape != output.shape and target.numel() == output.numel():
        target = target.reshape(output.shape)
    return target.to(output.dtype) if target.dtype != output.dtype else target


class _Elementwise(nn.Module):
    """An element-wise criterion whose target goes through :func:`adapt_target` first."""

    def __init__(self, loss: nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss(output, adapt_target(output, target))


class _CrossEntropy(nn.Module):
    """``nn.CrossEntropyLoss`` that also takes ``(N, 1)`` or float-typed class indices."""

    def __init__(self):
        super().__init__()
        self.loss = nn.CrossEntropyLoss()

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not target.is_floating_point() or target.shape != output.shape:  # indices, not class probabilities
            if target.dim() == 2 and target.shape[1] == 1:
                target = target[:, 0]
            target = target.long()
        return self.loss(output, target)


def build_loss(name_or_callable: str | Callable[..., Any]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The criterion ``name_or_callable`` stands for.

    Parameters
    ----------
    name_or_callable : str or callable
        One of :data:`LOSS_NAMES`, or what a loss spec resolved to: a class (an
        ``nn.Module`` subclass such as a user's ``FocalLoss``) is instantiated
        without arguments, a function is used as it is.

    Raises
    ------
    ValueError
        An unknown name (the message lists the built-in ones).
    TypeError
        A class that cannot be instantiated without arguments.
    """
    if callable(name_or_callable):
        if isinstance(name_or_callable, type):
            try:
                return name_or_callable()
            except TypeError as e:
                raise TypeError(f"the loss class {name_or_callable.__name__} cannot be built without arguments "
                                f"({e}); give a function or a factory that returns the criterion") from e
        return name_or_callable
    if name_or_callable == "cross_entropy":
        return _CrossEntropy()
    table = {"mse": nn.MSELoss, "bce_with_logits": nn.BCEWithLogitsLoss, "l1": nn.L1Loss, "huber": nn.HuberLoss,
             "smooth_l1": nn.SmoothL1Loss}
    if name_or_callable not in table:
        raise ValueError(f"unknown loss {name_or_callable!r}; choose {', '.join(LOSS_NAMES)} or give a spec "
                         "(file.py:MyLoss)")
    return _Elementwise(table[name_or_callable]())
