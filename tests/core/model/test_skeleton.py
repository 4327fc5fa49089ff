"""A model's structure as plain data and the stand-in built from it (workbench.core.model.skeleton), on resnet18."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from workbench.core.model.skeleton import SkeletonError, build_skeleton, describe_structure, is_skeleton


def test_the_description_is_plain_json_data_of_every_module_parameter_and_buffer():
    net = resnet18(num_classes=2)
    net.conv1.weight.requires_grad_(False)
    structure = describe_structure(net)
    assert json.loads(json.dumps(structure)) == structure  # travels over a wire as it is
    assert structure["modules"][0] == ["", "ResNet"] and ["layer1.0.bn1", "BatchNorm2d"] in structure["modules"]
    assert len(structure["modules"]) == len(list(net.modules()))
    assert structure["params"][0] == ["conv1.weight", [64, 3, 7, 7], "float32", False]
    assert ["fc.bias", [2], "float32", True] in structure["params"]
    assert ["bn1.num_batches_tracked", [], "int64"] in structure["buffers"]


def test_the_skeleton_has_the_same_names_classes_shapes_and_frozen_set_on_meta():
    net = resnet18(num_classes=2).half()
    net.layer1.requires_grad_(False)
    skeleton = build_skeleton(describe_structure(net))
    assert is_skeleton(skeleton) and not is_skeleton(net)
    assert [(n, type(m).__name__) for n, m in skeleton.named_modules()] == \
        [(n, type(m).__name__) for n, m in net.named_modules()]
    real = dict(net.named_parameters())
    for name, p in skeleton.named_parameters():
        assert (p.shape, p.dtype, p.requires_grad, p.device.type) == \
            (real[name].shape, torch.float16, real[name].requires_grad, "meta")
    assert set(real) == {n for n, _ in skeleton.named_parameters()}
    assert {n: b.dtype for n, b in skeleton.named_buffers()} == {n: b.dtype for n, b in net.named_buffers()}
    assert type(skeleton.layer1) is type(skeleton.layer2)  # one stand-in class per class name
    with pytest.raises(RuntimeError, match="^ResNet is the structure of a model in another process; it cannot run"):
        skeleton(torch.zeros(1, 3, 32, 32))


def test_a_class_name_that_is_not_an_identifier_becomes_module():
    skeleton = build_skeleton({"modules": [["", "os.system('x')"], ["fc", "Linear"]],
                               "params": [["fc.weight", [2, 32], "float32", True]]})
    assert type(skeleton).__name__ == "Module" and type(skeleton.fc).__name__ == "Linear"
    assert skeleton.fc.weight.shape == (2, 32)


def test_an_integer_parameter_is_never_trainable():
    skeleton = build_skeleton({"modules": [["", "Net"]], "params": [["codes", [3], "int8", True]]})
    assert skeleton.codes.dtype == torch.int8 and not skeleton.codes.requires_grad


ROOT = [["", "Net"], ["fc", "Linear"]]


@pytest.mark.parametrize("structure, message", [
    ({}, "not a model structure: 'modules'"),
    ({"modules": [["fc", "Linear"]]}, "module 'fc' has no parent listed before it"),
    ({"modules": [["", "Net"], ["", "Net"]]}, "module '' is listed twice"),
    ({"modules": [["", "Net"], ["a.b", "Linear"]]}, "module 'a.b' has no parent listed before it"),
    ({"modules": [["", "Net"], ["a b", "Linear"]]}, "module 'a b' has no parent listed before it"),
    ({"modules": []}, "the structure has no root module"),
    ({"modules": [["", 3]]}, "bad module entry"),
    ({"modules": ROOT, "params": [["fc.weight", [2, 32], "float32"]]}, "bad parameter entry"),
    ({"modules": ROOT, "params": [["head.weight", [2], "float32", True]]},
     "tensor 'head.weight' belongs to no listed module"),
    ({"modules": ROOT, "params": [["fc.weight", [2, -1], "float32", True]]}, "bad shape [2, -1]"),
    ({"modules": ROOT, "params": [["fc.weight", [2, True], "float32", True]]}, "bad shape [2, True]"),
    ({"modules": ROOT, "params": [["fc.weight", [2], "object", True]]}, "dtype 'object' refused"),
    ({"modules": ROOT, "buffers": [["fc.mean", [2]]]}, "bad buffer entry"),
    ({"modules": ROOT, "params": [["fc.training", [2], "float32", True]]},  # an attribute every module has
     "the structure cannot be built: "),
])
def test_a_structure_that_cannot_be_built_says_why(structure, message):
    with pytest.raises(SkeletonError) as err:
        build_skeleton(structure)
    assert str(err.value).startswith(message)
    assert isinstance(err.value, ValueError)


def test_a_tiny_model_round_trips():
    net = nn.Sequential(nn.Linear(32, 2))
    skeleton = build_skeleton(describe_structure(net))
    assert describe_structure(skeleton)["params"] == describe_structure(net)["params"]
    assert describe_structure(skeleton)["modules"] == [["", "Sequential"], ["0", "Linear"]]
