"""Loading a checkpoint into a module: strict, partial, dtypes, buffers, reports."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from tests.core.model.checkpoint_files import make_model, save_state_dict
from workbench.core.errors import ArchitectureError
from workbench.core.model.loading import load_model, load_state_dict_into
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.demo import DigitsCNN


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
