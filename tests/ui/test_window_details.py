"""Gaps found auditing issue 3 as a user: each test failed before its fix.

Architecture dialog when nothing fits, double-click in the architecture lists,
Export summary's extension from the chosen filter, a vanished recent file,
the exact size in bytes, re-initializing a BatchNorm with a fan-based init,
and the dock layout surviving a restart.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from workbench.core.model import architectures
from workbench.core.model.architectures import ArchSpec, Candidate
from workbench.ui.prompts import with_filter_suffix
from workbench.ui import dialogs
from tests.ui.helpers import RecordingPrompts


def _names() -> list[str]:
    return ["digits_cnn", "resnet18", "resnet34"]


def test_arch_dialog_enter_gives_weights_only_when_nothing_fits(qtbot):
    dialog = dialogs.ArchitectureDialog([], _names(), "odd.pt")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.weights_only_button.isDefault() and not dialog.ok_button.isDefault()
    assert "No known architecture fits" in dialog.findChild(object, "archIntro").text()
    qtbot.keyClick(dialog.choices.search, Qt.Key.Key_Return)  # Enter presses the default button
    assert dialog.chosen() == dialogs.WEIGHTS_ONLY


def test_arch_dialog_enter_takes_a_fitting_candidate(qtbot):
    dialog = dialogs.ArchitectureDialog([Candidate(ArchSpec("resnet18"), 1.0)], _names(), "r18.pt")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.ok_button.isDefault() and not dialog.weights_only_button.isDefault()
    qtbot.keyClick(dialog.choices.search, Qt.Key.Key_Return)
    assert dialog.chosen() == ArchSpec("resnet18")


@pytest.mark.parametrize("which", ["arch", "new"])
def test_double_click_on_a_row_accepts_it(qtbot, which):
    if which == "arch":
        dialog = dialogs.ArchitectureDialog([], _names(), "x.pt")
    else:
        dialog = dialogs.NewModelDialog(_names())
    qtbot.addWidget(dialog)
    dialog.show()
    view = dialog.choices.list
    item = view.item(1)
    center = view.visualItemRect(item).center()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=center)
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton, pos=center)
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert dialog.chosen().name == "resnet18"


def test_trust_dialog_wording_for_torchscript():
    from types import SimpleNamespace

    box = dialogs.trust_dialog(SimpleNamespace(path="m.pt", globals=[], kind="torchscript"))
    assert "contains a TorchScript program" in box.text()
    box.deleteLater()


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


def test_status_size_tooltip_gives_exact_bytes(window):
    root = window.tree_model.root
    expected = sum(t.numel() * t.element_size() for t in [*window.model.parameters(), *window.model.buffers()])
    assert root.total_bytes == expected
    assert f"{expected:,} bytes" in window.status_size.toolTip()


@pytest.mark.parametrize("method", ["xavier_uniform_", "kaiming_normal_"])
def test_fan_init_of_batchnorm_keeps_its_scale(window, method):
    bn = window.model.features[1]
    with torch.no_grad():
        bn.weight.fill_(3.0)
        bn.bias.fill_(2.0)
    assert window.reinitialize("features.1", method)
    assert torch.equal(bn.weight, torch.ones_like(bn.weight))  # a zero scale would silence the layer
    assert torch.equal(bn.bias, torch.zeros_like(bn.bias))
    window.undo_stack.undo()
    assert torch.equal(bn.weight, torch.full_like(bn.weight, 3.0))


def test_dock_layout_survives_a_restart(window, qtbot):
    from workbench.ui import MainWindow

    window.show()
    window.tabifyDockWidget(window.model_dock, window.details_dock)
    window.probes_dock.hide()
    window.close()
    assert os.path.exists(Path(os.environ["WORKBENCH_SETTINGS_DIR"]) / "workbench.ini")
    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert second.details_dock in second.tabifiedDockWidgets(second.model_dock)
    assert not second.probes_dock.isVisible()


def test_open_new_from_architecture_lists_every_torchvision_model():
    import torchvision

    names = architectures.list_architectures()
    assert set(torchvision.models.list_models()) <= set(names)


def test_bad_input_shape_keeps_the_previous_shapes_and_flops(window):
    from workbench.ui.model.tree_model import COL_FLOPS, COL_SHAPE

    root = window.tree_model.root
    flops = root.flops
    assert root.output_shape == (1, 10) and flops > 0
    window.tree_widget.input_shape_edit.setText("1,3,8,8")  # wrong channel count
    window.tree_widget._on_input_shape_entered()
    assert "Input shape" in window.statusBar().currentMessage()
    assert window.input_shape == (1, 1, 8, 8)
    assert root.output_shape == (1, 10) and root.flops == flops
    assert window.tree_model.index_for_name("features.0", COL_SHAPE).data() == "[1, 16, 8, 8]"
    assert window.tree_model.index_for_name("", COL_FLOPS).data() == f"{flops:,}"
