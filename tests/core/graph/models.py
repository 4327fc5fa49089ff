"""Models the graph tests share."""

from __future__ import annotations

import torch
import torchvision


def meta_model(name: str) -> torch.nn.Module:
    """Build torchvision's ``name`` on the meta device: the real structure, no values to read."""
    with torch.device("meta"):
        return torchvision.models.get_model(name)
