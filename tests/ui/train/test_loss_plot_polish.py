"""The training plots stay readable: nothing clipped at the right edge, curves visible on both themes,
sparse step curves drawn as markers (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QFontMetricsF

from workbench.ui.curve_colors import MIN_CONTRAST, contrast_ratio
from workbench.ui.theme import plot_colors, theme_palette
from workbench.ui.train.loss_plot import TrainingPlots


@pytest.fixture(params=[(700, 430), (420, 330)], ids=["dock", "narrow"])
def plots(qtbot, request):
    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(*request.param)  # the Training dock's plots in a 1600 x 960 and in a 1280 x 800 window
    w.show()
    qtbot.waitExposed(w)
    return w


def _run_like(plots, steps=69, epochs=3, grad_norms=(0.3, 1.6, 2.2, 2.0, 2.4)):
    """What a 3-epoch digits run leaves on the plots: the planned extent first, then the steps and epochs."""
    plots.expect_extent(steps, epochs)
    step = np.arange(1, steps + 1, dtype=float)
    plots.add_steps(step, 2.3 * np.exp(-step / 60), lr=np.full(steps, 1e-3), epoch=step / (steps / epochs),
                    time=step / 10)
    per = steps // epochs
    for e in range(epochs):
        plots.add_epoch(e + 1, (e + 1) * per, val_loss=2.1 - 0.6 * e, val_acc=0.4 + 0.22 * e, time=e + 1)
    for s, g in zip(np.linspace(1, steps, len(grad_norms)), grad_norms):
        plots.grad_norm.add(int(s), g)
    plots.refresh(force=True)


def _settle(qtbot):
    qtbot.wait(60)  # the layouts and axes settle on the event loop


def _right_edge_room_px(plot_widget, x):
    """Pixels from data x to the right edge of the plot's view (negative: outside)."""
    vb = plot_widget.getPlotItem().getViewBox()
    at = vb.mapViewToScene(QPointF(x, 0.0)).x()
    return vb.sceneBoundingRect().right() - at


def test_the_last_epoch_points_and_the_best_star_are_inside_the_view(plots, qtbot):
    _run_like(plots)
    _settle(qtbot)
    last = float(plots.epochs["step"][-1])
    star_radius = plots.best_marker.opts["symbolSize"] / 2
    # the best epoch is the last one here: its star (16 px) and the val points must be whole
    assert plots.best_epoch() == 2
    assert _right_edge_room_px(plots.loss_plot, last) >= star_radius
    assert _right_edge_room_px(plots.accuracy_plot, last) >= plots.acc_curve.opts["symbolSize"] / 2
    # the last step is still shown and the view does not waste more than a fifth of its width
    vb = plots.loss_plot.getPlotItem().getViewBox()
    (x0, x1), _ = vb.viewRange()
    assert x0 <= 1 and last < x1 <= last * 1.2


def test_the_best_epoch_label_lies_inside_the_accuracy_view(plots, qtbot):
    _run_like(plots)
    _settle(qtbot)
    label = plots.best_line.label
    assert plots.best_line.isVisible() and label.isVisible()
    assert label.toPlainText() == "best: epoch 3"
    view = plots.accuracy_plot.getPlotItem().getViewBox().sceneBoundingRect()
    box = label.sceneBoundingRect()
    assert view.contains(box), (box, view)
    # a best epoch at the left stays inside too (the label turns to the free side)
    plots.clear()
    plots.expect_extent(69, 3)
    for e, v in enumerate([0.5, 1.0, 1.1]):
        plots.add_epoch(e + 1, (e + 1) * 23, val_loss=v, val_acc=0.5)
    plots.refresh(force=True)
    _settle(qtbot)
    assert plots.best_epoch_number() == 1
    assert view.contains(plots.best_line.label.sceneBoundingRect())


def test_the_best_label_fits_the_narrowest_view_wherever_the_best_epoch_is(qtbot):
    """At the panel's least width the view (~120 px) is hardly wider than the label: a best epoch near the
    middle has room on neither side, and the label straddles its line instead of being cut."""
    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(700, 330)
    w.show()
    qtbot.waitExposed(w)
    vb = w.accuracy_plot.getPlotItem().getViewBox()
    label = w.best_line.label

    def show_best(epochs, best):
        w.clear()
        w.expect_extent(23 * epochs, epochs)
        for e in range(epochs):
            w.add_epoch(e + 1, (e + 1) * 23, val_loss=0.5 if e == best else 1.0 + 0.1 * e, val_acc=0.5)
        w.refresh(force=True)
        _settle(qtbot)
        assert label.toPlainText() == f"best: epoch {best + 1}"

    show_best(3, 1)
    assert vb.sceneBoundingRect().contains(label.sceneBoundingRect())
    w.resize(w.minimumSizeHint().width(), 330)  # narrower, same data: the label moves on the resize alone
    _settle(qtbot)
    view = vb.sceneBoundingRect()
    assert view.width() < 1.5 * label.sceneBoundingRect().width(), view  # truly narrow: no side has room
    assert view.contains(label.sceneBoundingRect()), (label.sceneBoundingRect(), view)
    for epochs, best in [(2, 0), (3, 0), (3, 1), (5, 2), (3, 2)]:
        show_best(epochs, best)
        box = label.sceneBoundingRect()
        assert view.contains(box), (epochs, best, box, view)
        line_x = vb.mapViewToScene(QPointF(w.best_line.value(), 0.0)).x()
        assert box.left() <= line_x + 1 and line_x - 1 <= box.right()  # it still touches its line


def test_the_grad_norm_axis_is_wide_enough_for_its_tick_labels(plots, qtbot):
    _run_like(plots)
    _settle(qtbot)
    axis = plots.loss_plot.getPlotItem().getAxis("right")
    assert axis.isVisible()
    lo, hi = plots.grad_norm.view.viewRange()[1]
    strings = []
    length = axis.geometry().height()
    for spacing, values in axis.tickValues(lo, hi, length):
        strings += [s for s in axis.tickStrings(values, 1.0, spacing) if s]
    assert strings, "the right axis shows no tick labels"
    font = axis.style["tickFont"] or axis.font()
    widest = max(QFontMetricsF(font).horizontalAdvance(s) for s in strings)
    # the rotated label's bounding rect overestimates its height; pyqtgraph budgets 80 % of it (AxisItem._updateWidth)
    label_room = 0.8 * axis.label.boundingRect().height() if axis.label.isVisible() else 0.0
    # AxisItem draws its tick text after the tick and its offset, the rotated label at the far side
    need = widest + max(0, axis.style["tickLength"]) + axis.style["tickTextOffset"][0] + label_room
    assert axis.width() >= need, (axis.width(), need, strings)
    # and the whole axis, its label included, lies inside the widget: a legend wider than the plot once
    # widened the plot past its widget and the axis was cut at the widget's edge
    visible = plots.loss_plot.mapToScene(plots.loss_plot.viewport().rect()).boundingRect()
    assert axis.sceneBoundingRect().right() <= visible.right() + 0.5, (axis.sceneBoundingRect(), visible)


def test_the_grad_norm_ticks_do_not_overlap(plots, qtbot):
    _run_like(plots)  # 0.3 to 2.4: pyqtgraph labels 0.3, 0.4, ... 0.9, 1, 2 on a plot 90 px high
    _settle(qtbot)
    axis = plots.loss_plot.getPlotItem().getAxis("right")
    lo, hi = plots.grad_norm.view.viewRange()[1]
    height = axis.geometry().height()
    shown = sorted(v for spacing, values in axis.tickValues(lo, hi, height) for v in values if lo <= v <= hi)
    text_px = QFontMetricsF(axis.style["tickFont"] or axis.font()).height()
    px = [(v - lo) / (hi - lo) * height for v in shown]
    assert len(shown) >= 2 and all(b - a >= text_px for a, b in zip(px, px[1:])), (shown, px)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_curve_has_3_to_1_contrast_on_the_plot_background(plots, theme):
    background = plot_colors(theme_palette(theme))[0]
    curves = {
        "train loss": plots.loss_curve.opts["pen"], "smoothed": plots.ema_curve.opts["pen"],
        "val loss": plots.val_loss_curve.opts["pen"], "val accuracy": plots.acc_curve.opts["pen"],
        "lr": plots.lr_curve.opts["pen"], "best line": plots.best_line.pen,
    }
    for name, pen in curves.items():
        color = pg_color(pen)
        # WCAG 2.1 contrast ratio of relative luminances, (L1 + 0.05) / (L2 + 0.05); 3:1 for graphics (SC 1.4.11)
        assert contrast_ratio(color, background) >= MIN_CONTRAST, (name, color.name(), background.name())
    overlay = plots.grad_norm.curve.opts["symbolBrush"]
    assert contrast_ratio(pg_color(overlay), background) >= MIN_CONTRAST


def pg_color(pen_or_brush) -> QColor:
    import pyqtgraph as pg

    if hasattr(pen_or_brush, "color"):
        return QColor(pen_or_brush.color())
    return QColor(pg.mkBrush(pen_or_brush).color())


def test_contrast_ratio_is_the_wcag_formula():
    assert contrast_ratio((255, 255, 255), (0, 0, 0)) == pytest.approx(21.0)
    assert contrast_ratio((118, 118, 118), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)  # WCAG's #767676
    assert contrast_ratio(QColor("#1e1e1e"), QColor("#1e1e1e")) == pytest.approx(1.0)


def test_a_short_run_draws_its_step_curves_with_markers_then_lines(plots):
    plots.add_steps(np.arange(1, 9, dtype=float), np.linspace(2, 1, 8), lr=np.full(8, 1e-3))
    plots.refresh(force=True)
    for curve in (plots.loss_curve, plots.ema_curve, plots.lr_curve):
        assert curve.opts["symbol"] is not None, curve.name()
    plots.add_steps(np.arange(9, 200, dtype=float), np.linspace(1, 0.5, 191), lr=np.full(191, 1e-3))
    plots.refresh(force=True)
    for curve in (plots.loss_curve, plots.ema_curve, plots.lr_curve):
        assert curve.opts["symbol"] is None, curve.name()
        assert curve.opts["pen"] is not None


def test_the_legend_takes_more_columns_when_the_plot_grows(qtbot):
    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(300, 330)
    w.show()
    qtbot.waitExposed(w)
    qtbot.wait(30)
    legend = w.loss_plot.getPlotItem().legend
    narrow = legend.columnCount
    w.resize(1000, 430)
    qtbot.wait(60)
    assert legend.columnCount == 3 > narrow
    view = w.loss_plot.getPlotItem().getViewBox().sceneBoundingRect()
    assert not legend.sceneBoundingRect().intersects(view)
