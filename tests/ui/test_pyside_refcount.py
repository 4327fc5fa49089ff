"""Regression test for PySide6 6.12.0 on CPython 3.11.

6.12.0 drops references to None/True/False in void methods and signal emission;
after enough calls CPython aborts with ``Fatal Python error: none_dealloc`` or
``bool_dealloc``. The pin ``PySide6-Essentials<6.12`` avoids it; this test fails
if a broken build comes back.
"""

from __future__ import annotations

import sys

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets


def test_refcounts_of_singletons_do_not_fall(qtbot):
    widget = pg.PlotWidget()
    qtbot.addWidget(widget)
    item = widget.plot()
    label = QtWidgets.QLabel()
    qtbot.addWidget(label)
    timer = QtCore.QTimer()
    x = np.arange(200, dtype=float)

    before = {name: sys.getrefcount(obj) for name, obj in (("None", None), ("True", True), ("False", False))}
    for i in range(3000):
        item.setData(x, np.sin(x + i))
        label.setText(str(i))
        label.setVisible(True)
        label.setEnabled(False)
        label.update()
        timer.setInterval(10)
        widget.setTitle(None)
    after = {name: sys.getrefcount(obj) for name, obj in (("None", None), ("True", True), ("False", False))}
    # Immortal objects (3.12+) report a huge constant; on 3.11 a broken binding
    # loses one reference per call, i.e. thousands here.
    for name in before:
        assert after[name] >= before[name] - 50, f"refcount of {name} fell from {before[name]} to {after[name]}"


def test_pyside_version_is_pinned_below_6_12():
    import PySide6

    major, minor = (int(p) for p in PySide6.__version__.split(".")[:2])
    assert (major, minor) < (6, 12), f"PySide6 {PySide6.__version__} is known to abort CPython 3.11"
