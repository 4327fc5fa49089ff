"""Saving from the window: format readable by plain PyTorch, bit-exact, atomic; summary export."""

from __future__ import annotations

import pytest
import torch


def test_save_format_weights_only_bit_exact(window, tmp_path):
    window.set_trainable("features", False)
    window.replace_head("classifier", 4)
    path = tmp_path / "out" / "model.pt"
    assert window.save_checkpoint(path)
    payload = torch.load(path, weights_only=True)
    assert {"model_state_dict", "arch", "frozen", "workbench_version", "epoch", "loss"} <= set(payload)
    live = window.model.state_dict()
    assert list(payload["model_state_dict"]) == list(live)
    for key, value in live.items():
        assert torch.equal(payload["model_state_dict"][key], value), key
    assert payload["arch"] == {"name": "digits_cnn", "kwargs": {"num_classes": 4}}
    assert "features.0.weight" in payload["frozen"] and "classifier.weight" not in payload["frozen"]
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary file left


def test_saved_file_reopens_without_questions(window, tmp_path):
    window.set_trainable("features", False)
    path = tmp_path / "model.pt"
    assert window.save_checkpoint(path)
    window.prompts.answers["architecture"] = lambda *a: pytest.fail("the arch entry should be used")
    window.open_demo()
    assert window.open_path(path)
    assert not window.model.features[0].weight.requires_grad and window.model.classifier.weight.requires_grad
    assert not window.errors


def test_save_error_is_shown(window, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert not window.save_checkpoint(blocker / "model.pt")
    assert window.errors


def test_export_summary(window, tmp_path):
    assert window.export_summary(tmp_path / "s.md")
    assert "| Name | Type |" in (tmp_path / "s.md").read_text()
    assert window.export_summary(tmp_path / "s.csv")
    assert (tmp_path / "s.csv").read_text().startswith("name,type,depth")
