"""The live plots and their growing buffer (no training involved)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from workbench.ui.plot_buffer import PlotBuffer
from workbench.ui.train.follow_range import X_PAD
from workbench.ui.train.loss_plot import EmaFilter, TrainingPlots


def test_buffer_doubles_and_keeps_values():
    buf = PlotBuffer(("step", "loss"), capacity=2)
    buf.append(step=0, loss=1.0)
    buf.append_many({"step": [1, 2, 3], "loss": [0.5, 0.25, np.nan]})
    assert len(buf) == 4 and buf.capacity == 4
    buf.append(step=4)
    assert buf.capacity == 8
    assert buf["step"].tolist() == [0, 1, 2, 3, 4]
    assert np.isnan(buf["loss"][3]) and np.isnan(buf["loss"][4])
    assert buf.last("step") == 4
    with pytest.raises(ValueError):
        buf.append_many({"step": [1, 2], "loss": [1.0]})
    buf.clear()
    assert len(buf) == 0 and buf.capacity == 8


def test_ema_is_chunk_invariant_and_skips_nonfinite():
    x = np.array([1.0, 2.0, np.nan, 3.0, np.inf, 4.0])
    whole = EmaFilter(0.8)(x)
    f = EmaFilter(0.8)
    parts = np.concatenate([f(x[:2]), f(x[2:5]), f(x[5:])])
    np.testing.assert_allclose(whole, parts)
    assert np.isfinite(whole).all()
    assert whole[0] == 1.0  # debiased: the first value is not pulled towards 0
    np.testing.assert_array_equal(EmaFilter(0.0)(np.array([1.0, 2.0])), [1.0, 2.0])


@pytest.fixture
def plots(qtbot):
    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(700, 500)
    w.show()
    return w


def _feed(plots, n=300):
    step = np.arange(n, dtype=float)
    plots.add_steps(step, 2 * np.exp(-step / 100), lr=np.full(n, 1e-3), epoch=step / 100, time=step / 50)
    for e in range(3):
        plots.add_epoch(e + 1, (e + 1) * 100, val_loss=[1.5, 1.2, 1.3][e], val_acc=0.5 + 0.1 * e, time=e + 1)
    plots.refresh()


def test_curves_hold_data_and_best_epoch_marked(plots):
    _feed(plots)
    items = plots.loss_plot.getPlotItem().listDataItems()
    names = [i.name() for i in items]
    assert names[:3] == ["train loss", "smoothed", "val loss"]
    x, y = items[0].getData()
    assert len(x) == 300 and y[0] == pytest.approx(2.0)
    assert plots.best_epoch() == 1
    bx, by = plots.best_marker.getData()
    assert bx.tolist() == [200.0] and by.tolist() == [1.2]
    assert plots.best_line.isVisible() and plots.best_line.value() == 200.0


def test_nan_loss_does_not_break_plot(plots):
    plots.add_steps([0, 1, 2, 3], [1.0, np.nan, np.inf, 0.5])
    plots.refresh()
    plots.grab()  # paints without raising
    assert np.isnan(plots.steps["loss"][1])
    assert np.isfinite(plots.steps["ema"]).all()


def test_x_axis_switch_and_freeze_marker(plots):
    _feed(plots)
    line = plots.mark_freeze(150, "freeze features (6)", epoch=1.5, time=3.0)
    assert line.value() == 150
    assert plots.freeze_markers() == [line]
    plots.set_x_mode("epoch")
    assert line.value() == 1.5
    x, _ = plots.loss_curve.getData()
    assert x[-1] == pytest.approx(2.99)
    assert plots.val_loss_curve.getData()[0].tolist() == [1.0, 2.0, 3.0]
    plots.set_x_mode("time")
    assert line.value() == 3.0
    with pytest.raises(ValueError):
        plots.set_x_mode("bogus")


def test_smoothing_slider_recomputes_ema(plots):
    plots.add_steps(np.arange(4), [4.0, 0.0, 4.0, 0.0])
    plots.set_smoothing(0.0)
    np.testing.assert_array_equal(plots.steps["ema"], [4.0, 0.0, 4.0, 0.0])
    plots.set_smoothing(0.9)
    assert np.ptp(plots.steps["ema"]) < 4.0


def test_downsampling_and_clip_to_view_on(plots):
    for w in (plots.loss_plot, plots.accuracy_plot, plots.lr_plot):
        opts = w.getPlotItem().ctrl
        assert opts.autoDownsampleCheck.isChecked() and opts.peakRadio.isChecked()
        assert opts.clipToViewCheck.isChecked()


def test_export_csv_and_png(plots, tmp_path):
    _feed(plots, n=10)
    path = plots.export_csv(tmp_path / "curves.csv")
    rows = list(csv.DictReader(path.open()))
    assert [r["kind"] for r in rows].count("step") == 10
    assert [r["kind"] for r in rows].count("epoch") == 3
    assert float(rows[0]["loss"]) == pytest.approx(2.0)
    assert float(rows[-1]["val_acc"]) == pytest.approx(0.7)
    png = plots.export_png(tmp_path / "plots.png")
    assert png.stat().st_size > 1000


def test_million_points_redraw(plots):
    n = 1_000_000
    step = np.arange(n, dtype=float)
    plots.add_steps(step, np.random.default_rng(0).random(n))
    plots.refresh()
    plots.loss_plot.repaint()
    assert plots.steps.capacity >= n and len(plots.loss_curve.getData()[0]) <= n


def test_best_epoch_label_names_the_runs_epoch_after_a_resume(plots):
    # a run resumed after 2 epochs: its first epoch row is epoch 3 (epochs completed)
    plots.add_steps(np.arange(47, 93), np.linspace(2.0, 1.0, 46))
    plots.add_epoch(3.0, 69, val_loss=1.5, val_acc=0.5)
    plots.add_epoch(4.0, 92, val_loss=1.1, val_acc=0.6)
    plots.add_epoch(5.0, 115, val_loss=1.3, val_acc=0.6)
    plots.refresh(force=True)
    assert plots.best_epoch() == 1
    assert plots.best_epoch_number() == 4
    assert plots.best_line.label.textItem.toPlainText() == "best: epoch 4"


def test_exports_ask_through_the_prompts_and_write_whole_files(qtbot, tmp_path):
    """The files were written as "curves" / "plots" without an extension, directly (not atomically)."""
    from tests.ui.helpers import RecordingPrompts

    prompts = RecordingPrompts(save_path=lambda title, filters, default: str(tmp_path / default))
    w = TrainingPlots(prompts=prompts)
    qtbot.addWidget(w)
    w.add_steps(np.arange(1.0, 6.0), np.linspace(2.0, 1.0, 5), lr=np.full(5, 1e-3))
    w.refresh(force=True)
    w._on_export_csv()
    w._on_export_png()
    assert [(a[2], a[3]) for a in prompts.asked] == [("CSV files (*.csv)", "curves.csv"),
                                                     ("PNG images (*.png)", "plots.png")]
    assert (tmp_path / "curves.csv").read_text().startswith("kind,step,epoch")
    assert (tmp_path / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "a_file").write_text("not a folder")
    prompts.answers["save_path"] = str(tmp_path / "a_file" / "curves.csv")
    w._on_export_csv()
    assert prompts.errors and "Could not write" in prompts.errors[-1]


def test_the_legend_sits_above_the_data_and_marker_labels_step_down(qtbot):
    """The legend and the freeze labels covered the curves and each other."""
    w = TrainingPlots()
    qtbot.addWidget(w)
    w.resize(800, 500)
    w.show()
    qtbot.waitExposed(w)
    item = w.loss_plot.getPlotItem()
    assert not item.legend.sceneBoundingRect().intersects(item.getViewBox().sceneBoundingRect())
    labels = [w.mark_freeze(10.0 + i, f"marker {i}").label.orthoPos for i in range(3)]
    assert len(set(labels)) == 3


def test_a_falling_loss_keeps_the_view_from_zero_and_moves_it_only_above_its_top(plots):
    """Each view move re-lays out the axes and repaints the plot, so a falling loss must not move it."""
    vb = plots.loss_plot.getPlotItem().getViewBox()
    moves = []
    vb.sigRangeChanged.connect(lambda *_: moves.append(1))
    plots.expect_extent(400.0, 4.0)
    step = np.arange(200, dtype=float)
    loss = 2.0 * np.exp(-step / 50)  # 2.0 down to 0.04
    for chunk in np.array_split(np.arange(200), 20):  # 20 refreshes, as during a run
        plots.add_steps(step[chunk], loss[chunk], lr=np.full(chunk.size, 1e-3))
        plots.refresh()
    (x0, x1), (y0, y1) = vb.viewRange()
    assert (x0, x1) == pytest.approx((0.0, 400.0 * (1 + X_PAD)))  # the planned steps and room for the last markers
    assert y0 == pytest.approx(0.0) and y1 == pytest.approx(2.2)  # 2.0 + 8 %, rounded up to two digits
    assert len(moves) == 1  # set once, on the first refresh
    plots.add_steps(np.array([200.0]), np.array([3.0]), lr=np.array([1e-3]))  # a spike above the top
    plots.refresh()
    assert vb.viewRange()[1][1] == pytest.approx(3.3) and len(moves) == 2


def test_a_new_run_like_the_last_keeps_the_view(plots):
    """Start clears the plots; when the next run plans the same steps and its loss starts alike, no view
    moves (a move lays out every axis again: the slowest repaint of a run's start)."""
    views = [p.getPlotItem().getViewBox() for p in (plots.loss_plot, plots.lr_plot, plots.accuracy_plot)]
    moves = []
    for vb in views:
        vb.sigRangeChanged.connect(lambda *_: moves.append(1))
    for start_loss, expected_moves in ((2.31, 3), (2.27, 0)):  # 2.31 and 2.27 (+8 %) both round up to 2.5
        moves.clear()
        plots.clear()
        plots.expect_extent(69.0, 3.0)
        step = np.arange(10, dtype=float)
        plots.add_steps(step, start_loss * np.exp(-step / 20), lr=np.full(10, 1e-3))
        plots.refresh()
        assert len(moves) == expected_moves
    assert views[0].viewRange()[0] == pytest.approx([0.0, 69.0 * (1 + X_PAD)]) and views[0].viewRange()[1] == pytest.approx([0, 2.5])


def test_a_loss_below_zero_gets_room_below_it(plots):
    plots.expect_extent(100.0, 1.0)
    plots.add_steps(np.arange(10, dtype=float), np.linspace(0.5, -1.5, 10), lr=np.full(10, 1e-3))
    plots.refresh()
    y0, y1 = plots.loss_plot.getPlotItem().getViewBox().viewRange()[1]
    assert y0 == pytest.approx(-1.5 - 0.25 * 2.0) and y1 == pytest.approx(0.5 + 0.08 * 2.0)


def test_an_epoch_end_redraws_one_plot_per_pass(plots):
    """A live panel redraws the epoch curves one plot per event-loop pass: the loss plot's first."""
    plots.expect_extent(40.0, 2.0)
    plots.add_steps(np.arange(20, dtype=float), np.linspace(2.0, 1.0, 20), lr=np.full(20, 1e-3))
    plots.refresh_steps()
    plots.add_epoch(1.0, 20.0, val_loss=1.2, val_acc=0.6)
    plots.refresh_epochs(one_plot=True)
    assert list(plots.val_loss_curve.getData()[1]) == [1.2] and list(plots.best_marker.getData()[1]) == [1.2]
    assert plots.acc_curve.getData()[1] is None or len(plots.acc_curve.getData()[1]) == 0
    assert not plots.best_line.isVisible()
    plots.refresh_epochs(one_plot=True)
    assert list(plots.acc_curve.getData()[1]) == [0.6]
    assert plots.best_line.isVisible() and plots.best_line.value() == 20.0
    plots.add_epoch(2.0, 40.0, val_loss=1.4, val_acc=0.7)  # worse: the best stays at epoch 1
    plots.refresh()  # both at once outside a live run
    assert list(plots.acc_curve.getData()[1]) == [0.6, 0.7] and list(plots.best_marker.getData()[0]) == [20.0]
    assert plots.best_line.label.toPlainText() == "best: epoch 1"


def test_a_sparse_grad_norm_overlay_draws_markers_not_a_line(plots):
    """Two measurements (step 1 and step 46) were joined by one straight line across the loss plot."""
    _feed(plots)
    overlay = plots.grad_norm
    overlay.add(1, 2.0)
    overlay.add(46, 0.5)
    plots.refresh()
    assert overlay.markers and overlay.curve.opts["pen"] is None and overlay.curve.opts["symbol"] is not None
    x, y = overlay.curve.getData()
    assert list(x) == [1.0, 46.0] and np.allclose(y, np.log10([2.0, 0.5]))
    for step in range(50, 1000, 10):  # a cadence that covers the run: a line again
        overlay.add(step, 1.0 / step)
    plots.refresh()
    assert not overlay.markers and overlay.curve.opts["pen"] is not None and overlay.curve.opts["symbol"] is None
    plots.clear()  # a new run starts sparse
    assert overlay.markers and overlay.curve.opts["pen"] is None
