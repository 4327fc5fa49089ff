"""Layer names and axis titles in the Gradients and Layers tabs stay readable (issue 25)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtGui import QFontMetricsF

from workbench.core.probe.gradients import GradNorms
from workbench.ui.axis_fit import ELLIPSIS, axis_font, category_ticks, elide_middle
from workbench.ui.probe.grad_norms_view import GradNormsView

MODULES = [f"encoder.layer.{i}.attention.output.dense" for i in range(24)]


def _grads() -> GradNorms:
    own = {m: 10.0 ** -(i % 4) for i, m in enumerate(MODULES)}
    return GradNorms(step=5, params={f"{m}.weight": v for m, v in own.items()}, own=own,
                     modules={"": 1.0}, global_norm=1.0, order=[f"{m}.weight" for m in MODULES])


@pytest.fixture(params=[(700, 450), (420, 230)], ids=["roomy", "cramped"])
def view(qtbot, request):
    v = GradNormsView()
    qtbot.addWidget(v)
    v.resize(*request.param)
    v.show()
    qtbot.waitExposed(v)
    v.show_latest(5, _grads(), [])
    qtbot.wait(50)
    return v


def _label_extents(axis, ticks):
    """(left, right) pixel extents of each tick label along a bottom axis, centred on its tick."""
    metrics = QFontMetricsF(axis_font(axis))
    vb = axis.linkedView()
    out = []
    for x, text in ticks:
        centre = vb.mapViewToScene(_pt(x)).x()
        half = metrics.horizontalAdvance(text) / 2
        out.append((centre - half, centre + half))
    return out


def _pt(x):
    from PySide6.QtCore import QPointF

    return QPointF(x, 0.0)


def test_the_bar_names_never_overlap_and_are_shortened(view):
    axis = view.bars_plot.getAxis("bottom")
    ticks = axis._tickLevels[0]
    assert ticks, "no layer is named"
    assert all(len(text) <= 16 for _, text in ticks)
    assert any(ELLIPSIS in text for _, text in ticks)  # the long names are shortened in the middle
    extents = _label_extents(axis, ticks)
    assert all(a[1] <= b[0] for a, b in zip(extents, extents[1:])), extents
    assert extents[0][0] >= 0 and extents[-1][1] <= view.plots.width()  # inside the widget


def test_the_axis_titles_fit_their_axes(view):
    for plot in (view.curve_plot, view.bars_plot):
        axis = plot.getAxis("left")
        if axis.label.isVisible():
            width = QFontMetricsF(axis.label.font()).horizontalAdvance(axis.labelText)
            assert width <= axis.geometry().height(), (axis.labelText, width, axis.geometry().height())
    # on a roomy plot the full title is there
    if view.height() >= 400:
        assert view.bars_plot.getAxis("left").labelText == "log10 grad norm"


def test_hovering_a_bar_names_its_layer_in_full(view):
    vb = view.bars_plot.getViewBox()
    pos = vb.mapViewToScene(_pt(7.0))
    pos.setY(vb.sceneBoundingRect().center().y())
    assert view.bar_at(pos) == 7
    view._on_mouse_moved(pos)
    assert view.bars_plot.toolTip().startswith(MODULES[7] + ":")


def test_elide_middle_keeps_both_ends():
    assert elide_middle("short", 16) == "short"
    e = elide_middle("encoder.layer.11.attention.output.dense", 16)
    assert len(e) == 16 and e.startswith("encoder") and e.endswith("dense") and ELLIPSIS in e


def test_module_names_keep_their_index_and_leaf():
    from workbench.ui.probe.module_label import elide_module_name

    assert elide_module_name("bert.encoder.layer.5.attention.self.value", 22) == f"{ELLIPSIS}layer.5{ELLIPSIS}self.value"
    assert elide_module_name("encoder.layer.11.attention.output.dense", 22) == f"{ELLIPSIS}layer.11{ELLIPSIS}output.dense"
    assert elide_module_name("model.layers.15.self_attn.q_proj", 16) == f"{ELLIPSIS}15{ELLIPSIS}q_proj"  # owner dropped
    assert elide_module_name("layer4.2.conv3", 16) == "layer4.2.conv3"  # short enough: as it is
    assert elide_module_name("features.denseblock4.denselayer16.conv2", 16) == elide_middle(
        "features.denseblock4.denselayer16.conv2", 16)  # no index segment: the middle goes


def test_category_ticks_label_fewer_on_a_shorter_axis(qapp):
    from PySide6.QtGui import QFont

    names = [f"layer{i}.conv" for i in range(40)]
    long, short = category_ticks(names, 2000, QFont()), category_ticks(names, 300, QFont())
    assert len(short) < len(long) <= 40 and short[0] == (0.0, "layer0.conv")
    assert math.isclose(short[1][0] - short[0][0], short[2][0] - short[1][0])


def test_the_heatmap_labels_more_layers_when_it_grows_and_shortens_long_names(qtbot):
    from PySide6.QtCore import QPointF

    from workbench.core.probe.layer_stats import QUANTITIES, LayerSnapshot
    from workbench.ui.probe.layer_heatmap_view import LayerHeatmapView

    v = LayerHeatmapView()
    qtbot.addWidget(v)
    v.resize(600, 200)
    v.show()
    qtbot.waitExposed(v)
    rng = np.random.default_rng(0)
    v.add([LayerSnapshot(step, tuple(MODULES), tuple("Linear" for _ in MODULES),
                         rng.random((len(MODULES), len(QUANTITIES))).astype(np.float32)) for step in (1, 5)])
    v.refresh()
    qtbot.wait(30)
    axis = v.plot.getAxis("left")
    few = len(axis._tickLevels[0])
    v.resize(600, 800)  # a tab first drawn small, then given room
    qtbot.wait(80)
    many = axis._tickLevels[0]
    assert few < len(many)
    assert all(len(text) <= 22 for _, text in many) and any(ELLIPSIS in text for _, text in many)
    # each label keeps its layer's index ("bert.encode…self.value" had named every layer alike)
    assert all(f"layer.{int(y)}{ELLIPSIS}" in text and text.endswith("dense") for y, text in many), many
    metrics = QFontMetricsF(axis_font(axis))
    vb = v.plot.getPlotItem().vb
    ys = sorted(vb.mapViewToScene(QPointF(0.0, y)).y() for y, _ in many)
    assert all(b - a >= metrics.height() for a, b in zip(ys, ys[1:])), ys
    # hovering a cell names its module in full
    pos = v.cell_center(MODULES[3], 5)
    v._on_mouse_moved(pos)
    assert v.plot.toolTip() == MODULES[3]


def test_a_long_title_beside_long_layer_names_leaves_the_colour_bar_whole(qtbot):
    """BERT's 22-character labels and the whole title made the plot wider than its widget: the colour bar's
    labels were cut at the right edge ("0" for 0.2)."""
    from workbench.core.probe.layer_stats import QUANTITIES, LayerSnapshot
    from workbench.ui.probe.layer_heatmap_view import LayerHeatmapView

    names = tuple(f"bert.encoder.layer.{i}.attention.output.{k}" for i in range(12) for k in ("dense", "LayerNorm"))
    v = LayerHeatmapView()
    qtbot.addWidget(v)
    v.resize(520, 500)
    v.show()
    qtbot.waitExposed(v)
    rng = np.random.default_rng(0)
    v.add([LayerSnapshot(step, names, tuple("Linear" for _ in names),
                         rng.random((len(names), len(QUANTITIES))).astype(np.float32)) for step in (1, 5)])
    v.refresh()
    qtbot.waitUntil(lambda: v.colorbar.axis.sceneBoundingRect().right() <= v.plot.viewport().width())
    title = v.plot.getPlotItem().titleLabel
    assert title.itemRect().width() <= v.plot.getPlotItem().vb.width() + 1
