"""Find LR from the Training panel: the sweep runs on a copy, the curve shows, "Use this LR" fills the form."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

from tests.ui.helpers import panel_host
from workbench.core.model.demo import DigitsCNN
from workbench.ui.threading import live_threads


def test_find_lr_then_use_it(qtbot, tmp_path):
    host = panel_host(DigitsCNN(), input_shape=(1, 1, 8, 8))
    qtbot.addWidget(host)
    panel = host.panel
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    panel.settings.optimizer_combo.setCurrentIndex(panel.settings.optimizer_combo.findData("sgd"))
    before = {k: v.clone() for k, v in host.model.state_dict().items()}
    qtbot.mouseClick(panel.lr_find_button, Qt.MouseButton.LeftButton)
    finder = panel.lr_finder
    dialog = finder.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=120_000)
    qtbot.waitUntil(lambda: not finder.is_running(), timeout=30_000)
    result = dialog.result
    assert result.suggested is not None and result.lrs[0] < result.suggested < result.lrs[-1]
    x, _ = dialog.smooth_curve.getData()
    assert len(x) == len(result.lrs)  # the smoothed curve drawn (log x: pyqtgraph keeps the raw x)
    assert len(dialog.marks.data) in (1, 2)  # valley and steepest marked
    assert dialog.use_button.isEnabled()
    qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    assert panel.settings.lr_spin.value() == pytest.approx(min(result.suggested, 10.0), rel=1e-3)
    assert all(torch.equal(v, before[k]) for k, v in host.model.state_dict().items())  # the window's model untouched
    assert not (tmp_path / "run").exists()  # nothing written to the runs
    assert not [t for t in live_threads() if t.objectName() == "lrFindThread"]
    assert panel.shutdown(ask=False)


def test_the_lr_finder_legend_sits_above_the_data(qtbot):
    """Its legend sat in the top right corner, where a diverging sweep's steep end is drawn."""
    from workbench.ui.train.lr_find_dialog import LRFindDialog

    dialog = LRFindDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    item = dialog.plot.getPlotItem()
    names = [label.text for _, label in item.legend.items]
    assert names == ["loss", "smoothed (EMA)"]
    assert not item.legend.sceneBoundingRect().intersects(item.getViewBox().sceneBoundingRect())


def _label_rects(axis):
    from PySide6.QtGui import QImage, QPainter

    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        _, _, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect, text) for rect, _flags, text in texts]


@pytest.mark.parametrize("top", [3e-7, 5e-6, 2e-3, 10.0])
def test_the_lr_axis_labels_never_overlap_mid_sweep(qtbot, top):
    """A sweep that has covered less than a decade, or many: the learning rates' labels stand apart."""
    import numpy as np

    from workbench.ui.train.lr_find_dialog import LRFindDialog

    dialog = LRFindDialog()
    qtbot.addWidget(dialog)
    dialog.resize(480, 360)
    dialog.show()
    qtbot.waitExposed(dialog)
    for i, lr in enumerate(np.geomspace(1e-7, top, 12)):
        dialog.add_step(i, float(lr), 2.0 - 0.01 * i)
    qtbot.wait(20)
    rects = _label_rects(dialog.plot.getAxis("bottom"))
    assert len(rects) >= 2, rects
    for (a, ta), (b, tb) in zip(rects, rects[1:]):
        assert not a.intersects(b), (ta, tb)
    rects = sorted(rects, key=lambda r: r[0].left())
    assert all(b.left() - a.right() >= 4 for (a, _), (b, _) in zip(rects, rects[1:])), [t for _, t in rects]
