"""The wheel never changes a field that has no focus (``ui.wheel_guard``): it scrolls what is behind it.

Scrolling the Training settings changed the learning rate and "Backbone LR ×"
whenever one of them passed under the pointer.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialog,
    QScrollArea,
    QScrollBar,
    QSpinBox,
    QVBoxLayout,
)

from workbench.ui.wheel_guard import WheelGuard

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _fields(root) -> list:
    """Every spin box, combo box and slider under ``root`` (scroll bars are the scrolling, not fields)."""
    found = [w for kind in GUARDED for w in root.findChildren(kind) if not isinstance(w, QScrollBar)]
    return list({id(w): w for w in found}.values())


def _value(field):
    return field.currentIndex() if isinstance(field, QComboBox) else field.value() if hasattr(field, "value") \
        else field.text()


def _wheel(widget, dy: int) -> None:
    """A vertical wheel notch (``dy`` = +-120) over the middle of ``widget``."""
    local = QPointF(widget.rect().center())
    event = QWheelEvent(local, QPointF(widget.mapToGlobal(local)), QPoint(), QPoint(0, dy), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _unfocus(field) -> None:
    if field.hasFocus():
        field.clearFocus()
    assert not field.hasFocus()


def test_an_unfocused_field_of_the_window_keeps_its_value(shown):
    fields = _fields(shown)
    names = {f.objectName() for f in fields}
    assert len(fields) >= 20 and {"lrSpin", "backboneLrSpin"} <= names, names
    for field in fields:
        assert field.focusPolicy() != Qt.FocusPolicy.WheelFocus, field.objectName()
        _unfocus(field)
        before = _value(field)
        for dy in (120, -120, -120, 120):
            _wheel(field, dy)
            assert _value(field) == before, (field.objectName(), type(field).__name__, dy)


def test_a_focused_field_takes_the_wheel(shown, qtbot):
    spin = shown.findChild(QAbstractSpinBox, "backboneLrSpin")
    shown.activateWindow()
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    before = spin.value()
    _wheel(spin, 120)
    assert spin.value() > before
    _wheel(spin, -120)
    assert spin.value() == pytest.approx(before)


def test_the_wheel_over_an_unfocused_field_scrolls_the_training_settings(shown, qtbot):
    scroll = shown.findChild(QScrollArea, "trainingSettingsScroll")
    bar = scroll.verticalScrollBar()
    if bar.maximum() == 0:  # the settings fit: a smaller window makes them scroll
        shown.resize(900, 560)
        qtbot.waitUntil(lambda: bar.maximum() > 0)
    spin = scroll.findChild(QAbstractSpinBox, "lrSpin")
    assert spin.isVisible() and not spin.hasFocus()
    bar.setValue(0)
    before = spin.value()
    _wheel(spin, -120)  # down
    assert bar.value() > 0 and spin.value() == before
    _wheel(spin, 120)
    assert bar.value() == 0 and spin.value() == before


def test_a_field_made_later_is_guarded_too(shown, qtbot):
    """A dialog built after the window (the guard watches the application, not a list of widgets)."""
    WheelGuard.install()  # a second install is the same guard
    assert len(QApplication.instance().findChildren(WheelGuard)) == 1
    dialog = QDialog(shown)
    spin = QSpinBox(dialog, minimum=0, maximum=10, value=5)
    combo = QComboBox(dialog)
    combo.addItems(["a", "b", "c"])
    combo.setCurrentIndex(1)
    layout = QVBoxLayout(dialog)
    layout.addWidget(spin)
    layout.addWidget(combo)
    dialog.show()
    qtbot.waitExposed(dialog)
    for field, before in ((spin, 5), (combo, 1)):
        assert field.focusPolicy() == Qt.FocusPolicy.StrongFocus
        _unfocus(field)
        _wheel(field, 120)
        _wheel(field, -240)
        assert _value(field) == before
    dialog.close()
