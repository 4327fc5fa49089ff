"""The built-in demo model: a small CNN for scikit-learn's 8x8 handwritten digits.

``make run`` opens the app on this model so a new user sees something real at
once; it trains to >90% validation accuracy on the digits in a few seconds on CPU.
"""

from __future__ import annotations

import torch
from torch import nn


class DigitsCNN(nn.Module):
    """A LeNet-sized CNN for 8x8 grayscale digits.

    ``features`` is the backbone and ``classifier`` the head, so "freeze the
    backbone" is one checkbox.

    Parameters
    ----------
    num_classes : int
        Number of output logits (10 for the digits).
    in_channels : int
        Input channels (1 for grayscale).

    Shapes
    ------
    input : ``(N, in_channels, 8, 8)`` (any H, W >= 2 works thanks to the global pool)
    output : ``(N, num_classes)`` logits
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(N, C, H, W)`` images to ``(N, num_classes)`` logits."""
        return self.classifier(self.features(x))


#: Input shape of the demo model, ``(N, C, H, W)``.
DEMO_INPUT_SHAPE = (1, 1, 8, 8)
