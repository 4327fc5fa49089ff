"""The mouse wheel scrolls the page, never an unfocused field under the pointer.

Without it, scrolling the Training settings changed the learning rate, the
"Backbone LR ×" factor or the optimizer whichever field passed under the pointer.
One :class:`WheelGuard` watches the whole application (dialogs and panels built
later included): spin boxes, combo boxes and sliders take the wheel only once
clicked or tabbed into.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

__all__ = ["WheelGuard"]

_WHEEL = QEvent.Type.Wheel
_POLISH = QEvent.Type.Polish


class WheelGuard(QObject):
    """An application event filter: a wheel over an unfocused value field scrolls what is behind it.

    For every ``QAbstractSpinBox``, ``QComboBox`` and ``QAbstractSlider`` (scroll
    bars excepted: they are the scrolling itself):

    - a wheel event while the field does not have focus never reaches it: it goes
      to the nearest scroll area around the field that can still scroll that way
      (else on up the widget's parents, as Qt passes an ignored wheel event);
    - a field that took focus from the wheel (``Qt.WheelFocus``) is given
      ``Qt.StrongFocus`` when it is polished: a click or Tab focuses it, the wheel does not.

    A focused field takes the wheel as usual. Install it with :meth:`install`
    (objectName ``wheelGuard``, a child of the ``QApplication``).
    """

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.setObjectName("wheelGuard")

    @classmethod
    def install(cls, app: QApplication | None = None) -> WheelGuard:
        """The guard of ``app``, created and installed on the first call (later calls return it).

        Parameters
        ----------
        app : QApplication, optional
            Default ``QApplication.instance()``.

        Returns
        -------
        WheelGuard

        Raises
        ------
        RuntimeError
            No ``QApplication`` exists yet.
        """
        app = app if app is not None else QApplication.instance()
        if app is None:
            raise RuntimeError("WheelGuard.install: create the QApplication first")
        guard = app.findChild(cls, "wheelGuard", Qt.FindChildOption.FindDirectChildrenOnly)
        if guard is None:
            guard = cls(app)
            app.installEventFilter(guard)
            for widget in QApplication.allWidgets():  # the ones polished before the guard existed
                if cls.guards(widget):
                    cls._without_wheel_focus(widget)
        return guard

    @staticmethod
    def guards(obj: QObject) -> bool:
        """Whether ``obj`` is a field the guard keeps from an unfocused wheel."""
        return (isinstance(obj, (QAbstractSpinBox, QComboBox, QAbstractSlider))
                and not isinstance(obj, QScrollBar))

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        """Redirect a wheel event of an unfocused field; strip the wheel from a new field's focus policy."""
        kind = event.type()
        if kind == _WHEEL:
            if self.guards(obj) and not obj.hasFocus():
                event.setAccepted(self._scroll_behind(obj, event))
                return True  # the field never sees it; ignored, Qt passes it on to the parents
        elif kind == _POLISH and self.guards(obj):
            self._without_wheel_focus(obj)
        return False

    @staticmethod
    def _without_wheel_focus(widget: QWidget) -> None:
        if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    @staticmethod
    def _scroll_behind(widget: QWidget, event: QWheelEvent) -> bool:
        """Send ``event`` to the viewports of the scroll areas around ``widget``, innermost first,
        until one scrolls; True when one did."""
        parent = widget.parentWidget()
        while parent is not None and not widget.isWindow():
            if isinstance(parent, QAbstractScrollArea):
                viewport = parent.viewport()
                forwarded = QWheelEvent(viewport.mapFromGlobal(event.globalPosition()), event.globalPosition(),
                                        event.pixelDelta(), event.angleDelta(), event.buttons(), event.modifiers(),
                                        event.phase(), event.inverted(), event.source())
                QApplication.sendEvent(viewport, forwarded)
                if forwarded.isAccepted():
                    return True
            if parent.isWindow():
                break
            parent = parent.parentWidget()
        return False
