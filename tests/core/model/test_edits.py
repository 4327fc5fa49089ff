"""Edits on a live model (workbench.core.model.edits): re-initialization and its undo, head replacement,
module lookup and swap, and the replay of a run file's ``[model] edits``, on torchvision's resnet18."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from workbench.core.errors import WorkbenchError
from workbench.core.model.edits import (
    INIT_METHODS,
    apply_edits,
    get_module,
    is_head_candidate,
    is_last_layer,
    last_layer,
    reinitialize,
    replace_head,
    restore_tensors,
    swap_module,
)


@pytest.fixture
def net() -> nn.Module:
    torch.manual_seed(0)
    return resnet18(num_classes=10)


def test_reinitialize_returns_the_old_values_and_restore_puts_them_back(net):
    block = net.layer1[0]
    before = {k: v.clone() for k, v in block.state_dict().items()}
    block.bn1.running_mean.fill_(3.0)
    old = reinitialize(block, "zeros_")
    assert set(old) == set(before)  # parameters and buffers
    assert torch.count_nonzero(block.conv1.weight) == 0 and torch.count_nonzero(block.bn1.bias) == 0
    assert torch.equal(old["bn1.running_mean"], torch.full((64,), 3.0))
    redo = restore_tensors(block, old)
    assert torch.equal(block.conv1.weight, before["conv1.weight"])
    assert torch.count_nonzero(redo["conv1.weight"]) == 0  # the edited values, to redo it
    assert block.conv1.weight.requires_grad


def test_fan_based_methods_give_norm_scales_ones_and_biases_zeros(net):
    reinitialize(net.layer1[0], "kaiming_normal_")
    bn = net.layer1[0].bn1
    assert torch.equal(bn.weight, torch.ones(64)) and torch.equal(bn.bias, torch.zeros(64))
    assert net.layer1[0].conv1.weight.std().item() == pytest.approx((2 / (64 * 9)) ** 0.5, rel=0.1)


def test_constant_and_normal_take_their_value(net):
    reinitialize(net.fc, "constant_", 0.25)
    assert torch.all(net.fc.weight == 0.25) and torch.all(net.fc.bias == 0.25)
    reinitialize(net.layer4, "normal_", 2.0)
    assert net.layer4[1].conv2.weight.std().item() == pytest.approx(2.0, rel=0.02)


def test_reset_parameters_resets_batchnorm_statistics_too(net):
    net.bn1.running_var.fill_(7.0)
    net.bn1.num_batches_tracked.fill_(5)
    reinitialize(net.bn1)
    assert torch.equal(net.bn1.running_var, torch.ones(64)) and net.bn1.num_batches_tracked.item() == 0
    assert set(INIT_METHODS) >= {"reset_parameters", "zeros_"}


def test_reinitialize_refuses_an_unknown_method_and_a_module_without_parameters(net):
    with pytest.raises(WorkbenchError, match="^Re-initialize: unknown method 'ones_'; use one of reset_parameters, "):
        reinitialize(net.fc, "ones_")
    with pytest.raises(WorkbenchError, match="^Re-initialize: ReLU has no parameters to re-initialize.$"):
        reinitialize(net.relu)


def test_replace_head_keeps_the_input_size_and_gives_the_new_outputs(net):
    old = replace_head(net, "fc", 3)
    assert old.out_features == 10 and isinstance(net.fc, nn.Linear)
    assert (net.fc.in_features, net.fc.out_features, net.fc.bias is not None) == (512, 3, True)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    swap_module(net, "fc", old)  # the undo
    assert net.fc is old and net(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_a_1x1_convolution_is_a_head_and_a_3x3_one_is_not():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Conv2d(8, 5, 1, bias=False))
    assert is_head_candidate(model[1]) and not is_head_candidate(model[0]) and is_head_candidate(nn.Linear(32, 2))
    replace_head(model, "1", 2)
    assert (model[1].out_channels, model[1].kernel_size, model[1].bias) == (2, (1, 1), None)
    assert model(torch.randn(1, 3, 6, 6)).shape == (1, 2, 4, 4)
    with pytest.raises(WorkbenchError, match="^Replace head: Conv2d is not a Linear or a 1x1 Conv2d;"):
        replace_head(model, "0", 2)
    with pytest.raises(WorkbenchError, match="the number of outputs must be >= 1, not 0"):
        replace_head(model, "1", 0)


def test_lookup_and_swap_name_what_is_missing(net):
    assert get_module(net, "layer2.1.conv1") is net.layer2[1].conv1 and get_module(net, "") is net
    with pytest.raises(WorkbenchError, match="^No module named 'layer9' in ResNet.$"):
        get_module(net, "layer9")
    with pytest.raises(WorkbenchError, match="Cannot replace the whole model"):
        swap_module(net, "", nn.Identity())
    old = swap_module(net, "layer3.0.relu", nn.Identity())
    assert isinstance(old, nn.ReLU) and isinstance(net.layer3[0].relu, nn.Identity)


def test_the_last_layer_with_parameters_is_the_head(net):
    assert last_layer(net) == "fc" and is_last_layer(net, "fc") and not is_last_layer(net, "layer4")
    assert last_layer(nn.Sequential(nn.Linear(32, 2), nn.ReLU())) == "0"
    assert last_layer(nn.ReLU()) is None


def test_apply_edits_replays_a_head_replacement(net):
    apply_edits(net, [{"op": "replace_head", "path": "fc", "num_outputs": 4}])
    assert net.fc.out_features == 4
    apply_edits(net, [])
    assert net.fc.out_features == 4


@pytest.mark.parametrize("edit, message", [
    ("fc", "[model] edits, entry 2: must be a table such as"),
    ({"op": "prune"}, "[model] edits, entry 2: unknown model edit 'prune'; known: replace_head, add_lora"),
    ({"op": "replace_head", "path": "", "num_outputs": 2},
     "entry 2: 'path' must be a module path such as \"fc\", not ''"),
    ({"op": "replace_head", "path": "fc", "num_outputs": True}, "'num_outputs' must be a whole number >= 1, not True"),
    ({"op": "add_lora", "paths": []}, "entry 2: 'paths' must be a list of module paths"),
    ({"op": "add_lora", "paths": ["fc"], "r": 0}, "'r' (the LoRA rank) must be a whole number >= 1, not 0"),
    ({"op": "add_lora", "paths": ["fc"], "alpha": -1}, "'alpha' must be a number > 0, not -1"),
    ({"op": "add_lora", "paths": ["fc"], "dropout": 1.0}, "'dropout' must be a number in [0, 1), not 1.0"),
])
def test_every_edit_is_checked_before_the_model_is_touched(net, edit, message):
    with pytest.raises(WorkbenchError) as err:
        apply_edits(net, [{"op": "replace_head", "path": "fc", "num_outputs": 2}, edit])
    assert message in str(err.value)
    assert net.fc.out_features == 10  # the first, valid edit was not made either


def test_a_path_the_model_lacks_is_named_when_replayed(net):
    with pytest.raises(WorkbenchError, match=r"^\[model\] edits, entry 1 \(replace_head\): No module named 'head' in "
                                             r"ResNet.$"):
        apply_edits(net, [{"op": "replace_head", "path": "head", "num_outputs": 2}])
