"""ModelTreeModel: structure, tri-state Train checkboxes <-> requires_grad, filter, badges, speed shape."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import QModelIndex, Qt
from torch import nn

from workbench.core.model import freezing
from workbench.core.model.tree import build_summary
from workbench.ui.model.tree_model import (
    CHECK,
    COL_NAME,
    COL_PARAMS,
    COL_TRAIN,
    COL_TRAINABLE,
    COL_TYPE,
    DECORATION,
    FOREGROUND,
    ModelTreeModel,
    ParamRow,
)

Checked, Partial, Unchecked = Qt.CheckState.Checked, Qt.CheckState.PartiallyChecked, Qt.CheckState.Unchecked


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3))
        self.head = nn.Linear(8, 2)


@pytest.fixture
def tree(qtbot):
    model = Net()
    tm = ModelTreeModel(build_summary(model))
    return model, tm


def _child(tm, parent, name):
    for row in range(tm.rowCount(parent)):
        idx = tm.index(row, 0, parent)
        if tm.data(idx) == name:
            return idx
    raise AssertionError(f"{name} not under {tm.data(parent)}")


def _train(idx):
    return idx.siblingAtColumn(COL_TRAIN)


def test_structure_and_parent_roundtrip(tree):
    model, tm = tree
    assert tm.rowCount() == 1
    root = tm.index(0, 0)
    assert tm.data(root) == "Net"
    assert [tm.data(tm.index(r, 0, root)) for r in range(tm.rowCount(root))] == ["backbone", "head"]
    head = _child(tm, root, "head")
    weight = _child(tm, head, "weight")
    assert isinstance(weight.internalPointer(), ParamRow)
    assert tm.parent(weight) == head and tm.parent(head) == root and not tm.parent(root).isValid()
    assert tm.data(weight.siblingAtColumn(COL_TYPE)) == "param · float32"
    assert tm.data(head.siblingAtColumn(COL_PARAMS)) == "18"
    assert tm.rowCount(weight) == 0 and not tm.hasChildren(weight)
    # a ReLU has no parameters: no checkbox
    relu = _child(tm, _child(tm, root, "backbone"), "1")
    assert tm.data(_train(relu), CHECK) is None
    assert not (tm.flags(_train(relu)) & Qt.ItemFlag.ItemIsUserCheckable)


def test_checkbox_sets_requires_grad_and_tristate(tree, qtbot):
    model, tm = tree
    root = tm.index(0, 0)
    backbone = _child(tm, root, "backbone")
    conv0 = _child(tm, backbone, "0")
    with qtbot.waitSignal(tm.dataChanged):
        assert tm.setData(_train(conv0), Unchecked.value, CHECK)
    assert not model.backbone[0].weight.requires_grad and not model.backbone[0].bias.requires_grad
    assert model.backbone[2].weight.requires_grad
    assert tm.data(_train(conv0), CHECK) == Unchecked
    assert tm.data(_train(backbone), CHECK) == Partial
    assert tm.data(_train(root), CHECK) == Partial
    assert tm.data(conv0, FOREGROUND) is not None  # dimmed
    assert tm.data(backbone.siblingAtColumn(COL_TRAINABLE)) == f"{8 * 4 * 9 + 8:,}"
    # a partially checked box that is clicked becomes checked (all below trainable)
    tm.setData(_train(root), Checked, CHECK)
    assert all(p.requires_grad for p in model.parameters())
    assert tm.data(_train(backbone), CHECK) == Checked
    tm.setData(_train(root), Unchecked, CHECK)
    assert not any(p.requires_grad for p in model.parameters())
    assert tm.data(_train(_child(tm, root, "head")), CHECK) == Unchecked


def test_parameter_row_checkbox(tree):
    model, tm = tree
    head = _child(tm, tm.index(0, 0), "head")
    bias = _child(tm, head, "bias")
    tm.setData(_train(bias), Unchecked, CHECK)
    assert not model.head.bias.requires_grad and model.head.weight.requires_grad
    assert tm.data(_train(head), CHECK) == Partial


def test_core_change_then_refresh_updates_checkboxes(tree, qtbot):
    model, tm = tree
    root = tm.index(0, 0)
    freezing.set_trainable(model, "head", False)
    with qtbot.waitSignal(tm.dataChanged):
        tm.refresh_trainable()
    assert tm.data(_train(_child(tm, root, "head")), CHECK) == Unchecked
    assert tm.data(_train(root), CHECK) == Partial


def test_badges_decoration_and_tooltip(tree, qtbot):
    from workbench.core.probe.health import Badge

    model, tm = tree
    head = _child(tm, tm.index(0, 0), "head")
    assert tm.data(head, DECORATION) is None
    badge = Badge(kind="vanishing_grad", value=1e-9, step=12, text="vanishing gradient (1e-09 at step 12)")
    with qtbot.waitSignal(tm.badgesChanged):
        tm.set_badges({"head": [badge]})
    assert tm.data(head, DECORATION) is not None
    assert "vanishing" in tm.data(head, Qt.ItemDataRole.ToolTipRole)
    tm.set_badges({})
    assert tm.data(head, DECORATION) is None


def test_model_tester_finds_no_inconsistency(tree, qtbot):
    from PySide6.QtTest import QAbstractItemModelTester

    _, tm = tree
    QAbstractItemModelTester(tm, QAbstractItemModelTester.FailureReportingMode.Warning)


def test_filter_and_sort_proxy(qtbot):
    from workbench.ui.model.tree_view import ModelTreeWidget

    class Ctl:
        keep_bn_stats_fixed = False
        toggled: list = []

        def set_keep_bn_stats_fixed(self, flag):
            self.keep_bn_stats_fixed = flag

        def is_probed(self, name):
            return name == "fc"

        def toggle_probe(self, name):
            self.toggled.append(name)

    import torchvision

    model = torchvision.models.resnet18()
    tm = ModelTreeModel(build_summary(model))
    widget = ModelTreeWidget(Ctl())
    qtbot.addWidget(widget)
    widget.set_model(tm)
    widget.filter_edit.setText("layer4")
    proxy = widget.proxy
    root = proxy.index(0, 0)
    names = [proxy.index(r, 0, root).data() for r in range(proxy.rowCount(root))]
    assert names == ["layer4"]
    widget.filter_edit.setText("Linear")
    assert [proxy.index(r, 0, root).data() for r in range(proxy.rowCount(root))] == ["fc"]
    widget.filter_edit.setText("")
    assert proxy.rowCount(root) == 10
    widget.view.sortByColumn(COL_PARAMS, Qt.SortOrder.DescendingOrder)
    assert proxy.index(0, COL_NAME, root).data() == "layer4"
    widget.view.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
    assert proxy.index(0, COL_NAME, root).data() == "conv1"
    menu = widget.context_menu(proxy.index(proxy.rowCount(root) - 1, 0, root))  # fc
    labels = [a.text() for a in menu.actions()]
    assert "Freeze all except this" in labels and "Replace head…" in labels
    probe = next(a for a in menu.actions() if a.text() == "Probe")
    assert probe.isChecked()  # the controller says fc is probed
    probe.trigger()
    assert Ctl.toggled == ["fc"]
    assert widget.context_menu(QModelIndex()) is None


def test_big_model_toggle_root_unfreezes_every_parameter(qtbot):
    """Unticking the root of a 2,000-module model (its speed is a figure in benchmarks/bench_tree.py)."""
    from workbench.ui.model.tree_view import ModelTreeWidget

    class Ctl:
        keep_bn_stats_fixed = False

    model = nn.Sequential(*[nn.Sequential(*[nn.Linear(2, 2) for _ in range(50)]) for _ in range(40)])
    tm = ModelTreeModel(build_summary(model))
    widget = ModelTreeWidget(Ctl())
    qtbot.addWidget(widget)
    widget.set_model(tm)
    widget.show()
    tm.setData(tm.index(0, COL_TRAIN), Unchecked, CHECK)
    assert not any(p.requires_grad for p in model.parameters())
    assert tm.root.trainable_params == 0
    assert torch.is_tensor(model[0][0].weight)


def test_flops_column_says_its_convention_and_offers_multiply_adds(qtbot):
    from workbench.core.model.tree import annotate_shapes_and_flops
    from workbench.ui.model.tree_model import COL_FLOPS, TOOLTIP

    model = nn.Sequential(nn.Linear(64, 10))
    root = build_summary(model)
    annotate_shapes_and_flops(root, (1, 64))
    tm = ModelTreeModel(root)
    header = tm.headerData(COL_FLOPS, Qt.Orientation.Horizontal, TOOLTIP)
    assert "2 per multiply-add" in header
    tip = tm.data(tm.index(0, COL_FLOPS, QModelIndex()), TOOLTIP)
    assert tip == "1.28 KFLOPs, 2 per multiply-add: 640 multiply-adds"
