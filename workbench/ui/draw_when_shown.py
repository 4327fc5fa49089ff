"""Draw a view now when it can be seen, else when it is next shown.

A live run sends the Probes panel a batch of reports 4 times a second; the
Gradients and Weights tabs drew each one even while another tab (or another
dock tab) covered them. That drawing was a quarter of an attached window's
CPU, taken from the script training on the same machine
(``benchmarks/bench_attach.py``). :class:`DrawWhenShown` keeps, per kind of
drawing, only the newest one a hidden view was asked for and runs it when the
view is shown. ``LayerHeatmapView`` does the same with its own timer.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget


class DrawWhenShown(QObject):
    """Runs a view's drawings at once while it is visible; holds the newest of each kind while it is not.

    A view whose window is not visible (never shown: a test's, or one drawn only
    to be grabbed; or hidden) draws at once: nothing is held for a show that may
    not come.

    Parameters
    ----------
    view : QWidget
        The view whose ``Show`` event runs the held drawings (an event filter; the
        object is the view's child and goes with it).
    """

    def __init__(self, view: QWidget):
        super().__init__(view)
        self._view = view
        self._held: dict[str, Callable[[], object]] = {}
        view.installEventFilter(self)

    def can_draw(self) -> bool:
        """True when a drawing could be seen now, or no show is to be waited for: the view is visible, or its
        window is not."""
        view = self._view
        return view.isVisible() or not view.window().isVisible()

    def draw(self, kind: str, fn: Callable[[], object]) -> None:
        """Run ``fn()`` now when :meth:`can_draw`, else keep it (replacing an older one of the same ``kind``)."""
        if self.can_draw():
            self._held.pop(kind, None)
            fn()
        else:
            self._held[kind] = fn

    def held(self) -> list[str]:
        """The kinds of drawing waiting for the view to be shown, in the order each kind was first held."""
        return list(self._held)

    def discard(self) -> None:
        """Forget the held drawings (the view was cleared)."""
        self._held.clear()

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        """On the view's ``Show``: run the held drawings, in :meth:`held`'s order."""
        if obj is self._view and event.type() == QEvent.Type.Show and self._held:
            held, self._held = self._held, {}
            for fn in held.values():
                fn()
        return False
