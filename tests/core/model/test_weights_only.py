"""The weights-only tree: structure without an architecture."""

from __future__ import annotations

import pytest
import torch

from tests.core.model.checkpoint_files import make_model
from workbench.core.errors import ArchitectureError
from workbench.core.model.weights_only import weights_only_model, WeightsOnlyModule


def test_weights_only_tree_shows_structure_but_refuses_forward():
    source = make_model("resnet18")
    sd = {"module." + k: v for k, v in source.state_dict().items()}
    tree = weights_only_model(sd)
    assert isinstance(tree, WeightsOnlyModule)
    names = dict(tree.named_modules())
    assert {"layer1.0.conv1", "layer4.1.bn2", "fc"} <= set(names)
    assert names["layer1.0.conv1"].weight.shape == (64, 64, 3, 3)
    assert sum(p.numel() for p in tree.parameters()) == sum(p.numel() for p in source.parameters())
    assert "layer1.0.bn1.running_mean" in dict(tree.named_buffers())
    assert all(p.requires_grad for p in tree.parameters())
    with pytest.raises(ArchitectureError, match="forward passes and training need an architecture"):
        tree(torch.randn(1, 3, 32, 32))


def test_weights_only_tree_survives_awkward_names():
    sd = {"a.weight": torch.zeros(2), "a": torch.zeros(1), "forward.x": torch.zeros(3), "b..c": torch.zeros(1)}
    tree = weights_only_model(sd)
    assert sum(t.numel() for t in tree.state_dict().values()) == 7
