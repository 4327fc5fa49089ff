"""The built-in "Tabular MLP": a multilayer perceptron for rows of a table.

It takes the ``(N, F)`` float inputs of ``[data] dataset = "csv"`` (numeric columns
standardised, text columns one-hot) and returns ``(N, num_outputs)``: class logits,
or one value per regression / multilabel target column.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from workbench.core.errors import ArchitectureError

__all__ = ["TabularMLP", "tabular_mlp"]


class TabularMLP(nn.Module):
    """Linear-ReLU-Dropout blocks (``body``) and a linear ``head``.

    ``body`` is the backbone and ``head`` the output layer, so "train only the head"
    is one checkbox. There is no BatchNorm: the inputs arrive standardised, and a
    BatchNorm layer would fail on a training batch of one row (the last batch of an
    epoch can be that small) and behave differently in eval.

    Parameters
    ----------
    in_features : int
        F, the number of inputs per row (``DataInfo.input_shape[0]``).
    num_outputs : int
        Classes (logits), or target columns (regression, multilabel).
    hidden : sequence of int
        Width of each hidden block, input side first; empty = a linear model.
    dropout : float
        Dropout probability after each hidden block's ReLU (0 = none).

    Shapes
    ------
    input : ``(N, in_features)`` float
    output : ``(N, num_outputs)``
    """

    def __init__(self, in_features: int, num_outputs: int, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.1):
        super().__init__()
        if int(in_features) < 1 or int(num_outputs) < 1:
            raise ArchitectureError(f"TabularMLP needs in_features >= 1 and num_outputs >= 1, "
                                    f"got {in_features} and {num_outputs}")
        self.in_features, self.num_outputs = int(in_features), int(num_outputs)
        blocks: list[nn.Module] = []
        width = self.in_features
        for h in hidden:
            blocks.append(nn.Sequential(nn.Linear(width, int(h)), nn.ReLU(), nn.Dropout(float(dropout))))
            width = int(h)
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(width, self.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(N, in_features)`` rows to ``(N, num_outputs)`` outputs."""
        return self.head(self.body(x))


def tabular_mlp(in_features: int | None = None, num_outputs: int | None = None, *, num_classes: int | None = None,
                hidden: Sequence[int] = (128, 64), dropout: float = 0.1) -> TabularMLP:
    """Build a :class:`TabularMLP`; ``num_classes`` is accepted for ``num_outputs``.

    Parameters
    ----------
    in_features : int
        Inputs per row: the data's ``input_shape[0]``.
    num_outputs, num_classes : int, optional
        Outputs (either name; ``num_classes`` is what "New from architecture" and
        ``--num-classes`` pass). Default 1.
    hidden, dropout
        As :class:`TabularMLP`.

    Raises
    ------
    ArchitectureError
        ``in_features`` is not given, or both output counts are given and differ.
    """
    if in_features is None:
        raise ArchitectureError("tabular_mlp needs in_features, the number of input columns after one-hot "
                                "(the data's input_shape), e.g. tabular_mlp(in_features=10, num_outputs=1)")
    if num_outputs is not None and num_classes is not None and num_outputs != num_classes:
        raise ArchitectureError(f"tabular_mlp got num_outputs={num_outputs} and num_classes={num_classes}; give one")
    outputs = num_outputs if num_outputs is not None else num_classes if num_classes is not None else 1
    return TabularMLP(in_features, outputs, hidden=tuple(hidden), dropout=dropout)
