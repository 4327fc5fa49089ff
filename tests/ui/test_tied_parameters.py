"""Tied weights in the window: listed under every module that holds them, frozen the same idle and mid-run.

``TiedDigits``: a decoder ``nn.Linear`` shares ``embedding.weight`` (640 of its
814 parameters). Unticking "decoder" must freeze the shared weight whether the
window applies it (idle) or the run does (at a step boundary).
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

from tests.core.model.checkpoint_files import TIED_SPEC, TiedDigits
from tests.ui.helpers import pause_and_sync
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.ui.model.tree_model import COL_TRAIN, COL_TYPE

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


@pytest.fixture
def tied_window(main_window, tmp_path):
    window, panel = main_window
    path = tmp_path / "tied.pt"
    torch.save(TiedDigits().state_dict(), path)
    assert window.open_path(path, arch=TIED_SPEC), window.prompts.errors
    assert window.model.decoder.weight is window.model.embedding.weight
    return window, panel


def test_the_tree_lists_the_shared_weight_under_the_decoder(tied_window):
    window, _ = tied_window
    tm = window.tree_model
    row = tm.index_for_name("decoder.weight")
    assert row.isValid()
    assert row.siblingAtColumn(COL_TYPE).data() == "param · shared with embedding.weight"
    assert "tied" in row.data(Qt.ItemDataRole.ToolTipRole)
    assert window.status_trainable.text() == "trainable 814 / 814"  # counted once
    tm.setData(row.siblingAtColumn(COL_TRAIN), Qt.CheckState.Unchecked.value, Qt.ItemDataRole.CheckStateRole)
    assert not window.model.embedding.weight.requires_grad
    assert tm.index_for_name("embedding.weight").siblingAtColumn(COL_TRAIN).data(
        Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Unchecked


def test_unticking_the_decoder_freezes_the_shared_weight_idle_and_mid_run(tied_window, qtbot, tmp_path):
    window, panel = tied_window
    window.set_trainable("decoder", False)
    assert window.status_trainable.text() == "trainable 110 / 814"
    window.undo_stack.undo()
    assert window.status_trainable.text() == "trainable 814 / 814"

    panel.settings.set_config(TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=100,
                                          tensorboard=False))
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    assert panel.start()
    qtbot.waitUntil(lambda: len(panel.plots.steps["step"]) >= 3, timeout=60_000)
    with qtbot.waitSignal(panel.trainableChanged, timeout=30_000) as applied:
        window.set_trainable("decoder", False)
    assert applied.args[0] == ["embedding.weight", "decoder.bias"]
    assert window.status_trainable.text() == "trainable 110 / 814"
    pause_and_sync(qtbot, panel)
    frozen = window.model.embedding.weight.detach().clone()
    panel.resume()
    qtbot.waitUntil(lambda: len(panel.plots.steps["step"]) >= 20, timeout=60_000)
    panel.stop()
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=60_000)
    assert torch.equal(window.model.embedding.weight, frozen)
    tm = window.tree_model
    for name in ("decoder", "decoder.weight", "embedding"):
        state = tm.index_for_name(name).siblingAtColumn(COL_TRAIN).data(Qt.ItemDataRole.CheckStateRole)
        assert state == Qt.CheckState.Unchecked, name
