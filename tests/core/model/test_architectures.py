"""Architectures: building by name / spec, auto-detection, loading reports, weights-only trees."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from tests.core.model.checkpoint_files import SMALL_VIT_SPEC, make_model, save_lightning, save_state_dict
from workbench.core.errors import ArchitectureError
from workbench.core.model.architectures import (
    ArchSpec,
    WeightsOnlyModule,
    build_module,
    detect_architecture,
    list_architectures,
    load_model,
    load_state_dict_into,
    weights_only_model,
)
from workbench.core.model.checkpoint import read_checkpoint
from workbench.core.model.demo import DigitsCNN


def meta_state_dict(name: str, **kwargs) -> dict:
    """A state_dict with the right keys and shapes, no memory (big models cost nothing)."""
    return build_module(ArchSpec(name, kwargs), device="meta").state_dict()


def test_list_architectures_has_builtins_and_torchvision():
    names = list_architectures()
    assert names[0] == "digits_cnn"
    assert {"resnet18", "mobilenet_v3_small", "vit_b_16"} <= set(names)


def test_arch_spec_round_trips_and_parses():
    spec = ArchSpec.parse("resnet18(num_classes=10, zero_init_residual=True)")
    assert spec == ArchSpec("resnet18", {"num_classes": 10, "zero_init_residual": True})
    assert ArchSpec.from_dict(spec.to_dict()) == spec
    assert ArchSpec.parse("pkg.mod:make", width=2) == ArchSpec("pkg.mod:make", {"width": 2})
    assert str(spec) == "resnet18(num_classes=10, zero_init_residual=True)"
    with pytest.raises(ValueError):
        ArchSpec("x", {"act": nn.ReLU}).to_dict()
    with pytest.raises(ArchitectureError):
        ArchSpec.parse("resnet18(10)")


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


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_net", ["unknown architecture"]),
        ("resnet18(bogus=1)", ["could not build", "bogus"]),
        ("not_a_module_xyz:make", ["could not be imported"]),
        ("/nonexistent/file.py:make", ["not found"]),
    ],
)
def test_bad_specs_raise_architecture_error(spec, words):
    with pytest.raises(ArchitectureError) as info:
        build_module(spec)
    for word in words:
        assert word in str(info.value)


def test_detect_resnet18_with_module_prefix_first():
    model = make_model("resnet18", num_classes=10)
    sd = {"module." + k: v for k, v in model.state_dict().items()}
    ranking = detect_architecture(sd)
    assert ranking[0].spec == ArchSpec("resnet18", {"num_classes": 10})
    assert ranking[0].score == 1.0
    assert all(0 <= c.score < 1 for c in ranking[1:])
    assert [c.score for c in ranking] == sorted((c.score for c in ranking), reverse=True)


def test_detect_default_resnet18_without_kwargs():
    sd = {"module." + k: v for k, v in meta_state_dict("resnet18").items()}
    best = detect_architecture(sd, top_k=1)
    assert len(best) == 1 and best[0].spec == ArchSpec("resnet18") and best[0].score == 1.0


def test_detect_lightning_wrapped_and_default_head(tmp_path):
    model = make_model("mobilenet_v3_small")
    ckpt = read_checkpoint(save_lightning(model, tmp_path / "m.ckpt"))
    best = detect_architecture(ckpt.state_dict, top_k=3)[0]
    assert best.spec == ArchSpec("mobilenet_v3_small") and best.score == 1.0
    loaded, report = load_model(ckpt, best.spec)
    assert report.stripped_prefixes == ["model."] and report.ok


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("vit_b_16", {}), ("vit_b_32", {"num_classes": 5}), ("fcn_resnet50", {"num_classes": 5}),
     ("fasterrcnn_resnet50_fpn", {"num_classes": 11}), ("digits_cnn", {"num_classes": 3})],
)
def test_detect_infers_the_head(name, kwargs):
    ranking = detect_architecture(meta_state_dict(name, **kwargs), top_k=5)
    assert ranking[0].spec == ArchSpec(name, kwargs) and ranking[0].score == 1.0


def test_detect_custom_vit_config_is_not_claimed_as_a_perfect_match():
    ranking = detect_architecture(make_model("small_vit").state_dict())
    assert ranking and ranking[0].spec.name.startswith("vit_")  # the family is recognised
    assert all(c.score < 0.5 for c in ranking)  # but not as a fit


def test_strict_mismatch_reports_shapes_and_partial_load_works(tmp_path):
    source = make_model("resnet18", num_classes=10)
    ckpt = read_checkpoint(save_state_dict(source, tmp_path / "r.pt", prefix="module."))
    with pytest.raises(ArchitectureError) as info:
        load_model(ckpt, "resnet18")
    report = info.value.report
    assert report.mismatched == [("fc.weight", (1000, 512), (10, 512)), ("fc.bias", (1000,), (10,))]
    assert "fc.weight: expected (1000, 512), found (10, 512)" in str(info.value)
    assert "partially" in str(info.value)
    model, report = load_model(ckpt, "resnet18", strict=False)
    assert not report.ok and report.loaded == len(ckpt.state_dict) - 2
    assert report.stripped_prefixes == ["module."]
    assert torch.equal(model.conv1.weight, source.conv1.weight)
    assert model.fc.weight.shape == (1000, 512) and not model.fc.weight.is_meta
    assert model.fc.weight.abs().sum() > 0  # initialised the module's usual way
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])


def test_loaded_parameters_are_trainable_parameters(tmp_path):
    ckpt = read_checkpoint(save_state_dict(make_model("resnet18"), tmp_path / "r.pt"))
    assert not any(t.requires_grad for t in ckpt.state_dict.values())
    model, _ = load_model(ckpt, "resnet18")
    params = list(model.parameters())
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in params)
    model(torch.randn(2, 3, 64, 64)).sum().backward()  # train mode: BatchNorm needs a batch
    assert model.conv1.weight.grad is not None


def test_missing_num_batches_tracked_and_half_precision(tmp_path):
    sd = {k: v.half() if v.is_floating_point() else v for k, v in DigitsCNN().state_dict().items() if "num_batches" not in k}
    path = tmp_path / "old.pt"
    torch.save(sd, path)
    model, report = load_model(read_checkpoint(path), "digits_cnn")
    assert report.ok and model.features[1].num_batches_tracked.item() == 0
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_wrong_architecture_partial_loads_nothing(tmp_path):
    ckpt = read_checkpoint(save_state_dict(DigitsCNN(), tmp_path / "d.pt"))
    model, report = load_model(ckpt, "mobilenet_v3_small", strict=False)
    assert report.loaded == 0 and len(report.unexpected) == len(ckpt.state_dict) and report.missing
    assert model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 1000)


def test_load_state_dict_into_a_cpu_module_copies(tmp_path):
    source, target = DigitsCNN(), DigitsCNN()
    report = load_state_dict_into(target, {"_orig_mod." + k: v for k, v in source.state_dict().items()})
    assert report.ok and report.stripped_prefixes == ["_orig_mod."]
    assert torch.equal(target.classifier.weight, source.classifier.weight)
    assert target.classifier.weight.data_ptr() != source.classifier.weight.data_ptr()


def test_computed_non_persistent_buffers_are_real(tmp_path):
    src = tmp_path / "posnet.py"
    src.write_text(textwrap.dedent("""
        import torch
        class PosNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)
                self.register_buffer("index", torch.arange(4) * 2, persistent=False)
                self.register_buffer("scale", torch.ones(4) * 3, persistent=False)
    """))
    spec = ArchSpec(f"{src}:PosNet")
    ckpt_path = save_state_dict(build_module(spec), tmp_path / "p.pt")
    model, report = load_model(read_checkpoint(ckpt_path), spec)
    assert report.ok
    assert torch.equal(model.index, torch.arange(4) * 2)
    assert torch.equal(model.scale, torch.full((4,), 3.0))


def test_no_architecture_known(tmp_path):
    ckpt = read_checkpoint(save_state_dict(DigitsCNN(), tmp_path / "d.pt"))
    with pytest.raises(ArchitectureError, match="which architecture"):
        load_model(ckpt)


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
