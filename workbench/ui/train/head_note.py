"""The note beside Start when the model's head does not match the chosen data's classes, with "Replace head…".

Core tells the counts (:func:`workbench.core.train.data.preflight.head_mismatch`:
the head's outputs and the data's classes, without loading the data); this row
shows them, again whenever the model, its structure or the Training settings
change (after :data:`HEAD_NOTE_MS` of quiet), hidden during a run.
"Replace head…" asks the Replace head question with the data's class count
filled in and hands the answer to the window (``session.replaceHeadRequested``:
the last layer is replaced, undoably). objectNames: ``headNote`` (the row), ``headNoteLabel``,
``replaceHeadButton``.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from workbench.core.train.data.preflight import HeadMismatch, head_mismatch

__all__ = ["HEAD_NOTE_MS", "HeadNote"]

#: How long the settings stay unchanged before the note counts the data's classes again, ms.
HEAD_NOTE_MS = 300


class HeadNote(QWidget):
    """A warning row beside Start, hidden while the head fits the data (or either count is unknown).

    Parameters
    ----------
    session : Session
        ``model``, ``running``, the ``modelChanged`` / ``structureChanged`` signals and
        ``replaceHeadRequested(int)``.
    settings : TrainingSettings
        ``config()`` (the data and the task kind) and its ``changed`` signal.
    prompts : Prompts
        ``integer(title, label, value)``: the Replace head question.
    parent : QWidget, optional

    Attributes
    ----------
    mismatch : HeadMismatch or None
        What the row says (None: hidden).
    timer : QTimer
        Single shot, :data:`HEAD_NOTE_MS` after a change: then :meth:`refresh`.
    """

    def __init__(self, session, settings, prompts, parent: QWidget | None = None):
        super().__init__(parent, objectName="headNote")
        self.session, self.settings, self.prompts = session, settings, prompts
        self.mismatch: HeadMismatch | None = None
        self.timer = QTimer(self, singleShot=True, interval=HEAD_NOTE_MS)
        self.timer.timeout.connect(self.refresh)
        for signal in (session.modelChanged, session.structureChanged, settings.changed):
            signal.connect(lambda *_: self.timer.start())
        self.label = QLabel(objectName="headNoteLabel")
        self.label.setWordWrap(True)
        self.label.setStyleSheet("color: #b35900;")
        self.button = QPushButton("Replace head…", objectName="replaceHeadButton")
        self.button.clicked.connect(self._on_replace_clicked)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 2)
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        self.setVisible(False)
        self.timer.start()

    def follow(self, running: bool) -> None:
        """A run started (the note hides) or ended (counted again)."""
        if running:
            self.timer.stop()
            self.show_mismatch(None)
        else:
            self.timer.start()

    def refresh(self) -> HeadMismatch | None:
        """Count again (core) and show the result; returns it."""
        mismatch = None
        if self.session.model is not None and not self.session.running:
            try:
                config = self.settings.config()
            except ValueError:  # a setting being typed: no count now
                config = None
            if config is not None:
                mismatch = head_mismatch(self.session.model, config.data, config.task.kind)
        self.show_mismatch(mismatch)
        return mismatch

    def show_mismatch(self, mismatch: HeadMismatch | None) -> None:
        """Say ``mismatch`` (None hides the row)."""
        self.mismatch = mismatch
        if mismatch is not None:
            self.label.setText(f"⚠ {mismatch.message}.")
            self.label.setToolTip(
                f"The data's classes are counted from the Training settings ({mismatch.data_classes:,}); the "
                f"head is the model's last layer, {mismatch.head}. Replace head… gives it one output per class "
                "(Ctrl+Z puts the old head back).")
            self.button.setToolTip(f"Replace {mismatch.head} with a new layer of {mismatch.data_classes:,} outputs")
        self.setVisible(mismatch is not None)

    def _on_replace_clicked(self) -> None:
        """The Replace head question, the data's class count filled in; the window replaces the last layer."""
        mismatch = self.mismatch
        if mismatch is None or self.session.refuse_while_running("replace the head"):
            return
        outputs = self.prompts.integer("Replace head", f"Number of outputs of the new {mismatch.head}:",
                                       mismatch.data_classes)
        if outputs is not None:
            self.session.replaceHeadRequested.emit(int(outputs))
