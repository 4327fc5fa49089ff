"""Workbench checkpoints: weights-only loadable, atomic, and read back with arch and frozen."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import workbench
from tests.core.model.checkpoint_files import make_model
from workbench.core.errors import CheckpointError
from workbench.core.model.loading import load_model
from workbench.core.model.spec import ArchSpec
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.saving import checkpoint_payload, save_checkpoint
from workbench.core.rng import rng_state
from workbench.core.rng import set_rng_state as restore_rng_state


def trained_digits():
    torch.manual_seed(0)
    model = DigitsCNN()
    for p in model.features[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    sched.step()
    return model, opt, sched


def test_payload_loads_weights_only_and_reads_back(tmp_path):
    model, opt, sched = trained_digits()
    payload = checkpoint_payload(
        model, arch=ArchSpec("digits_cnn", {"num_classes": 10}), optimizer=opt, scheduler=sched,
        epoch=2, step=40, loss=torch.tensor(0.5), extra={"best_acc": np.float32(0.75)},
    )
    path = save_checkpoint(tmp_path / "run" / "last.pt", payload)
    raw = torch.load(path, weights_only=True)
    assert raw["arch"] == {"name": "digits_cnn", "kwargs": {"num_classes": 10}}
    assert raw["frozen"] == ["features.0.weight", "features.0.bias"]
    assert (raw["epoch"], raw["step"], raw["loss"], raw["best_acc"]) == (2, 40, 0.5, 0.75)
    assert raw["workbench_version"] == workbench.__version__
    assert raw["optimizer_class"] == "AdamW" and raw["scheduler_class"] == "StepLR"
    assert "scheduler_state_dict" in raw and raw["optimizer_state_dict"]["state"]

    ckpt = read_checkpoint(path)
    meta = ckpt.metadata
    assert (meta.format, meta.state_dict_key, meta.epoch, meta.global_step, meta.loss) == (
        "training_dict", "model_state_dict", 2, 40, 0.5)
    assert meta.arch == {"name": "digits_cnn", "kwargs": {"num_classes": 10}}
    assert meta.frozen == ["features.0.weight", "features.0.bias"]
    assert meta.optimizer_class == "AdamW" and meta.optimizer_hparams["lr"] == pytest.approx(1e-3)

    loaded, report = load_model(ckpt)  # the arch entry names the architecture
    assert report.ok
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    frozen = {n for n, p in loaded.named_parameters() if not p.requires_grad}
    assert frozen == {"features.0.weight", "features.0.bias"}
    opt2 = torch.optim.AdamW((p for p in loaded.parameters() if p.requires_grad), lr=1.0)
    opt2.load_state_dict(ckpt.raw["optimizer_state_dict"])
    assert opt2.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_payload_is_a_snapshot():
    model, opt, _ = trained_digits()
    payload = checkpoint_payload(model, arch=None, optimizer=opt)
    before = payload["model_state_dict"]["classifier.weight"].clone()
    with torch.no_grad():
        model.classifier.weight.add_(1.0)
    assert torch.equal(payload["model_state_dict"]["classifier.weight"], before)
    assert payload["arch"] is None


def test_rng_state_round_trips_through_a_weights_only_file(tmp_path):
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    path = save_checkpoint(tmp_path / "rng.pt", {"rng_state": rng_state()})
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    restore_rng_state(torch.load(path, weights_only=True)["rng_state"])
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]


def test_resnet18_round_trip_is_bit_exact(tmp_path):
    model = make_model("resnet18", num_classes=10)
    path = save_checkpoint(tmp_path / "r.pt", checkpoint_payload(model, arch=ArchSpec("resnet18", {"num_classes": 10})))
    loaded, report = load_model(read_checkpoint(path))
    assert report.ok
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_reserved_extra_keys_and_bad_arch_are_refused():
    with pytest.raises(ValueError):
        checkpoint_payload(DigitsCNN(), arch=None, extra={"frozen": []})
    with pytest.raises(ValueError):
        checkpoint_payload(DigitsCNN(), arch=ArchSpec("x", {"act": torch.nn.ReLU}))


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "c.pt", {"epoch": 1})
    original = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(CheckpointError, match="No space left"):
        save_checkpoint(path, {"epoch": 2})
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


# --------------------------------------------------------------------------- the format follows the suffix


class TiedLM(torch.nn.Module):
    """An embedding whose weight the output layer shares (tied weights)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 8)
        self.out = torch.nn.Linear(8, 20, bias=False)
        self.out.weight = self.embed.weight


def test_a_safetensors_save_is_a_real_safetensors_file_that_reopens_as_itself(tmp_path):
    from safetensors.torch import load_file

    from workbench.core.model.opening import open_model
    from workbench.core.model.saving import save_model_file

    model = make_model("resnet18", num_classes=3)
    frozen = {n for n, _ in model.layer1.named_parameters(prefix="layer1")}
    for p in model.layer1.parameters():
        p.requires_grad_(False)
    payload = checkpoint_payload(model, arch=ArchSpec("resnet18", {"num_classes": 3}), epoch=2, step=40, loss=0.5)
    payload["optimizer_state_dict"] = torch.optim.SGD(model.parameters(), lr=0.1).state_dict()
    path, notes = save_model_file(tmp_path / "model.safetensors", payload)
    assert path == tmp_path / "model.safetensors"
    assert notes and "optimizer" in notes[0]  # left out, and said
    head = path.read_bytes()[:9]
    assert head[:2] != b"PK" and head[8:9] == b"{"  # a safetensors header, not a torch zip
    tensors = load_file(path)  # the library's own reader takes it
    assert set(tensors) == set(model.state_dict())
    assert torch.equal(tensors["fc.weight"], model.fc.weight)
    opened = open_model(path)
    assert opened.spec == ArchSpec("resnet18", {"num_classes": 3})
    assert {n for n, p in opened.model.named_parameters() if not p.requires_grad} == frozen
    assert opened.checkpoint.metadata.epoch == 2 and opened.checkpoint.metadata.global_step == 40
    for key, value in model.state_dict().items():
        assert torch.equal(opened.model.state_dict()[key], value), key


def test_tied_weights_are_stored_once_and_read_back_under_both_names(tmp_path):
    from safetensors import safe_open

    from workbench.core.model.formats import read_checkpoint as read
    from workbench.core.model.loading import load_state_dict_into

    model = TiedLM()
    payload = checkpoint_payload(model)
    assert payload["model_state_dict"]["out.weight"] is payload["model_state_dict"]["embed.weight"]
    path = save_checkpoint(tmp_path / "tied.safetensors", payload)
    with safe_open(str(path), "pt") as f:
        assert list(f.keys()) == ["embed.weight"]
        assert "out.weight" in f.metadata()["workbench_tied"]
    ckpt = read(path)
    assert set(ckpt.state_dict) == {"embed.weight", "out.weight"}
    fresh = TiedLM()
    assert load_state_dict_into(fresh, ckpt.state_dict).ok  # strict: every key is there
    assert torch.equal(fresh.out.weight, model.embed.weight) and fresh.out.weight is fresh.embed.weight
    # the torch file stores the tied storage once too
    pt = save_checkpoint(tmp_path / "tied.pt", checkpoint_payload(model))
    loaded = torch.load(pt, weights_only=True)["model_state_dict"]
    assert loaded["out.weight"].untyped_storage().data_ptr() == loaded["embed.weight"].untyped_storage().data_ptr()


def test_a_suffix_that_names_no_format_is_refused_and_none_gets_pt(tmp_path):
    from workbench.core.model.saving import save_model_file

    with pytest.raises(CheckpointError, match=r"\.safetensors"):
        save_model_file(tmp_path / "model.onnx", checkpoint_payload(DigitsCNN()))
    assert not (tmp_path / "model.onnx").exists()
    path, notes = save_model_file(tmp_path / "model", checkpoint_payload(DigitsCNN()))
    assert path.name == "model.pt" and "suffix" in notes[0]
    assert "model_state_dict" in torch.load(path, weights_only=True)
