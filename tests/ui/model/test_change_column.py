"""The Change column aggregates to parent modules: a collapsed encoder shows the change of a layer below it."""

from __future__ import annotations

import torch
import torchvision
from PySide6.QtCore import Qt

from workbench.core.model.diff import compare_models
from workbench.core.model.tree import build_summary
from workbench.ui.model.tree_model import CHANGE_TIP, COL_CHANGE, ModelTreeModel


def test_a_collapsed_parent_row_shows_the_largest_change_below_it(qtbot):
    torch.manual_seed(0)
    a = torchvision.models.resnet18(num_classes=4)
    b = torchvision.models.resnet18(num_classes=4)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.layer3[1].conv2.weight.mul_(1.2)  # deep inside layer3, whose row starts collapsed
        b.layer3[0].conv1.weight.mul_(1.05)
    changes = compare_models(a, b).changes
    model = ModelTreeModel(build_summary(a))
    model.set_comparison({c.module: c for c in changes})

    def cell(name):
        index = model.index_for_name(name)
        return index.sibling(index.row(), COL_CHANGE)

    deep = next(c for c in changes if c.module == "layer3.1.conv2").params
    for parent in ("layer3", "layer3.1", ""):
        assert cell(parent).data() == f"{deep:.2e}", parent  # was blank: values on leaf modules only
    assert "largest below: layer3.1.conv2" in cell("layer3").data(Qt.ItemDataRole.ToolTipRole)
    assert cell("layer3").data(Qt.ItemDataRole.BackgroundRole) is not None
    assert cell("layer2").data() is None  # nothing changed below
    assert model.headerData(COL_CHANGE, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole) == CHANGE_TIP
