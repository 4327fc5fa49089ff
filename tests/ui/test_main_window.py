"""MainWindow: demo, open by path / drop, freezing through the tree, status bar, undo, head, screenshot."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QThread, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from tests.ui.helpers import RecordingPrompts
from workbench.core.model.spec import ArchSpec
from workbench.ui.main_window import MainWindow
from workbench.ui.model.tree_model import CHECK, COL_TRAIN


@pytest.fixture(autouse=True)
def _dangling_qthreads():
    """Fail a test that leaves a QThread running."""
    yield
    QApplication.processEvents()
    running = [t for t in QApplication.instance().findChildren(QThread) if t.isRunning()]
    assert not running, f"QThreads still running: {running}"


@pytest.fixture(scope="module")
def resnet18_module_prefixed(tmp_path_factory) -> Path:
    """A resnet18 state_dict saved with DataParallel's ``module.`` prefix."""
    path = tmp_path_factory.mktemp("ckpt") / "resnet18_dp.pt"
    sd = torchvision.models.resnet18().state_dict()
    torch.save({f"module.{k}": v for k, v in sd.items()}, path)
    return path


def _index(win, name: str, column: int = 0):
    return win.tree_model.index_for_name(name, column)


def test_demo_opens_with_shapes(window):
    assert window.objectName() == "mainWindow"
    assert type(window.model).__name__ == "DigitsCNN"
    assert window.input_shape == (1, 1, 8, 8)
    assert window.tree_model.root.output_shape == (1, 10)
    assert window.tree_model.root.flops > 0
    for name in ("modelTree", "detailsTable", "statusTrainable", "filterEdit", "inputShapeEdit"):
        assert window.findChild(object, name) is not None, name
    total = sum(p.numel() for p in window.model.parameters())
    assert window.status_trainable.text() == f"trainable {total:,} / {total:,}"
    assert window.training_panel is not None and window.probes_panel is not None


def test_done_when_resnet18_module_prefix(window, resnet18_module_prefixed, monkeypatch):
    """The issue's 'done when': 11,689,512 parameters; root off, fc on -> trainable 513,000 / 11,689,512.

    resnet18 is the only architecture that matches every key and shape: it opens with no question.
    """
    assert window.open_path(resnet18_module_prefixed)
    assert window.prompts.count("architecture") == 0 and window.arch_spec.name == "resnet18"
    assert window.tree_model.root.total_params == 11_689_512
    status = window.findChild(object, "statusTrainable")
    assert status.text() == "trainable 11,689,512 / 11,689,512"
    tm = window.tree_model
    tm.setData(tm.index(0, COL_TRAIN), Qt.CheckState.Unchecked, CHECK)
    assert not any(p.requires_grad for p in window.model.parameters())
    tm.setData(_index(window, "fc", COL_TRAIN), Qt.CheckState.Checked.value, CHECK)
    assert status.text() == "trainable 513,000 / 11,689,512"
    assert window.model.fc.weight.requires_grad and not window.model.conv1.weight.requires_grad
    assert tm.data(tm.index(0, COL_TRAIN), CHECK) == Qt.CheckState.PartiallyChecked
    # undo / redo through the stack
    window.undo_stack.undo()
    assert status.text() == "trainable 0 / 11,689,512"
    window.undo_stack.undo()
    assert status.text() == "trainable 11,689,512 / 11,689,512"
    window.undo_stack.redo()
    window.undo_stack.redo()
    assert status.text() == "trainable 513,000 / 11,689,512"
    assert str(resnet18_module_prefixed.resolve()) in window.recent_files()


def test_open_by_drop(window, resnet18_module_prefixed):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(resnet18_module_prefixed))])
    window.prompts.answers["architecture"] = ArchSpec("resnet18")
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    no_urls = QMimeData()  # the event does not own its mime data: keep a reference
    empty = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, no_urls, buttons, mods)
    QApplication.sendEvent(window, empty)
    assert not empty.isAccepted()
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(window, enter)  # Qt delivers a drop to the widget that accepted the drag
    assert enter.isAccepted()
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, event)
    assert type(window.model).__name__ == "ResNet"
    assert window.tree_model.root.total_params == 11_689_512
    assert "resnet18_dp.pt" in window.status_file.text()


@pytest.fixture(scope="module")
def resnet18_without_fc_bias(tmp_path_factory) -> Path:
    """A resnet18 state_dict that lacks one tensor: no architecture matches every key (the dialog asks)."""
    path = tmp_path_factory.mktemp("ckpt") / "resnet18_no_fc_bias.pt"
    sd = torchvision.models.resnet18().state_dict()
    del sd["fc.bias"]
    torch.save(sd, path)
    return path


def test_cancelled_architecture_keeps_previous_model(window, resnet18_without_fc_bias):
    window.prompts.answers["architecture"] = None
    before = window.model
    assert not window.open_path(resnet18_without_fc_bias)
    assert window.prompts.count("architecture") == 1
    assert window.model is before and not window.errors


def test_weights_only_view(window, resnet18_without_fc_bias):
    from workbench.ui.dialogs import WEIGHTS_ONLY

    window.prompts.answers["architecture"] = WEIGHTS_ONLY
    assert window.open_path(resnet18_without_fc_bias)
    assert window.tree_model.root.total_params == 11_689_512 - 1000
    assert window.arch_spec is None


def test_errors_are_shown_and_app_stays_usable(window, tmp_path):
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a checkpoint at all")
    assert not window.open_path(bad)
    assert window.errors and "broken.pt" in window.errors[-1]
    assert type(window.model).__name__ == "DigitsCNN"


def test_trust_dialog_default_cancel(window, tmp_path):
    from workbench.core.model.demo import DigitsCNN

    path = tmp_path / "pickled.pt"
    torch.save(DigitsCNN(), path)
    seen = []
    window.prompts.answers["trust"] = lambda err: seen.append(err) or False
    assert not window.open_path(path)
    assert seen and seen[0].globals
    window.prompts.answers["trust"] = True
    assert window.open_path(path)
    assert type(window.model).__name__ == "DigitsCNN"


def test_partial_load_report(window, tmp_path):
    sd = torchvision.models.resnet18(num_classes=10).state_dict()
    path = tmp_path / "r18_10.pt"
    torch.save(sd, path)
    reports = []
    window.prompts.answers["partial_load"] = lambda report, name, spec: reports.append(report) or True
    assert window.open_path(path, arch="resnet18")
    assert reports and reports[0].mismatched
    assert window.model.fc.out_features == 1000


def test_the_architecture_question_names_the_file_being_opened(window, tmp_path):
    """The dialog was titled from the previously opened checkpoint."""
    from workbench.ui.dialogs import WEIGHTS_ONLY

    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    sd = torchvision.models.resnet18().state_dict()
    del sd["fc.bias"]  # no full match: the dialog asks
    torch.save(sd, first)
    torch.save(sd, second)
    window.prompts.answers["architecture"] = WEIGHTS_ONLY
    assert window.open_path(first) and window.open_path(second)
    names = [a[2] for a in window.prompts.asked if a[0] == "architecture"]
    assert names == ["first.pt", "second.pt"]
    assert window.checkpoint.path == second


@pytest.mark.parametrize("size", [(1500, 900), (1280, 720)])
def test_the_train_checkbox_is_on_screen_at_first_launch(qtbot, size):
    """The Train column sat at x = 705-747 in a 676 px wide tree at 1500x900."""
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    view = win.tree_widget.view
    header = view.header()
    left = header.sectionViewportPosition(COL_TRAIN)
    assert 0 <= left and left + header.sectionSize(COL_TRAIN) <= view.viewport().width()


def test_frozen_batchnorm_statistics_are_fixed_by_default_and_the_tree_says_so(window):
    assert window.session.keep_bn_stats_fixed and window.keep_bn_action.isChecked()
    window.set_trainable("features.1", False)
    tip = window.tree_model.index_for_name("features.1").data(Qt.ItemDataRole.ToolTipRole)
    assert "running statistics fixed" in tip
    window.set_keep_bn_stats_fixed(False)
    tip = window.tree_model.index_for_name("features.1").data(Qt.ItemDataRole.ToolTipRole)
    assert "still update" in tip and not window.keep_bn_action.isChecked()


def test_head_replacement_trains_and_undoes(window):
    model = window.model
    old_total = window.tree_model.root.total_params
    window.set_trainable("", False)
    assert window.replace_head("classifier", 3)
    assert window.model.classifier.out_features == 3
    assert window.model.classifier.weight.requires_grad
    assert window.tree_model.root.total_params == old_total - 7 * 65
    assert window.tree_model.root.trainable_params == 3 * 65
    assert window.arch_spec.kwargs["num_classes"] == 3
    assert window.model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    window.undo_stack.undo()
    assert model.classifier.out_features == 10 and window.tree_model.root.total_params == old_total
    assert window.arch_spec.kwargs.get("num_classes") is None
    window.undo_stack.redo()
    assert window.model.classifier.out_features == 3


def test_reinitialize_undo_restores_values(window):
    before = window.model.features[0].weight.detach().clone()
    assert window.reinitialize("features.0", "zeros_")
    assert torch.count_nonzero(window.model.features[0].weight) == 0
    window.undo_stack.undo()
    assert torch.equal(window.model.features[0].weight, before)
    window.undo_stack.redo()
    assert torch.count_nonzero(window.model.features[0].weight) == 0


def test_freeze_all_except_and_before(window):
    window.freeze_all_except("classifier")
    assert [n for n, p in window.model.named_parameters() if p.requires_grad] == ["classifier.weight", "classifier.bias"]
    window.undo_stack.undo()
    assert all(p.requires_grad for p in window.model.parameters())
    window.freeze_before("features.3")
    assert not window.model.features[0].weight.requires_grad and window.model.features[3].weight.requires_grad
    window.set_trainable("no.such.module", False)
    assert window.errors  # unknown path: a message, no crash


def test_input_shape_field_and_details(window, qtbot):
    window.tree_widget.input_shape_edit.setText("2,1,16,16")
    window.tree_widget._on_input_shape_entered()
    assert window.input_shape == (2, 1, 16, 16) and window.tree_model.root.output_shape == (2, 10)
    window.tree_widget.input_shape_edit.setText("1,3,8,8")  # wrong channel count: status bar, no crash
    window.tree_widget._on_input_shape_entered()
    assert window.input_shape == (2, 1, 16, 16)
    assert "Input shape" in window.statusBar().currentMessage()
    assert window.tree_widget.select_name("features.0")
    table = window.findChild(object, "detailsTable")
    assert table.rowCount() == 2 and table.item(0, 0).text() == "features.0.weight"


def test_screenshot_is_not_blank(window, tmp_path):
    from workbench.ui.app import take_screenshot

    out = take_screenshot(window, tmp_path / "shot.png")
    image = QApplication.instance() and __import__("PySide6.QtGui", fromlist=["QImage"]).QImage(str(out))
    assert not image.isNull() and image.width() > 800
    ptr = image.convertToFormat(image.Format.Format_Grayscale8)
    arr = np.frombuffer(ptr.constBits(), dtype=np.uint8, count=ptr.sizeInBytes())
    assert arr.std() > 10


def test_settings_persist_layout(window, tmp_path):
    import os

    window.save_layout()
    assert (Path(os.environ["WORKBENCH_SETTINGS_DIR"]) / "workbench.ini").exists()
    assert window.settings.value("geometry") is not None


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


def test_opening_keeps_the_window_painting(window, tmp_path):
    """Reading the file and ranking the architectures froze the window for seconds."""
    from PySide6.QtCore import QTimer

    path = tmp_path / "r18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    ticks = []
    timer = QTimer()
    timer.setInterval(0)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start()
    window.prompts.answers["architecture"] = lambda candidates, name: candidates[0].spec
    try:
        assert window.open_path(path)
    finally:
        timer.stop()
    assert ticks, "no event was processed while the file was opened"
    assert window.tree_model.root.total_params == 11_689_512


def test_a_class_count_mismatch_offers_to_replace_the_head(main_window, qtbot):
    window, panel = main_window
    assert window.replace_head("classifier", 2)
    window.prompts.answers["replace_head"] = True
    panel.settings.epochs_spin.setValue(1)
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=60_000)
    assert panel.last_reason() == "error"
    assert [a[1:] for a in window.prompts.asked if a[0] == "replace_head"] == [(10, 2)]
    assert window.model.classifier.out_features == 10
    assert panel.start()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=60_000)
    assert panel.last_reason() == "completed"


def test_compare_with_a_fine_tuned_checkpoint_colours_only_the_head(main_window, tmp_path):
    """File > Compare with checkpoint…: a Change column with the relative change of each changed module."""
    from PySide6.QtCore import Qt as _Qt

    from workbench.core.model.spec import ArchSpec
    from workbench.ui.model.tree_model import COL_CHANGE

    window, _ = main_window
    base = torchvision.models.resnet18(num_classes=10)
    tuned = torchvision.models.resnet18(num_classes=10)
    tuned.load_state_dict(base.state_dict())
    with torch.no_grad():
        tuned.fc.weight.mul_(1.1)
    torch.save(base.state_dict(), tmp_path / "base.pt")
    torch.save(tuned.state_dict(), tmp_path / "tuned.pt")
    assert window.open_path(tmp_path / "base.pt", arch=ArchSpec.parse("resnet18(num_classes=10)"))
    assert window.tree_widget.view.isColumnHidden(COL_CHANGE)
    changes = window.compare_with(tmp_path / "tuned.pt")
    assert [c.module for c in changes] == ["fc"] and not window.prompts.errors
    assert not window.tree_widget.view.isColumnHidden(COL_CHANGE)
    model = window.tree_model
    fc = model.index_for_name("fc")
    cell = fc.sibling(fc.row(), COL_CHANGE)
    assert cell.data() == f"{changes[0].params:.2e}" and cell.data(_Qt.ItemDataRole.BackgroundRole) is not None
    conv = model.index_for_name("conv1")
    assert conv.sibling(conv.row(), COL_CHANGE).data() is None  # unchanged: blank
    window.session.set_comparison(None)
    assert window.tree_widget.view.isColumnHidden(COL_CHANGE)
