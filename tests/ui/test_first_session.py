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

from tests.ui.helpers import type_text

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


def test_scripted_first_session_of_the_issue(main_window, qtbot, tmp_path):
    """Open a ``module.``-prefixed resnet18, freeze all but fc, replace the head, train 3 epochs, type a
    new LR mid-run, Stop, Resume, finish: no dialog but the ones a user must answer, and the run folder
    shows the LR change at the step it was typed and a resume at the stop step."""
    import json
    from pathlib import Path

    import torchvision

    from workbench.ui.model.tree_model import CHECK, COL_TRAIN

    win, panel = main_window
    path = tmp_path / "resnet18_dp.pt"
    torch.save({f"module.{k}": v for k, v in torchvision.models.resnet18().state_dict().items()}, path)
    assert win.open_path(path)  # resnet18 is the one full match: no Architecture dialog
    assert win.arch_spec.name == "resnet18" and "resnet18" in win.statusBar().currentMessage()

    tree = win.tree_model  # freeze all but fc with the Train checkboxes
    tree.setData(tree.index(0, COL_TRAIN), Qt.CheckState.Unchecked, CHECK)
    tree.setData(tree.index_for_name("fc", COL_TRAIN), Qt.CheckState.Checked.value, CHECK)
    win.prompts.answers["integer"] = 3  # Replace head… asks the number of outputs
    assert win.replace_head("fc")
    assert win.model.fc.out_features == 3 and win.model.fc.weight.requires_grad
    assert not win.model.conv1.weight.requires_grad

    s = panel.settings
    s.dataset_combo.setCurrentIndex(s.dataset_combo.findData("fake"))
    type_text(qtbot, s.fake_shape_edit, "3, 32, 32", enter=True)
    s.fake_size_spin.setValue(400)
    s.classes_spin.setValue(3)
    s.batch_spin.setValue(16)
    s.epochs_spin.setValue(3)
    steps_per_epoch = 20  # 320 training images / 16
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(panel.plots.steps) >= 3, timeout=RUN_TIMEOUT_MS)
    type_text(qtbot, s.lr_spin, "1e-4", enter=True)
    qtbot.waitUntil(lambda: any("lr 0.0001" in m[3] for m in panel.plots._markers), timeout=RUN_TIMEOUT_MS)
    lr_step = next(m[0] for m in panel.plots._markers if "lr 0.0001" in m[3])
    qtbot.waitUntil(lambda: len(panel.plots.steps) >= steps_per_epoch + 2, timeout=RUN_TIMEOUT_MS)
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "stopped"
    stopped_at = int(panel.plots.steps["step"][-1])
    run_dir = Path(panel.run_dir())
    assert torch.load(run_dir / "last.pt", weights_only=True)["step"] == stopped_at

    assert win.resume_run(str(run_dir / "last.pt"), str(run_dir))  # Runs > Resume
    with qtbot.waitSignal(panel.runningChanged, timeout=5000):
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=RUN_TIMEOUT_MS)
    assert panel.last_reason() == "completed"
    assert int(panel.plots.steps["step"][0]) == stopped_at + 1
    assert int(panel.plots.steps["step"][-1]) == 3 * steps_per_epoch
    assert float(panel.plots.steps["lr"][0]) == pytest.approx(1e-4)  # the typed LR goes on after the resume

    edits = [json.loads(line) for line in (run_dir / "edits.jsonl").read_text().splitlines()]
    assert [(e["step"], e["lr"]) for e in edits if e["op"] == "set_lr"] == [(lr_step, pytest.approx(1e-4))]
    assert "resume = true" in (run_dir / "run.toml").read_text()
    assert len((run_dir / "metrics.csv").read_text().strip().splitlines()) == 1 + 3
    assert win.prompts.errors == []
    assert [a[0] for a in win.prompts.asked] == ["integer"]  # the one question a user must answer
