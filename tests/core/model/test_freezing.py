"""core.model.freezing: requires_grad edits by path, counts, BatchNorm policy."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.freezing import (
    apply_batchnorm_policy,
    apply_frozen,
    freeze_all_except,
    freeze_before,
    set_requires_grad,
    set_trainable,
    trainable_counts,
)
from workbench.core.model.names import UnknownPathError
from workbench.core.model.names import frozen_names as frozen_parameter_names


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.mid = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10)
        self.head.weight = self.embed.weight


def _trainable(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def resnet():
    return torchvision.models.resnet18()


@pytest.fixture
def r18(resnet):
    for p in resnet.parameters():
        p.requires_grad_(True)
    resnet.train()
    return resnet


def test_set_trainable_module_parameter_and_all(r18):
    changed = set_trainable(r18, "layer1", False)
    assert changed == [n for n, _ in r18.named_parameters() if n.startswith("layer1.")]
    assert set_trainable(r18, "layer1", False) == []  # nothing changes twice
    assert set_trainable(r18, "fc.bias", False) == ["fc.bias"]
    assert not r18.fc.bias.requires_grad and r18.fc.weight.requires_grad
    trainable, total = trainable_counts(r18)
    assert total == 11_689_512
    assert trainable == total - sum(p.numel() for p in r18.layer1.parameters()) - 1000
    changed = set_trainable(r18, "", True)
    assert "fc.bias" in changed and "layer1.0.conv1.weight" in changed and "conv1.weight" not in changed
    assert trainable_counts(r18) == (total, total)


def test_unknown_path_suggests_close_matches(r18):
    with pytest.raises(UnknownPathError) as info:
        set_trainable(r18, "layer1.0.conv", False)
    err = info.value
    assert isinstance(err, WorkbenchError)
    assert err.path == "layer1.0.conv"
    assert "layer1.0.conv1" in err.suggestions
    assert "'layer1.0.conv'" in str(err) and "Did you mean" in str(err)
    assert _trainable(r18) == {n for n, _ in r18.named_parameters()}  # nothing changed


def test_freeze_all_except(r18):
    changed = freeze_all_except(r18, "fc")
    assert _trainable(r18) == {"fc.weight", "fc.bias"}
    assert len(changed) == len(list(r18.parameters())) - 2
    assert freeze_all_except(r18, "") == changed  # "" unfreezes everything again, same names


def test_freeze_before_registration_order(r18):
    changed = freeze_before(r18, "layer3")
    names = [n for n, _ in r18.named_parameters()]
    frozen_expected = [n for n in names if n.split(".")[0] in {"conv1", "bn1", "layer1", "layer2"}]
    assert changed == frozen_expected
    assert frozen_parameter_names(r18) == frozen_expected
    # parameter path: everything listed before it
    set_trainable(r18, "", True)
    assert freeze_before(r18, "bn1.weight") == ["conv1.weight"]
    assert freeze_before(r18, "") == []


def test_freeze_before_includes_ancestor_own_parameters():
    vit = torchvision.models.VisionTransformer(
        image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16)
    changed = freeze_before(vit, "encoder.layers.encoder_layer_1")
    assert "class_token" in changed and "encoder.pos_embedding" in changed
    assert "conv_proj.weight" in changed
    assert any(n.startswith("encoder.layers.encoder_layer_0.") for n in changed)
    assert not any(n.startswith("encoder.layers.encoder_layer_1.") or n.startswith("heads") for n in changed)


def test_tied_parameters_once_and_aliases():
    model = Tied()
    assert trainable_counts(model) == (40 + 20 + 10, 40 + 20 + 10)
    # freezing via the alias reports the canonical name, once
    assert set_trainable(model, "head.weight", False) == ["embed.weight"]
    assert not model.embed.weight.requires_grad
    assert trainable_counts(model) == (30, 70)
    # a module holding a tied parameter: freezing 'head' freezes the shared weight too (already frozen)
    assert set_trainable(model, "head", False) == ["head.bias"]
    # freeze_all_except keeps a parameter shared with the kept subtree trainable
    changed = freeze_all_except(model, "head")
    assert set(changed) == {"embed.weight", "head.bias", "mid.weight", "mid.bias"}
    assert _trainable(model) == {"embed.weight", "head.bias"}


def test_set_requires_grad_and_apply_frozen_roundtrip():
    model = DigitsCNN()
    assert set_requires_grad(model, ["features.0.weight", "features.1"], False) == [
        "features.0.weight", "features.1.weight", "features.1.bias"]
    frozen = frozen_parameter_names(model)
    other = DigitsCNN()
    changed = apply_frozen(other, frozen)
    assert changed == frozen and frozen_parameter_names(other) == frozen
    # apply_frozen also unfreezes what is not listed
    assert apply_frozen(other, ["classifier.bias"]) == frozen + ["classifier.bias"]
    with pytest.raises(UnknownPathError):
        apply_frozen(other, ["head.weight"])
    assert frozen_parameter_names(other) == ["classifier.bias"]  # unchanged after the error
    assert apply_frozen(other, ["head.weight"], strict=False) == ["classifier.bias"]
    with pytest.raises(UnknownPathError):
        set_requires_grad(model, ["features.0.weight", "nope"], True)
    assert not model.features[0].weight.requires_grad  # nothing applied


def test_batchnorm_policy_keeps_frozen_running_stats():
    model = DigitsCNN()
    set_trainable(model, "features.1", False)  # first BatchNorm frozen, second not
    model.train()
    assert apply_batchnorm_policy(model) == ["features.1"]
    assert not model.features[1].training and model.features[4].training
    assert apply_batchnorm_policy(model) == []  # already in eval
    before = model.features[1].running_mean.clone()
    model(torch.randn(8, 1, 8, 8))
    assert torch.equal(model.features[1].running_mean, before)
    assert not torch.equal(model.features[4].running_mean, torch.zeros(32))
    # affine=False BatchNorm has no freeze decision: left alone
    bare = nn.Sequential(nn.BatchNorm1d(3, affine=False))
    assert apply_batchnorm_policy(bare) == [] and bare[0].training


def test_apply_frozen_takes_module_paths_as_a_run_file_writes_them_by_hand():
    model = DigitsCNN()
    apply_frozen(model, ["features", "classifier.bias"])
    want = [n for n, _ in model.named_parameters() if n.startswith("features.")] + ["classifier.bias"]
    assert frozen_parameter_names(model) == want
    with pytest.raises(UnknownPathError, match="featurez"):
        apply_frozen(model, ["featurez"])


def test_would_change_names_what_set_requires_grad_changes_and_changes_nothing():
    import copy

    from workbench.core.model.freezing import set_requires_grad, would_change

    model = torchvision.models.resnet18(num_classes=10)
    model.layer1[0].requires_grad_(False)
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    for names, flag in ((["layer1"], False), (["layer1", "fc.weight"], True), (["layer2.0.bn1"], True)):
        predicted = would_change(model, names, flag)
        assert {n: p.requires_grad for n, p in model.named_parameters()} == before
        assert predicted == set_requires_grad(copy.deepcopy(model), names, flag)
    assert would_change(model, ["layer1"], False) == [n for n in before if n.startswith("layer1.1.")]
