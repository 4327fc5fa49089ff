"""Graphs captured once per session: real torchvision architectures (built on ``meta``: no weights to read)."""

from __future__ import annotations

import pytest
import torch
import torchvision

from tests.core.graph.models import meta_model
from workbench.core.graph import capture_graph


@pytest.fixture(scope="session")
def resnet18_graph():
    """resnet18 (real weights, CPU) captured by the default method."""
    return capture_graph(torchvision.models.resnet18(), torch.zeros(1, 3, 224, 224))


@pytest.fixture(scope="session")
def vit_graph():
    return capture_graph(meta_model("vit_b_16"), torch.zeros(1, 3, 224, 224, device="meta"))
