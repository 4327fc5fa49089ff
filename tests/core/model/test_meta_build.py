"""Building by name or spec, on CPU and on the meta device."""

from __future__ import annotations


from tests.core.model.checkpoint_files import SMALL_VIT_SPEC
from workbench.core.model.meta_build import build_module, list_architectures
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN


def test_list_architectures_has_builtins_and_torchvision():
    names = list_architectures()
    assert names[0] == "digits_cnn"
    assert {"resnet18", "mobilenet_v3_small", "vit_b_16"} <= set(names)


def test_build_torchvision_builtin_and_factories(tmp_path):
    model = build_module("resnet18(num_classes=7)")
    assert model.fc.out_features == 7 and model.fc.weight.device.type == "cpu"
    assert isinstance(build_module("digits_cnn"), DigitsCNN)
    assert isinstance(build_module("workbench.core.model.demo:DigitsCNN", device="meta"), DigitsCNN)
    vit = build_module(ArchSpec(SMALL_VIT_SPEC, {"num_classes": 4}))
    assert vit.heads.head.out_features == 4
    src = tmp_path / "mynet.py"
    src.write_text("import torch\ndef make(width=3):\n    return torch.nn.Linear(2, width)\n")
    assert build_module(ArchSpec(f"{src}:make", {"width": 5})).out_features == 5


def test_meta_builds_allocate_nothing_and_never_download():
    # detection models would download backbone weights unless weights_backbone=None is passed
    model = build_module("fasterrcnn_mobilenet_v3_large_fpn", device="meta")
    assert all(p.is_meta for p in model.parameters())
    regnet = build_module("regnet_y_400mf", device="meta")  # computes widths with tensors
    assert all(p.is_meta for p in regnet.parameters())
