"""A resnet18 and its ONNX export, made once for the export tests (the export is the slow part)."""

from __future__ import annotations

import pytest
import torch
import torchvision

from workbench.core.export import export


@pytest.fixture(scope="session")
def resnet():
    """torchvision resnet18 with 10 classes, random weights (seed 0), eval mode."""
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


@pytest.fixture(scope="session")
def image():
    """One 3 x 64 x 64 image, standard normal values."""
    return torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="session")
def resnet_onnx(resnet, image, tmp_path_factory):
    """``(report, path)`` of resnet18 exported to ONNX (dynamic batch) and checked."""
    out = tmp_path_factory.mktemp("onnx") / "resnet18.onnx"
    return export(resnet, "onnx", out, example=image), out
