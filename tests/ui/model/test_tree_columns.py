"""The tree's columns at 1280x800: every header in view, deep names keep their leaf, a column chooser remembers.

FLOPs was cut at the right edge and names at depth 5 were invisible (the Name
column elided them at their end, after the indentation had taken its width).
"""

from __future__ import annotations

import torch.nn as nn
from PySide6.QtCore import Qt

from workbench.ui.model.tree_model import COL_CHANGE, COL_FLOPS, COL_NAME, COL_SHAPE, COLUMNS
from workbench.ui.model.tree_view import CHOOSABLE_COLUMNS, ModelTreeWidget

#: A depth-5 module of a real architecture: Transformer > decoder > layers > 0 > multihead_attn > out_proj.
DEEP = "decoder.layers.0.multihead_attn.out_proj"


def _transformer() -> nn.Module:
    return nn.Transformer(d_model=32, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64,
                          batch_first=True)


def _headers_in_view(view) -> dict:
    header = view.header()
    return {COLUMNS[c]: (header.sectionViewportPosition(c), header.sectionSize(c)) for c in range(header.count())
            if not view.isColumnHidden(c)}


def _all_in_view(view) -> bool:
    width = view.viewport().width()
    return all(0 <= left and left + size <= width for left, size in _headers_in_view(view).values())


def test_every_header_and_a_depth_5_leaf_show_at_1280x800(shown, qtbot):
    win = shown
    win.session.set_model(_transformer(), None, None, None, source="transformer")
    tree = win.tree_widget
    view = tree.view
    assert view.textElideMode() == Qt.TextElideMode.ElideMiddle  # "word_…dings": the start and the index stay
    assert tree.set_expanded(DEEP, True) and tree.select_name(DEEP)
    qtbot.waitUntil(lambda: _all_in_view(view), timeout=3000)
    # Memory is hidden until asked for (its total is the fit line under Start)
    assert set(_headers_in_view(view)) == set(COLUMNS) - {"Change", "Memory"}, _headers_in_view(view)
    assert view.horizontalScrollBar().maximum() == 0
    index = view.currentIndex()
    assert index.data() == "out_proj"
    cell = view.visualRect(index)
    assert cell.left() >= 5 * view.indentation()  # it is that deep...
    assert cell.width() >= view.fontMetrics().horizontalAdvance("out_proj")  # ...and its name is whole
    assert cell.right() <= view.header().sectionViewportPosition(COL_NAME) + view.header().sectionSize(COL_NAME)
    # the settings still stand beside the plots: the tree took no more than that leaves
    assert win.training_panel._split.orientation() == Qt.Orientation.Horizontal
    # a comparison's Change column comes into view too (the Name column gives up the room)
    tree.show_change_column(True)
    qtbot.waitUntil(lambda: _all_in_view(view) and "Change" in _headers_in_view(view), timeout=3000)


def test_the_column_chooser_hides_a_column_and_a_new_tree_remembers_it(shown, qtbot):
    tree = shown.tree_widget
    menu = tree.column_menu()
    entries = {a.text(): a for a in menu.actions()}
    assert set(entries) == {COLUMNS[c] for c in CHOOSABLE_COLUMNS}
    assert all(a.isCheckable() and a.isChecked() == (name != "Memory") for name, a in entries.items())
    entries["Output shape"].setChecked(False)  # what a click in the header's menu does
    assert tree.view.isColumnHidden(COL_SHAPE) and not tree.view.isColumnHidden(COL_FLOPS)
    assert _all_in_view(tree.view)

    again = ModelTreeWidget(shown.edits)
    qtbot.addWidget(again)
    again.set_model(shown.tree_model)
    assert again.view.isColumnHidden(COL_SHAPE) and again.view.isColumnHidden(COL_CHANGE)
    assert not again.view.isColumnHidden(COL_FLOPS)
    assert not again.column_menu().actions()[CHOOSABLE_COLUMNS.index(COL_SHAPE)].isChecked()
    again.set_column_shown(COL_SHAPE, True)
    third = ModelTreeWidget(shown.edits)
    qtbot.addWidget(third)
    third.set_model(shown.tree_model)
    assert not third.view.isColumnHidden(COL_SHAPE)


def test_the_type_column_takes_the_name_columns_spare_room_for_a_whole_type_name(shown, qtbot):
    """The demo's "AdaptiveAvgPool2d" read "AdaptiveAvgPo…" at every window size (Type was capped at 110 px); it
    shows whole where the Name column has room to spare (a depth-5 leaf keeps its room: the test above)."""
    from workbench.ui.model.tree_model import COL_TYPE

    win = shown
    view = win.tree_widget.view
    header = view.header()
    whole = view.fontMetrics().horizontalAdvance("AdaptiveAvgPool2d")
    win.resize(1920, 1080)
    qtbot.waitUntil(lambda: header.sectionSize(COL_TYPE) >= whole, timeout=3000)
    assert _all_in_view(view)
    # a column the user dragged keeps the user's width when the room changes
    header.resizeSection(COL_TYPE, 90)
    before = view.viewport().width()
    win.resize(1700, 1000)
    qtbot.waitUntil(lambda: view.viewport().width() != before, timeout=3000)
    qtbot.wait(10)  # the viewport's resize event, which shares the room, is handled before this returns
    assert header.sectionSize(COL_TYPE) == 90
