"""The settings inspector and where it stands: beside the plots in a wide dock, above them in a narrow one.

:class:`TrainingInspector` scrolls the run's settings (and the run options) up
and down, never sideways, under a note that says during a run what still
changes live; :class:`InspectorSplit` holds it and the plots and turns when the
dock is too narrow to show them side by side.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QScrollArea, QSplitter, QVBoxLayout, QWidget

__all__ = ["TrainingInspector", "InspectorSplit", "LIVE_NOTE", "ATTACHED_NOTE", "INSPECTOR_WIDTH",
           "STACKED_INSPECTOR_SHARE"]

#: Shown above the settings during a run.
LIVE_NOTE = ("<b>During this run</b> the learning rate (type it, then Enter) and freezing (the Model tree's "
             "Train boxes) change live, from the next step. The other settings are fixed for this run: stop to "
             "change them.")
#: The note above the settings while a script is attached (its own settings are the script's).
ATTACHED_NOTE = ("<b>Attached to {name}</b>: the learning rate (type it, then Enter), freezing (the Model tree's "
                 "Train boxes), Pause, Save now and Stop steer the script at its next <code>wb.step</code>. "
                 "The settings below are for runs started here. File › Detach lets the script train on "
                 "(a pause stays until a window resumes it).")
#: The settings inspector's first width beside the plots, px (the plots get the rest of the dock).
INSPECTOR_WIDTH = 320
#: The inspector's share of the height when it stands above the plots (a narrow dock); the curves get the rest.
STACKED_INSPECTOR_SHARE = 0.36


class TrainingInspector(QScrollArea):
    """The settings' sections and the run options (objectName ``trainingSettingsScroll``).

    Parameters
    ----------
    sections : sequence of QWidget
        Shown top to bottom under the live note (the settings form, the run options).

    Attributes
    ----------
    live_note : QLabel
        objectName ``liveNote``; shown during a run only.
    """

    def __init__(self, sections):
        super().__init__(objectName="trainingSettingsScroll")
        inner = QWidget(objectName="trainingInspector")
        column = QVBoxLayout(inner)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        self.live_note = QLabel(LIVE_NOTE, objectName="liveNote", wordWrap=True)
        self.live_note.setContentsMargins(6, 2, 2, 4)
        self.live_note.setVisible(False)
        column.addWidget(self.live_note)
        for section in sections:
            column.addWidget(section)
        column.addStretch(1)
        self.setWidgetResizable(True)
        # the sections wrap their rows to the width there is; the splitter cannot make it narrower than that
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(inner)
        self.setMinimumWidth(inner.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
                             + 2 * self.frameWidth())

    def show_run(self, attached_to: str | None = None) -> None:
        """A run started: say what still changes (``attached_to``: the name of the script attached)."""
        self.live_note.setText(LIVE_NOTE if attached_to is None else ATTACHED_NOTE.format(name=attached_to))
        self.live_note.setVisible(True)

    def hide_run(self) -> None:
        """The run ended: the note goes."""
        self.live_note.setVisible(False)


class InspectorSplit(QSplitter):
    """The inspector beside the plots, or above them (objectName ``trainingSplitter``).

    Once the user drags the handle, the inspector keeps the width given (:attr:`moved`).
    """

    def __init__(self, inspector: QWidget, plots: QWidget):
        super().__init__(Qt.Orientation.Horizontal, objectName="trainingSplitter")
        self.inspector, self.plots = inspector, plots
        self.addWidget(inspector)
        self.addWidget(plots)
        self.setStretchFactor(0, 0)
        self.setStretchFactor(1, 1)
        self.setChildrenCollapsible(False)
        self.setSizes([INSPECTOR_WIDTH, 800])
        self.moved = False
        self.splitterMoved.connect(self._on_moved)

    def side_by_side_width(self) -> int:
        """The least width that shows the inspector beside the plots, px (both, and the handle)."""
        return self.inspector.minimumWidth() + self.plots.minimumSizeHint().width() + self.handleWidth()

    def stacked_size(self) -> QSize:
        """The least size with the inspector above the plots, px."""
        parts = (self.inspector, self.plots)
        width = max(max(p.minimumSizeHint().width(), p.minimumWidth()) for p in parts)
        return QSize(width, sum(p.minimumSizeHint().height() for p in parts) + self.handleWidth())

    def stacked_size_with(self, rows, layout) -> QSize:
        """The least size of a box (``layout``) holding ``rows`` (widgets) and this split stacked, one row each, px."""
        margins = layout.contentsMargins()
        stacked = self.stacked_size()
        width = max(stacked.width(), *(max(p.minimumSizeHint().width(), p.minimumWidth()) for p in rows))
        height = stacked.height() + sum(p.minimumSizeHint().height() for p in rows) + (len(rows) + 1) * \
            layout.spacing()
        return QSize(width + margins.left() + margins.right(), height + margins.top() + margins.bottom())

    def fit(self, size: QSize, room: int) -> None:
        """Beside the plots whenever ``room`` (the width there is for the split, px) holds both, else above them
        with a smaller share (``size``: the dock's).

        Beside them, the settings scroll in their own column and the curves keep the dock's whole height (at
        1280x800 the Training dock is ~708 px wide: the settings had stood above the plots, and reaching the
        LR field left the loss plot ~70 px). The settings get :data:`INSPECTOR_WIDTH` at most, less when the
        plots would fall under their minimum width.
        """
        wide = room >= self.side_by_side_width()
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if self.orientation() != orientation or (wide and not self.moved):
            self.setOrientation(orientation)
            total = room if wide else size.height()
            if wide:
                plots_min = self.plots.minimumSizeHint().width() + self.handleWidth()
                first = max(self.inspector.minimumWidth(), min(INSPECTOR_WIDTH, total - plots_min))
            else:
                first = int(total * STACKED_INSPECTOR_SHARE)
            self.setSizes([first, max(100, total - first - self.handleWidth())])

    def _on_moved(self, *args) -> None:
        self.moved = True
