"""Find LR works after any edit of the window's model: Replace head (with the Graph tab capturing), LoRA.

The issue: Find LR right after Replace head did nothing; stderr held "Cannot access data
pointer of Tensor (e.g. FakeTensor…)" from the dialog's ``copy.deepcopy``. The Graph tab
recaptures the edited model on a worker thread with ``torch.export``, which puts fake
tensors in the model's place while it traces, and the GUI thread (waiting in a local
event loop) took the click and copied the model meanwhile.
"""

from __future__ import annotations

import threading

import pytest
import torch
from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest

from workbench.core.train.lr_finder import ModelNotCopyable, sweep_copy
from workbench.ui.graph import graph_panel


def _sweep(qtbot, panel):
    panel.settings.optimizer_combo.setCurrentIndex(panel.settings.optimizer_combo.findData("sgd"))
    finder = panel.lr_finder
    qtbot.waitUntil(lambda: finder.dialog is not None, timeout=30_000)
    dialog = finder.dialog
    qtbot.waitUntil(lambda: dialog.result is not None or "failed" in dialog.label.text(), timeout=120_000)
    qtbot.waitUntil(lambda: not finder.is_running(), timeout=30_000)
    assert dialog.result is not None, dialog.label.toolTip() or dialog.label.text()
    assert dialog.result.suggested is not None
    return dialog.result


def test_find_lr_while_the_graph_tab_captures_the_replaced_head(main_window, qtbot, monkeypatch):
    win, panel = main_window
    win.graph_dock.show()
    win.graph_dock.raise_()
    qtbot.waitUntil(lambda: win.graph_panel.graph is not None, timeout=60_000)
    tracing, clicked = threading.Event(), threading.Event()
    real = graph_panel.capture_graph

    def capture_held(model, example, **kwargs):
        """The real capture, held while torch.export has fake tensors in the model (until the click)."""
        def hold(_module, _args):
            if not clicked.is_set():
                tracing.set()
                clicked.wait(30)

        handle = model.register_forward_pre_hook(hold)
        try:
            return real(model, example, **kwargs)
        finally:
            handle.remove()

    monkeypatch.setattr(graph_panel, "capture_graph", capture_held)
    seen = []

    def click_when_tracing():
        if not tracing.is_set():
            QTimer.singleShot(20, click_when_tracing)
            return
        from torch._subclasses.fake_tensor import is_fake

        seen.append(is_fake(win.model.classifier.weight))
        QTest.mouseClick(panel.lr_find_button, Qt.MouseButton.LeftButton)
        clicked.set()

    QTimer.singleShot(0, click_when_tracing)
    assert win.replace_head("classifier", 10)
    qtbot.waitUntil(lambda: clicked.is_set(), timeout=60_000)
    assert seen == [True]  # the click came while the trace held fake tensors in the model
    before = {k: v.clone() for k, v in win.model.state_dict().items()}
    _sweep(qtbot, panel)
    assert all(torch.equal(v, before[k]) for k, v in win.model.state_dict().items())
    assert panel.shutdown(ask=False)


def test_find_lr_after_lora(main_window, qtbot):
    pytest.importorskip("peft")
    from workbench.ui.dialogs import LoraOptions

    win, panel = main_window
    assert win.edits.add_lora("classifier", LoraOptions(r=4, alpha=8.0))
    QTest.mouseClick(panel.lr_find_button, Qt.MouseButton.LeftButton)
    _sweep(qtbot, panel)
    assert panel.shutdown(ask=False)


def test_a_model_without_values_is_said_not_copied():
    model = torch.nn.Linear(3, 2, device="meta")
    with pytest.raises(ModelNotCopyable, match="weight"):
        sweep_copy(model)
    copy = sweep_copy(torch.nn.Linear(3, 2))
    assert isinstance(copy, torch.nn.Linear)


def test_find_lr_after_change_architecture(main_window, qtbot, tmp_path):
    """Edit > Change architecture… reopens the file as another model (the Graph tab captures it again)."""
    import torchvision

    from tests.ui.helpers import type_text

    win, panel = main_window
    path = tmp_path / "r18.pt"
    torch.save(torchvision.models.resnet18(num_classes=3).state_dict(), path)
    assert win.open_path(path)
    win.graph_dock.show()
    win.graph_dock.raise_()
    win.prompts.answers["architecture"] = lambda candidates, name: candidates[0].spec
    assert win.change_architecture()
    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("fake"))
    type_text(qtbot, s.fake_shape_edit, "3, 32, 32", enter=True)
    s.fake_size_spin.setValue(64)
    s.classes_spin.setValue(3)
    s.batch_spin.setValue(8)
    s.optimizer_combo.setCurrentIndex(s.optimizer_combo.findData("sgd"))
    assert panel.lr_finder.start(1e-4, 1.0, 8)
    finder = panel.lr_finder
    qtbot.waitUntil(lambda: not finder.is_running(), timeout=120_000)
    assert finder.dialog.result is not None, finder.dialog.label.toolTip() or finder.dialog.label.text()
    assert len(finder.dialog.result.lrs) >= 5
    assert panel.shutdown(ask=False)
