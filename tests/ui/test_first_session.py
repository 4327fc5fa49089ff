"""The first milestone end to end, as a new user does it, in the real MainWindow.

Open the demo, freeze the backbone in the tree, train on CPU and watch the loss
fall, save with File > Save checkpoint, reopen the saved file, resume, and check
the run continued where it stopped (epoch and optimizer step) with the backbone
still frozen and bit-identical.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

RUN_TIMEOUT_MS = 120_000

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def _train(qtbot, panel, epochs: int) -> None:
    panel.settings.epochs_spin.setValue(epochs)
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.errors == [] and panel.last_reason() == "completed"


def test_freeze_train_save_reopen_resume(main_window, qtbot, tmp_path):
    win, panel = main_window
    tree = win.tree_model
    # freeze the backbone with its checkbox in the tree
    features = tree.index_for_name("features")
    train_col = next(c for c in range(tree.columnCount()) if tree.headerData(c, Qt.Orientation.Horizontal) == "Train")
    idx = features.siblingAtColumn(train_col)
    assert tree.setData(idx, Qt.CheckState.Unchecked.value, Qt.ItemDataRole.CheckStateRole)
    assert all(not p.requires_grad for p in win.model.features.parameters())
    assert all(p.requires_grad for p in win.model.classifier.parameters())
    frozen_before = {n: p.detach().clone() for n, p in win.model.features.named_parameters()}

    _train(qtbot, panel, epochs=2)
    x, y = panel.plots.steps["step"], panel.plots.steps["loss"]
    assert len(y) > 20 and np.mean(y[-5:]) < np.mean(y[:5])  # the loss fell
    step_after_first_run = int(x[-1])

    saved = tmp_path / "saved.pt"
    assert win.save_checkpoint(saved)
    plain = torch.load(saved, weights_only=True)  # readable by plain PyTorch
    assert plain["epoch"] == 2 and "optimizer_state_dict" in plain
    assert set(plain["frozen"]) == {f"features.{n}" for n in frozen_before}

    # reopen the saved file (no architecture dialog: the file names it) and resume
    win.prompts.answers["architecture"] = lambda *a: pytest.fail("the saved file names its architecture")
    assert win.open_path(saved)
    assert all(not p.requires_grad for p in win.model.features.parameters())
    assert panel.resume_check.isEnabled()
    panel.resume_check.setChecked(True)
    _train(qtbot, panel, epochs=3)
    extras = panel.checkpoint_extras()
    assert extras["epoch"] == 3 and extras["step"] == 3 * 23  # 23 steps per epoch
    assert len(panel.plots.steps) == 23  # only the third epoch ran
    assert extras["step"] > step_after_first_run
    for n, p in win.model.features.named_parameters():
        assert torch.equal(p.detach(), frozen_before[n]), n
