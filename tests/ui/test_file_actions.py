"""Saving from the window: format readable by plain PyTorch, bit-exact, atomic; summary export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.ui.helpers import RecordingPrompts
from workbench.ui.prompts import with_filter_suffix


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


def test_export_suffix_comes_from_the_chosen_filter(window, tmp_path):
    assert with_filter_suffix(str(tmp_path / "summary"), "CSV (*.csv)") == str(tmp_path / "summary.csv")
    assert with_filter_suffix("s.md", "CSV (*.csv)") == "s.md"
    assert with_filter_suffix("model", "All files (*)") == "model"
    assert with_filter_suffix("", "CSV (*.csv)") == ""
    out = with_filter_suffix(str(tmp_path / "summary"), "CSV (*.csv)")
    assert window.export_summary(out)
    assert Path(out).read_text().startswith("name,type,")


def test_missing_recent_file_is_forgotten(window, tmp_path):
    path = tmp_path / "demo_copy.pt"
    assert window.save_checkpoint(path)
    assert str(path.resolve()) in window.recent_files()
    path.unlink()
    action = next(a for a in window.recent_menu.actions() if a.statusTip() == str(path.resolve()))
    action.trigger()
    assert window.errors and "not found" in window.errors[-1]
    assert str(path.resolve()) not in window.recent_files()
    assert not any(a.statusTip() == str(path.resolve()) for a in window.recent_menu.actions())
    assert type(window.model).__name__ == "DigitsCNN"  # still usable


def test_recent_files_persist_and_reopen(window, qtbot, tmp_path):
    from workbench.ui import MainWindow

    path = tmp_path / "again.pt"
    assert window.save_checkpoint(path)
    window.close()
    second = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(second)
    action = second.recent_menu.actions()[0]
    assert action.statusTip() == str(path.resolve())
    second.open_demo()
    second.set_trainable("features", False)
    action.trigger()
    assert second.checkpoint is not None and second.checkpoint.path.name == "again.pt"
    assert all(p.requires_grad for p in second.model.parameters())


def test_saving_a_diverged_model_says_so(window, tmp_path):
    """A checkpoint is never written with NaN/Inf values without saying so."""
    with torch.no_grad():
        window.model.features[1].running_var.fill_(float("nan"))
    assert window.save_checkpoint(tmp_path / "nan.pt")
    assert window.errors and "features.1.running_var" in window.errors[-1]


def test_file_open_starts_in_the_last_folder_used(window, tmp_path):
    """The Open dialog started in the working directory every time."""
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.model.saving import checkpoint_payload, save_checkpoint

    folder = tmp_path / "models"
    path = save_checkpoint(folder / "digits.pt", checkpoint_payload(DigitsCNN(), arch={"name": "digits_cnn"}))
    assert window.open_path(path)
    window.file_actions.on_open_triggered()  # the recording prompts answer None (cancel)
    assert window.prompts.asked[-1] == ("open_path", str(folder.resolve()))
