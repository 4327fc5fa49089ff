"""A model that starts with an nn.Embedding in the real window: token ids as its example input."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from torch import nn

from workbench.ui.model.tree_model import COL_FLOPS, COL_SHAPE

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


class Mean(nn.Module):
    def forward(self, x):
        return x.mean(dim=1)


def _tiny_transformer() -> nn.Sequential:
    return nn.Sequential(nn.Embedding(100, 32), nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                         Mean(), nn.Linear(32, 3))


def _cell(win, name: str, column: int) -> str:
    return win.tree_model.data(win.tree_model.index_for_name(name, column), Qt.ItemDataRole.DisplayRole)


def test_an_embedding_model_shows_shapes_and_flops_for_token_ids(window, qtbot):
    win = window
    win.session.set_model(_tiny_transformer(), source="tiny transformer")
    assert win.input_shape == (1, 16)
    assert win.tree_widget.input_shape_edit.text() == "1,16"
    root = win.tree_model.root
    assert root.find("0").output_shape == (1, 16, 32) and root.output_shape == (1, 3)
    assert root.flops > 0 and root.find("1").flops > 0
    assert _cell(win, "1", COL_SHAPE) not in (None, "")
    assert _cell(win, "3", COL_FLOPS) not in (None, "", "0")
    assert win.errors == []

    # the field keeps working: a typed (N, L) is the shape of the ids
    win.tree_widget.input_shape_edit.setText("2,8")
    win.tree_widget.input_shape_edit.returnPressed.emit()
    assert win.input_shape == (2, 8)
    assert root.find("0").output_shape == (2, 8, 32) and root.output_shape == (2, 3)


def test_the_probes_random_data_for_an_embedding_model_runs(window, qtbot):
    win = window
    win.session.set_model(_tiny_transformer(), source="tiny transformer")
    probes = win.probes_panel
    assert probes.toggle_probe("0")
    with qtbot.waitSignal(probes.resultsShown, timeout=20_000):
        assert probes.run_probe_batch()
    qtbot.waitUntil(lambda: not probes.is_busy(), timeout=10_000)
    stats = probes.current_stats()
    assert stats is not None and stats.module == "0" and stats.shape[1:] == (16, 32)
