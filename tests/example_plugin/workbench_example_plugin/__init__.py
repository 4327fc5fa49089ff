"""An installed package's contribution to Workbench: the architecture ``tiny_mlp``.

Registered in this package's ``pyproject.toml`` under the entry-point group
``workbench.architectures``; Workbench imports this module only when
``tiny_mlp`` is built (``docs/plugins.md``).
"""

from __future__ import annotations

from torch import nn

__all__ = ["TinyMLP"]


class TinyMLP(nn.Module):
    """Flatten, one hidden layer with ReLU, then logits.

    Parameters
    ----------
    num_classes : int
        Output logits.
    in_features : int
        Input features after flattening (64 for 8x8 grayscale digits).
    hidden : int
        Width of the hidden layer.

    Shapes
    ------
    input : ``(N, *)`` with ``in_features`` elements per sample, e.g. ``(N, 1, 8, 8)``
    output : ``(N, num_classes)``
    """

    def __init__(self, num_classes: int = 10, in_features: int = 64, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU())
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x):
        """Logits of ``x``: ``(N, *) -> (N, num_classes)``."""
        return self.out(self.body(x))
