"""Dialogs, built and inspected without exec(); new-from-architecture; CLI screenshot."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QMessageBox

from tests.ui.helpers import RecordingPrompts
from workbench.core.errors import TrustRequired
from workbench.core.model import meta_build
from workbench.core.model.detection import Candidate
from workbench.core.model.loading import LoadReport
from workbench.core.model.spec import ArchSpec
from workbench.ui import dialogs


def test_architecture_dialog_ranking_search_and_spec(qtbot):
    cands = [Candidate(ArchSpec("resnet18", {"num_classes": 10}), 1.0), Candidate(ArchSpec("resnet34"), 0.4)]
    dlg = dialogs.ArchitectureDialog(cands, ["digits_cnn", "resnet18", "resnet34", "vgg11"], "x.pt")
    qtbot.addWidget(dlg)
    assert dlg.objectName() == "archDialog"
    lst = dlg.findChild(object, "archList")
    assert lst.item(0).text().startswith("resnet18(num_classes=10)") and "100%" in lst.item(0).text()
    assert lst.count() == 4  # 2 candidates + digits_cnn + vgg11
    dlg.accept()
    assert dlg.chosen() == ArchSpec("resnet18", {"num_classes": 10})
    dlg.choices.search.setText("vgg")
    assert dlg.chosen() == ArchSpec("vgg11")
    dlg.spec_edit.setText("my.pkg:make(width=2)")
    assert dlg.chosen() == ArchSpec("my.pkg:make", {"width": 2})
    dlg.reject()
    assert dlg.chosen() is None
    dlg._on_weights_only_clicked()
    assert dlg.chosen() == dialogs.WEIGHTS_ONLY


def test_trust_dialog_defaults_to_cancel(qtbot):
    err = TrustRequired("m.pt", ["mymod.MyNet", "collections.OrderedDict"], kind="pickle")
    box = dialogs.trust_dialog(err)
    qtbot.addWidget(box)
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    assert box.escapeButton() is box.button(QMessageBox.StandardButton.Cancel)
    assert "mymod.MyNet" in box.informativeText()
    assert not dialogs.accepted_button(box)


def test_load_report_dialog(qtbot):
    report = LoadReport(missing=["fc.bias"], unexpected=["head.w"], mismatched=[("fc.weight", (1000, 512), (10, 512))],
                        stripped_prefixes=["module."], strict=True, loaded=100)
    box = dialogs.load_report_dialog(report, "x.pt", "resnet18")
    qtbot.addWidget(box)
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    assert "fc.weight: expected (1000, 512), found (10, 512)" in box.detailedText()
    assert box.findChild(object, "partialLoadButton") is not None


def test_new_model_dialog_and_window(qtbot):
    dlg = dialogs.NewModelDialog(["digits_cnn", "resnet18"])
    qtbot.addWidget(dlg)
    dlg.choices.search.setText("resnet")
    dlg.num_classes.setValue(7)
    dlg.setResult(QDialog.DialogCode.Accepted)
    assert dlg.chosen() == ArchSpec("resnet18", {"num_classes": 7})

    from workbench.ui import MainWindow

    win = MainWindow(prompts=RecordingPrompts(new_architecture=ArchSpec("digits_cnn", {"num_classes": 3})))
    qtbot.addWidget(win)
    assert win.new_from_architecture()
    assert win.model.classifier.out_features == 3 and win.checkpoint is None


def test_cli_screenshot(tmp_path, qtbot):
    from workbench.ui.app import main

    out = tmp_path / "demo.png"
    assert main(["--freeze", "features", "--screenshot", str(out)]) == 0
    assert out.stat().st_size > 10_000


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


def test_open_new_from_architecture_lists_every_torchvision_model():
    import torchvision

    names = meta_build.list_architectures()
    assert set(torchvision.models.list_models()) <= set(names)
